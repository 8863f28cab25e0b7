//! virt-handler's subresource server: what virt-api calls for a VMI on this node.
//!
//! Transport: HTTP/1.1 over mutual TLS on the pod network, port 8186. The server presents the
//! certificate of the `kubevirt-virt-handler-server-certs` Secret (SAN
//! `virt-handler.kubevirt.svc`, which virt-api checks since it dials Pod IPs) and requires a
//! client certificate that chains to the same Secret's `ca.crt` with EKU clientAuth and the
//! common name `kubevirt.io:system:client:virt-handler`: virt-api presents
//! `kubevirt-virt-handler-certs` (see [`tls`]). A client without one, with one from another
//! CA, or with another name, fails the handshake and never reaches a route. The Secret is the one the migration stream
//! uses, mounted at [`crate::migration::tls::DEFAULT_CERT_DIR`]; the operator rolls
//! virt-handler when it rotates the certificates.
//!
//! A VMI is named by its UID, which is also the name of its socket directory
//! (`<socket root>/<uid>/`, holding `launcher-sock`, `console-sock` and, with graphics,
//! `vnc-sock`):
//!
//! - `PUT /v1/vmis/{uid}/{pause|unpause|reset|softreboot|unfreeze}` and
//!   `PUT /v1/vmis/{uid}/freeze/{unfreeze timeout in seconds}`: calls the launcher's Pause,
//!   Unpause, Reset, SoftReboot, Unfreeze or Freeze over gRPC; `200`, or `404` (no launcher here), `409` (the
//!   launcher refuses in this state, or has no guest agent to reboot through), `500`, with the
//!   reason as text.
//! - `GET /v1/vmis/{uid}/{guestosinfo|userlist|filesystemlist}`: what the launcher last heard
//!   from the guest agent, as KubeVirt's JSON (see [`guest_info`]); `409` without an agent.
//! - `GET /v1/vmis/{uid}/portforward/{port}[/{tcp|udp}]` with `Upgrade: ferrovirt-portforward`:
//!   connects to the guest's TCP `port` (or opens a UDP socket to it) from inside the launcher
//!   Pod's network namespace, then answers `101` and relays (see [`portforward`]); `404`
//!   without a launcher, `400` without a masquerade network; when the guest does not accept
//!   the connection, `101` and a stream that ends at once, as KubeVirt's.
//! - `GET /v1/vmis/{uid}/console` with `Connection: Upgrade` and
//!   `Upgrade: ferrovirt-console`: connects to `console-sock` first (so a missing console is a
//!   plain `404`), then answers `101 Switching Protocols`; from then on the connection and the
//!   console socket are copied into each other until either side closes (see [`console`]).
//! - `GET /v1/vmis/{uid}/vnc` with `Connection: Upgrade` and `Upgrade: ferrovirt-vnc`: the same
//!   with `vnc-sock`, QEMU's VNC server (a raw RFB stream), which exists only when the VM has a
//!   graphics device (`404` without it); several connections may share the display (see
//!   [`vnc`]).
//! - `GET /v1/vmis/{uid}/vnc/screenshot`: calls the launcher's Screenshot; `200` with the PNG
//!   (`Content-Type: image/png`), or `404` (no launcher here), `409` (no graphics device).

pub mod console;
pub mod guest_info;
pub mod portforward;
mod routes;
pub mod tls;
pub mod vnc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

pub use routes::{route, HandlerRoute, VmiAction};

/// Port of the subresource server.
pub const PORT: u16 = 8186;
/// The `Upgrade` protocol of the console relay.
pub const CONSOLE_UPGRADE: &str = "ferrovirt-console";
/// The `Upgrade` protocol of the VNC relay.
pub const VNC_UPGRADE: &str = "ferrovirt-vnc";
/// The `Upgrade` protocol of a port-forward.
pub const PORT_FORWARD_UPGRADE: &str = "ferrovirt-portforward";
/// Settings of the server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub socket_root: PathBuf,
    /// Serving certificate and the CA client certificates must chain to.
    pub tls: Arc<rustls::ServerConfig>,
    /// The open console of each VMI: a new one closes the one before.
    pub consoles: console::Consoles,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("loading the TLS certificates")]
    Tls(#[source] crate::migration::tls::TlsError),
    #[error("binding {0}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// Reads the settings from the environment (`VIRT_HANDLER_SERVER_ADDRESS`, and
/// `VIRT_HANDLER_SERVER_CERT_DIR` for the certificates) and serves; logs and returns if it
/// cannot (the rest of virt-handler keeps running without consoles and pause).
pub async fn run_from_env(socket_root: PathBuf) {
    let listen = std::env::var("VIRT_HANDLER_SERVER_ADDRESS")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], PORT)));
    let cert_dir = crate::migration::tls::cert_dir();
    let result = match tls::server_config(&cert_dir) {
        Ok(tls) => {
            serve(ServerConfig {
                listen,
                socket_root,
                tls,
                consoles: console::Consoles::default(),
            })
            .await
        }
        Err(e) => Err(ServerError::Tls(e)),
    };
    if let Err(e) = result {
        let source = std::error::Error::source(&e)
            .map(|s| format!(": {s}"))
            .unwrap_or_default();
        log::error!("subresource server (console, pause, reset) not running: {e}{source}");
    }
}

