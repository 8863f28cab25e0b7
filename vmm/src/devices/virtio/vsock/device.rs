//! The virtio-vsock `VirtioDevice` and its worker: TX packets go to the muxer, and whenever
//! something may have produced packets for the guest (TX, new receive buffers, host sockets)
//! the worker fills receive buffers from the muxer.

use std::io;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::guest_memory::GuestMemoryMmap;
use crate::seccomp::ThreadKind;
use log::warn;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::muxer::{Muxer, FIRST_CONNECTION_TOKEN};
use super::packet::{read_tx_packet, rx_capacity, write_rx_packet};
use crate::devices::virtio::chain;
use crate::devices::virtio::{
    queue_events, ActivateError, Activation, ActiveQueues, DeviceWorker, Interrupt, VirtioDevice,
    VIRTIO_F_VERSION_1,
};
use crate::devices::worker::{EventRegistry, WorkerEvent};

/// Device type of virtio-vsock.
pub const TYPE_VSOCK: u32 = 19;
const QUEUE_SIZES: [u16; 3] = [256, 256, 256];
/// Queue event tokens are the queue indexes ([`queue_events`]).
const RX_QUEUE_EVENT: u64 = 0;
const TX_QUEUE_EVENT: u64 = 1;
const EVENT_QUEUE_EVENT: u64 = 2;
/// Queue indexes, as the interrupt is told which queue it is for.
const RX_QUEUE: u16 = RX_QUEUE_EVENT as u16;
const TX_QUEUE: u16 = TX_QUEUE_EVENT as u16;
const LISTENER_EVENT: u64 = 3;

/// A virtio-vsock device whose host side is a unix socket.
pub struct Vsock {
    cid: u64,
    path: PathBuf,
    listener: UnixListener,
    worker: DeviceWorker,
}

impl Vsock {
    /// Binds the host socket at `path` (replacing a stale one).
    pub fn new(cid: u64, path: &Path) -> io::Result<Vsock> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(Vsock {
            cid,
            path: path.into(),
            listener,
            worker: DeviceWorker::default(),
        })
    }
}

struct VsockWorker {
    mem: GuestMemoryMmap,
    rx: Queue,
    tx: Queue,
    evts: [EventFd; 3],
    interrupt: Arc<Interrupt>,
    muxer: Muxer,
}

impl VsockWorker {
    fn broken(&self, what: &str, e: &dyn std::fmt::Display) {
        warn!("virtio-vsock: {what}: {e}; device marked broken");
        self.interrupt.mark_broken();
    }

    fn process_tx(&mut self, reg: &EventRegistry<'_>) {
        let mut used_any = false;
        while let Some(chain) = self.tx.pop_descriptor_chain(&self.mem) {
            if self.interrupt.is_broken() {
                return;
            }
            let head = chain.head_index();
            match read_tx_packet(&self.mem, chain) {
                Ok((header, payload)) => self.muxer.handle_guest_packet(&header, &payload, reg),
                Err(e) => return self.broken("bad TX packet", &e),
            }
            if let Err(e) = self.tx.add_used(&self.mem, head, 0) {
                return self.broken("TX add used", &e);
            }
            used_any = true;
        }
        if used_any {
            self.interrupt.signal_used_queue(TX_QUEUE);
        }
    }

    fn process_rx(&mut self, reg: &EventRegistry<'_>) {
        let mut used_any = false;
        while !self.interrupt.is_broken() {
            let Some(chain) = self.rx.pop_descriptor_chain(&self.mem) else {
                break;
            };
            let head = chain.head_index();
            let descs = match chain::collect(chain) {
                Ok(descs) => descs,
                Err(e) => {
                    self.broken("bad RX chain", &e);
                    break;
                }
            };
            let capacity = match rx_capacity(&descs) {
                Ok(capacity) => capacity,
                Err(e) => {
                    self.broken("bad RX chain", &e);
                    break;
                }
            };
            let Some((header, payload)) = self.muxer.next_rx_packet(capacity, reg) else {
                self.rx.go_to_previous_position();
                break;
            };
            let len = match write_rx_packet(&self.mem, &descs, &header, &payload) {
                Ok(len) => len,
                Err(e) => {
                    self.broken("write RX packet", &e);
                    break;
                }
            };
            if let Err(e) = self.rx.add_used(&self.mem, head, len) {
                self.broken("RX add used", &e);
                break;
            }
            used_any = true;
        }
        if used_any {
            self.interrupt.signal_used_queue(RX_QUEUE);
        }
    }

    fn handle(&mut self, token: u64, reg: &EventRegistry<'_>) {
        match token {
            RX_QUEUE_EVENT | EVENT_QUEUE_EVENT => {
                let _ = self.evts[token as usize].read();
            }
            TX_QUEUE_EVENT => {
                let _ = self.evts[1].read();
                self.process_tx(reg);
            }
            LISTENER_EVENT => self.muxer.accept(reg),
            token if token >= FIRST_CONNECTION_TOKEN => self.muxer.stream_event(token, reg),
            other => warn!("virtio-vsock: unknown event {other}"),
        }
        self.process_rx(reg);
    }
}

impl VirtioDevice for Vsock {
    fn device_type(&self) -> u32 {
        TYPE_VSOCK
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &QUEUE_SIZES
    }

    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1
    }

    fn config_space(&self) -> Vec<u8> {
        self.cid.to_le_bytes().to_vec()
    }

    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        let ActiveQueues {
            mem,
            queues: [rx, tx, _event],
            queue_evts: evts,
            interrupt,
            ..
        } = activation.into_queues()?;
        let listener = self.listener.try_clone().map_err(ActivateError::Setup)?;
        let muxer = Muxer::new(self.cid, &self.path, listener);
        let mut events = queue_events(&evts);
        events.push(WorkerEvent {
            fd: muxer.listener_fd(),
            token: LISTENER_EVENT,
            edge_triggered: false,
        });
        let mut state = VsockWorker {
            mem,
            rx,
            tx,
            evts,
            interrupt,
            muxer,
        };
        self.worker.start(
            "virtio-vsock",
            ThreadKind::VsockWorker,
            events,
            move |token, reg| state.handle(token, reg),
        )
    }

    fn device_worker(&mut self) -> &mut DeviceWorker {
        &mut self.worker
    }
}
