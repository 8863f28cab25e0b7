//! The virtio-console `VirtioDevice` and its worker.
//!
//! The device owns the listening socket and the state the worker shares with it
//! ([`ConsoleState`]: the control protocol and the host side), which outlives the worker: a
//! driver reset stops the worker and forgets the driver's side of the protocol, but keeps the
//! host client connected; a migration saves and restores the driver's side.
//!
//! The worker wakes on the queues' notifications, the listener, the client socket and once when
//! it starts (to register a client that connected before, and to send what the control queue
//! owes the driver after a migration). Whatever woke it, it then does everything that may have
//! become possible: takes the driver's control messages and the guest's output, writes to the
//! client, reads from it, and fills the control and agent receive buffers.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use log::{debug, info, warn};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryError};
use vmm_sys_util::eventfd::EventFd;

use super::control::ControlState;
use super::host::{Fill, HostSide};
use super::*;
use crate::devices::virtio::chain::{self, ChainError};
use crate::devices::virtio::{
    queue_events, ActivateError, Activation, ActiveQueues, DeviceWorker, Interrupt, VirtioDevice,
    VIRTIO_F_VERSION_1,
};
use crate::devices::worker::{EventRegistry, WorkerEvent};
use crate::guest_memory::GuestMemoryMmap;
use crate::seccomp::ThreadKind;
use crate::wire::WireError;

/// Queue sizes: QEMU's for the ports, fewer for the control queues (a handful of messages).
const QUEUE_SIZES: [u16; QUEUES] = [128, 128, 32, 32, 128, 128];
/// Worker event tokens after the queues' (which are the queue indexes).
pub(super) const LISTENER_EVENT: u64 = QUEUES as u64;
pub(super) const CLIENT_EVENT: u64 = LISTENER_EVENT + 1;
pub(super) const START_EVENT: u64 = LISTENER_EVENT + 2;
/// Most bytes one transmit chain may carry (Linux puts at most 32 KiB in one).
pub const MAX_TX_CHAIN_BYTES: u64 = 256 << 10;

