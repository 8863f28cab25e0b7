//! The host side of vsock: connections between guest ports and unix streams, the listener for
//! host-initiated connections, and the queue of packets waiting to go to the guest.
//!
//! The worker feeds it guest packets ([`Muxer::handle_guest_packet`]) and fd events, and asks it
//! for the next packet to put in a receive buffer ([`Muxer::next_rx_packet`]): control packets
//! first, then data from host streams that have some, within the guest's credit.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use log::{debug, warn};

use super::packet::PacketHeader;
use super::*;
use crate::devices::worker::EventRegistry;

/// Receive buffer we advertise per connection.
pub const BUF_ALLOC: u32 = 256 << 10;
/// Tokens from here up name connections.
pub const FIRST_CONNECTION_TOKEN: u64 = 16;
/// Host ports for host-initiated connections start here.
const FIRST_HOST_PORT: u32 = 1 << 30;
/// How long a host client may take to send its `CONNECT <port>` line.
const CONNECT_LINE_TIMEOUT: Duration = Duration::from_secs(1);
/// Open connections at most, each a host file descriptor (Firecracker's limit): a guest
/// REQUEST beyond it gets RST, a host client beyond it is closed.
pub const MAX_CONNECTIONS: usize = 1023;
/// Queued RST and CREDIT_UPDATE packets at most. A guest that sends packets the host answers
/// (junk, credit requests) without giving receive buffers would grow the queue without end;
/// beyond this its answers are dropped. REQUEST, RESPONSE and SHUTDOWN are bounded by the
/// connections and always queued.
pub const MAX_QUEUED_CONTROL: usize = 1024;

/// (host port, guest port)
type ConnKey = (u32, u32);

/// SHUTDOWN flags: the sender will receive no more, will send no more.
pub const SHUTDOWN_RCV: u32 = 1;
pub const SHUTDOWN_SEND: u32 = 2;

#[derive(Debug, PartialEq, Eq)]
enum ConnState {
    /// Host-initiated; REQUEST sent, waiting for the guest's RESPONSE.
    AwaitingResponse,
    Established,
}

struct Connection {
    stream: UnixStream,
    token: u64,
    state: ConnState,
    peer_buf_alloc: u32,
    peer_fwd_cnt: u32,
    /// Payload bytes sent to the guest.
    tx_cnt: u32,
    /// Payload bytes received from the guest (and accepted for the host stream).
    fwd_cnt: u32,
    fwd_cnt_sent: u32,
    /// Bytes for the host stream that did not fit its socket buffer yet.
    to_host: Vec<u8>,
    /// The guest sent SHUTDOWN with SEND: once `to_host` is written, the host stream's write
    /// side is shut (the host reads EOF) while the host may still send.
    guest_send_closed: bool,
    /// The guest sent SHUTDOWN with RCV: nothing more is read from the host stream for it.
    guest_recv_closed: bool,
    /// The host stream ended (EOF): the guest got SHUTDOWN with SEND and may still send.
    host_send_closed: bool,
}

impl Connection {
    fn credit(&self) -> u32 {
        self.peer_buf_alloc
            .saturating_sub(self.tx_cnt.wrapping_sub(self.peer_fwd_cnt))
    }

    fn flush_to_host(&mut self) -> io::Result<()> {
        while !self.to_host.is_empty() {
            match self.stream.write(&self.to_host) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.to_host.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        if self.guest_send_closed {
            // Everything the guest sent is written: the host reads EOF now.
            self.stream.shutdown(std::net::Shutdown::Write)?;
        }
        Ok(())
    }

    /// Whether data may be read from the host stream for the guest.
    fn host_may_send(&self) -> bool {
        self.state == ConnState::Established && !self.host_send_closed && !self.guest_recv_closed
    }
}

/// The connection table and the packets waiting for the guest.
pub struct Muxer {
    guest_cid: u64,
    socket_path: PathBuf,
    listener: UnixListener,
    conns: HashMap<ConnKey, Connection>,
    tokens: HashMap<u64, ConnKey>,
    next_token: u64,
    next_host_port: u32,
    control: VecDeque<PacketHeader>,
    readable: BTreeSet<ConnKey>,
    max_connections: usize,
}

impl Muxer {
    /// `listener` is bound at `socket_path` (non-blocking).
    pub fn new(guest_cid: u64, socket_path: &Path, listener: UnixListener) -> Muxer {
        Muxer {
            guest_cid,
            socket_path: socket_path.into(),
            listener,
            conns: HashMap::new(),
            tokens: HashMap::new(),
            next_token: FIRST_CONNECTION_TOKEN,
            next_host_port: FIRST_HOST_PORT,
            control: VecDeque::new(),
            readable: BTreeSet::new(),
            max_connections: MAX_CONNECTIONS,
        }
    }

