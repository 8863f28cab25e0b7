//! What both virtio transports (mmio, pci) do the same way, whatever their register layout:
//! feature negotiation, queue configuration, the device status state machine and activation.
//!
//! The driver's side, step by step (virtio 1.x, 3.1.1):
//!
//! 1. reset (status 0), then ACKNOWLEDGE, then DRIVER;
//! 2. reads the device features, 32 bits at a time (the device feature select picks the half),
//!    writes the features it accepts the same way; bits the device did not offer are dropped;
//! 3. sets FEATURES_OK, which the device refuses (the bit reads back clear) unless
//!    VIRTIO_F_VERSION_1 is among the accepted features;
//! 4. per queue: selects it, reads its maximum size, writes its size and the three ring
//!    addresses, enables it. Queue registers may change only between FEATURES_OK and DRIVER_OK;
//! 5. sets DRIVER_OK: [`VirtioCore`] checks every queue against guest memory and hands queues,
//!    notify eventfds and the interrupt to the device ([`VirtioDevice::activate`]), whose worker
//!    then serves them. A queue that is not ready or lies outside guest memory marks the device
//!    broken (DEVICE_NEEDS_RESET, config interrupt) instead.
//!
//! Writing status 0 resets the device (its worker stops) and every register.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::{Activation, Interrupt, VirtioDevice, VIRTIO_F_VERSION_1};
use crate::guest_memory::GuestMemoryMmap;

pub const STATUS_ACKNOWLEDGE: u32 = 1;
pub const STATUS_DRIVER: u32 = 2;
pub const STATUS_DRIVER_OK: u32 = 4;
pub const STATUS_FEATURES_OK: u32 = 8;
pub const STATUS_NEEDS_RESET: u32 = 0x40;
pub const STATUS_FAILED: u32 = 0x80;

/// One queue's configuration as the driver set it (for live migration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    pub max_size: u16,
    pub size: u16,
    pub ready: bool,
    pub desc_table: u64,
    pub avail_ring: u64,
    pub used_ring: u64,
}

/// The transport's registers and queue configuration (for live migration). The device-side
/// ring positions are not part of it: a paused device has completed every chain it took, so
/// both positions equal the used ring's index in guest memory, which travels with the memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportState {
    pub device_type: u32,
    pub status: u32,
    pub acked_features: u64,
    pub device_features_sel: u32,
    pub driver_features_sel: u32,
    pub queue_sel: u32,
    pub interrupt_status: u32,
    pub broken: bool,
    pub activated: bool,
    pub queues: Vec<QueueConfig>,
    /// The device's own state ([`VirtioDevice::save_state`]); empty for most devices.
    pub device_state: Vec<u8>,
}

/// Restoring a transport's state failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RestoreTransportError {
    #[error("device type {got} where this VM has type {expected}")]
    DeviceType { expected: u32, got: u32 },
    #[error("queue max sizes {got:?} where this VM's device has {expected:?}")]
    Queues { expected: Vec<u16>, got: Vec<u16> },
    #[error("queue {0}: read the used ring index from guest memory")]
    UsedIndex(usize),
    #[error("the device did not activate with the restored queues")]
    Activate,
    #[error("the PCI state does not fit this device: {0}")]
    Pci(String),
    #[error("the device's own state: {0}")]
    DeviceState(String),
}