/// A malformed chain on a data or control queue.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    #[error("descriptor chain")]
    Chain(#[from] ChainError),
    #[error("descriptor {0} of a transmit chain is device-writable")]
    WriteOnly(usize),
    #[error("descriptor {0} of a receive chain is device-readable")]
    ReadOnly(usize),
    #[error("transmit chain of {0} bytes, more than the {MAX_TX_CHAIN_BYTES} one may carry")]
    TooLong(u64),
    #[error("receive chain of {room} bytes has no room for a {need}-byte control message")]
    TooSmall { room: u64, need: usize },
    #[error("guest buffer at {0:#x}")]
    GuestMemory(u64, #[source] GuestMemoryError),
}

/// The bytes a transmit chain carries; every descriptor must be device-readable.
pub fn tx_len(descs: &[Descriptor]) -> Result<u64, BufferError> {
    if let Some(index) = descs.iter().position(|d| d.is_write_only()) {
        return Err(BufferError::WriteOnly(index));
    }
    Ok(descs.iter().map(|d| u64::from(d.len())).sum())
}

/// The room of a receive chain; every descriptor must be device-writable.
pub fn rx_room(descs: &[Descriptor]) -> Result<u64, BufferError> {
    if let Some(index) = descs.iter().position(|d| !d.is_write_only()) {
        return Err(BufferError::ReadOnly(index));
    }
    Ok(descs.iter().map(|d| u64::from(d.len())).sum())
}

/// The address `offset` bytes into `desc`'s buffer.
fn buffer_addr(desc: &Descriptor, offset: usize) -> Result<GuestAddress, BufferError> {
    desc.addr()
        .checked_add(offset as u64)
        .ok_or(BufferError::GuestMemory(
            desc.addr().0,
            GuestMemoryError::InvalidGuestAddress(desc.addr()),
        ))
}

/// The first `len` bytes of a transmit chain's buffers.
pub fn read_tx(
    mem: &GuestMemoryMmap,
    descs: &[Descriptor],
    len: u64,
) -> Result<Vec<u8>, BufferError> {
    let len = usize::try_from(len).map_err(|_| BufferError::TooLong(len))?;
    let mut bytes = vec![0u8; len];
    let mut done = 0;
    for desc in descs {
        if done == len {
            break;
        }
        let n = (desc.len() as usize).min(len - done);
        let addr = buffer_addr(desc, 0)?;
        mem.read_slice(&mut bytes[done..done + n], addr)
            .map_err(|e| BufferError::GuestMemory(addr.0, e))?;
        done += n;
    }
    bytes.truncate(done);
    Ok(bytes)
}

/// The bytes of a control message the driver put in a transmit chain: at most the header's
/// 8 (fewer if the chain is shorter; [`ControlMessage::parse`] refuses those).
///
/// [`ControlMessage::parse`]: super::control::ControlMessage::parse
pub fn read_control_message(
    mem: &GuestMemoryMmap,
    chain: DescriptorChain<&GuestMemoryMmap>,
) -> Result<Vec<u8>, BufferError> {
    let descs = chain::collect(chain)?;
    let len = tx_len(&descs)?.min(CONTROL_HEADER_LEN as u64);
    read_tx(mem, &descs, len)
}

/// Writes `bytes` across a receive chain's buffers (as many as fit); returns how many.
pub fn write_rx(
    mem: &GuestMemoryMmap,
    descs: &[Descriptor],
    bytes: &[u8],
) -> Result<u32, BufferError> {
    let mut done = 0usize;
    for desc in descs {
        if done == bytes.len() {
            break;
        }
        let n = (desc.len() as usize).min(bytes.len() - done);
        let addr = buffer_addr(desc, 0)?;
        mem.write_slice(&bytes[done..done + n], addr)
            .map_err(|e| BufferError::GuestMemory(addr.0, e))?;
        done += n;
    }
    // At most the chain's room, which is a sum of u32 lengths of at most a queue's descriptors;
    // the callers give at most 64 KiB.
    Ok(u32::try_from(done).unwrap_or(u32::MAX))
}

/// What the device and its worker share; outlives the worker.
#[derive(Default)]
pub struct ConsoleState {
    pub control: ControlState,
    pub host: HostSide,
}

fn lock(shared: &Mutex<ConsoleState>) -> MutexGuard<'_, ConsoleState> {
    shared.lock().unwrap_or_else(crate::poison::fatal)
}

/// A virtio-console with the guest agent port, whose host side is a unix socket.
pub struct VirtioConsole {
    path: PathBuf,
    listener: UnixListener,
    shared: Arc<Mutex<ConsoleState>>,
    worker: DeviceWorker,
}

impl VirtioConsole {
    /// Listens on the unix socket `path` (replacing a stale one) for the agent port's client.
    pub fn new(path: &Path) -> io::Result<VirtioConsole> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                debug!("virtio-console: remove {}: {e}", path.display())
            }
            _ => {}
        }
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(VirtioConsole {
            path: path.into(),
            listener,
            shared: Arc::default(),
            worker: DeviceWorker::default(),
        })
    }

    /// The socket the device listens on.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// The control protocol's state as it is now (for tests and diagnostics).
    pub fn control_state(&self) -> ControlState {
        lock(&self.shared).control.clone()
    }

    /// A worker over this device's listener and state that the test runs itself, event by
    /// event, instead of a thread.
    #[cfg(test)]
    pub(super) fn test_worker(
        &self,
        mem: GuestMemoryMmap,
        queues: [Queue; QUEUES],
        evts: [EventFd; QUEUES],
        interrupt: Arc<Interrupt>,
    ) -> ConsoleWorker {
        let listener = self.listener.try_clone().expect("clone the listener");
        ConsoleWorker::new(mem, queues, evts, interrupt, listener, self.shared.clone())
    }
}

