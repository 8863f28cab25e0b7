//! The HTTPS server: accepts TLS connections, notes whether the client presented a verified
//! front-proxy certificate, and routes each request (see [`crate::routes`]).
//!
//! Admission requests and health checks need no user. Discovery and version need a verified
//! front-proxy connection. Subresources need a verified front-proxy connection, a user in the
//! `X-Remote-*` headers, and a SubjectAccessReview that allows the user (see [`crate::auth`]);
//! so does `expand-vm-spec` (see [`crate::expand`]).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio_rustls::TlsAcceptor;

use crate::admission::{self, AdmissionConfig, Webhook};
use crate::auth::{self, Access, RequestHeaderConfig, User};
use crate::handler_client::{HandlerAction, HandlerClient};
use crate::options::{self, PauseOptions};
use crate::routes::{self, PortTarget, Route, Subresource, SubresourceRequest};
use crate::status::ApiError;
use crate::{console, discovery, expand, vm_actions, vmi_actions, websocket};

/// Largest request body read (AdmissionReviews of big objects included).
const MAX_BODY: usize = 8 << 20;

/// Everything a request may need.
pub struct ServerState {
    pub client: Client,
    pub handlers: HandlerClient,
    pub request_header: RequestHeaderConfig,
    pub admission: AdmissionConfig,
    /// The resourceVersion of the KubeVirt CR `/healthz` reports: the CR it has read, as
    /// KubeVirt's tests expect of it (virt-api applies its `memoryOvercommit`, [`Self::kubevirts`]).
    pub config_version: api::healthz::ConfigVersion,
    /// The KubeVirt CRs of the install namespace as last watched (the configuration a new
    /// VMI's defaults follow).
    pub kubevirts: Arc<dyn Fn() -> Vec<Arc<api::KubeVirt>> + Send + Sync>,
}

/// What the TLS handshake established about the peer.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// A client certificate chaining to the requestheader CA, with an allowed name.
    pub front_proxy: bool,
}

type Body = Full<Bytes>;

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding {0}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// Serves until the process ends.
pub async fn serve(
    address: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<ServerState>,
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| ServeError::Bind(address, e))?;
    log::info!("virt-api listening on https://{address}");
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                log::warn!("accept: {e}");
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(stream).await {
                Ok(tls) => tls,
                Err(e) => {
                    log::debug!("TLS handshake with {remote}: {e}");
                    return;
                }
            };
            let common_name = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| auth::certificate_common_name(c));
            let peer = Peer {
                front_proxy: common_name.is_some()
                    && state.request_header.name_allowed(common_name.as_deref()),
            };
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&state, peer, request).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades()
                .await
            {
                log::debug!("connection from {remote}: {e}");
            }
        });
    }
}

fn json_response(code: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(error: &ApiError) -> Response<Body> {
    json_response(error.code, error.to_status_json())
}

async fn read_body(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))
}

/// Answers one request.
pub async fn handle(state: &ServerState, peer: Peer, request: Request<Incoming>) -> Response<Body> {
    let route = routes::route(request.method(), request.uri().path());
    match dispatch(state, peer, route, request).await {
        Ok(response) => response,
        Err(error) => {
            if error.code.is_server_error() {
                log::warn!("{}", error.message);
            }
            error_response(&error)
        }
    }
}

