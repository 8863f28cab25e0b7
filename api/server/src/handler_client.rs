//! virt-api's client of virt-handler's subresource server (see `handler::server` for the
//! server side).
//!
//! The handler of a VMI is the Pod labelled `kubevirt.io=virt-handler` in virt-handler's
//! namespace whose `spec.nodeName` is the VMI's `status.nodeName`; virt-api connects to its Pod
//! IP on port 8186. The transport is HTTP/1.1 over mutual TLS: virt-api presents the client
//! certificate of the `kubevirt-virt-handler-certs` Secret, and accepts the handler only when
//! its certificate chains to that Secret's CA and names `virt-handler.kubevirt.svc` (see
//! [`crate::tls::handler_client_config`]):
//!
//! - `PUT /v1/vmis/{uid}/{pause|unpause|reset|softreboot|unfreeze}` and
//!   `PUT /v1/vmis/{uid}/freeze/{seconds}` -> `200`, or an error status with the reason as text;
//! - `GET /v1/vmis/{uid}/{guestosinfo|userlist|filesystemlist}` -> `200` with KubeVirt's JSON
//!   of what the guest agent said, or an error status with the reason as text;
//! - `GET /v1/vmis/{uid}/console` with `Connection: Upgrade`, `Upgrade: ferrovirt-console`
//!   -> `101`, after which the connection is the raw byte stream of the guest's serial console;
//! - `GET /v1/vmis/{uid}/vnc` with `Connection: Upgrade`, `Upgrade: ferrovirt-vnc` -> `101`,
//!   after which the connection is the raw RFB stream of the VM's VNC display;
//! - `GET /v1/vmis/{uid}/vnc/screenshot` -> `200` with a PNG of the VM's screen, or an error
//!   status with the reason as text;
//! - `GET /v1/vmis/{uid}/portforward/{port}` with `Upgrade: ferrovirt-portforward` -> `101`,
//!   after which the connection is a TCP connection to that port of the guest.

use std::net::SocketAddr;
use std::sync::Arc;

use api::VirtualMachineInstance;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::status::ApiError;
use crate::tls::HANDLER_SERVER_NAME;

/// Port of virt-handler's subresource server.
pub const HANDLER_PORT: u16 = 8186;
/// Label of virt-handler's Pods.
pub const HANDLER_LABEL: &str = "kubevirt.io=virt-handler";
/// The `Upgrade` protocol name of the console relay.
pub const CONSOLE_UPGRADE: &str = "ferrovirt-console";
/// The `Upgrade` protocol name of the VNC relay.
pub const VNC_UPGRADE: &str = "ferrovirt-vnc";
/// The `Upgrade` protocol name of a port-forward.
pub const PORT_FORWARD_UPGRADE: &str = "ferrovirt-portforward";

/// How to reach the handlers.
#[derive(Clone)]
pub struct HandlerClient {
    pub client: Client,
    /// virt-handler's namespace.
    pub namespace: String,
    pub port: u16,
    /// Client certificate and the CA handlers are checked against.
    pub tls: Arc<rustls::ClientConfig>,
}

/// A VMI action the handler performs through the launcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandlerAction {
    Pause,
    Unpause,
    Reset,
    SoftReboot,
    /// Freeze, thawed by the launcher after this many seconds.
    Freeze(u64),
    Unfreeze,
}

impl HandlerAction {
    pub fn name(self) -> &'static str {
        match self {
            HandlerAction::Pause => "pause",
            HandlerAction::Unpause => "unpause",
            HandlerAction::Reset => "reset",
            HandlerAction::SoftReboot => "softreboot",
            HandlerAction::Freeze(_) => "freeze",
            HandlerAction::Unfreeze => "unfreeze",
        }
    }

    /// The handler path's last part(s) for this action.
    fn path(self) -> String {
        match self {
            HandlerAction::Freeze(seconds) => format!("freeze/{seconds}"),
            other => other.name().to_string(),
        }
    }
}

/// The handler path of an action, the console or another subresource for a VMI uid.
pub fn handler_path(uid: &str, what: &str) -> String {
    format!("/v1/vmis/{uid}/{what}")
}