impl VirtioDevice for VirtioConsole {
    fn device_type(&self) -> u32 {
        TYPE_CONSOLE
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &QUEUE_SIZES
    }

    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1 | F_MULTIPORT
    }

    fn config_space(&self) -> Vec<u8> {
        let mut config = Vec::with_capacity(12);
        // cols, rows: no VIRTIO_CONSOLE_F_SIZE.
        config.extend_from_slice(&0u16.to_le_bytes());
        config.extend_from_slice(&0u16.to_le_bytes());
        config.extend_from_slice(&(PORTS as u32).to_le_bytes());
        // emerg_wr: no VIRTIO_CONSOLE_F_EMERG_WRITE.
        config.extend_from_slice(&0u32.to_le_bytes());
        config
    }

    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        let ActiveQueues {
            mem,
            queues,
            queue_evts: evts,
            interrupt,
            ..
        } = activation.into_queues::<QUEUES>()?;
        let listener = self.listener.try_clone().map_err(ActivateError::Setup)?;
        let start = EventFd::new(libc::EFD_NONBLOCK).map_err(ActivateError::Setup)?;
        start.write(1).map_err(ActivateError::Setup)?;
        let mut events = queue_events(&evts);
        events.push(WorkerEvent {
            fd: listener.as_raw_fd(),
            token: LISTENER_EVENT,
            edge_triggered: false,
        });
        events.push(WorkerEvent {
            fd: start.as_raw_fd(),
            token: START_EVENT,
            edge_triggered: false,
        });
        {
            // After a migration the driver may believe a client is connected that is not.
            let mut state = lock(&self.shared);
            let connected = state.host.connected();
            state.control.set_host_connected(connected);
        }
        let mut worker =
            ConsoleWorker::new(mem, queues, evts, interrupt, listener, self.shared.clone());
        worker.start = Some(start);
        self.worker.start(
            "virtio-console",
            ThreadKind::ConsoleWorker,
            events,
            move |token, reg| worker.handle(token, reg),
        )
    }

    fn device_worker(&mut self) -> &mut DeviceWorker {
        &mut self.worker
    }

    fn reset(&mut self) {
        self.worker.stop();
        lock(&self.shared).control.reset();
    }

    fn save_state(&self) -> Vec<u8> {
        lock(&self.shared).control.encode()
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), WireError> {
        let restored = ControlState::decode(state)?;
        let mut shared = lock(&self.shared);
        let connected = shared.host.connected();
        shared.control = restored;
        // Told to the driver when the device activates.
        shared.control.set_host_connected(connected);
        Ok(())
    }
}

/// The worker: the queues, the listener and the shared state.
pub struct ConsoleWorker {
    mem: GuestMemoryMmap,
    queues: [Queue; QUEUES],
    evts: [EventFd; QUEUES],
    /// Written once before the worker starts: its first event.
    start: Option<EventFd>,
    interrupt: Arc<Interrupt>,
    listener: UnixListener,
    shared: Arc<Mutex<ConsoleState>>,
    /// The client socket registered with this worker's epoll.
    registered: Option<RawFd>,
    /// Queues whose used ring got buffers in this round.
    used: [bool; QUEUES],
}

impl ConsoleWorker {
    /// A worker over `queues` (in queue order) and their notify eventfds; `listener` is
    /// non-blocking.
    pub fn new(
        mem: GuestMemoryMmap,
        queues: [Queue; QUEUES],
        evts: [EventFd; QUEUES],
        interrupt: Arc<Interrupt>,
        listener: UnixListener,
        shared: Arc<Mutex<ConsoleState>>,
    ) -> ConsoleWorker {
        ConsoleWorker {
            mem,
            queues,
            evts,
            start: None,
            interrupt,
            listener,
            shared,
            registered: None,
            used: [false; QUEUES],
        }
    }

    /// Handles the event `token`, then does whatever may have become possible.
    pub fn handle(&mut self, token: u64, reg: &EventRegistry<'_>) {
        let shared = self.shared.clone();
        let mut state = lock(&shared);
        match token {
            t if t < QUEUES as u64 => {
                let _ = self.evts[t as usize].read();
            }
            LISTENER_EVENT => self.accept(&mut state, reg),
            CLIENT_EVENT => state.host.mark_readable(),
            START_EVENT => {
                if let Some(start) = &self.start {
                    let _ = start.read();
                }
            }
            other => warn!("virtio-console: unknown event {other}"),
        }
        self.run(&mut state, reg);
    }

