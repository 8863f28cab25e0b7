//! The virtio-mmio transport (virtio 1.x, register layout version 2).
//!
//! Driver side, step by step: reset (status 0), ACKNOWLEDGE, DRIVER, read DeviceFeatures (two
//! 32-bit halves via DeviceFeaturesSel), write DriverFeatures, FEATURES_OK (refused unless
//! VIRTIO_F_VERSION_1 is among them), then per queue QueueSel, QueueNumMax, QueueNum, the three
//! ring addresses and QueueReady, then DRIVER_OK: the transport checks every queue against guest
//! memory and activates the device. QueueNotify normally never reaches us (a KVM ioeventfd
//! catches it); if it does, the transport signals the queue's eventfd itself. Every register is
//! a 32-bit access; anything else is ignored with a warning. Config space starts at 0x100.

use std::sync::Arc;

use crate::guest_memory::GuestMemoryMmap;
use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::transport::VirtioCore;
use super::{Interrupt, VirtioDevice};
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

pub use super::transport::{
    CreateTransportError, QueueConfig, RestoreTransportError, TransportState, STATUS_ACKNOWLEDGE,
    STATUS_DRIVER, STATUS_DRIVER_OK, STATUS_FAILED, STATUS_FEATURES_OK, STATUS_NEEDS_RESET,
};
use super::transport::{TransportSnapshot, VirtioTransport};

/// One virtio device on the MMIO bus.
pub struct MmioTransport {
    core: VirtioCore,
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
        Ok(MmioTransport {
            core: VirtioCore::new("virtio-mmio", device, mem, queue_evts, interrupt)?,
        })
    }

    /// Parks the device's worker between two requests (for live migration).
    pub fn pause_device(&mut self) {
        self.core.pause_device();
    }

    /// Lets a paused worker go on.
    pub fn resume_device(&mut self) {
        self.core.resume_device();
    }

    /// The device's disk, if it is a virtio-blk device.
    pub fn disk(&self) -> Option<super::block::DiskHandle> {
        self.core.disk()
    }

    /// The registers and queue configuration.
    pub fn state(&self) -> TransportState {
        self.core.state()
    }

    /// Takes over `state` (on a migration target, before the vCPUs run), see
    /// [`VirtioCore::restore`].
    pub fn restore(&mut self, state: &TransportState) -> Result<(), RestoreTransportError> {
        self.core.restore(state)
    }

    /// A machine reset: the device is reset as by its driver (worker stopped, registers and
    /// queues cleared), ready for the rebooted driver to set it up again.
    pub fn hardware_reset(&mut self) {
        self.core.reset();
    }

    fn read_register(&mut self, offset: u64) -> u32 {
        let queue = self.core.selected_queue();
        match offset {
            REG_MAGIC => MAGIC_VALUE,
            REG_VERSION => VERSION,
            REG_DEVICE_ID => self.core.device().device_type(),
            REG_VENDOR_ID => VENDOR_ID,
            REG_DEVICE_FEATURES => self.core.device_features(),
            REG_QUEUE_NUM_MAX => queue.map_or(0, |q| u32::from(q.max_size())),
            REG_QUEUE_READY => queue.map_or(0, |q| u32::from(q.ready())),
            REG_QUEUE_DESC_LOW => queue.map_or(0, |q| q.desc_table() as u32),
            REG_QUEUE_DESC_HIGH => queue.map_or(0, |q| (q.desc_table() >> 32) as u32),
            REG_QUEUE_DRIVER_LOW => queue.map_or(0, |q| q.avail_ring() as u32),
            REG_QUEUE_DRIVER_HIGH => queue.map_or(0, |q| (q.avail_ring() >> 32) as u32),
            REG_QUEUE_DEVICE_LOW => queue.map_or(0, |q| q.used_ring() as u32),
            REG_QUEUE_DEVICE_HIGH => queue.map_or(0, |q| (q.used_ring() >> 32) as u32),
            REG_INTERRUPT_STATUS => self.core.interrupt().status(),
            REG_STATUS => self.core.status(),
            REG_CONFIG_GENERATION => 0,
            _ => 0,
        }
    }

    fn write_register(&mut self, offset: u64, value: u32) {
        let core = &mut self.core;
        match offset {
            REG_DEVICE_FEATURES_SEL => core.device_features_sel = value,
            REG_DRIVER_FEATURES_SEL => core.driver_features_sel = value,
            REG_DRIVER_FEATURES => core.write_driver_features(value),
            REG_QUEUE_SEL => core.queue_sel = value,
            REG_QUEUE_NUM => {
                if let Some(q) = core.selected_queue_for_setup("QueueNum") {
                    q.set_size(value as u16);
                }
            }
            REG_QUEUE_READY => {
                if let Some(q) = core.selected_queue_for_setup("QueueReady") {
                    q.set_ready(value == 1);
                }
            }
            REG_QUEUE_DESC_LOW => {
                self.set_address(|q, v| q.set_desc_table_address(Some(v), None), value)
            }
            REG_QUEUE_DESC_HIGH => {
                self.set_address(|q, v| q.set_desc_table_address(None, Some(v)), value)
            }
            REG_QUEUE_DRIVER_LOW => {
                self.set_address(|q, v| q.set_avail_ring_address(Some(v), None), value)
            }
            REG_QUEUE_DRIVER_HIGH => {
                self.set_address(|q, v| q.set_avail_ring_address(None, Some(v)), value)
            }
            REG_QUEUE_DEVICE_LOW => {
                self.set_address(|q, v| q.set_used_ring_address(Some(v), None), value)
            }
            REG_QUEUE_DEVICE_HIGH => {
                self.set_address(|q, v| q.set_used_ring_address(None, Some(v)), value)
            }
            REG_QUEUE_NOTIFY => core.notify(value),
            REG_INTERRUPT_ACK => core.interrupt().ack(value),
            REG_STATUS => core.set_status(value),
            _ => guest_warn!("virtio-mmio: write to unknown register {offset:#x}"),
        }
    }

    fn set_address(&mut self, set: fn(&mut Queue, u32), value: u32) {
        if let Some(q) = self.core.selected_queue_for_setup("a queue address") {
            set(q, value);
        }
    }
}

