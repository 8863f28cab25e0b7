//! The console relay on the handler side: the upgraded HTTP connection from virt-api and the
//! launcher's `console-sock` (a unix socket that streams the guest's serial port and takes its
//! input; several clients may be connected) are copied into each other until either closes.

use bytes::Bytes;
use contract::sockets::CONSOLE_SOCKET;
use http::{header, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use super::{text, ServerConfig, CONSOLE_UPGRADE};

fn asks_for_console_upgrade(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(CONSOLE_UPGRADE))
}

/// Connects to the console socket, answers 101 and relays in the background.
pub async fn open(
    config: &ServerConfig,
    uid: &str,
    mut request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if !asks_for_console_upgrade(&request) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("the console needs Connection: Upgrade, Upgrade: {CONSOLE_UPGRADE}"),
        );
    }
    let path = config.socket_root.join(uid).join(CONSOLE_SOCKET);
    let mut socket = match UnixStream::connect(&path).await {
        Ok(socket) => socket,
        Err(e) => {
            return text(
                StatusCode::NOT_FOUND,
                format!("no console for VMI {uid} on this node: {e}"),
            )
        }
    };
    let upgrade = hyper::upgrade::on(&mut request);
    let uid = uid.to_string();
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let mut upgraded = TokioIo::new(upgraded);
                match tokio::io::copy_bidirectional(&mut upgraded, &mut socket).await {
                    Ok((to_guest, from_guest)) => log::info!(
                        "console of {uid} closed ({to_guest} bytes in, {from_guest} bytes out)"
                    ),
                    Err(e) => log::info!("console of {uid} closed: {e}"),
                }
            }
            Err(e) => log::warn!("console of {uid}: upgrade failed: {e}"),
        }
    });
    let mut response = text(StatusCode::SWITCHING_PROTOCOLS, "");
    let headers = response.headers_mut();
    headers.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    headers.insert(
        header::UPGRADE,
        header::HeaderValue::from_static(CONSOLE_UPGRADE),
    );
    response
}
