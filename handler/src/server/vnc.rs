//! The VNC relay on the handler side: the upgraded HTTP connection from virt-api and the VM's
//! `vnc-sock` (QEMU's VNC server on a unix socket, a raw RFB stream both ways) are copied into
//! each other until either closes; and the screenshot, which the launcher takes.
//!
//! Unlike the console, a VMI may have several VNC connections at once: QEMU's VNC server
//! shares the display between its clients, so a new viewer does not close the one before.
//!
//! The socket exists only when the VM has a graphics device, so a missing socket is answered
//! as such (`404`) before the upgrade, as a missing console is.

use std::io;

use bytes::Bytes;
use contract::sockets::{LAUNCHER_SOCKET, VNC_SOCKET};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::UnixStream;

use super::{text, ServerConfig, VNC_UPGRADE};

/// Why the VNC socket of `uid` could not be reached, as an HTTP answer: the launcher's socket
/// tells a VM without graphics from a VMI that does not run here.
fn not_reachable(config: &ServerConfig, uid: &str, error: &io::Error) -> Response<Full<Bytes>> {
    let directory = config.socket_root.join(uid);
    let message = if !directory.join(LAUNCHER_SOCKET).exists() {
        format!("no launcher for VMI {uid} on this node")
    } else if error.kind() == io::ErrorKind::NotFound {
        format!("VMI {uid} has no VNC display on this node: its VM has no graphics device")
    } else {
        format!("no VNC display for VMI {uid} on this node: {error}")
    };
    text(StatusCode::NOT_FOUND, message)
}

/// Connects to the VNC socket, answers 101 and relays in the background.
pub async fn open(
    config: &ServerConfig,
    uid: &str,
    mut request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if !super::asks_for_upgrade(&request, VNC_UPGRADE) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("VNC needs Connection: Upgrade, Upgrade: {VNC_UPGRADE}"),
        );
    }
    let path = config.socket_root.join(uid).join(VNC_SOCKET);
    let socket = match UnixStream::connect(&path).await {
        Ok(socket) => socket,
        Err(e) => return not_reachable(config, uid, &e),
    };
    super::relay_upgraded(&mut request, VNC_UPGRADE, socket, format!("VNC of {uid}"))
}

/// `200` with the launcher's PNG of the screen, or its refusal.
pub async fn screenshot(config: &ServerConfig, uid: &str) -> Response<Full<Bytes>> {
    let socket = super::launcher_socket(config, uid);
    match super::routes::screenshot(&socket, uid).await {
        Ok(png) => {
            let mut response = Response::new(Full::new(Bytes::from(png)));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("image/png"),
            );
            response
        }
        Err((code, message)) => text(code, message),
    }
}
