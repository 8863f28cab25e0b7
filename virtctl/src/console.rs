//! `virtctl console`: a WebSocket (`plain.kubevirt.io`) to the VMI's console subresource
//! through kube-apiserver, with the terminal in raw mode.
//!
//! 1. Connect: `GET .../virtualmachineinstances/{name}/console` with `Upgrade: websocket`.
//!    While the VMI is not running yet (400, or a console that cannot be reached yet) the
//!    attempt is repeated once a second until `--timeout` minutes have passed, so
//!    `virtctl start vm && virtctl console vm` works. A VMI that does not exist ends it at
//!    once, as KubeVirt's virtctl does.
//! 2. Relay: stdin bytes go out as masked binary frames; binary and text frames from the
//!    server go to stdout. Ctrl+] (0x1d) ends the session.
//! 3. A session that the server ends prints why it may have ended; run `virtctl console`
//!    again to reconnect (the guest's console keeps running meanwhile).

use std::time::{Duration, Instant};

use http::{header, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use kube::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use virt_api::routes::{subresource_path, Subresource};
use virt_api::websocket::{
    client_key, read_frame, write_frame, OP_BINARY, OP_CLOSE, OP_CONTINUATION, OP_PING, OP_PONG,
    OP_TEXT, PLAIN_PROTOCOL,
};

use crate::client::CallError;
use crate::terminal::RawMode;

/// Ctrl+].
pub const ESCAPE: u8 = 0x1d;

/// How a session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The user pressed Ctrl+] (or stdin ended).
    Escape,
    /// The server closed the WebSocket.
    Disconnected,
}

/// Why connecting failed: retry (the VMI is not ready yet) or give up.
enum ConnectError {
    NotReady(String),
    Fatal(CallError),
}

async fn connect(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<hyper::upgrade::Upgraded, ConnectError> {
    let path = subresource_path(namespace, name, Subresource::Console);
    match open_websocket(client, &path).await {
        Ok(stream) => Ok(stream),
        Err(Refused::Transport(e)) => Err(ConnectError::NotReady(e)),
        Err(Refused::Status(status, message)) => Err(classify(status, name, message)),
        Err(Refused::Upgrade(e)) => Err(ConnectError::Fatal(CallError::Transport(e))),
    }
}

/// Why a WebSocket to a subresource was not opened.
#[derive(Debug)]
pub enum Refused {
    /// kube-apiserver could not be reached.
    Transport(String),
    /// The server answered with this status and message instead of switching protocols.
    Status(StatusCode, String),
    /// The switch itself failed.
    Upgrade(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Transport(e) | Refused::Upgrade(e) => f.write_str(e),
            Refused::Status(_, message) => f.write_str(message),
        }
    }
}

/// Opens a WebSocket (`plain.kubevirt.io`) to the subresource at `path` through kube-apiserver.
pub async fn open_websocket(
    client: &Client,
    path: &str,
) -> Result<hyper::upgrade::Upgraded, Refused> {
    let request = http::Request::get(path)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_VERSION, "13")
        .header(header::SEC_WEBSOCKET_KEY, client_key(seed()))
        .header(header::SEC_WEBSOCKET_PROTOCOL, PLAIN_PROTOCOL)
        .body(kube::client::Body::from(Vec::new()))
        .map_err(|e| Refused::Upgrade(e.to_string()))?;
    let response = client
        .send(request)
        .await
        .map_err(|e| Refused::Transport(e.to_string()))?;
    let status = response.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default();
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                v.get("message")
                    .and_then(|m| m.as_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
        return Err(Refused::Status(status, message));
    }
    hyper::upgrade::on(response)
        .await
        .map_err(|e| Refused::Upgrade(format!("upgrade: {e}")))
}

/// A fresh seed for WebSocket keys and masks.
pub fn seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    now ^ u64::from(std::process::id()).rotate_left(32)
}

/// Successive WebSocket masks (a client masks every frame it sends).
pub fn masks(mut seed: u64) -> impl FnMut() -> [u8; 4] {
    move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 32).to_le_bytes()[..4]
            .try_into()
            .unwrap_or([0x5a; 4])
    }
}

/// Whether a refused connection is worth another attempt.
fn classify(status: StatusCode, name: &str, message: String) -> ConnectError {
    let missing_vmi =
        status == StatusCode::NOT_FOUND && message.ends_with(&format!("\"{name}\" not found"));
    match status {
        _ if missing_vmi => ConnectError::Fatal(CallError::Server(format!(
            "Can't access VMI {name}: {message}"
        ))),
        StatusCode::CONFLICT
        | StatusCode::BAD_REQUEST
        | StatusCode::NOT_FOUND
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::INTERNAL_SERVER_ERROR => ConnectError::NotReady(message),
        _ => ConnectError::Fatal(CallError::Server(message)),
    }
}