async fn dispatch(
    state: &ServerState,
    peer: Peer,
    route: Route,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let proxied_only = || {
        if peer.front_proxy {
            Ok(())
        } else {
            Err(ApiError::unauthorized(
                "virt-api serves subresources.kubevirt.io through kube-apiserver only: \
                 no valid front-proxy client certificate",
            ))
        }
    };
    let to_json = |r: Result<Vec<u8>, serde_json::Error>| {
        r.map(|b| json_response(StatusCode::OK, b))
            .map_err(|e| ApiError::internal(e.to_string()))
    };
    match route {
        Route::Mutate(resource) | Route::Validate(resource)
            if request.method() != http::Method::POST =>
        {
            Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("admission webhook for {resource} takes POST"),
            ))
        }
        Route::Mutate(resource) => admit(state, Webhook::Mutate, &resource, request).await,
        Route::Validate(resource) => admit(state, Webhook::Validate, &resource, request).await,
        Route::Healthz => Ok(healthz(state).await),
        Route::ApiGroupList => {
            proxied_only()?;
            to_json(discovery::to_json(
                "APIGroupList",
                &discovery::api_group_list(),
            ))
        }
        Route::ApiGroup => {
            proxied_only()?;
            to_json(discovery::to_json("APIGroup", &discovery::api_group()))
        }
        Route::ApiResourceList => {
            proxied_only()?;
            to_json(discovery::to_json(
                "APIResourceList",
                &discovery::api_resource_list(),
            ))
        }
        Route::Version => {
            proxied_only()?;
            to_json(serde_json::to_vec(&crate::version_info()))
        }
        Route::NotFound => Err(ApiError::not_found(
            "the server could not find the requested resource",
        )),
        Route::MethodNotAllowed => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed for this subresource",
        )),
        Route::PortForward(sub, target) => {
            proxied_only()?;
            authorize_caller(state, &request, &Access::subresource(&sub)).await?;
            open_port_forward(state, &sub, &target, request).await
        }
        Route::Subresource(sub) => {
            proxied_only()?;
            authorize_caller(state, &request, &Access::subresource(&sub)).await?;
            subresource(state, sub, request).await
        }
        Route::ExpandVmSpec(namespace) => {
            proxied_only()?;
            authorize_caller(state, &request, &Access::expand_vm_spec(&namespace)).await?;
            let body = read_body(request).await?;
            let vm = expand::vm_from_body(&body, &namespace)?;
            let vm = expand::expand(&state.client, vm)
                .await
                .map_err(ApiError::bad_request)?;
            vm_response(&vm)
        }
    }
}

/// Checks that the user kube-apiserver names in the front-proxy headers may have `access`.
async fn authorize_caller(
    state: &ServerState,
    request: &Request<Incoming>,
    access: &Access,
) -> Result<(), ApiError> {
    let user = auth::user_from_headers(&state.request_header, request.headers())
        .ok_or_else(|| ApiError::unauthorized("no user in the front-proxy headers"))?;
    authorize(&state.client, &user, access).await
}

/// KubeVirt's `/healthz`: the API server's connectivity and version, and the KubeVirt CR's
/// resourceVersion ([`api::healthz`]); 500 when the API server does not answer.
async fn healthz(state: &ServerState) -> Response<Body> {
    let (status, body) = api::healthz::answer(&state.client, &state.config_version).await;
    json_response(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
    )
}

async fn admit(
    state: &ServerState,
    webhook: Webhook,
    resource: &str,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let body = read_body(request).await?;
    let mut references = if admission::needs_references(webhook, resource) {
        match admission::vm_of_review(&body) {
            Some(vm) => find_references(&state.client, &vm).await,
            None => admission::References::default(),
        }
    } else {
        admission::References::default()
    };
    if admission::needs_cluster_configuration(webhook, resource) {
        let kubevirts = (state.kubevirts)();
        references.memory_overcommit = Some(
            api::kubevirt::DeveloperConfiguration::memory_overcommit_in_force(
                api::kubevirt::in_force(&kubevirts),
            ),
        );
    }
    if admission::needs_snapshot_facts(webhook, resource) {
        references.snapshots = snapshot_facts(&state.client, &body).await?;
    }
    let answer = admission::review_with(webhook, resource, &body, &state.admission, &references)
        .map_err(|e| ApiError::bad_request(format!("{e}: {}", source_text(&e))))?;
    Ok(json_response(StatusCode::OK, answer))
}

/// What a VM's instance type and preference are, for its admission. As in KubeVirt, one that
/// cannot be found (not yet created, a bad kind, ...) is left out: the VM is admitted and
/// virt-controller reports it.
async fn find_references(client: &Client, vm: &api::vm::VirtualMachine) -> admission::References {
    use api::instancetype::{find, Reference};
    let mut references = admission::References::default();
    for reference in [Reference::Instancetype, Reference::Preference] {
        match find::find(client, vm, reference).await {
            Ok(found) => references.set(reference, found.map(|f| f.spec)),
            Err(e) => log::info!(
                "admitting VM {}/{} without its {}: {e}",
                vm.metadata.namespace.as_deref().unwrap_or_default(),
                vm.metadata.name.as_deref().unwrap_or_default(),
                reference.field()
            ),
        }
    }
    references
}

