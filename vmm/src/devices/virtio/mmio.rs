//! The virtio-mmio transport (virtio 1.x, register layout version 2).
//!
//! Driver side, step by step: reset (status 0), ACKNOWLEDGE, DRIVER, read DeviceFeatures (two
//! 32-bit halves via DeviceFeaturesSel), write DriverFeatures, FEATURES_OK (refused unless
//! VIRTIO_F_VERSION_1 is among them), then per queue QueueSel, QueueNumMax, QueueNum, the three
//! ring addresses and QueueReady, then DRIVER_OK: the transport checks every queue against guest
//! memory and activates the device. QueueNotify normally never reaches us (a KVM ioeventfd
//! catches it); if it does, the transport signals the queue's eventfd itself. Every register is
//! a 32-bit access; anything else is ignored with a warning. Config space starts at 0x100.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::vstate::memory::GuestMemoryMmap;
use log::warn;
use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::{Activation, Interrupt, VirtioDevice, VIRTIO_F_VERSION_1};
use crate::devices::bus::BusDevice;

const MAGIC_VALUE: u32 = 0x7472_6976; // "virt"
const VERSION: u32 = 2;
const VENDOR_ID: u32 = 0x5446_5646; // "FVFT"

pub const REG_MAGIC: u64 = 0x000;
pub const REG_VERSION: u64 = 0x004;
pub const REG_DEVICE_ID: u64 = 0x008;
pub const REG_VENDOR_ID: u64 = 0x00c;
pub const REG_DEVICE_FEATURES: u64 = 0x010;
pub const REG_DEVICE_FEATURES_SEL: u64 = 0x014;
pub const REG_DRIVER_FEATURES: u64 = 0x020;
pub const REG_DRIVER_FEATURES_SEL: u64 = 0x024;
pub const REG_QUEUE_SEL: u64 = 0x030;
pub const REG_QUEUE_NUM_MAX: u64 = 0x034;
pub const REG_QUEUE_NUM: u64 = 0x038;
pub const REG_QUEUE_READY: u64 = 0x044;
pub const REG_QUEUE_NOTIFY: u64 = 0x050;
pub const REG_INTERRUPT_STATUS: u64 = 0x060;
pub const REG_INTERRUPT_ACK: u64 = 0x064;
pub const REG_STATUS: u64 = 0x070;
pub const REG_QUEUE_DESC_LOW: u64 = 0x080;
pub const REG_QUEUE_DESC_HIGH: u64 = 0x084;
pub const REG_QUEUE_DRIVER_LOW: u64 = 0x090;
pub const REG_QUEUE_DRIVER_HIGH: u64 = 0x094;
pub const REG_QUEUE_DEVICE_LOW: u64 = 0x0a0;
pub const REG_QUEUE_DEVICE_HIGH: u64 = 0x0a4;
pub const REG_CONFIG_GENERATION: u64 = 0x0fc;
pub const CONFIG_SPACE: u64 = 0x100;

pub const STATUS_ACKNOWLEDGE: u32 = 1;
pub const STATUS_DRIVER: u32 = 2;
pub const STATUS_DRIVER_OK: u32 = 4;
pub const STATUS_FEATURES_OK: u32 = 8;
pub const STATUS_NEEDS_RESET: u32 = 0x40;
pub const STATUS_FAILED: u32 = 0x80;

/// One virtio device on the MMIO bus.
pub struct MmioTransport {
    device: Box<dyn VirtioDevice>,
    mem: GuestMemoryMmap,
    queues: Vec<Queue>,
    queue_evts: Vec<EventFd>,
    interrupt: Arc<Interrupt>,
    device_features_sel: u32,
    driver_features_sel: u32,
    acked_features: u64,
    queue_sel: u32,
    status: u32,
    activated: bool,
}

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
}