/// Serves until the process ends.
pub async fn serve(config: ServerConfig) -> Result<(), ServerError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ServerError::Bind(config.listen, e))?;
    log::info!("subresource server listening on https://{}", config.listen);
    serve_listener(listener, Arc::new(config)).await;
    Ok(())
}

/// Serves connections from a bound listener (tests bind port 0).
pub async fn serve_listener(listener: tokio::net::TcpListener, config: Arc<ServerConfig>) {
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                log::warn!("subresource server accept: {e}");
                continue;
            }
        };
        let config = config.clone();
        tokio::spawn(async move {
            let acceptor = tokio_rustls::TlsAcceptor::from(config.tls.clone());
            let stream = match acceptor.accept(stream).await {
                Ok(stream) => stream,
                Err(e) => {
                    log::warn!("subresource server: TLS handshake with {remote} refused: {e}");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |request| {
                let config = config.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&config, request).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await
            {
                log::debug!("subresource connection from {remote}: {e}");
            }
        });
    }
}

fn text(code: StatusCode, message: impl Into<String>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(message.into())));
    *response.status_mut() = code;
    response
}

/// `101 Switching Protocols` to `protocol`.
fn switching_protocols(protocol: &'static str) -> Response<Full<Bytes>> {
    let mut response = text(StatusCode::SWITCHING_PROTOCOLS, "");
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("Upgrade"),
    );
    headers.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static(protocol),
    );
    response
}

/// Answers `101` to `protocol` and, in the background once the connection is upgraded, copies
/// it and `stream` into each other until either closes; `what` names the relay in the log.
fn relay_upgraded<S>(
    request: &mut Request<Incoming>,
    protocol: &'static str,
    mut stream: S,
    what: String,
) -> Response<Full<Bytes>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let upgrade = hyper::upgrade::on(request);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let mut upgraded = TokioIo::new(upgraded);
                match tokio::io::copy_bidirectional(&mut upgraded, &mut stream).await {
                    Ok((to_vm, from_vm)) => {
                        log::info!("{what} closed ({to_vm} bytes in, {from_vm} bytes out)")
                    }
                    Err(e) => log::info!("{what} closed: {e}"),
                }
            }
            Err(e) => log::warn!("{what}: upgrade failed: {e}"),
        }
    });
    switching_protocols(protocol)
}

/// Whether `request` asks to switch to `protocol` (`Upgrade:`).
fn asks_for_upgrade(request: &Request<Incoming>, protocol: &str) -> bool {
    request
        .headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(protocol))
}

fn launcher_socket(config: &ServerConfig, uid: &str) -> PathBuf {
    config
        .socket_root
        .join(uid)
        .join(contract::sockets::LAUNCHER_SOCKET)
}

async fn handle(config: &ServerConfig, request: Request<Incoming>) -> Response<Full<Bytes>> {
    match route(request.method(), request.uri().path()) {
        HandlerRoute::Action(uid, action) => {
            let socket = launcher_socket(config, &uid);
            match routes::call_launcher(&socket, &uid, action).await {
                Ok(()) => text(StatusCode::OK, ""),
                Err((code, message)) => text(code, message),
            }
        }
        HandlerRoute::GuestInfo(uid, kind) => {
            let socket = launcher_socket(config, &uid);
            let body = match routes::guest_agent(&socket, &uid).await {
                Ok(agent) => guest_info::render(kind, agent.as_ref()),
                Err(e) => Err(e),
            };
            match body {
                Ok(body) => {
                    let mut response = text(StatusCode::OK, body.to_string());
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json"),
                    );
                    response
                }
                Err((code, message)) => text(code, message),
            }
        }
        HandlerRoute::Console(uid) => console::open(config, &uid, request).await,
        HandlerRoute::Vnc(uid) => vnc::open(config, &uid, request).await,
        HandlerRoute::VncScreenshot(uid) => vnc::screenshot(config, &uid).await,
        HandlerRoute::PortForward(uid, port, protocol) => {
            portforward::open(config, &uid, port, protocol, request).await
        }
        HandlerRoute::NotFound => text(StatusCode::NOT_FOUND, "not found"),
    }
}

#[cfg(test)]
mod tests;