/// Connects (waiting up to `timeout` for the VMI) and runs one session.
pub async fn run(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<SessionEnd, CallError> {
    let deadline = Instant::now() + timeout;
    let mut reported = false;
    let stream = loop {
        match connect(client, namespace, name).await {
            Ok(stream) => break stream,
            Err(ConnectError::Fatal(e)) => return Err(e),
            Err(ConnectError::NotReady(reason)) => {
                if Instant::now() >= deadline {
                    return Err(CallError::Server(format!(
                        "Timeout trying to connect to the virtual machine instance: {reason}"
                    )));
                }
                if !reported {
                    eprintln!("Waiting for the console of {name}: {reason}");
                    reported = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    eprint!("Successfully connected to {name} console. The escape sequence is ^]\r\n");
    let raw = RawMode::enable();
    let end = session(TokioIo::new(stream)).await;
    drop(raw);
    if end == SessionEnd::Disconnected {
        eprintln!(
            "\nYou were disconnected from the console. This has one of the following reasons:\
             \n - another user connected to the console of the target vm\
             \n - network issues\
             \n - the virtual machine instance stopped\
             \nRun `virtctl console {name}` again to reconnect."
        );
    }
    Ok(end)
}

/// Relays stdin/stdout over the WebSocket until Ctrl+] or the server closes.
async fn session<S>(stream: S) -> SessionEnd
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut ws_read, mut ws_write) = tokio::io::split(stream);
    let (pong_tx, mut pong_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let mut next_mask = masks(seed());
    let input = async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 1024];
        loop {
            tokio::select! {
                read = stdin.read(&mut buf) => {
                    let n = match read {
                        Ok(0) | Err(_) => return SessionEnd::Escape,
                        Ok(n) => n,
                    };
                    let (data, escaped) = match buf[..n].iter().position(|b| *b == ESCAPE) {
                        Some(i) => (&buf[..i], true),
                        None => (&buf[..n], false),
                    };
                    if !data.is_empty()
                        && write_frame(&mut ws_write, OP_BINARY, data, Some(next_mask())).await.is_err()
                    {
                        return SessionEnd::Disconnected;
                    }
                    if escaped {
                        let _ = write_frame(&mut ws_write, OP_CLOSE, &[0x03, 0xe8], Some(next_mask())).await;
                        return SessionEnd::Escape;
                    }
                }
                Some(payload) = pong_rx.recv() => {
                    let _ = write_frame(&mut ws_write, OP_PONG, &payload, Some(next_mask())).await;
                }
            }
        }
    };
    let output = async move {
        let mut stdout = tokio::io::stdout();
        loop {
            match read_frame(&mut ws_read).await {
                Ok(Some(frame)) => match frame.opcode {
                    OP_BINARY | OP_TEXT | OP_CONTINUATION => {
                        if stdout.write_all(&frame.payload).await.is_err() {
                            return SessionEnd::Escape;
                        }
                        let _ = stdout.flush().await;
                    }
                    OP_PING => {
                        let _ = pong_tx.send(frame.payload).await;
                    }
                    OP_CLOSE => return SessionEnd::Disconnected,
                    _ => {}
                },
                Ok(None) | Err(_) => return SessionEnd::Disconnected,
            }
        }
    };
    tokio::select! {
        end = input => end,
        end = output => end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_vmi_ends_at_once_and_a_vmi_not_running_yet_is_retried() {
        let missing = classify(
            StatusCode::NOT_FOUND,
            "vm1",
            "virtualmachineinstances.kubevirt.io \"vm1\" not found".into(),
        );
        match missing {
            ConnectError::Fatal(e) => assert_eq!(
                e.to_string(),
                "Can't access VMI vm1: virtualmachineinstances.kubevirt.io \"vm1\" not found"
            ),
            ConnectError::NotReady(m) => panic!("retried: {m}"),
        }
        for (status, message) in [
            (
                StatusCode::CONFLICT,
                "Unable to connect to VirtualMachineInstance because phase is Scheduling instead of Running",
            ),
            (StatusCode::NOT_FOUND, "console not available: no console for VMI x on this node"),
            (StatusCode::INTERNAL_SERVER_ERROR, "virt-handler at 10.0.0.1:8186: connection refused"),
        ] {
            assert!(
                matches!(classify(status, "vm1", message.into()), ConnectError::NotReady(_)),
                "{status} {message}"
            );
        }
        assert!(matches!(
            classify(StatusCode::FORBIDDEN, "vm1", "forbidden".into()),
            ConnectError::Fatal(_)
        ));
    }
}
