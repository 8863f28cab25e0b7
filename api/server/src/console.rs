//! The console relay: a WebSocket (`plain.kubevirt.io`) from the client on one side, the raw
//! serial byte stream from virt-handler on the other.
//!
//! The client (virtctl, through kube-apiserver's proxy) sends binary or text frames whose
//! payloads are keystrokes; they are written to the handler stream as they are. Bytes the
//! guest writes arrive from the handler and go back as binary frames. A ping is answered with
//! a pong; a close frame or the end of either side ends the relay. A client that closed is
//! answered with its close frame; when the console ends (the VM stopped, or a newer console of
//! the VMI replaced this one), the connection is closed without a close frame, as KubeVirt's
//! virt-api does, so that KubeVirt's clients read an unexpected EOF rather than a normal end.
//!
//! The VNC display and port-forwards are relayed the same way, with their byte streams (RFB,
//! a guest's TCP connection) in place of the serial port's. A UDP port-forward carries
//! datagrams ([`Framing::Datagrams`]): each WebSocket message is one datagram, as KubeVirt's
//! virtctl sends and expects them, and the handler stream carries each as a 2-byte big-endian
//! length and its bytes (virt-handler's `portforward` module speaks the same).

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::websocket::{
    read_frame, write_frame, OP_BINARY, OP_CLOSE, OP_CONTINUATION, OP_PING, OP_PONG, OP_TEXT,
};

/// How a relay ended.
#[derive(Debug, PartialEq, Eq)]
pub enum RelayEnd {
    /// The client closed the WebSocket or went away.
    ClientClosed,
    /// The console stream ended (the VM stopped, the handler went away).
    ConsoleClosed,
}

/// What the handler stream carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// A byte stream (the serial port, RFB, a TCP connection): message boundaries mean nothing.
    Bytes,
    /// Datagrams, each a 2-byte big-endian length and its bytes; one WebSocket message each.
    Datagrams,
}

/// Relays until one side ends. `client` speaks WebSocket (server side: frames from it are
/// masked, frames to it are not); `console` is raw bytes or datagrams, as `framing` says.
pub async fn relay<C, H>(client: C, console: H, framing: Framing) -> RelayEnd
where
    C: AsyncRead + AsyncWrite + Send + 'static,
    H: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut console_read, mut console_write) = tokio::io::split(console);
    let (frames_tx, mut frames_rx) = mpsc::channel::<(u8, Vec<u8>)>(64);

    let writer = tokio::spawn(async move {
        while let Some((opcode, payload)) = frames_rx.recv().await {
            if write_frame(&mut client_write, opcode, &payload, None)
                .await
                .is_err()
                || opcode == OP_CLOSE
            {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    });

    let to_console = {
        let frames_tx = frames_tx.clone();
        async move {
            // A message's fragments so far (datagrams only).
            let mut message = Vec::new();
            loop {
                let frame = match read_frame(&mut client_read).await {
                    Ok(Some(frame)) => frame,
                    Ok(None) | Err(_) => return RelayEnd::ClientClosed,
                };
                match frame.opcode {
                    OP_BINARY | OP_TEXT | OP_CONTINUATION => {
                        let bytes = match framing {
                            Framing::Bytes => frame.payload,
                            Framing::Datagrams => {
                                message.extend(frame.payload);
                                if !frame.fin {
                                    continue;
                                }
                                match datagram(&std::mem::take(&mut message)) {
                                    Some(framed) => framed,
                                    None => return RelayEnd::ClientClosed,
                                }
                            }
                        };
                        if console_write.write_all(&bytes).await.is_err()
                            || console_write.flush().await.is_err()
                        {
                            return RelayEnd::ConsoleClosed;
                        }
                    }
                    OP_PING => {
                        let _ = frames_tx.send((OP_PONG, frame.payload)).await;
                    }
                    OP_CLOSE => {
                        let _ = frames_tx.send((OP_CLOSE, frame.payload)).await;
                        return RelayEnd::ClientClosed;
                    }
                    _ => {}
                }
            }
        }
    };
    let from_console = {
        let frames_tx = frames_tx.clone();
        async move {
            // Large enough that a VNC screen update goes in few frames; a read returns what
            // is there, so the console's keystroke echoes are not held back.
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let read = match framing {
                    Framing::Bytes => match console_read.read(&mut buf).await {
                        Ok(0) | Err(_) => None,
                        Ok(n) => Some(n),
                    },
                    Framing::Datagrams => read_datagram(&mut console_read, &mut buf).await.ok(),
                };
                match read {
                    None => return RelayEnd::ConsoleClosed,
                    Some(n) => {
                        if frames_tx
                            .send((OP_BINARY, buf[..n].to_vec()))
                            .await
                            .is_err()
                        {
                            return RelayEnd::ClientClosed;
                        }
                    }
                }
            }
        }
    };
    let end = tokio::select! {
        end = to_console => end,
        end = from_console => end,
    };
    drop(frames_tx);
    let _ = writer.await;
    end
}