    fn run(&mut self, state: &mut ConsoleState, reg: &EventRegistry<'_>) {
        self.register_client(state, reg);
        if !self.interrupt.is_broken() {
            self.process_port0_tx();
            self.process_control_tx(state);
            loop {
                let took = self.process_agent_tx(state);
                if let Err(e) = state.host.flush() {
                    info!("virtio-console: write to the host client: {e}; disconnected");
                    self.disconnect(state, reg);
                }
                if took == 0 || state.host.to_host_full() || self.interrupt.is_broken() {
                    break;
                }
            }
            self.pump_agent_rx(state, reg);
            self.pump_control_rx(state);
        }
        for (queue, used) in self.used.iter_mut().enumerate() {
            if std::mem::take(used) {
                self.interrupt.signal_used_queue(queue as u16);
            }
        }
    }

    fn broken(&self, what: &str, e: &dyn std::fmt::Display) {
        warn!("virtio-console: {what}: {e}; device marked broken");
        self.interrupt.mark_broken();
    }

    fn complete(&mut self, queue: u16, head: u16, len: u32) -> bool {
        match self.queues[queue as usize].add_used(&self.mem, head, len) {
            Ok(()) => {
                self.used[queue as usize] = true;
                true
            }
            Err(e) => {
                self.broken(&format!("queue {queue}: add used"), &e);
                false
            }
        }
    }

