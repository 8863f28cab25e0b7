//! The virtio-net `VirtioDevice` and its worker: TX queue events, RX queue events (the guest
//! added receive buffers) and tap readability, each with a named token.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use crate::guest_memory::GuestMemoryMmap;
use crate::seccomp::ThreadKind;
use log::warn;
use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::frame::{read_tx_frame, write_rx_frame, RxOutcome};
use super::tap::{Tap, TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_UFO};
use super::*;
use crate::devices::virtio::{
    queue_events, ActivateError, Activation, ActiveQueues, DeviceWorker, Interrupt, VirtioDevice,
    TYPE_NET, VIRTIO_F_VERSION_1,
};
use crate::devices::worker::WorkerEvent;

const QUEUE_SIZES: [u16; 2] = [256, 256];
/// Queue event tokens are the queue indexes ([`queue_events`]).
const RX_QUEUE_EVENT: u64 = 0;
const TX_QUEUE_EVENT: u64 = 1;
/// Queue indexes, as the interrupt is told which queue it is for.
const RX_QUEUE: u16 = RX_QUEUE_EVENT as u16;
const TX_QUEUE: u16 = TX_QUEUE_EVENT as u16;
const TAP_EVENT: u64 = 2;

/// A virtio-net device on a tap.
pub struct Net {
    tap: Arc<Mutex<Tap>>,
    mac: [u8; 6],
    worker: DeviceWorker,
}

impl Net {
    pub fn new(tap: Tap, mac: [u8; 6]) -> Net {
        Net {
            tap: Arc::new(Mutex::new(tap)),
            mac,
            worker: DeviceWorker::default(),
        }
    }
}

struct NetWorker {
    mem: GuestMemoryMmap,
    rx: Queue,
    tx: Queue,
    rx_evt: EventFd,
    tx_evt: EventFd,
    interrupt: Arc<Interrupt>,
    tap: Arc<Mutex<Tap>>,
    /// A frame read from the tap that waits for a receive buffer.
    pending: Option<Vec<u8>>,
    rx_buf: Vec<u8>,
    tx_buf: Vec<u8>,
}

impl NetWorker {
    fn broken(&self, what: &str, e: &dyn std::fmt::Display) {
        warn!("virtio-net: {what}: {e}; device marked broken");
        self.interrupt.mark_broken();
    }

    fn process_tx(&mut self) {
        let mut used_any = false;
        while let Some(chain) = self.tx.pop_descriptor_chain(&self.mem) {
            if self.interrupt.is_broken() {
                return;
            }
            let head = chain.head_index();
            match read_tx_frame(&self.mem, chain, &mut self.tx_buf) {
                Ok(_) => {
                    let mut tap = self.tap.lock().unwrap_or_else(crate::poison::fatal);
                    if let Err(e) = tap.write(&self.tx_buf) {
                        guest_warn!("virtio-net: tap write dropped a frame: {e}");
                    }
                }
                Err(e) => return self.broken("bad TX chain", &e),
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

    /// Moves frames from the tap into receive buffers until the tap is empty or the guest has
    /// no buffer left.
    fn process_rx(&mut self) {
        let mut used_any = false;
        loop {
            if self.interrupt.is_broken() {
                break;
            }
            let frame = match self.pending.take() {
                Some(frame) => frame,
                None => match self.read_tap() {
                    Some(frame) => frame,
                    None => break,
                },
            };
            let Some(chain) = self.rx.pop_descriptor_chain(&self.mem) else {
                self.pending = Some(frame);
                break;
            };
            let head = chain.head_index();
            let len = match write_rx_frame(&self.mem, chain, &frame) {
                Ok(RxOutcome::Delivered(len)) => len,
                Ok(RxOutcome::Dropped) => {
                    guest_warn!(
                        "virtio-net: frame of {} bytes does not fit the RX buffer; dropped",
                        frame.len()
                    );
                    0
                }
                Err(e) => {
                    self.broken("bad RX chain", &e);
                    break;
                }
            };
            self.rx_buf = frame;
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

    fn read_tap(&mut self) -> Option<Vec<u8>> {
        let mut buf = std::mem::take(&mut self.rx_buf);
        buf.resize(MAX_FRAME_LEN, 0);
        let mut tap = self.tap.lock().unwrap_or_else(crate::poison::fatal);
        match tap.read(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                Some(buf)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::WouldBlock {
                    warn!("virtio-net: tap read: {e}");
                }
                self.rx_buf = buf;
                None
            }
        }
    }

    fn handle(&mut self, token: u64) {
        match token {
            RX_QUEUE_EVENT => {
                let _ = self.rx_evt.read();
                self.process_rx();
            }
            TX_QUEUE_EVENT => {
                let _ = self.tx_evt.read();
                self.process_tx();
            }
            TAP_EVENT => self.process_rx(),
            _ => warn!("virtio-net: unknown event {token}"),
        }
    }
}

/// The tap offloads matching the driver's accepted receive-side features.
pub fn tap_offloads(acked: u64) -> u32 {
    let mut flags = 0;
    if acked & VIRTIO_NET_F_GUEST_CSUM != 0 {
        flags |= TUN_F_CSUM;
        if acked & VIRTIO_NET_F_GUEST_TSO4 != 0 {
            flags |= TUN_F_TSO4;
        }
        if acked & VIRTIO_NET_F_GUEST_TSO6 != 0 {
            flags |= TUN_F_TSO6;
        }
        if acked & VIRTIO_NET_F_GUEST_UFO != 0 {
            flags |= TUN_F_UFO;
        }
    }
    flags
}

impl VirtioDevice for Net {
    fn device_type(&self) -> u32 {
        TYPE_NET
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &QUEUE_SIZES
    }

    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1
            | VIRTIO_NET_F_MAC
            | VIRTIO_NET_F_CSUM
            | VIRTIO_NET_F_GUEST_CSUM
            | VIRTIO_NET_F_GUEST_TSO4
            | VIRTIO_NET_F_GUEST_TSO6
            | VIRTIO_NET_F_GUEST_UFO
            | VIRTIO_NET_F_HOST_TSO4
            | VIRTIO_NET_F_HOST_TSO6
            | VIRTIO_NET_F_HOST_UFO
    }

    fn config_space(&self) -> Vec<u8> {
        self.mac.to_vec()
    }

    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        let ActiveQueues {
            mem,
            queues: [rx, tx],
            queue_evts,
            interrupt,
            acked_features,
        } = activation.into_queues()?;
        let tap_fd = {
            let tap = self.tap.lock().unwrap_or_else(crate::poison::fatal);
            tap.set_offload(tap_offloads(acked_features))
                .map_err(|e| ActivateError::Setup(io::Error::other(e)))?;
            tap.as_raw_fd()
        };
        let mut events = queue_events(&queue_evts);
        events.push(WorkerEvent {
            fd: tap_fd,
            token: TAP_EVENT,
            edge_triggered: true,
        });
        let [rx_evt, tx_evt] = queue_evts;
        let mut state = NetWorker {
            mem,
            rx,
            tx,
            rx_evt,
            tx_evt,
            interrupt,
            tap: self.tap.clone(),
            pending: None,
            rx_buf: Vec::with_capacity(MAX_FRAME_LEN),
            tx_buf: Vec::with_capacity(MAX_FRAME_LEN),
        };
        self.worker
            .start("virtio-net", ThreadKind::Worker, events, move |token, _| {
                state.handle(token)
            })
    }

    fn device_worker(&mut self) -> &mut DeviceWorker {
        &mut self.worker
    }
}