/// `payload` with its 2-byte big-endian length in front; `None` when it cannot be a UDP
/// datagram (longer than 65535 bytes).
fn datagram(payload: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(payload.len()).ok()?;
    let mut framed = Vec::with_capacity(payload.len() + 2);
    framed.extend(len.to_be_bytes());
    framed.extend(payload);
    Some(framed)
}

/// Reads one length-prefixed datagram into `buf` (at least 64 KiB); returns its length.
async fn read_datagram<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    let len = usize::from(reader.read_u16().await?);
    reader.read_exact(&mut buf[..len]).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::websocket::{encode_frame, Frame};

    #[tokio::test]
    async fn keystrokes_go_in_and_guest_output_comes_back() {
        let (client, client_peer) = tokio::io::duplex(1 << 16);
        let (console, mut guest) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client_peer, console, Framing::Bytes));
        let (mut client_read, mut client_write) = tokio::io::split(client);

        client_write
            .write_all(&encode_frame(OP_BINARY, b"ls\r", Some([1, 2, 3, 4])))
            .await
            .unwrap();
        let mut typed = [0u8; 3];
        guest.read_exact(&mut typed).await.unwrap();
        assert_eq!(&typed, b"ls\r");

        guest.write_all(b"login: ").await.unwrap();
        let frame = read_frame(&mut client_read).await.unwrap().unwrap();
        assert_eq!(
            frame,
            Frame {
                fin: true,
                opcode: OP_BINARY,
                payload: b"login: ".to_vec()
            }
        );

        client_write
            .write_all(&encode_frame(OP_PING, b"p", Some([5, 6, 7, 8])))
            .await
            .unwrap();
        let pong = read_frame(&mut client_read).await.unwrap().unwrap();
        assert_eq!((pong.opcode, pong.payload), (OP_PONG, b"p".to_vec()));

        client_write
            .write_all(&encode_frame(OP_CLOSE, &[], Some([0, 0, 0, 0])))
            .await
            .unwrap();
        assert_eq!(relay.await.unwrap(), RelayEnd::ClientClosed);
    }

    #[tokio::test]
    async fn console_end_closes_the_connection_without_a_close_frame() {
        let (client, client_peer) = tokio::io::duplex(1 << 16);
        let (console, mut guest) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client_peer, console, Framing::Bytes));
        guest.write_all(b"bye").await.unwrap();
        drop(guest);
        let (mut client_read, _client_write) = tokio::io::split(client);
        let last = read_frame(&mut client_read).await.unwrap().unwrap();
        assert_eq!((last.opcode, last.payload), (OP_BINARY, b"bye".to_vec()));
        assert!(read_frame(&mut client_read).await.unwrap().is_none());
        assert_eq!(relay.await.unwrap(), RelayEnd::ConsoleClosed);
    }

    #[tokio::test]
    async fn datagrams_keep_their_boundaries_both_ways() {
        let (client, client_peer) = tokio::io::duplex(1 << 16);
        let (console, mut handler) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client_peer, console, Framing::Datagrams));
        let (mut client_read, mut client_write) = tokio::io::split(client);
        // One message in two fragments, then one in one frame: two datagrams.
        let mut first = encode_frame(OP_BINARY, b"o", Some([1, 2, 3, 4]));
        first[0] &= 0x7f;
        for frame in [
            first,
            encode_frame(OP_CONTINUATION, b"ne", Some([5, 6, 7, 8])),
            encode_frame(OP_BINARY, b"two", Some([9, 9, 9, 9])),
        ] {
            client_write.write_all(&frame).await.unwrap();
        }
        let mut framed = [0u8; 10];
        handler.read_exact(&mut framed).await.unwrap();
        assert_eq!(&framed, b"\0\x03one\0\x03two");
        // Two datagrams from the guest, the second empty: two messages.
        handler.write_all(b"\0\x05hello\0\0").await.unwrap();
        for expected in [&b"hello"[..], b""] {
            let frame = read_frame(&mut client_read).await.unwrap().unwrap();
            assert_eq!(
                (frame.opcode, frame.payload.as_slice()),
                (OP_BINARY, expected)
            );
        }
        drop(handler);
        assert_eq!(relay.await.unwrap(), RelayEnd::ConsoleClosed);
    }
}