/// Whether the `Snapshot` gate is off, and for a new restore the restores of its namespace
/// with the same target that are not complete. A lookup that fails fails the review (KubeVirt's
/// admitter answers its error too).
async fn snapshot_facts(
    client: &Client,
    body: &[u8],
) -> Result<admission::SnapshotFacts, ApiError> {
    use api::snapshot::VirtualMachineRestore;
    let lookup = |e: kube::Error| ApiError::internal(format!("looking up for the review: {e}"));
    let kubevirts = Api::<api::KubeVirt>::all(client.clone())
        .list(&Default::default())
        .await
        .map_err(lookup)?
        .items
        .into_iter()
        .map(std::sync::Arc::new)
        .collect::<Vec<_>>();
    let mut facts = admission::SnapshotFacts {
        gate_off: !api::snapshot::gate_enabled(api::kubevirt::in_force(&kubevirts)),
        restores_in_progress: Vec::new(),
    };
    if let Some(restore) = admission::restore_of_review(body) {
        let namespace = restore.metadata.namespace.clone().unwrap_or_default();
        let restores = Api::<VirtualMachineRestore>::namespaced(client.clone(), &namespace)
            .list(&Default::default())
            .await
            .map_err(lookup)?;
        facts.restores_in_progress = restores
            .items
            .iter()
            .filter(|r| r.spec.target == restore.spec.target)
            .filter(|r| r.status.as_ref().and_then(|s| s.complete) != Some(true))
            .filter_map(|r| r.metadata.name.clone())
            .collect();
    }
    Ok(facts)
}

fn source_text(error: &dyn std::error::Error) -> String {
    error.source().map(|s| s.to_string()).unwrap_or_default()
}

/// Asks kube-apiserver whether the user may have the access; 403 when not.
pub async fn authorize(client: &Client, user: &User, access: &Access) -> Result<(), ApiError> {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = reviews
        .create(&PostParams::default(), &auth::access_review(user, access))
        .await
        .map_err(|e| ApiError::from_kube("SubjectAccessReview", e))?;
    let status = answer.status.unwrap_or_default();
    if status.allowed {
        return Ok(());
    }
    Err(ApiError::forbidden(auth::denial_message(
        user,
        access,
        status.reason.as_deref(),
    )))
}

fn parse<T: Default + serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    options::parse_body(body).map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
}

/// 200 with the VM as JSON.
fn vm_response(vm: &api::vm::VirtualMachine) -> Result<Response<Body>, ApiError> {
    serde_json::to_vec(vm)
        .map(|b| json_response(StatusCode::OK, b))
        .map_err(|e| ApiError::internal(format!("writing the VM: {e}")))
}

fn accepted() -> Response<Body> {
    json_response(StatusCode::ACCEPTED, Vec::new())
}

