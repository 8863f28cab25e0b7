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
//! a guest's TCP connection) in place of the serial port's.

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

/// Relays until one side ends. `client` speaks WebSocket (server side: frames from it are
/// masked, frames to it are not); `console` is raw bytes.
pub async fn relay<C, H>(client: C, console: H) -> RelayEnd
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
            loop {
                let frame = match read_frame(&mut client_read).await {
                    Ok(Some(frame)) => frame,
                    Ok(None) | Err(_) => return RelayEnd::ClientClosed,
                };
                match frame.opcode {
                    OP_BINARY | OP_TEXT | OP_CONTINUATION
                        if console_write.write_all(&frame.payload).await.is_err()
                            || console_write.flush().await.is_err() =>
                    {
                        return RelayEnd::ConsoleClosed;
                    }
                    OP_BINARY | OP_TEXT | OP_CONTINUATION => {}
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
                match console_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return RelayEnd::ConsoleClosed,
                    Ok(n) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::websocket::{encode_frame, Frame};

    #[tokio::test]
    async fn keystrokes_go_in_and_guest_output_comes_back() {
        let (client, client_peer) = tokio::io::duplex(1 << 16);
        let (console, mut guest) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client_peer, console));
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
        let relay = tokio::spawn(relay(client_peer, console));
        guest.write_all(b"bye").await.unwrap();
        drop(guest);
        let (mut client_read, _client_write) = tokio::io::split(client);
        let last = read_frame(&mut client_read).await.unwrap().unwrap();
        assert_eq!((last.opcode, last.payload), (OP_BINARY, b"bye".to_vec()));
        assert!(read_frame(&mut client_read).await.unwrap().is_none());
        assert_eq!(relay.await.unwrap(), RelayEnd::ConsoleClosed);
    }
}