impl VirtioTransport for MmioTransport {
    fn core(&self) -> &VirtioCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut VirtioCore {
        &mut self.core
    }

    fn hardware_reset(&mut self) {
        self.core.reset();
    }

    fn snapshot(&self) -> TransportSnapshot {
        TransportSnapshot::Mmio(self.core.state())
    }

    fn restore(&mut self, snapshot: &TransportSnapshot) -> Result<(), RestoreTransportError> {
        match snapshot {
            TransportSnapshot::Mmio(state) => self.core.restore(state),
            TransportSnapshot::Pci(_) => Err(RestoreTransportError::Pci(
                "a virtio-pci state for a virtio-mmio device".into(),
            )),
        }
    }
}

impl BusDevice for MmioTransport {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset >= CONFIG_SPACE {
            self.core.read_device_config(offset - CONFIG_SPACE, data);
            return;
        }
        if data.len() == 4 {
            data.copy_from_slice(&self.read_register(offset).to_le_bytes());
        } else {
            guest_warn!("virtio-mmio: register read of width other than 4 at {offset:#x}");
            data.fill(0);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset >= CONFIG_SPACE {
            guest_warn!("virtio-mmio: config space is read-only");
            return;
        }
        match <[u8; 4]>::try_from(data) {
            Ok(word) => self.write_register(offset, u32::from_le_bytes(word)),
            Err(_) => {
                guest_warn!("virtio-mmio: register write of width other than 4 at {offset:#x}")
            }
        }
    }
}

#[cfg(test)]
#[path = "mmio_tests.rs"]
mod tests;