async fn subresource(
    state: &ServerState,
    sub: SubresourceRequest,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let client = &state.client;
    let (ns, name) = (sub.namespace.as_str(), sub.name.as_str());
    match sub.subresource {
        Subresource::Console => open_console(state, ns, name, request).await,
        Subresource::Vnc => open_vnc(state, ns, name, request).await,
        Subresource::VncScreenshot => {
            vmi_actions::check_screenshot_query(request.uri().query())?;
            let vmi = vmi_actions::load(client, ns, name).await?;
            vmi_actions::check_vnc(&vmi)?;
            let png = state.handlers.screenshot(&vmi).await?;
            let mut response = Response::new(Full::new(png));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("image/png"),
            );
            Ok(response)
        }
        // Routed with their port only ([`Route::PortForward`]).
        Subresource::VmiPortForward | Subresource::VmPortForward => Err(ApiError::not_found(
            "the server could not find the requested resource",
        )),
        Subresource::GuestOsInfo | Subresource::UserList | Subresource::FilesystemList => {
            let vmi = vmi_actions::load(client, ns, name).await?;
            vmi_actions::check_agent(&vmi)?;
            let body = state
                .handlers
                .guest_info(&vmi, sub.subresource.name())
                .await?;
            Ok(json_response(StatusCode::OK, body.to_vec()))
        }
        Subresource::ExpandSpec => {
            let vm = expand::load(client, ns, name).await?;
            let vm = expand::expand(client, vm)
                .await
                .map_err(|e| ApiError::internal(format!("Internal error occurred: {e}")))?;
            vm_response(&vm)
        }
        Subresource::SoftReboot | Subresource::Freeze | Subresource::Unfreeze => {
            let action = match sub.subresource {
                Subresource::Freeze => {
                    let body = read_body(request).await?;
                    let timeout: options::FreezeUnfreezeTimeout = parse(&body)?;
                    HandlerAction::Freeze(timeout.seconds().map_err(ApiError::bad_request)?)
                }
                Subresource::Unfreeze => HandlerAction::Unfreeze,
                _ => HandlerAction::SoftReboot,
            };
            let vmi = vmi_actions::load(client, ns, name).await?;
            if action == HandlerAction::SoftReboot {
                vmi_actions::check_soft_reboot(&vmi)?;
            } else {
                // As KubeVirt: a freeze without an agent fails in the launcher, which says why.
                vmi_actions::check_action(&vmi, action)?;
            }
            state.handlers.act(&vmi, action).await?;
            Ok(json_response(StatusCode::OK, Vec::new()))
        }
        Subresource::Pause | Subresource::Unpause | Subresource::Reset => {
            let action = match sub.subresource {
                Subresource::Pause => HandlerAction::Pause,
                Subresource::Unpause => HandlerAction::Unpause,
                _ => HandlerAction::Reset,
            };
            let body = read_body(request).await?;
            let options: PauseOptions = parse(&body)?;
            let vmi = vmi_actions::load(client, ns, name).await?;
            vmi_actions::check_action(&vmi, action)?;
            if !options::is_dry_run(&options.dry_run) {
                state.handlers.act(&vmi, action).await?;
            }
            Ok(json_response(StatusCode::OK, Vec::new()))
        }
        Subresource::Start | Subresource::Stop | Subresource::Restart | Subresource::Migrate => {
            let body = read_body(request).await?;
            // A 409 from apply is the VM's resourceVersion moving on under us (virt-controller
            // writes its status): plan again from the VM as it is now. A 409 from planning
            // ("VM is already running") is the answer.
            let mut attempts = 0;
            loop {
                let (vm, vmi) = vm_actions::load(client, ns, name).await?;
                let applied = match sub.subresource {
                    Subresource::Start => {
                        let o: options::StartOptions = parse(&body)?;
                        let change = vm_actions::plan_start(&vm, vmi.as_ref(), &o)?;
                        vm_actions::apply(client, &vm, &change, &o.dry_run).await
                    }
                    Subresource::Stop => {
                        let o: options::StopOptions = parse(&body)?;
                        let change = vm_actions::plan_stop(&vm, vmi.as_ref(), &o)?;
                        vm_actions::apply(client, &vm, &change, &o.dry_run).await
                    }
                    Subresource::Restart => {
                        let o: options::RestartOptions = parse(&body)?;
                        let change = vm_actions::plan_restart(&vm, vmi.as_ref(), &o)?;
                        vm_actions::apply(client, &vm, &change, &o.dry_run).await
                    }
                    _ => {
                        let o: options::MigrateOptions = parse(&body)?;
                        let migration = vm_actions::plan_migration(&vm, vmi.as_ref(), &o)?;
                        vm_actions::create_migration(client, &migration, &o.dry_run).await
                    }
                };
                match applied {
                    Err(e) if e.code == StatusCode::CONFLICT && attempts < 5 => attempts += 1,
                    other => break other?,
                }
            }
            Ok(accepted())
        }
    }
}

/// A client's WebSocket handshake: its key, and whether it offered `plain.kubevirt.io`.
struct Handshake {
    key: String,
    plain: bool,
}

