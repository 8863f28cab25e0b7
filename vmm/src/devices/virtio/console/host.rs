//! The host side of the agent port: the connected client (one at a time) and the bytes on
//! their way in each direction, bounded.
//!
//! * Host to guest: [`HostSide::fill`] reads from the client into `to_guest` while it has room
//!   ([`TO_GUEST_CAPACITY`]); beyond that the device stops reading, so the rest waits in the
//!   socket's buffer and then in the client's writes. The worker delivers `to_guest` to the
//!   port's receive buffers while the guest has the port open.
//! * Guest to host: the worker adds what the guest wrote to `to_host` ([`HostSide::push_to_host`],
//!   dropped when no client is connected) and [`HostSide::flush`] writes it to the client. While
//!   `to_host` holds [`TO_HOST_CAPACITY`] bytes or more the worker takes no more transmit
//!   buffers from the guest, which then waits, as it would on a slow serial line.
//!
//! The client socket is non-blocking and registered edge-triggered with the worker's epoll:
//! `readable` says whether a read may still find bytes (until one would block).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// Bytes from the client the device holds for the guest at most.
pub const TO_GUEST_CAPACITY: usize = 64 << 10;
/// Bytes for the client above which the device takes no more of the guest's transmit buffers.
pub const TO_HOST_CAPACITY: usize = 64 << 10;
/// Bytes read from the client in one `read`.
const READ_CHUNK: usize = 16 << 10;

/// What reading the client found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// The client is still there (or there is none).
    Open,
    /// The client closed its end or its socket failed: it must be disconnected.
    Ended,
}

/// The client and the bytes in flight; kept across driver resets (the device's, not the
/// worker's), not migrated.
#[derive(Default)]
pub struct HostSide {
    client: Option<UnixStream>,
    readable: bool,
    to_guest: VecDeque<u8>,
    to_host: VecDeque<u8>,
}

impl HostSide {
    /// Whether a client is connected.
    pub fn connected(&self) -> bool {
        self.client.is_some()
    }

    /// The client's socket, to register with the worker's epoll.
    pub fn client_fd(&self) -> Option<RawFd> {
        self.client.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The client may have bytes to read (its socket was reported readable, or nothing has
    /// looked at it since it was registered).
    pub fn mark_readable(&mut self) {
        self.readable = true;
    }

    /// Makes `stream` the client; returns the previous one, which it replaces (the caller
    /// deregisters and drops it). What the previous client left undelivered, either way, is
    /// dropped: the new client starts afresh.
    pub fn set_client(&mut self, stream: UnixStream) -> io::Result<Option<UnixStream>> {
        stream.set_nonblocking(true)?;
        self.to_guest.clear();
        self.to_host.clear();
        self.readable = true;
        Ok(self.client.replace(stream))
    }

    /// The client went away: what it had not read yet is dropped; what it sent and the guest
    /// has not received yet is still delivered. Returns its socket.
    pub fn disconnect(&mut self) -> Option<UnixStream> {
        self.to_host.clear();
        self.readable = false;
        self.client.take()
    }

    /// Bytes waiting for the guest.
    pub fn to_guest_len(&self) -> usize {
        self.to_guest.len()
    }

    /// At most `max` of the oldest bytes waiting for the guest (they stay until
    /// [`Self::consume_to_guest`]).
    pub fn to_guest_front(&mut self, max: usize) -> &[u8] {
        let bytes = self.to_guest.make_contiguous();
        &bytes[..max.min(bytes.len())]
    }

    /// The oldest `n` bytes for the guest reached it.
    pub fn consume_to_guest(&mut self, n: usize) {
        self.to_guest.drain(..n.min(self.to_guest.len()));
    }

    /// Bytes waiting for the client.
    pub fn to_host_len(&self) -> usize {
        self.to_host.len()
    }

    /// Whether the guest's transmit buffers must wait for the client to read.
    pub fn to_host_full(&self) -> bool {
        self.to_host.len() >= TO_HOST_CAPACITY
    }

    /// Queues what the guest wrote for the client; dropped when none is connected.
    pub fn push_to_host(&mut self, bytes: &[u8]) {
        if self.client.is_some() {
            self.to_host.extend(bytes);
        }
    }

    /// Reads from the client while it has bytes and `to_guest` has room.
    pub fn fill(&mut self) -> Fill {
        let Some(client) = &self.client else {
            return Fill::Open;
        };
        let mut chunk = [0u8; READ_CHUNK];
        let mut reader = client;
        while self.readable && self.to_guest.len() < TO_GUEST_CAPACITY {
            let want = (TO_GUEST_CAPACITY - self.to_guest.len()).min(READ_CHUNK);
            match reader.read(&mut chunk[..want]) {
                Ok(0) => return Fill::Ended,
                Ok(n) => self.to_guest.extend(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::info!("virtio-console: read from the host client: {e}");
                    return Fill::Ended;
                }
            }
        }
        Fill::Open
    }

    /// Writes what waits for the client until its socket is full; an error means the client
    /// must be disconnected.
    pub fn flush(&mut self) -> io::Result<()> {
        let Some(client) = &self.client else {
            self.to_host.clear();
            return Ok(());
        };
        let mut writer = client;
        while !self.to_host.is_empty() {
            let (front, _) = self.to_host.as_slices();
            match writer.write(front) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.to_host.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