    /// [`Muxer::new`] with another connection limit than [`MAX_CONNECTIONS`] (tests reach it
    /// without a thousand descriptors).
    pub fn with_max_connections(mut self, max: usize) -> Muxer {
        self.max_connections = max;
        self
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Control packets waiting for the guest.
    pub fn queued_control(&self) -> usize {
        self.control.len()
    }

    fn full(&self) -> bool {
        self.conns.len() >= self.max_connections
    }

    pub fn listener_fd(&self) -> i32 {
        self.listener.as_raw_fd()
    }

    fn header(&self, key: ConnKey, op: u16) -> PacketHeader {
        let fwd_cnt = self.conns.get(&key).map_or(0, |c| c.fwd_cnt);
        PacketHeader {
            src_cid: HOST_CID,
            dst_cid: self.guest_cid,
            src_port: key.0,
            dst_port: key.1,
            len: 0,
            type_: TYPE_STREAM,
            op,
            flags: 0,
            buf_alloc: BUF_ALLOC,
            fwd_cnt,
        }
    }

    fn push_control(&mut self, key: ConnKey, op: u16) {
        if matches!(op, OP_RST | OP_CREDIT_UPDATE) && self.control.len() >= MAX_QUEUED_CONTROL {
            guest_warn!(
                "vsock: {} control packets wait for receive buffers; op {op} for {key:?} dropped",
                self.control.len()
            );
            return;
        }
        let header = self.header(key, op);
        self.control.push_back(header);
    }

    fn add(&mut self, key: ConnKey, stream: UnixStream, state: ConnState, reg: &EventRegistry<'_>) {
        let token = self.next_token;
        self.next_token += 1;
        if let Err(e) = stream
            .set_nonblocking(true)
            .and_then(|()| reg.add_stream(stream.as_raw_fd(), token))
        {
            warn!("vsock: register connection {key:?}: {e}");
            self.push_control(key, OP_RST);
            return;
        }
        self.tokens.insert(token, key);
        self.conns.insert(
            key,
            Connection {
                stream,
                token,
                state,
                peer_buf_alloc: 0,
                peer_fwd_cnt: 0,
                tx_cnt: 0,
                fwd_cnt: 0,
                fwd_cnt_sent: 0,
                to_host: Vec::new(),
                guest_send_closed: false,
                guest_recv_closed: false,
                host_send_closed: false,
            },
        );
    }

    fn remove(&mut self, key: ConnKey, reg: &EventRegistry<'_>) {
        if let Some(conn) = self.conns.remove(&key) {
            let _ = reg.remove(conn.stream.as_raw_fd());
            self.tokens.remove(&conn.token);
            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        }
        self.readable.remove(&key);
    }

    /// Accepts host clients; each sends `CONNECT <port>\n`, then the guest gets a REQUEST.
    pub fn accept(&mut self, reg: &EventRegistry<'_>) {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    warn!("vsock: accept: {e}");
                    return;
                }
            };
            if self.full() {
                guest_warn!(
                    "vsock: {} connections open, the limit; a host client is closed",
                    self.conns.len()
                );
                continue;
            }
            let Some(port) = read_connect_line(&stream) else {
                debug!("vsock: host client sent no valid CONNECT line");
                continue;
            };
            let key = (self.next_host_port, port);
            self.next_host_port = self.next_host_port.wrapping_add(1).max(FIRST_HOST_PORT);
            self.add(key, stream, ConnState::AwaitingResponse, reg);
            if self.conns.contains_key(&key) {
                self.push_control(key, OP_REQUEST);
            }
        }
    }

    /// A host stream became readable or writable.
    pub fn stream_event(&mut self, token: u64, reg: &EventRegistry<'_>) {
        let Some(&key) = self.tokens.get(&token) else {
            return;
        };
        self.readable.insert(key);
        let failed = self
            .conns
            .get_mut(&key)
            .is_some_and(|c| c.flush_to_host().is_err());
        if failed {
            self.remove(key, reg);
            self.push_control(key, OP_RST);
        }
    }

    /// Handles one packet from the guest.
    pub fn handle_guest_packet(
        &mut self,
        hdr: &PacketHeader,
        payload: &[u8],
        reg: &EventRegistry<'_>,
    ) {
        let (src_cid, dst_cid, type_, op) = (hdr.src_cid, hdr.dst_cid, hdr.type_, hdr.op);
        let key = (hdr.dst_port, hdr.src_port);
        if src_cid != self.guest_cid || dst_cid != HOST_CID || type_ != TYPE_STREAM {
            debug!("vsock: dropping packet cid {src_cid}->{dst_cid} type {type_} op {op}");
            if op != OP_RST && dst_cid == HOST_CID {
                self.push_control(key, OP_RST);
            }
            return;
        }
        if let Some(conn) = self.conns.get_mut(&key) {
            conn.peer_buf_alloc = hdr.buf_alloc;
            conn.peer_fwd_cnt = hdr.fwd_cnt;
            if conn.credit() > 0 {
                self.readable.insert(key);
            }
        }
        match op {
            OP_REQUEST => {
                if self.conns.contains_key(&key) {
                    self.push_control(key, OP_RST);
                    return;
                }
                if self.full() {
                    guest_warn!(
                        "vsock: {} connections open, the limit; guest REQUEST to port {} refused",
                        self.conns.len(),
                        key.0
                    );
                    self.push_control(key, OP_RST);
                    return;
                }
                let path = format!("{}_{}", self.socket_path.display(), key.0);
                match UnixStream::connect(&path) {
                    Ok(stream) => {
                        self.add(key, stream, ConnState::Established, reg);
                        if let Some(conn) = self.conns.get_mut(&key) {
                            conn.peer_buf_alloc = hdr.buf_alloc;
                            conn.peer_fwd_cnt = hdr.fwd_cnt;
                            self.push_control(key, OP_RESPONSE);
                        }
                    }
                    Err(e) => {
                        debug!("vsock: guest connect to {path}: {e}");
                        self.push_control(key, OP_RST);
                    }
                }
            }
            OP_RESPONSE => match self.conns.get_mut(&key) {
                Some(conn) if conn.state == ConnState::AwaitingResponse => {
                    conn.state = ConnState::Established;
                    conn.to_host
                        .extend_from_slice(format!("OK {}\n", key.0).as_bytes());
                    if conn.flush_to_host().is_err() {
                        self.remove(key, reg);
                        self.push_control(key, OP_RST);
                    }
                }
                _ => self.push_control(key, OP_RST),
            },
            OP_RW => self.forward_to_host(key, payload, reg),
            OP_CREDIT_UPDATE => {}
            OP_CREDIT_REQUEST => {
                if self.conns.contains_key(&key) {
                    self.push_control(key, OP_CREDIT_UPDATE);
                }
            }
            OP_SHUTDOWN => self.guest_shutdown(key, hdr.flags, reg),
            OP_RST => self.remove(key, reg),
            other => {
                debug!("vsock: unknown op {other}");
                self.push_control(key, OP_RST);
            }
        }
    }

    /// SHUTDOWN from the guest: one direction ends (the other goes on), or both, and then the
    /// connection is closed with RST. No flag (not what Linux sends) counts as both.
    fn guest_shutdown(&mut self, key: ConnKey, flags: u32, reg: &EventRegistry<'_>) {
        let flags = match flags & (SHUTDOWN_RCV | SHUTDOWN_SEND) {
            0 => SHUTDOWN_RCV | SHUTDOWN_SEND,
            f => f,
        };
        let Some(conn) = self.conns.get_mut(&key) else {
            self.push_control(key, OP_RST);
            return;
        };
        conn.guest_recv_closed |= flags & SHUTDOWN_RCV != 0;
        conn.guest_send_closed |= flags & SHUTDOWN_SEND != 0;
        let done = (conn.guest_recv_closed || conn.host_send_closed) && conn.guest_send_closed;
        if done || conn.flush_to_host().is_err() {
            self.remove(key, reg);
            self.push_control(key, OP_RST);
        } else if conn.guest_recv_closed {
            self.readable.remove(&key);
        }
    }

    fn forward_to_host(&mut self, key: ConnKey, payload: &[u8], reg: &EventRegistry<'_>) {
        let Some(conn) = self.conns.get_mut(&key) else {
            self.push_control(key, OP_RST);
            return;
        };
        if conn.state != ConnState::Established
            || conn.guest_send_closed
            || conn.to_host.len() + payload.len() > BUF_ALLOC as usize
        {
            guest_warn!("vsock: guest sent data beyond its credit or before the connection was up");
            self.remove(key, reg);
            self.push_control(key, OP_RST);
            return;
        }
        conn.to_host.extend_from_slice(payload);
        conn.fwd_cnt = conn.fwd_cnt.wrapping_add(payload.len() as u32);
        let unannounced = conn.fwd_cnt.wrapping_sub(conn.fwd_cnt_sent);
        if conn.flush_to_host().is_err() {
            self.remove(key, reg);
            self.push_control(key, OP_RST);
        } else if unannounced > BUF_ALLOC / 2 {
            self.push_control(key, OP_CREDIT_UPDATE);
        }
    }

    /// The next packet for the guest with at most `capacity` payload bytes, if any.
    pub fn next_rx_packet(
        &mut self,
        capacity: usize,
        reg: &EventRegistry<'_>,
    ) -> Option<(PacketHeader, Vec<u8>)> {
        if let Some(mut header) = self.control.pop_front() {
            let key = (header.src_port, header.dst_port);
            if let Some(conn) = self.conns.get_mut(&key) {
                header.fwd_cnt = conn.fwd_cnt;
                conn.fwd_cnt_sent = conn.fwd_cnt;
            }
            return Some((header, Vec::new()));
        }
        while let Some(key) = self.readable.first().copied() {
            let Some(conn) = self.conns.get_mut(&key) else {
                self.readable.remove(&key);
                continue;
            };
            let want = capacity.min(conn.credit() as usize).min(packet_max());
            if !conn.host_may_send() || want == 0 {
                self.readable.remove(&key);
                continue;
            }
            let mut buf = vec![0u8; want];
            match conn.stream.read(&mut buf) {
                // The host will send no more: the guest may still, unless it is done too.
                Ok(0) if !conn.guest_send_closed => {
                    conn.host_send_closed = true;
                    self.readable.remove(&key);
                    let mut header = self.header(key, OP_SHUTDOWN);
                    header.flags = SHUTDOWN_SEND;
                    return Some((header, Vec::new()));
                }
                Ok(0) => {
                    self.remove(key, reg);
                    return Some((self.header(key, OP_RST), Vec::new()));
                }
                Ok(n) => {
                    buf.truncate(n);
                    conn.tx_cnt = conn.tx_cnt.wrapping_add(n as u32);
                    conn.fwd_cnt_sent = conn.fwd_cnt;
                    let mut header = self.header(key, OP_RW);
                    header.len = n as u32;
                    return Some((header, buf));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable.remove(&key);
                }
                Err(_) => {
                    self.remove(key, reg);
                    return Some((self.header(key, OP_RST), Vec::new()));
                }
            }
        }
        None
    }
}

fn packet_max() -> usize {
    super::packet::MAX_PAYLOAD
}

/// Reads `CONNECT <port>\n` from a freshly accepted host client.
fn read_connect_line(stream: &UnixStream) -> Option<u32> {
    stream.set_read_timeout(Some(CONNECT_LINE_TIMEOUT)).ok()?;
    // Byte by byte: nothing after the newline may be consumed here.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let mut reader = stream;
    while line.len() < 64 {
        if reader.read(&mut byte).ok()? == 0 {
            return None;
        }
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    stream.set_read_timeout(None).ok()?;
    std::str::from_utf8(&line)
        .ok()?
        .trim_end()
        .strip_prefix("CONNECT ")?
        .trim()
        .parse()
        .ok()
}