/// Checks that `request` opens a WebSocket (what it is for: `what`).
fn websocket_handshake(request: &Request<Incoming>, what: &str) -> Result<Handshake, ApiError> {
    let headers = request.headers();
    let is_websocket = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (true, Some(key)) = (is_websocket, key) else {
        return Err(ApiError::bad_request(format!(
            "the {what} is a WebSocket: send Upgrade: websocket with Sec-WebSocket-Key"
        )));
    };
    let plain = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == websocket::PLAIN_PROTOCOL);
    Ok(Handshake { key, plain })
}

/// Answers the handshake with 101 and relays the upgraded client connection and `stream` (from
/// the handler) in the background, logging how it ended under `label`.
fn relay_websocket(
    mut request: Request<Incoming>,
    handshake: &Handshake,
    stream: hyper::upgrade::Upgraded,
    framing: console::Framing,
    label: String,
) -> Response<Body> {
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(client) => {
                let end = console::relay(TokioIo::new(client), TokioIo::new(stream), framing).await;
                log::info!("{label} closed: {end:?}");
            }
            Err(e) => log::warn!("{label}: upgrade failed: {e}"),
        }
    });
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    h.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    if let Ok(accept) = header::HeaderValue::from_str(&websocket::accept_key(&handshake.key)) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if handshake.plain {
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            header::HeaderValue::from_static(websocket::PLAIN_PROTOCOL),
        );
    }
    response
}

/// Checks the WebSocket handshake and the VMI, opens the console at the handler, answers 101
/// and relays in the background.
async fn open_console(
    state: &ServerState,
    namespace: &str,
    name: &str,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let handshake = websocket_handshake(&request, "console")?;
    let vmi = vmi_actions::load(&state.client, namespace, name).await?;
    vmi_actions::check_console(&vmi)?;
    let console = state.handlers.console(&vmi).await?;
    let label = format!("console of {namespace}/{name}");
    Ok(relay_websocket(
        request,
        &handshake,
        console,
        console::Framing::Bytes,
        label,
    ))
}

/// Checks the WebSocket handshake and the VMI, opens the VNC display at the handler, answers
/// 101 and relays in the background, as the console: the frames carry the RFB stream (virtctl's
/// viewer proxy and noVNC speak it over the same WebSocket).
async fn open_vnc(
    state: &ServerState,
    namespace: &str,
    name: &str,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let handshake = websocket_handshake(&request, "VNC display")?;
    let vmi = vmi_actions::load(&state.client, namespace, name).await?;
    vmi_actions::check_vnc(&vmi)?;
    let vnc = state.handlers.vnc(&vmi).await?;
    let label = format!("VNC of {namespace}/{name}");
    Ok(relay_websocket(
        request,
        &handshake,
        vnc,
        console::Framing::Bytes,
        label,
    ))
}

/// A port-forward: the WebSocket's bytes are a TCP connection to `target.port` of the guest,
/// or its messages UDP datagrams to and from that port, which virt-handler sends from inside
/// the launcher Pod's network namespace. A VM's port-forward goes to its VMI (of the same
/// name).
async fn open_port_forward(
    state: &ServerState,
    sub: &SubresourceRequest,
    target: &PortTarget,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let handshake = websocket_handshake(&request, "port-forward")?;
    let framing = match target.protocol.as_str() {
        "tcp" => console::Framing::Bytes,
        "udp" => console::Framing::Datagrams,
        other => {
            return Err(ApiError::bad_request(format!(
                "port-forward over {other}: the protocol is tcp or udp"
            )))
        }
    };
    let vmi = vmi_actions::load(&state.client, &sub.namespace, &sub.name).await?;
    vmi_actions::check_port_forward(&vmi, target.port, &target.protocol)?;
    let stream = state
        .handlers
        .port_forward(&vmi, target.port, &target.protocol)
        .await?;
    let label = format!(
        "port-forward to {}/{} port {}/{}",
        sub.namespace, sub.name, target.port, target.protocol
    );
    Ok(relay_websocket(request, &handshake, stream, framing, label))
}
