//! virt-handler's subresource server: what virt-api calls for a VMI on this node.
//!
//! Transport: plain HTTP/1.1 on the pod network, port 8186, every request carrying
//! `Authorization: Bearer <token>` where the token is the one both virt-api and virt-handler
//! read from the same Secret (mounted at `$VIRT_HANDLER_TOKEN_FILE`). TLS between the two is
//! not done yet; the token keeps other pods from driving VMs, but the pod network sees the
//! console bytes.
//!
//! A VMI is named by its UID, which is also the name of its socket directory
//! (`<socket root>/<uid>/`, holding `launcher-sock` and `console-sock`):
//!
//! - `PUT /v1/vmis/{uid}/{pause|unpause|reset}`: calls the launcher's Pause, Unpause or Reset
//!   over gRPC; `200`, or `404` (no launcher here), `409` (the launcher refuses in this state),
//!   `500`, with the reason as text.
//! - `GET /v1/vmis/{uid}/console` with `Connection: Upgrade` and
//!   `Upgrade: ferrovirt-console`: connects to `console-sock` first (so a missing console is a
//!   plain `404`), then answers `101 Switching Protocols`; from then on the connection and the
//!   console socket are copied into each other until either side closes (see [`console`]).

pub mod console;
mod routes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

pub use routes::{route, HandlerRoute, VmiAction};

/// Port of the subresource server.
pub const PORT: u16 = 8186;
/// The `Upgrade` protocol of the console relay.
pub const CONSOLE_UPGRADE: &str = "ferrovirt-console";
/// Default path of the shared token (a Secret volume).
pub const DEFAULT_TOKEN_FILE: &str = "/etc/virt-handler/handler-token/token";

/// Settings of the server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub socket_root: PathBuf,
    pub token: String,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("reading the token {0}")]
    Token(PathBuf, #[source] std::io::Error),
    #[error("the token file {0} is empty")]
    EmptyToken(PathBuf),
    #[error("binding {0}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// Reads the settings from the environment (`VIRT_HANDLER_SERVER_ADDRESS`,
/// `VIRT_HANDLER_TOKEN_FILE`) and serves; logs and returns if it cannot (the rest of
/// virt-handler keeps running without consoles and pause).
pub async fn run_from_env(socket_root: PathBuf) {
    let listen = std::env::var("VIRT_HANDLER_SERVER_ADDRESS")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], PORT)));
    let token_file = std::env::var_os("VIRT_HANDLER_TOKEN_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TOKEN_FILE));
    let result = match read_token(&token_file) {
        Ok(token) => {
            serve(ServerConfig {
                listen,
                socket_root,
                token,
            })
            .await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        let source = std::error::Error::source(&e)
            .map(|s| format!(": {s}"))
            .unwrap_or_default();
        log::error!("subresource server (console, pause, reset) not running: {e}{source}");
    }
}

fn read_token(path: &std::path::Path) -> Result<String, ServerError> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| ServerError::Token(path.to_path_buf(), e))?
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(ServerError::EmptyToken(path.to_path_buf()));
    }
    Ok(token)
}

/// Serves until the process ends.
pub async fn serve(config: ServerConfig) -> Result<(), ServerError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ServerError::Bind(config.listen, e))?;
    log::info!("subresource server listening on http://{}", config.listen);
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

/// Compares the bearer token without stopping at the first difference.
fn authorized(config: &ServerConfig, request: &Request<Incoming>) -> bool {
    let Some(presented) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (presented.as_bytes(), config.token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn handle(config: &ServerConfig, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if !authorized(config, &request) {
        return text(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    match route(request.method(), request.uri().path()) {
        HandlerRoute::Action(uid, action) => {
            let socket = config
                .socket_root
                .join(&uid)
                .join(crate::vmi::reconcile::LAUNCHER_SOCKET);
            match routes::call_launcher(&socket, &uid, action).await {
                Ok(()) => text(StatusCode::OK, ""),
                Err((code, message)) => text(code, message),
            }
        }
        HandlerRoute::Console(uid) => console::open(config, &uid, request).await,
        HandlerRoute::NotFound => text(StatusCode::NOT_FOUND, "not found"),
    }
}

#[cfg(test)]
mod tests;
