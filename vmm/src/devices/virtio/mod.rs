//! virtio over MMIO (virtio 1.x, "version 2" register layout only).
//!
//! Devices: block, net, rng, vsock (unix-socket host side) and console (multiport, the guest
//! agent's port on a unix socket). A device ([`VirtioDevice`]) sits behind an
//! [`mmio::MmioTransport`] on the MMIO bus at `0xd0000000 + i * 0x1000` with IRQ `5 + i`,
//! announced to Linux on the kernel command line as `virtio_mmio.device=4K@0xd0000000:5`.
//! The driver negotiates features and sets up the queues through the transport's registers;
//! on DRIVER_OK the transport hands the queues, their notify eventfds (KVM ioeventfds on the
//! QueueNotify register) and the interrupt (a KVM irqfd) to the device, which starts a worker
//! thread that waits on them with epoll.
//!
//! Everything the guest writes (queue addresses, descriptors, buffers) is untrusted: checked
//! when used. A malformed chain is logged, the device is marked broken (status
//! DEVICE_NEEDS_RESET, config-change interrupt) and stops processing until the driver resets it.

pub mod activation;
pub mod block;
pub mod chain;
pub mod console;
pub mod mmio;
pub mod net;
pub mod pci;
pub mod rng;
#[cfg(test)]
pub mod test_utils;
pub mod transport;
pub mod vsock;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use log::warn;
use vmm_sys_util::eventfd::EventFd;

use crate::devices::worker;

/// A transport's state, whichever transport it is (for live migration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportSnapshot {
    Mmio(transport::TransportState),
    Pci(Box<pci::VirtioPciState>),
}

pub use activation::{queue_events, ActivateError, Activation, ActiveQueues, DeviceWorker};

/// Feature bit: the device follows virtio 1.x (required by this transport).
pub const VIRTIO_F_VERSION_1: u64 = 1 << 32;

/// Device types (virtio spec 5).
pub const TYPE_NET: u32 = 1;
pub const TYPE_BLOCK: u32 = 2;
pub const TYPE_CONSOLE: u32 = console::TYPE_CONSOLE;
pub const TYPE_RNG: u32 = 4;

/// Interrupt status bits (the virtio-mmio InterruptStatus register, the virtio-pci ISR).
pub const INT_USED_RING: u32 = 1;
pub const INT_CONFIG: u32 = 2;

/// How a transport delivers a device's interrupts: virtio-mmio has one edge-triggered line for
/// everything; virtio-pci has an MSI-X vector per queue and one for configuration changes, or
/// its INTx line when the driver did not enable MSI-X. [`Interrupt`] sets the status bits before
/// it calls these.
pub trait InterruptDelivery: Send + Sync {
    /// The device put buffers in the used ring of queue `queue`.
    fn used_queue(&self, queue: u16);
    /// The device's configuration (or its status: DEVICE_NEEDS_RESET) changed.
    fn config_changed(&self);
}

/// One KVM irqfd for every interrupt of the device (virtio-mmio).
pub struct IrqfdDelivery(EventFd);

impl InterruptDelivery for IrqfdDelivery {
    fn used_queue(&self, _queue: u16) {
        if let Err(e) = self.0.write(1) {
            warn!("virtio: raise interrupt: {e}");
        }
    }

    fn config_changed(&self) {
        self.used_queue(0);
    }
}

/// A device's interrupts as its worker raises them: the interrupt status register, whether the
/// device is broken, and the transport's delivery. Shared by the transport and the worker.
pub struct Interrupt {
    status: AtomicU32,
    broken: AtomicBool,
    delivery: Box<dyn InterruptDelivery>,
}

impl Interrupt {
    /// An interrupt delivered through one irqfd (virtio-mmio).
    pub fn new(evt: EventFd) -> Self {
        Interrupt::with_delivery(Box::new(IrqfdDelivery(evt)))
    }

