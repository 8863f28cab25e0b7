//! `virtctl port-forward` of UDP ports (`udp/LOCAL[:REMOTE]`), as KubeVirt's virtctl forwards
//! them: a local UDP socket, and for each local sender a WebSocket to the VMI's
//! `portforward/{port}/udp` subresource. Each datagram the sender sends goes out as one
//! masked binary message; each message from the server (one datagram of the guest's) goes
//! back to that sender. A sender's WebSocket lives until the server closes it or virtctl ends;
//! a datagram from a sender whose WebSocket ended opens a new one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use kube::Client;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use virt_api::websocket::{
    read_frame, write_frame, OP_BINARY, OP_CLOSE, OP_CONTINUATION, OP_PING, OP_PONG, OP_TEXT,
};

use crate::websocket::{masks, open_websocket, seed};

/// The largest UDP datagram.
const MAX_DATAGRAM: usize = 65535;

/// Datagrams queued for one sender's WebSocket while it opens; more are dropped, as a full
/// socket buffer drops them.
const QUEUE: usize = 256;

/// What goes out on one sender's WebSocket: a frame's opcode and payload.
type Outgoing = (u8, Vec<u8>);

/// Forwards what arrives at `socket` to the guest's UDP port `remote`, whose port-forward
/// subresource is at `path`; runs until killed.
pub async fn forward(client: Client, path: String, socket: UdpSocket, remote: u16) {
    let socket = Arc::new(socket);
    let mut senders: HashMap<SocketAddr, mpsc::Sender<Outgoing>> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(e) => {
                eprintln!("receiving on udp port {remote}: {e}");
                continue;
            }
        };
        let datagram = (OP_BINARY, buf[..n].to_vec());
        let datagram = match senders.get(&peer) {
            Some(tx) => match tx.try_send(datagram) {
                Ok(()) | Err(TrySendError::Full(_)) => continue,
                // Its WebSocket ended: a new one.
                Err(TrySendError::Closed(datagram)) => datagram,
            },
            None => datagram,
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let _ = tx.try_send(datagram);
        senders.insert(peer, tx.clone());
        let session = Session {
            client: client.clone(),
            path: path.clone(),
            socket: socket.clone(),
            peer,
        };
        tokio::spawn(async move {
            if let Err(e) = session.run(tx, rx).await {
                eprintln!("forwarding {peer} -> {remote}/udp: {e}");
            }
        });
    }
}

/// One local sender's WebSocket.
struct Session {
    client: Client,
    path: String,
    socket: Arc<UdpSocket>,
    peer: SocketAddr,
}

impl Session {
    /// Opens the WebSocket and carries datagrams both ways until the server ends it.
    async fn run(
        self,
        tx: mpsc::Sender<Outgoing>,
        mut rx: mpsc::Receiver<Outgoing>,
    ) -> Result<(), String> {
        let stream = open_websocket(&self.client, &self.path)
            .await
            .map_err(|e| e.to_string())?;
        let (mut ws_read, mut ws_write) = tokio::io::split(TokioIo::new(stream));
        let mut next_mask = masks(seed());
        let outgoing = async move {
            while let Some((opcode, payload)) = rx.recv().await {
                write_frame(&mut ws_write, opcode, &payload, Some(next_mask()))
                    .await
                    .map_err(|e| format!("websocket: {e}"))?;
            }
            Ok(())
        };
        let incoming = async move {
            let mut message = Vec::new();
            loop {
                let frame = match read_frame(&mut ws_read).await {
                    Ok(Some(frame)) => frame,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(format!("websocket: {e}")),
                };
                match frame.opcode {
                    OP_BINARY | OP_TEXT | OP_CONTINUATION => {
                        message.extend(frame.payload);
                        if frame.fin {
                            let datagram = std::mem::take(&mut message);
                            let _ = self.socket.send_to(&datagram, self.peer).await;
                        }
                    }
                    OP_PING => {
                        let _ = tx.send((OP_PONG, frame.payload)).await;
                    }
                    OP_CLOSE => return Ok(()),
                    _ => {}
                }
            }
        };
        tokio::select! {
            ended = outgoing => ended,
            ended = incoming => ended,
        }
    }
}