fn uid_of(vmi: &VirtualMachineInstance) -> Result<&str, ApiError> {
    vmi.metadata
        .uid
        .as_deref()
        .ok_or_else(|| ApiError::internal("the VMI has no uid"))
}

impl HandlerClient {
    /// Finds the address of the handler on the VMI's node.
    pub async fn address(&self, vmi: &VirtualMachineInstance) -> Result<SocketAddr, ApiError> {
        let node = vmi
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .ok_or_else(|| {
                ApiError::conflict("VMI is not running: it has not been scheduled to a node")
            })?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = ListParams::default()
            .labels(HANDLER_LABEL)
            .fields(&format!("spec.nodeName={node}"));
        let list = pods
            .list(&params)
            .await
            .map_err(|e| ApiError::from_kube("listing virt-handler pods", e))?;
        let ip = list
            .items
            .iter()
            .filter_map(|p| p.status.as_ref()?.pod_ip.as_deref())
            .find_map(|ip| ip.parse().ok())
            .ok_or_else(|| {
                ApiError::internal(format!(
                    "no running virt-handler pod with an IP on node {node}"
                ))
            })?;
        Ok(SocketAddr::new(ip, self.port))
    }

    /// Asks the VMI's handler to pause, unpause or reset it.
    pub async fn act(
        &self,
        vmi: &VirtualMachineInstance,
        action: HandlerAction,
    ) -> Result<(), ApiError> {
        let address = self.address(vmi).await?;
        HandlerConnection::new(&self.tls, address)
            .act(uid_of(vmi)?, action)
            .await
    }

    /// What the VMI's guest agent said (`what`: `guestosinfo`, `userlist`, `filesystemlist`),
    /// as the JSON body to answer with.
    pub async fn guest_info(
        &self,
        vmi: &VirtualMachineInstance,
        what: &str,
    ) -> Result<Bytes, ApiError> {
        let address = self.address(vmi).await?;
        HandlerConnection::new(&self.tls, address)
            .guest_info(uid_of(vmi)?, what)
            .await
    }

    /// Opens the VMI's serial console through its handler.
    pub async fn console(&self, vmi: &VirtualMachineInstance) -> Result<Upgraded, ApiError> {
        let address = self.address(vmi).await?;
        HandlerConnection::new(&self.tls, address)
            .console(uid_of(vmi)?)
            .await
    }

    /// Opens the VMI's VNC display through its handler.
    pub async fn vnc(&self, vmi: &VirtualMachineInstance) -> Result<Upgraded, ApiError> {
        let address = self.address(vmi).await?;
        HandlerConnection::new(&self.tls, address)
            .vnc(uid_of(vmi)?)
            .await
    }

    /// A PNG of the VMI's screen, taken by its launcher through its handler.
    pub async fn screenshot(&self, vmi: &VirtualMachineInstance) -> Result<Bytes, ApiError> {
        let address = self.address(vmi).await?;
        HandlerConnection::new(&self.tls, address)
            .screenshot(uid_of(vmi)?)
            .await
    }

    /// Opens a port-forward to `port` of the VMI's guest through its handler: a TCP
    /// connection, or with `protocol` `udp` a stream of length-prefixed datagrams.
    pub async fn port_forward(
        &self,
        vmi: &VirtualMachineInstance,
        port: u16,
        protocol: &str,
    ) -> Result<Upgraded, ApiError> {
        let address = self.address(vmi).await?;
        HandlerConnection::new(&self.tls, address)
            .port_forward(uid_of(vmi)?, port, protocol)
            .await
    }
}

/// The calls to one handler at a known address.
pub struct HandlerConnection {
    tls: Arc<rustls::ClientConfig>,
    address: SocketAddr,
}

impl HandlerConnection {
    pub fn new(tls: &Arc<rustls::ClientConfig>, address: SocketAddr) -> HandlerConnection {
        HandlerConnection {
            tls: tls.clone(),
            address,
        }
    }

