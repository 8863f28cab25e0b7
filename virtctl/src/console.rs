//! `virtctl console`: a WebSocket (`plain.kubevirt.io`) to the VMI's console subresource
//! through kube-apiserver, with the terminal in raw mode.
//!
//! 1. Connect: `GET .../virtualmachineinstances/{name}/console` with `Upgrade: websocket`.
//!    While the VMI is not running yet (400, or a console that cannot be reached yet) the
//!    attempt is repeated once a second until `--timeout` minutes have passed, so
//!    `virtctl start vm && virtctl console vm` works. A VMI that does not exist ends it at
//!    once, as KubeVirt's virtctl does.
//! 2. Relay ([`crate::websocket::relay`], which `vnc` and `port-forward` use too): stdin bytes
//!    go out as masked binary frames; binary and text frames from the server go to stdout.
//!    Ctrl+] (0x1d) ends the session.
//! 3. A session that the server ends prints why it may have ended; run `virtctl console`
//!    again to reconnect (the guest's console keeps running meanwhile).

use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use http::StatusCode;
use hyper_util::rt::TokioIo;
use kube::Client;
use tokio::io::{AsyncRead, ReadBuf};
use virt_api::routes::{subresource_path, Subresource};

use crate::client::CallError;
use crate::terminal::RawMode;
use crate::websocket::{open_websocket, relay, Ended, Refused};

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
    let input = UntilEscape {
        inner: tokio::io::stdin(),
        escaped: false,
    };
    match relay(stream, input, tokio::io::stdout()).await {
        Ended::Local => SessionEnd::Escape,
        Ended::Closed(_) | Ended::Broken(_) => SessionEnd::Disconnected,
    }
}

/// Input that ends just before the first Ctrl+] (what follows it is dropped).
pub struct UntilEscape<R> {
    pub inner: R,
    pub escaped: bool,
}

impl<R: AsyncRead + Unpin> AsyncRead for UntilEscape<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.escaped {
            return Poll::Ready(Ok(()));
        }
        let start = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if let Some(i) = buf.filled()[start..].iter().position(|b| *b == ESCAPE) {
            buf.set_filled(start + i);
            self.escaped = true;
        }
        Poll::Ready(Ok(()))
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

    #[tokio::test]
    async fn input_ends_at_the_escape_key() {
        use tokio::io::AsyncReadExt;
        let mut input = UntilEscape {
            inner: &b"ls -l\r\x1d after"[..],
            escaped: false,
        };
        let mut got = Vec::new();
        input.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"ls -l\r");
        let mut input = UntilEscape {
            inner: &b"\x1d"[..],
            escaped: false,
        };
        let mut got = Vec::new();
        input.read_to_end(&mut got).await.unwrap();
        assert!(got.is_empty());
    }
}