    /// An interrupt delivered as `delivery` says.
    pub fn with_delivery(delivery: Box<dyn InterruptDelivery>) -> Self {
        Interrupt {
            status: AtomicU32::new(0),
            broken: AtomicBool::new(false),
            delivery,
        }
    }

    /// The device put buffers in the used ring of queue `queue`.
    pub fn signal_used_queue(&self, queue: u16) {
        self.status.fetch_or(INT_USED_RING, Ordering::SeqCst);
        self.delivery.used_queue(queue);
    }

    /// The device's configuration changed.
    pub fn signal_config(&self) {
        self.status.fetch_or(INT_CONFIG, Ordering::SeqCst);
        self.delivery.config_changed();
    }

    /// Marks the device broken: it needs a reset by the driver.
    pub fn mark_broken(&self) {
        self.broken.store(true, Ordering::SeqCst);
        self.signal_config();
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// The interrupt status register.
    pub fn status(&self) -> u32 {
        self.status.load(Ordering::SeqCst)
    }

    /// Clears `bits` of the status register (virtio-mmio InterruptACK).
    pub fn ack(&self, bits: u32) {
        self.status.fetch_and(!bits, Ordering::SeqCst);
    }

    /// Reads and clears the status register (the virtio-pci ISR, read-to-clear).
    pub fn take_status(&self) -> u32 {
        self.status.swap(0, Ordering::SeqCst)
    }

    /// Clears the status register and the broken flag (a device reset).
    pub fn clear(&self) {
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
}

/// A virtio device, behind either transport.
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
    /// The device's own state beyond its transport's, for a live migration (taken while its
    /// worker is paused). Empty for the devices whose registers and rings say everything; the
    /// console's says which ports the driver readied and opened.
    fn save_state(&self) -> Vec<u8> {
        Vec::new()
    }
    /// Takes over what [`VirtioDevice::save_state`] gave on the source, before the device is
    /// activated again. The bytes come from the source: checked, never trusted. By default
    /// only the empty state is accepted.
    fn restore_state(&mut self, state: &[u8]) -> Result<(), crate::wire::WireError> {
        if state.is_empty() {
            Ok(())
        } else {
            Err(crate::wire::WireError::Malformed {
                what: format!("state of virtio device type {}", self.device_type()),
                why: format!("{} bytes for a device that keeps none", state.len()),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records what the transport was asked to deliver.
    #[derive(Default)]
    struct Recorder(Arc<Mutex<Vec<Option<u16>>>>);

    impl InterruptDelivery for Recorder {
        fn used_queue(&self, queue: u16) {
            self.0.lock().unwrap().push(Some(queue));
        }
        fn config_changed(&self) {
            self.0.lock().unwrap().push(None);
        }
    }

    #[test]
    fn the_status_bits_are_set_before_delivery_and_the_queue_is_named() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let interrupt = Interrupt::with_delivery(Box::new(Recorder(seen.clone())));
        interrupt.signal_used_queue(2);
        assert_eq!(interrupt.status(), INT_USED_RING);
        interrupt.mark_broken();
        assert!(interrupt.is_broken());
        assert_eq!(interrupt.status(), INT_USED_RING | INT_CONFIG);
        assert_eq!(*seen.lock().unwrap(), vec![Some(2), None]);
        assert_eq!(interrupt.take_status(), INT_USED_RING | INT_CONFIG);
        assert_eq!(interrupt.status(), 0, "the ISR is read-to-clear");
        interrupt.signal_config();
        interrupt.ack(INT_CONFIG);
        assert_eq!(interrupt.status(), 0);
        interrupt.clear();
        assert!(!interrupt.is_broken());
    }

    #[test]
    fn the_mmio_interrupt_is_one_irqfd() {
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let interrupt = Interrupt::new(evt.try_clone().unwrap());
        interrupt.signal_used_queue(0);
        interrupt.signal_used_queue(1);
        interrupt.signal_config();
        assert_eq!(evt.read().unwrap(), 3);
    }
}
