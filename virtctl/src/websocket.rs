//! The WebSocket client the streaming subresources share (`console`, `vnc`, `portforward`):
//! open one (`plain.kubevirt.io`) through kube-apiserver, and relay a local byte stream over it.
//!
//! Bytes go out as masked binary frames; binary and text frames from the server come back as
//! they are; pings are answered. The relay ends when either side ends, and says which
//! ([`Ended`]).

use http::{header, StatusCode};
use http_body_util::BodyExt;
use kube::Client;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use virt_api::websocket::{
    client_key, read_frame, write_frame, OP_BINARY, OP_CLOSE, OP_CONTINUATION, OP_PING, OP_PONG,
    OP_TEXT, PLAIN_PROTOCOL,
};

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

/// The message of an error response: a Kubernetes Status's `message`, else the body's text,
/// else the status line.
pub fn status_message(status: StatusCode, body: &[u8]) -> String {
    let from_status = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        });
    match from_status {
        Some(message) => message,
        None => {
            let text = String::from_utf8_lossy(body).trim().to_string();
            if text.is_empty() {
                status.to_string()
            } else {
                text
            }
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
        return Err(Refused::Status(status, status_message(status, &body)));
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

/// The close code of a normal closure.
pub const NORMAL_CLOSURE: u16 = 1000;

/// Which side ended a [`relay`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The local side ended (end of input, or its output went away); a close frame was sent.
    Local,
    /// The server sent a close frame, with this code (`None`: it gave none).
    Closed(Option<u16>),
    /// The connection to the server broke without a close frame.
    Broken(String),
}

impl Ended {
    /// Whether the session ended as it should: the local side ended it, or the server closed it
    /// normally. Otherwise the error, in the words of KubeVirt's WebSocket client.
    pub fn result(&self) -> Result<(), String> {
        match self {
            Ended::Local | Ended::Closed(None) => Ok(()),
            Ended::Closed(Some(code)) if *code == NORMAL_CLOSURE => Ok(()),
            Ended::Closed(Some(code)) => Err(format!("websocket: close {code}")),
            Ended::Broken(reason) => Err(reason.clone()),
        }
    }
}

/// What a connection that ends without a close frame is called.
const ABNORMAL: &str = "websocket: close 1006 (abnormal closure): unexpected EOF";

/// Copies `local_read` into the WebSocket `stream` and the server's frames into `local_write`
/// until either side ends.
pub async fn relay<S, R, W>(stream: S, mut local_read: R, mut local_write: W) -> Ended
where
    S: AsyncRead + AsyncWrite + Send + 'static,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (mut ws_read, mut ws_write) = tokio::io::split(stream);
    let (pong_tx, mut pong_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let mut next_mask = masks(seed());
    let outgoing = async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            tokio::select! {
                read = local_read.read(&mut buf) => {
                    let n = match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if let Err(e) = write_frame(&mut ws_write, OP_BINARY, &buf[..n], Some(next_mask())).await {
                        return Ended::Broken(format!("websocket: {e}"));
                    }
                }
                Some(payload) = pong_rx.recv() => {
                    let _ = write_frame(&mut ws_write, OP_PONG, &payload, Some(next_mask())).await;
                }
            }
        }
        let _ = write_frame(
            &mut ws_write,
            OP_CLOSE,
            &NORMAL_CLOSURE.to_be_bytes(),
            Some(next_mask()),
        )
        .await;
        Ended::Local
    };
    let incoming = async move {
        let ended = loop {
            match read_frame(&mut ws_read).await {
                Ok(Some(frame)) => match frame.opcode {
                    OP_BINARY | OP_TEXT | OP_CONTINUATION
                        if local_write.write_all(&frame.payload).await.is_err()
                            || local_write.flush().await.is_err() =>
                    {
                        break Ended::Local;
                    }
                    OP_BINARY | OP_TEXT | OP_CONTINUATION => {}
                    OP_PING => {
                        let _ = pong_tx.send(frame.payload).await;
                    }
                    OP_CLOSE => {
                        let code = frame
                            .payload
                            .get(..2)
                            .map(|c| u16::from_be_bytes([c[0], c[1]]));
                        break Ended::Closed(code);
                    }
                    _ => {}
                },
                Ok(None) => break Ended::Broken(ABNORMAL.into()),
                Err(e) => break Ended::Broken(format!("websocket: {e}")),
            }
        };
        let _ = local_write.shutdown().await;
        ended
    };
    tokio::select! {
        ended = outgoing => ended,
        ended = incoming => ended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay against a WebSocket server played by the test: local bytes arrive as masked
    /// binary frames, server frames come out locally, a server close ends it.
    #[tokio::test]
    async fn relays_both_ways_and_ends_on_close() {
        let (client_side, mut server_side) = tokio::io::duplex(1 << 16);
        let (mut local_in, local_read) = tokio::io::duplex(1 << 16);
        let (local_write, mut local_out) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client_side, local_read, local_write));
        local_in.write_all(b"SSH-2.0-client\r\n").await.unwrap();
        let frame = read_frame(&mut server_side).await.unwrap().unwrap();
        assert_eq!(
            (frame.opcode, frame.payload.as_slice()),
            (OP_BINARY, &b"SSH-2.0-client\r\n"[..])
        );
        write_frame(&mut server_side, OP_BINARY, b"SSH-2.0-guest\r\n", None)
            .await
            .unwrap();
        let mut got = vec![0u8; 15];
        local_out.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"SSH-2.0-guest\r\n");
        write_frame(&mut server_side, OP_CLOSE, &[0x03, 0xe8], None)
            .await
            .unwrap();
        assert_eq!(relay.await.unwrap(), Ended::Closed(Some(1000)));
        let mut rest = Vec::new();
        local_out.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "the local side ends after the close");
    }

    /// The end of local input closes the WebSocket normally; pings are answered.
    #[tokio::test]
    async fn local_end_sends_a_close_and_pings_get_pongs() {
        let (client_side, mut server_side) = tokio::io::duplex(1 << 16);
        let (mut local_in, local_read) = tokio::io::duplex(1 << 16);
        let (local_write, _local_out) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client_side, local_read, local_write));
        write_frame(&mut server_side, OP_PING, b"hi", None)
            .await
            .unwrap();
        let pong = read_frame(&mut server_side).await.unwrap().unwrap();
        assert_eq!(
            (pong.opcode, pong.payload.as_slice()),
            (OP_PONG, &b"hi"[..])
        );
        local_in.shutdown().await.unwrap();
        drop(local_in);
        let close = read_frame(&mut server_side).await.unwrap().unwrap();
        assert_eq!(
            (close.opcode, close.payload.as_slice()),
            (OP_CLOSE, &[0x03, 0xe8][..])
        );
        assert_eq!(relay.await.unwrap(), Ended::Local);
    }

    #[tokio::test]
    async fn a_connection_gone_without_a_close_is_abnormal() {
        let (client_side, server_side) = tokio::io::duplex(1 << 16);
        let (_local_in, local_read) = tokio::io::duplex(1 << 16);
        let (local_write, _local_out) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client_side, local_read, local_write));
        drop(server_side);
        let ended = relay.await.unwrap();
        assert_eq!(
            ended.result().unwrap_err(),
            "websocket: close 1006 (abnormal closure): unexpected EOF"
        );
        assert_eq!(Ended::Closed(Some(1000)).result(), Ok(()));
        assert_eq!(Ended::Closed(None).result(), Ok(()));
        assert_eq!(
            Ended::Closed(Some(1011)).result().unwrap_err(),
            "websocket: close 1011"
        );
    }

    #[test]
    fn error_bodies_give_the_status_message() {
        let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"virtualmachineinstances.kubevirt.io \"x\" not found","reason":"NotFound","code":404}"#;
        assert_eq!(
            status_message(StatusCode::NOT_FOUND, status),
            "virtualmachineinstances.kubevirt.io \"x\" not found"
        );
        assert_eq!(
            status_message(StatusCode::BAD_GATEWAY, b" upstream down\n"),
            "upstream down"
        );
        assert_eq!(status_message(StatusCode::NOT_FOUND, b""), "404 Not Found");
    }
}