    async fn send(
        &self,
        request: Request<Empty<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, ApiError> {
        let address = self.address;
        let unreachable = |e: &dyn std::fmt::Display| {
            ApiError::internal(format!("virt-handler at {address}: {e}"))
        };
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| unreachable(&e))?;
        let name = ServerName::try_from(HANDLER_SERVER_NAME)
            .expect("HANDLER_SERVER_NAME is a valid DNS name");
        let stream = TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| unreachable(&e))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(&e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                log::debug!("virt-handler connection: {e}");
            }
        });
        sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(&e))
    }

    fn request(method: http::Method, path: &str) -> http::request::Builder {
        Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, HANDLER_SERVER_NAME)
    }

    /// Asks the handler to pause, unpause or reset the VMI `uid`.
    pub async fn act(&self, uid: &str, action: HandlerAction) -> Result<(), ApiError> {
        let request = Self::request(http::Method::PUT, &handler_path(uid, &action.path()))
            .body(Empty::new())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.call(request, action.name()).await.map(drop)
    }

    /// Asks the handler what the guest agent of the VMI `uid` said (`what`: the subresource).
    pub async fn guest_info(&self, uid: &str, what: &str) -> Result<Bytes, ApiError> {
        let request = Self::request(http::Method::GET, &handler_path(uid, what))
            .body(Empty::new())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.call(request, what).await
    }

    /// Sends `request`; the body of a success, or the handler's status with its reason.
    async fn call(&self, request: Request<Empty<Bytes>>, what: &str) -> Result<Bytes, ApiError> {
        let response = self.send(request).await?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| ApiError::internal(format!("virt-handler's answer to {what}: {e}")))?;
        if status.is_success() {
            return Ok(body);
        }
        Err(failure(what, status, &String::from_utf8_lossy(&body)))
    }

    /// Opens the serial console of the VMI `uid`.
    pub async fn console(&self, uid: &str) -> Result<Upgraded, ApiError> {
        self.upgrade(&handler_path(uid, "console"), CONSOLE_UPGRADE, "console")
            .await
    }

    /// Opens the VNC display of the VMI `uid`.
    pub async fn vnc(&self, uid: &str) -> Result<Upgraded, ApiError> {
        self.upgrade(&handler_path(uid, "vnc"), VNC_UPGRADE, "vnc")
            .await
    }

    /// A PNG of the screen of the VMI `uid`.
    pub async fn screenshot(&self, uid: &str) -> Result<Bytes, ApiError> {
        let what = "vnc/screenshot";
        let request = Self::request(http::Method::GET, &handler_path(uid, what))
            .body(Empty::new())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.call(request, what).await
    }

    /// Opens a port-forward to `port` (`tcp` or `udp`) of the guest of the VMI `uid`.
    pub async fn port_forward(
        &self,
        uid: &str,
        port: u16,
        protocol: &str,
    ) -> Result<Upgraded, ApiError> {
        let path = handler_path(uid, &format!("portforward/{port}/{protocol}"));
        self.upgrade(&path, PORT_FORWARD_UPGRADE, "port-forward")
            .await
    }

    /// `GET path` upgraded to `protocol`: the raw byte stream the handler relays.
    async fn upgrade(&self, path: &str, protocol: &str, what: &str) -> Result<Upgraded, ApiError> {
        let request = Self::request(http::Method::GET, path)
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, protocol)
            .body(Empty::new())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let response = self.send(request).await?;
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
            return Err(ApiError::new(
                status,
                format!("{what} not available: {}", body.trim()),
            ));
        }
        hyper::upgrade::on(response)
            .await
            .map_err(|e| ApiError::internal(format!("{what} upgrade: {e}")))
    }
}

/// The error for the handler's refusal of `what` with `status` and `reason`. KubeVirt's virt-api
/// answers a failed freeze or thaw as an internal error naming the command, whatever the cause.
pub fn failure(what: &str, status: StatusCode, reason: &str) -> ApiError {
    let command = match what {
        "freeze" => "Freeze",
        "unfreeze" => "Unfreeze",
        _ => return ApiError::new(status, format!("{what} failed: {}", reason.trim())),
    };
    ApiError::internal(format!(
        "Internal error occurred: command {command} failed: {}",
        reason.trim()
    ))
}

#[cfg(test)]
#[path = "handler_client_tests.rs"]
mod tests;