    /// Takes every pending connection; the last one becomes the client.
    fn accept(&mut self, state: &mut ConsoleState, reg: &EventRegistry<'_>) {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    warn!("virtio-console: accept a host client: {e}");
                    return;
                }
            };
            if let Some(fd) = self.registered.take() {
                let _ = reg.remove(fd);
            }
            match state.host.set_client(stream) {
                Ok(replaced) => {
                    if replaced.is_some() {
                        info!("virtio-console: a new host client replaces the previous one");
                    } else {
                        info!("virtio-console: a host client connected");
                    }
                    state.control.set_host_connected(true);
                }
                Err(e) => {
                    warn!("virtio-console: set up the host client: {e}");
                    self.disconnect(state, reg);
                }
            }
        }
    }

    /// Registers the client with this worker's epoll if it is not yet (it connected before
    /// the worker started, or was just accepted).
    fn register_client(&mut self, state: &mut ConsoleState, reg: &EventRegistry<'_>) {
        if self.registered.is_some() {
            return;
        }
        let Some(fd) = state.host.client_fd() else {
            return;
        };
        match reg.add_stream(fd, CLIENT_EVENT) {
            Ok(()) => {
                self.registered = Some(fd);
                state.host.mark_readable();
            }
            Err(e) => {
                warn!("virtio-console: watch the host client: {e}");
                self.disconnect(state, reg);
            }
        }
    }

    fn disconnect(&mut self, state: &mut ConsoleState, reg: &EventRegistry<'_>) {
        if let Some(fd) = self.registered.take() {
            let _ = reg.remove(fd);
        }
        if state.host.disconnect().is_some() {
            info!("virtio-console: the host client disconnected");
        }
        state.control.set_host_connected(false);
    }

    /// Port 0 has no host side: its output is dropped.
    fn process_port0_tx(&mut self) {
        while !self.interrupt.is_broken() {
            let Some(chain) = self.queues[PORT0_TX_QUEUE as usize].pop_descriptor_chain(&self.mem)
            else {
                return;
            };
            let head = chain.head_index();
            if let Err(e) = chain::collect(chain)
                .map_err(BufferError::from)
                .and_then(|descs| tx_len(&descs))
            {
                return self.broken("port 0 transmit chain", &e);
            }
            if !self.complete(PORT0_TX_QUEUE, head, 0) {
                return;
            }
        }
    }

    /// The driver's control messages; a malformed one is logged and ignored.
    fn process_control_tx(&mut self, state: &mut ConsoleState) {
        while !self.interrupt.is_broken() {
            let Some(chain) =
                self.queues[CONTROL_TX_QUEUE as usize].pop_descriptor_chain(&self.mem)
            else {
                return;
            };
            let head = chain.head_index();
            match read_control_message(&self.mem, chain) {
                Ok(bytes) => match state.control.handle_driver_message(&bytes) {
                    Ok(()) => debug!("virtio-console: control message {bytes:02x?}"),
                    Err(e) => guest_warn!("virtio-console: {e}; ignored"),
                },
                Err(e) => guest_warn!("virtio-console: control transmit chain: {e}; ignored"),
            }
            if !self.complete(CONTROL_TX_QUEUE, head, 0) {
                return;
            }
        }
    }

    /// The guest's output on the agent port, for the client (dropped when there is none),
    /// while the client keeps up; returns how many chains it took.
    fn process_agent_tx(&mut self, state: &mut ConsoleState) -> usize {
        let mut took = 0;
        while !self.interrupt.is_broken() && !state.host.to_host_full() {
            let Some(chain) = self.queues[AGENT_TX_QUEUE as usize].pop_descriptor_chain(&self.mem)
            else {
                break;
            };
            let head = chain.head_index();
            let bytes = chain::collect(chain)
                .map_err(BufferError::from)
                .and_then(|descs| {
                    let len = tx_len(&descs)?;
                    if len > MAX_TX_CHAIN_BYTES {
                        return Err(BufferError::TooLong(len));
                    }
                    if state.host.connected() {
                        read_tx(&self.mem, &descs, len)
                    } else {
                        Ok(Vec::new())
                    }
                });
            match bytes {
                Ok(bytes) => state.host.push_to_host(&bytes),
                Err(e) => {
                    self.broken("agent port transmit chain", &e);
                    break;
                }
            }
            if !self.complete(AGENT_TX_QUEUE, head, 0) {
                break;
            }
            took += 1;
        }
        took
    }

    /// Delivers the client's bytes into the agent port's receive buffers while the guest has
    /// the port open, reading more from the client as they drain.
    fn pump_agent_rx(&mut self, state: &mut ConsoleState, reg: &EventRegistry<'_>) {
        while !self.interrupt.is_broken() {
            if state.host.fill() == Fill::Ended {
                self.disconnect(state, reg);
            }
            if !state.control.guest_open(AGENT_PORT) || state.host.to_guest_len() == 0 {
                return;
            }
            let queue = &mut self.queues[AGENT_RX_QUEUE as usize];
            let Some(chain) = queue.pop_descriptor_chain(&self.mem) else {
                return;
            };
            let head = chain.head_index();
            let written = chain::collect(chain)
                .map_err(BufferError::from)
                .and_then(|descs| {
                    let room = rx_room(&descs)?;
                    let bytes = state
                        .host
                        .to_guest_front(usize::try_from(room).unwrap_or(usize::MAX));
                    write_rx(&self.mem, &descs, bytes)
                });
            let written = match written {
                Ok(written) => written,
                Err(e) => return self.broken("agent port receive chain", &e),
            };
            state.host.consume_to_guest(written as usize);
            if !self.complete(AGENT_RX_QUEUE, head, written) {
                return;
            }
        }
    }

    /// Writes the messages the driver is owed into control receive buffers.
    fn pump_control_rx(&mut self, state: &mut ConsoleState) {
        while !self.interrupt.is_broken() {
            let Some(message) = state.control.next_outgoing() else {
                return;
            };
            let queue = &mut self.queues[CONTROL_RX_QUEUE as usize];
            let Some(chain) = queue.pop_descriptor_chain(&self.mem) else {
                return;
            };
            let head = chain.head_index();
            let bytes = message.to_bytes();
            let written = chain::collect(chain)
                .map_err(BufferError::from)
                .and_then(|descs| {
                    let room = rx_room(&descs)?;
                    if room < bytes.len() as u64 {
                        return Err(BufferError::TooSmall {
                            room,
                            need: bytes.len(),
                        });
                    }
                    write_rx(&self.mem, &descs, &bytes)
                });
            let written = match written {
                Ok(written) => written,
                Err(e) => return self.broken("control receive chain", &e),
            };
            debug!("virtio-console: sent control message {message:?}");
            state.control.pop_outgoing();
            if !self.complete(CONTROL_RX_QUEUE, head, written) {
                return;
            }
        }
    }
}