/// Creating the transport failed.
#[derive(Debug, thiserror::Error)]
pub enum CreateTransportError {
    #[error("queue of size {0}")]
    Queue(u16, #[source] virtio_queue::Error),
    #[error("{queues} queues but {evts} notify eventfds")]
    EventCount { queues: usize, evts: usize },
}

impl MmioTransport {
    /// `queue_evts` are the notify eventfds (one per queue, registered as ioeventfds by the
    /// caller); `interrupt` wraps the irqfd.
    pub fn new(
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
        Ok(MmioTransport {
            device,
            mem,
            queues,
            queue_evts,
            interrupt,
            device_features_sel: 0,
            driver_features_sel: 0,
            acked_features: 0,
            queue_sel: 0,
            status: 0,
            activated: false,
        })
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
        if state.activated {
            self.activate();
            if !self.activated {
                return Err(RestoreTransportError::Activate);
            }
        }
        Ok(())
    }

    fn selected_queue(&mut self) -> Option<&mut Queue> {
        self.queues.get_mut(self.queue_sel as usize)
    }

    /// Queue registers may change only between FEATURES_OK and DRIVER_OK.
    fn queue_config_allowed(&self) -> bool {
        !self.activated && self.status & STATUS_FEATURES_OK != 0
    }

    /// A machine reset: the device is reset as by its driver (worker stopped, registers and
    /// queues cleared), ready for the rebooted driver to set it up again.
    pub fn hardware_reset(&mut self) {
        self.reset();
    }

    fn reset(&mut self) {
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

    fn set_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        let mut value = value;
        if value & STATUS_FEATURES_OK != 0
            && self.status & STATUS_FEATURES_OK == 0
            && self.acked_features & VIRTIO_F_VERSION_1 == 0
        {
            warn!("virtio-mmio: driver did not accept VIRTIO_F_VERSION_1; refusing FEATURES_OK");
            value &= !STATUS_FEATURES_OK;
        }
        let newly_ok = value & STATUS_DRIVER_OK != 0 && self.status & STATUS_DRIVER_OK == 0;
        self.status = value;
        if newly_ok && !self.activated {
            self.activate();
        }
    }

    fn activate(&mut self) {
        if self.status & STATUS_FEATURES_OK == 0 {
            warn!("virtio-mmio: DRIVER_OK without FEATURES_OK");
            self.interrupt.mark_broken();
            return;
        }
        if let Some(i) = self
            .queues
            .iter()
            .position(|q| !q.ready() || !q.is_valid(&self.mem))
        {
            warn!("virtio-mmio: queue {i} is not ready or lies outside guest memory");
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
                warn!("virtio-mmio: clone queue eventfds: {e}");
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
                warn!("virtio-mmio: copy queue state: {e}");
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
                warn!("virtio-mmio: activate device: {e}");
                self.interrupt.mark_broken();
            }
        }
    }

    fn read_register(&mut self, offset: u64) -> u32 {
        match offset {
            REG_MAGIC => MAGIC_VALUE,
            REG_VERSION => VERSION,
            REG_DEVICE_ID => self.device.device_type(),
            REG_VENDOR_ID => VENDOR_ID,
            REG_DEVICE_FEATURES => match self.device_features_sel {
                0 => self.device.features() as u32,
                1 => (self.device.features() >> 32) as u32,
                _ => 0,
            },
            REG_QUEUE_NUM_MAX => self.selected_queue().map_or(0, |q| u32::from(q.max_size())),
            REG_QUEUE_READY => self.selected_queue().map_or(0, |q| u32::from(q.ready())),
            REG_QUEUE_DESC_LOW => self.selected_queue().map_or(0, |q| q.desc_table() as u32),
            REG_QUEUE_DESC_HIGH => self
                .selected_queue()
                .map_or(0, |q| (q.desc_table() >> 32) as u32),
            REG_QUEUE_DRIVER_LOW => self.selected_queue().map_or(0, |q| q.avail_ring() as u32),
            REG_QUEUE_DRIVER_HIGH => self
                .selected_queue()
                .map_or(0, |q| (q.avail_ring() >> 32) as u32),
            REG_QUEUE_DEVICE_LOW => self.selected_queue().map_or(0, |q| q.used_ring() as u32),
            REG_QUEUE_DEVICE_HIGH => self
                .selected_queue()
                .map_or(0, |q| (q.used_ring() >> 32) as u32),
            REG_INTERRUPT_STATUS => self.interrupt.status(),
            REG_STATUS => {
                let broken = if self.interrupt.is_broken() {
                    STATUS_NEEDS_RESET
                } else {
                    0
                };
                self.status | broken
            }
            REG_CONFIG_GENERATION => 0,
            _ => 0,
        }
    }

