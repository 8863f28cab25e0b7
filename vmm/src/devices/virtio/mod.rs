//! virtio over MMIO (virtio 1.x, "version 2" register layout only).
//!
//! Devices: block, net, rng and vsock (unix-socket host side). A device ([`VirtioDevice`]) sits behind an [`mmio::MmioTransport`] on the MMIO bus at
//! `0xd0000000 + i * 0x1000` with IRQ `5 + i`, announced to Linux on the kernel command line as
//! `virtio_mmio.device=4K@0xd0000000:5`. The driver negotiates features and sets up the queues
//! through the transport's registers; on DRIVER_OK the transport hands the queues, their notify
//! eventfds (KVM ioeventfds on the QueueNotify register) and the interrupt (a KVM irqfd) to the
//! device, which starts a worker thread that waits on them with epoll.
//!
//! Everything the guest writes (queue addresses, descriptors, buffers) is untrusted: checked
//! when used. A malformed chain is logged, the device is marked broken (status
//! DEVICE_NEEDS_RESET, config-change interrupt) and stops processing until the driver resets it.

pub mod activation;
pub mod block;
pub mod chain;
pub mod mmio;
pub mod net;
pub mod rng;
#[cfg(test)]
pub mod test_utils;
pub mod vsock;
pub mod worker;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use log::warn;
use vmm_sys_util::eventfd::EventFd;

pub use activation::{queue_events, ActivateError, Activation, ActiveQueues, DeviceWorker};

/// Feature bit: the device follows virtio 1.x (required by this transport).
pub const VIRTIO_F_VERSION_1: u64 = 1 << 32;

/// Device types (virtio spec 5).
pub const TYPE_NET: u32 = 1;
pub const TYPE_BLOCK: u32 = 2;
pub const TYPE_RNG: u32 = 4;

/// Interrupt status bits.
const INT_USED_RING: u32 = 1;
const INT_CONFIG: u32 = 2;

/// A device's interrupt line (a KVM irqfd), its interrupt status register and whether the
/// device is broken. Shared by the transport and the device's worker.
pub struct Interrupt {
    evt: EventFd,
    status: AtomicU32,
    broken: AtomicBool,
}

impl Interrupt {
    pub fn new(evt: EventFd) -> Self {
        Interrupt {
            evt,
            status: AtomicU32::new(0),
            broken: AtomicBool::new(false),
        }
    }

    fn raise(&self, bit: u32) {
        self.status.fetch_or(bit, Ordering::SeqCst);
        if let Err(e) = self.evt.write(1) {
            warn!("virtio: raise interrupt: {e}");
        }
    }

    /// The device put buffers in a used ring.
    pub fn signal_used_queue(&self) {
        self.raise(INT_USED_RING);
    }

    /// Marks the device broken: it needs a reset by the driver.
    pub fn mark_broken(&self) {
        self.broken.store(true, Ordering::SeqCst);
        self.raise(INT_CONFIG);
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    fn status(&self) -> u32 {
        self.status.load(Ordering::SeqCst)
    }

    fn ack(&self, bits: u32) {
        self.status.fetch_and(!bits, Ordering::SeqCst);
    }

    fn clear(&self) {
        self.status.store(0, Ordering::SeqCst);
        self.broken.store(false, Ordering::SeqCst);
    }

    /// The interrupt status register and the broken flag (for live migration).
    pub fn save(&self) -> (u32, bool) {
        (self.status(), self.is_broken())
    }

    /// Sets the interrupt status register and the broken flag (on a migration target).
    pub fn restore(&self, status: u32, broken: bool) {
        self.status.store(status, Ordering::SeqCst);
        self.broken.store(broken, Ordering::SeqCst);
    }

    /// The eventfd, for registering as an irqfd.
    pub fn eventfd(&self) -> &EventFd {
        &self.evt
    }
}

/// A virtio device behind the MMIO transport.
pub trait VirtioDevice: Send {
    fn device_type(&self) -> u32;
    /// Maximum size of each queue; the length is the number of queues.
    fn queue_max_sizes(&self) -> &[u16];
    /// Offered feature bits (VIRTIO_F_VERSION_1 included).
    fn features(&self) -> u64;
    /// The device-specific configuration space.
    fn config_space(&self) -> Vec<u8>;
    /// Starts processing the queues.
    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError>;
    /// The device's worker thread slot (empty while the device is not active).
    fn device_worker(&mut self) -> &mut DeviceWorker;
    /// Stops processing (driver reset); the device can be activated again. By default: stops
    /// the worker.
    fn reset(&mut self) {
        self.device_worker().stop();
    }
    /// The running worker thread, if the device is active.
    fn worker(&mut self) -> Option<&mut worker::WorkerHandle> {
        self.device_worker().handle()
    }
    /// The disk behind the device, for a live migration to copy (virtio-blk only).
    fn disk(&self) -> Option<block::DiskHandle> {
        None
    }
}