/// Creating a transport failed.
#[derive(Debug, thiserror::Error)]
pub enum CreateTransportError {
    #[error("queue of size {0}")]
    Queue(u16, #[source] virtio_queue::Error),
    #[error("{queues} queues but {evts} notify eventfds")]
    EventCount { queues: usize, evts: usize },
    #[error("{queues} queues need {} MSI-X vectors, not {vectors}", queues + 1)]
    Vectors { queues: usize, vectors: usize },
    #[error("PCI configuration space")]
    Config(#[source] crate::devices::pci::config_space::ConfigSpaceError),
}

// The snapshot names every transport, so it lives in the parent module, beside both.
pub use super::TransportSnapshot;

/// A virtio device with its transport, as the VMM drives it: pause and resume the worker
/// (migration), the disk (block migration), machine reset, save and restore.
pub trait VirtioTransport: Send {
    fn core(&self) -> &VirtioCore;
    fn core_mut(&mut self) -> &mut VirtioCore;

    fn device_type(&self) -> u32 {
        self.core().device().device_type()
    }

    /// Parks the device's worker between two requests (for live migration).
    fn pause_device(&mut self) {
        self.core_mut().pause_device();
    }

    /// Lets a paused worker go on.
    fn resume_device(&mut self) {
        self.core_mut().resume_device();
    }

    /// The device's disk, if it is a virtio-blk device.
    fn disk(&self) -> Option<super::block::DiskHandle> {
        self.core().disk()
    }

    /// A machine reset: the device as at power-on, ready for the rebooted driver.
    fn hardware_reset(&mut self);

    /// The registers, queues and transport state.
    fn snapshot(&self) -> TransportSnapshot;

    /// Takes over a snapshot (on a migration target, before the vCPUs run).
    fn restore(&mut self, snapshot: &TransportSnapshot) -> Result<(), RestoreTransportError>;
}

/// A device with its queues, notify eventfds, interrupt, negotiated features and status.
pub struct VirtioCore {
    /// For warnings: "virtio-mmio" or "virtio-pci".
    name: &'static str,
    device: Box<dyn VirtioDevice>,
    mem: GuestMemoryMmap,
    queues: Vec<Queue>,
    queue_evts: Vec<EventFd>,
    interrupt: Arc<Interrupt>,
    pub device_features_sel: u32,
    pub driver_features_sel: u32,
    pub queue_sel: u32,
    acked_features: u64,
    status: u32,
    activated: bool,
}

impl VirtioCore {
    /// `queue_evts` are the notify eventfds (one per queue, registered as ioeventfds by the
    /// caller); `interrupt` is how the device's interrupts reach the guest.
    pub fn new(
        name: &'static str,
        device: Box<dyn VirtioDevice>,
        mem: GuestMemoryMmap,
        queue_evts: Vec<EventFd>,
        interrupt: Arc<Interrupt>,
    ) -> Result<Self, CreateTransportError> {
        let queues = device
            .queue_max_sizes()
            .iter()
            .map(|&size| Queue::new(size).map_err(|e| CreateTransportError::Queue(size, e)))
            .collect::<Result<Vec<_>, _>>()?;
        if queues.len() != queue_evts.len() {
            return Err(CreateTransportError::EventCount {
                queues: queues.len(),
                evts: queue_evts.len(),
            });
        }
        Ok(VirtioCore {
            name,
            device,
            mem,
            queues,
            queue_evts,
            interrupt,
            device_features_sel: 0,
            driver_features_sel: 0,
            queue_sel: 0,
            acked_features: 0,
            status: 0,
            activated: false,
        })
    }

    pub fn device(&self) -> &dyn VirtioDevice {
        self.device.as_ref()
    }

    pub fn interrupt(&self) -> &Arc<Interrupt> {
        &self.interrupt
    }

    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// The notify eventfd of each queue.
    pub fn queue_evts(&self) -> &[EventFd] {
        &self.queue_evts
    }

    pub fn activated(&self) -> bool {
        self.activated
    }

    /// Parks the device's worker between two requests (for live migration).
    pub fn pause_device(&mut self) {
        if let Some(worker) = self.device.worker() {
            worker.pause();
        }
    }

    /// Lets a paused worker go on.
    pub fn resume_device(&mut self) {
        if let Some(worker) = self.device.worker() {
            worker.resume();
        }
    }

    /// The device's disk, if it is a virtio-blk device.
    pub fn disk(&self) -> Option<super::block::DiskHandle> {
        self.device.disk()
    }

    /// The half of the device features the device feature select picks.
    pub fn device_features(&self) -> u32 {
        match self.device_features_sel {
            0 => self.device.features() as u32,
            1 => (self.device.features() >> 32) as u32,
            _ => 0,
        }
    }

    /// The half of the accepted features the driver feature select picks.
    pub fn driver_features(&self) -> u32 {
        match self.driver_features_sel {
            0 => self.acked_features as u32,
            1 => (self.acked_features >> 32) as u32,
            _ => 0,
        }
    }

    /// The driver accepts `value` for the half of the features the select picks; only offered
    /// bits are kept, and only during negotiation (after DRIVER, before FEATURES_OK).
    pub fn write_driver_features(&mut self, value: u32) {
        if self.status & STATUS_DRIVER == 0 || self.status & STATUS_FEATURES_OK != 0 {
            guest_warn!(
                "{}: driver features written outside feature negotiation",
                self.name
            );
            return;
        }
        let shift = match self.driver_features_sel {
            0 => 0,
            1 => 32,
            _ => return,
        };
        let mask = 0xffff_ffffu64 << shift;
        let offered = self.device.features();
        self.acked_features =
            (self.acked_features & !mask) | ((u64::from(value) << shift) & offered);
    }

    /// The queue the queue select picks, if it exists.
    pub fn selected_queue(&self) -> Option<&Queue> {
        self.queues.get(self.queue_sel as usize)
    }

    /// The selected queue, to change its configuration; `None` (with a warning) when it does not
    /// exist or when queue registers may not change now (before FEATURES_OK or once the device
    /// runs).
    pub fn selected_queue_for_setup(&mut self, register: &str) -> Option<&mut Queue> {
        if self.activated || self.status & STATUS_FEATURES_OK == 0 {
            guest_warn!("{}: {register} written outside queue setup", self.name);
            return None;
        }
        self.queues.get_mut(self.queue_sel as usize)
    }

    /// The status register, DEVICE_NEEDS_RESET included when the device is broken.
    pub fn status(&self) -> u32 {
        let broken = if self.interrupt.is_broken() {
            STATUS_NEEDS_RESET
        } else {
            0
        };
        self.status | broken
    }

    /// The driver writes the status register: 0 resets, FEATURES_OK is refused without
    /// VIRTIO_F_VERSION_1, DRIVER_OK activates the device.
    pub fn set_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        let mut value = value;
        if value & STATUS_FEATURES_OK != 0
            && self.status & STATUS_FEATURES_OK == 0
            && self.acked_features & VIRTIO_F_VERSION_1 == 0
        {
            guest_warn!(
                "{}: driver did not accept VIRTIO_F_VERSION_1; refusing FEATURES_OK",
                self.name
            );
            value &= !STATUS_FEATURES_OK;
        }
        let newly_ok = value & STATUS_DRIVER_OK != 0 && self.status & STATUS_DRIVER_OK == 0;
        self.status = value;
        if newly_ok && !self.activated {
            self.activate();
        }
    }

    /// Signals queue `index`'s notify eventfd (a notification that reached the VMM instead of a
    /// KVM ioeventfd).
    pub fn notify(&self, index: u32) {
        match self.queue_evts.get(index as usize) {
            Some(evt) => {
                if let Err(e) = evt.write(1) {
                    guest_warn!("{}: notify queue {index}: {e}", self.name);
                }
            }
            None => guest_warn!(
                "{}: notify of queue {index}, which does not exist",
                self.name
            ),
        }
    }

    /// Reads the device-specific configuration at `offset`; zeros past its end.
    pub fn read_device_config(&self, offset: u64, data: &mut [u8]) {
        let config = self.device.config_space();
        let bytes = usize::try_from(offset)
            .ok()
            .and_then(|start| config.get(start..start.checked_add(data.len())?));
        match bytes {
            Some(bytes) => data.copy_from_slice(bytes),
            None => data.fill(0),
        }
    }

    /// A device reset (by the driver, or a machine reset): the worker stops, registers and
    /// queues are cleared, ready for the driver to set the device up again.
    pub fn reset(&mut self) {
        if self.activated {
            self.device.reset();
        }
        self.activated = false;
        self.status = 0;
        self.acked_features = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.queue_sel = 0;
        for queue in &mut self.queues {
            queue.reset();
        }
        self.interrupt.clear();
    }

    fn activate(&mut self) {
        if self.status & STATUS_FEATURES_OK == 0 {
            guest_warn!("{}: DRIVER_OK without FEATURES_OK", self.name);
            self.interrupt.mark_broken();
            return;
        }
        if let Some(i) = self
            .queues
            .iter()
            .position(|q| !q.ready() || !q.is_valid(&self.mem))
        {
            guest_warn!(
                "{}: queue {i} is not ready or lies outside guest memory",
                self.name
            );
            self.interrupt.mark_broken();
            return;
        }
        let evts = match self
            .queue_evts
            .iter()
            .map(|e| e.try_clone())
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(evts) => evts,
            Err(e) => {
                guest_warn!("{}: clone queue eventfds: {e}", self.name);
                self.interrupt.mark_broken();
                return;
            }
        };
        let queues = match self
            .queues
            .iter()
            .map(|q| Queue::try_from(q.state()))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(queues) => queues,
            Err(e) => {
                guest_warn!("{}: copy queue state: {e}", self.name);
                self.interrupt.mark_broken();
                return;
            }
        };
        let activation = Activation {
            mem: self.mem.clone(),
            queues,
            queue_evts: evts,
            interrupt: self.interrupt.clone(),
            acked_features: self.acked_features,
        };
        match self.device.activate(activation) {
            Ok(()) => self.activated = true,
            Err(e) => {
                guest_warn!("{}: activate device: {e}", self.name);
                self.interrupt.mark_broken();
            }
        }
    }

    /// The registers and queue configuration.
    pub fn state(&self) -> TransportState {
        let (interrupt_status, broken) = self.interrupt.save();
        TransportState {
            device_type: self.device.device_type(),
            status: self.status,
            acked_features: self.acked_features,
            device_features_sel: self.device_features_sel,
            driver_features_sel: self.driver_features_sel,
            queue_sel: self.queue_sel,
            interrupt_status,
            broken,
            activated: self.activated,
            queues: self
                .queues
                .iter()
                .map(|q| QueueConfig {
                    max_size: q.max_size(),
                    size: q.size(),
                    ready: q.ready(),
                    desc_table: q.desc_table(),
                    avail_ring: q.avail_ring(),
                    used_ring: q.used_ring(),
                })
                .collect(),
            device_state: self.device.save_state(),
        }
    }

    /// Takes over `state` (on a migration target, before the vCPUs run): registers, queue
    /// configuration, interrupt status, and activates the device when the source's was active,
    /// with its ring positions at the used index in the (already copied) guest memory.
    pub fn restore(&mut self, state: &TransportState) -> Result<(), RestoreTransportError> {
        let device_type = self.device.device_type();
        if state.device_type != device_type {
            return Err(RestoreTransportError::DeviceType {
                expected: device_type,
                got: state.device_type,
            });
        }
        let max_sizes: Vec<u16> = self.queues.iter().map(|q| q.max_size()).collect();
        let got: Vec<u16> = state.queues.iter().map(|q| q.max_size).collect();
        if max_sizes != got {
            return Err(RestoreTransportError::Queues {
                expected: max_sizes,
                got,
            });
        }
        self.reset();
        self.status = state.status;
        self.acked_features = state.acked_features & self.device.features();
        self.device_features_sel = state.device_features_sel;
        self.driver_features_sel = state.driver_features_sel;
        self.queue_sel = state.queue_sel;
        for (i, (queue, config)) in self.queues.iter_mut().zip(&state.queues).enumerate() {
            queue.set_size(config.size);
            queue.set_desc_table_address(
                Some(config.desc_table as u32),
                Some((config.desc_table >> 32) as u32),
            );
            queue.set_avail_ring_address(
                Some(config.avail_ring as u32),
                Some((config.avail_ring >> 32) as u32),
            );
            queue.set_used_ring_address(
                Some(config.used_ring as u32),
                Some((config.used_ring >> 32) as u32),
            );
            queue.set_ready(config.ready);
            if state.activated {
                let used = queue
                    .used_idx(&self.mem, Ordering::Acquire)
                    .map_err(|_| RestoreTransportError::UsedIndex(i))?;
                queue.set_next_avail(used.0);
                queue.set_next_used(used.0);
            }
        }
        self.interrupt.restore(state.interrupt_status, state.broken);
        self.device
            .restore_state(&state.device_state)
            .map_err(|e| RestoreTransportError::DeviceState(e.to_string()))?;
        if state.activated {
            self.activate();
            if !self.activated {
                return Err(RestoreTransportError::Activate);
            }
        }
        Ok(())
    }
}