    fn write_register(&mut self, offset: u64, value: u32) {
        let queue_ok = self.queue_config_allowed();
        match offset {
            REG_DEVICE_FEATURES_SEL => self.device_features_sel = value,
            REG_DRIVER_FEATURES_SEL => self.driver_features_sel = value,
            REG_DRIVER_FEATURES => {
                if self.status & STATUS_DRIVER == 0 || self.status & STATUS_FEATURES_OK != 0 {
                    warn!("virtio-mmio: DriverFeatures written outside feature negotiation");
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
            REG_QUEUE_SEL => self.queue_sel = value,
            REG_QUEUE_NUM if queue_ok => {
                if let Some(q) = self.selected_queue() {
                    q.set_size(value as u16);
                }
            }
            REG_QUEUE_READY if queue_ok => {
                if let Some(q) = self.selected_queue() {
                    q.set_ready(value == 1);
                }
            }
            REG_QUEUE_DESC_LOW if queue_ok => {
                self.set_address(|q, v| q.set_desc_table_address(Some(v), None), value)
            }
            REG_QUEUE_DESC_HIGH if queue_ok => {
                self.set_address(|q, v| q.set_desc_table_address(None, Some(v)), value)
            }
            REG_QUEUE_DRIVER_LOW if queue_ok => {
                self.set_address(|q, v| q.set_avail_ring_address(Some(v), None), value)
            }
            REG_QUEUE_DRIVER_HIGH if queue_ok => {
                self.set_address(|q, v| q.set_avail_ring_address(None, Some(v)), value)
            }
            REG_QUEUE_DEVICE_LOW if queue_ok => {
                self.set_address(|q, v| q.set_used_ring_address(Some(v), None), value)
            }
            REG_QUEUE_DEVICE_HIGH if queue_ok => {
                self.set_address(|q, v| q.set_used_ring_address(None, Some(v)), value)
            }
            REG_QUEUE_NUM
            | REG_QUEUE_READY
            | REG_QUEUE_DESC_LOW
            | REG_QUEUE_DESC_HIGH
            | REG_QUEUE_DRIVER_LOW
            | REG_QUEUE_DRIVER_HIGH
            | REG_QUEUE_DEVICE_LOW
            | REG_QUEUE_DEVICE_HIGH => {
                warn!("virtio-mmio: queue register {offset:#x} written outside queue setup");
            }
            REG_QUEUE_NOTIFY => {
                if let Some(evt) = self.queue_evts.get(value as usize) {
                    if let Err(e) = evt.write(1) {
                        warn!("virtio-mmio: notify queue {value}: {e}");
                    }
                }
            }
            REG_INTERRUPT_ACK => self.interrupt.ack(value),
            REG_STATUS => self.set_status(value),
            _ => warn!("virtio-mmio: write to unknown register {offset:#x}"),
        }
    }

    fn set_address(&mut self, set: fn(&mut Queue, u32), value: u32) {
        if let Some(q) = self.selected_queue() {
            set(q, value);
        }
    }
}

impl BusDevice for MmioTransport {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset >= CONFIG_SPACE {
            let config = self.device.config_space();
            let start = (offset - CONFIG_SPACE) as usize;
            match config.get(start..start.saturating_add(data.len())) {
                Some(bytes) => data.copy_from_slice(bytes),
                None => data.fill(0),
            }
            return;
        }
        if data.len() == 4 {
            data.copy_from_slice(&self.read_register(offset).to_le_bytes());
        } else {
            warn!("virtio-mmio: register read of width other than 4 at {offset:#x}");
            data.fill(0);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset >= CONFIG_SPACE {
            warn!("virtio-mmio: config space is read-only");
            return;
        }
        match <[u8; 4]>::try_from(data) {
            Ok(word) => self.write_register(offset, u32::from_le_bytes(word)),
            Err(_) => warn!("virtio-mmio: register write of width other than 4 at {offset:#x}"),
        }
    }
}

#[cfg(test)]
#[path = "mmio_tests.rs"]
mod tests;
