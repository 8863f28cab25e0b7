//! The virtio-pci transport (virtio 1.x "modern" only, no legacy I/O BAR).
//!
//! What the guest finds, step by step:
//!
//! 1. A PCI function with vendor 0x1af4 and device id 0x1040 + the virtio device type, revision
//!    1, subsystem 0x1af4:0x0040, INTA#.
//! 2. One 64-bit memory BAR (BAR 0, 32 KiB) holding, 4 KiB apart: the common configuration
//!    ([`common_cfg`]), the ISR byte (read-to-clear: reading returns and clears the interrupt
//!    status), the device configuration, the notify area (queue `i` at `0x3000 + 4 * i`: a KVM
//!    ioeventfd on each address), the MSI-X table and the MSI-X PBA.
//! 3. A capability list: MSI-X (one vector per queue plus one for configuration changes), then
//!    the virtio structures (vendor-specific capabilities: common, notify with
//!    `notify_off_multiplier` 4, ISR, device when the device has configuration) and the PCI
//!    configuration access window (`VIRTIO_PCI_CAP_PCI_CFG`: BAR, offset and length written by
//!    the driver, then its data bytes read or write the BAR there).
//! 4. The driver negotiates and sets queues up through the common configuration exactly as
//!    with any transport ([`super::transport`]); it gives each queue, and the configuration, an
//!    MSI-X vector, or leaves them at VIRTIO_MSI_NO_VECTOR and uses INTx ([`interrupt`]).

pub mod common_cfg;
pub mod interrupt;

use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

use self::interrupt::{PciDelivery, PciInterrupt};
use super::transport::{
    CreateTransportError, RestoreTransportError, TransportSnapshot, TransportState, VirtioCore,
    VirtioTransport,
};
use super::{Interrupt, VirtioDevice, TYPE_BLOCK, TYPE_CONSOLE, TYPE_NET};
use crate::devices::irq::{LevelLine, PendingCheck};
use crate::devices::pci::config_space::{
    Bar, BarKind, ConfigSpace, PciHeader, COMMAND, COMMAND_INTX_DISABLE,
};
use crate::devices::pci::msix::{self, MsixSnapshot, MsixVectors};
use crate::devices::pci::PciDevice;
use crate::guest_memory::GuestMemoryMmap;

pub const VENDOR_ID: u16 = 0x1af4;
/// Device id of virtio device type 0.
const DEVICE_ID_BASE: u16 = 0x1040;
const SUBSYSTEM_ID: u16 = 0x0040;
/// The capability id of the virtio structures.
const VENDOR_CAPABILITY: u8 = 0x09;
const CAP_COMMON: u8 = 1;
const CAP_NOTIFY: u8 = 2;
const CAP_ISR: u8 = 3;
const CAP_DEVICE: u8 = 4;
const CAP_PCI_CFG: u8 = 5;

/// BAR 0's layout.
pub const BAR_INDEX: usize = 0;
pub const BAR_SIZE: u64 = 0x8000;
pub const COMMON_OFFSET: u64 = 0x0000;
pub const ISR_OFFSET: u64 = 0x1000;
pub const DEVICE_OFFSET: u64 = 0x2000;
pub const NOTIFY_OFFSET: u64 = 0x3000;
pub const MSIX_TABLE_OFFSET: u64 = 0x4000;
pub const MSIX_PBA_OFFSET: u64 = 0x5000;
const REGION_SIZE: u64 = 0x1000;
/// Bytes between two queues' notify addresses.
pub const NOTIFY_MULTIPLIER: u32 = 4;
/// The kind of BAR 0.
pub const BAR_KIND: BarKind = BarKind::Memory64;

/// Offsets inside the `VIRTIO_PCI_CAP_PCI_CFG` capability.
const PCI_CFG_BAR: usize = 4;
const PCI_CFG_OFFSET: usize = 8;
const PCI_CFG_LENGTH: usize = 12;
const PCI_CFG_DATA: usize = 16;

/// Where a device sits: its BAR's address and the GSI of its INTx line (the interrupt line
/// register's value).
#[derive(Clone, Copy, Debug)]
pub struct PciPlacement {
    pub bar_address: u64,
    pub intx_gsi: u8,
}

/// The transport's state (for live migration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtioPciState {
    pub transport: TransportState,
    pub config_vector: u16,
    pub queue_vectors: Vec<u16>,
    /// The 256 bytes of configuration space (BAR addresses, command, MSI-X control included).
    pub config: Vec<u8>,
    pub msix: MsixSnapshot,
}

/// One virtio device behind a PCI function.
pub struct VirtioPciDevice {
    core: VirtioCore,
    config: ConfigSpace,
    power_on: ConfigSpace,
    irq: Arc<PciInterrupt>,
    msix_cap: usize,
    pci_cfg_cap: usize,
}

fn class_of(device_type: u32) -> (u8, u8, u8) {
    match device_type {
        TYPE_NET => (0x02, 0x00, 0x00),
        TYPE_BLOCK => (0x01, 0x00, 0x00),
        // Simple communication controller, other (QEMU's class for virtio-serial).
        TYPE_CONSOLE => (0x07, 0x80, 0x00),
        _ => (0xff, 0x00, 0x00),
    }
}

fn overlaps(offset: usize, len: usize, start: usize, size: usize) -> bool {
    offset < start + size && start < offset + len
}

impl VirtioPciDevice {
    /// `queue_evts` are the notify eventfds (the root registers them as ioeventfds where the
    /// BAR is mapped); `msix` must have one vector per queue plus one; `intx` raises the INTx
    /// line.
    pub fn new(
        device: Box<dyn VirtioDevice>,
        mem: GuestMemoryMmap,
        queue_evts: Vec<EventFd>,
        msix: Arc<MsixVectors>,
        intx: LevelLine,
        placement: PciPlacement,
    ) -> Result<Self, CreateTransportError> {
        let queues = device.queue_max_sizes().len();
        let device_type = device.device_type();
        let config_len = device.config_space().len();
        if usize::from(msix.count()) != queues + 1 {
            return Err(CreateTransportError::Vectors {
                queues,
                vectors: usize::from(msix.count()),
            });
        }
        let irq = Arc::new(PciInterrupt::new(msix.clone(), queues, intx));
        let interrupt = Arc::new(Interrupt::with_delivery(Box::new(PciDelivery(irq.clone()))));
        let core = VirtioCore::new("virtio-pci", device, mem, queue_evts, interrupt)?;
        let mut config = ConfigSpace::new(&PciHeader {
            vendor_id: VENDOR_ID,
            device_id: DEVICE_ID_BASE + device_type as u16,
            revision_id: 1,
            class: class_of(device_type),
            subsystem_vendor_id: VENDOR_ID,
            subsystem_id: SUBSYSTEM_ID,
            interrupt_pin: Some(1),
        });
        config.set_u8(
            crate::devices::pci::config_space::INTERRUPT_LINE,
            placement.intx_gsi,
        );
        let bar = Bar {
            kind: BAR_KIND,
            size: BAR_SIZE,
            prefetchable: false,
        };
        config
            .add_bar(BAR_INDEX, bar, placement.bar_address)
            .map_err(CreateTransportError::Config)?;
        let (body, writable) = msix.capability(
            BAR_INDEX as u8,
            MSIX_TABLE_OFFSET as u32,
            MSIX_PBA_OFFSET as u32,
        );
        let msix_cap = config
            .add_capability(msix::CAPABILITY_ID, &body, &writable)
            .map_err(CreateTransportError::Config)?;
        let mut add = |cfg_type: u8, offset: u64, length: usize, extra: &[u8], writable: &[u8]| {
            let mut body = vec![(16 + extra.len()) as u8, cfg_type, BAR_INDEX as u8, 0, 0, 0];
            body.extend_from_slice(&(offset as u32).to_le_bytes());
            body.extend_from_slice(&(length as u32).to_le_bytes());
            body.extend_from_slice(extra);
            config
                .add_capability(VENDOR_CAPABILITY, &body, writable)
                .map_err(CreateTransportError::Config)
        };
        add(
            CAP_COMMON,
            COMMON_OFFSET,
            common_cfg::SIZE as usize,
            &[],
            &[],
        )?;
        let notify_len = queues * NOTIFY_MULTIPLIER as usize;
        add(
            CAP_NOTIFY,
            NOTIFY_OFFSET,
            notify_len,
            &NOTIFY_MULTIPLIER.to_le_bytes(),
            &[],
        )?;
        add(CAP_ISR, ISR_OFFSET, 1, &[], &[])?;
        if config_len > 0 {
            add(CAP_DEVICE, DEVICE_OFFSET, config_len, &[], &[])?;
        }
        // The driver writes bar, offset, length and data of the access window.
        let mut window = [0u8; 18];
        window[2] = 0xff;
        window[6..18].fill(0xff);
        let pci_cfg_cap = add(CAP_PCI_CFG, 0, 0, &[0; 4], &window)?;
        Ok(VirtioPciDevice {
            core,
            power_on: config.clone(),
            config,
            irq,
            msix_cap,
            pci_cfg_cap,
        })
    }

    /// The device's interrupt (its ISR), for the INTx resampler.
    pub fn interrupt(&self) -> Arc<Interrupt> {
        self.core.interrupt().clone()
    }

    /// Whether the INTx line should stay up (for the resampler).
    pub fn intx_pending(&self) -> PendingCheck {
        self.irq.intx_pending(self.interrupt())
    }

    /// The access the `VIRTIO_PCI_CAP_PCI_CFG` window names: offset into BAR 0 and length.
    fn window(&self) -> Option<(u64, usize)> {
        let cap = self.pci_cfg_cap;
        let bar = self.config.u8_at(cap + PCI_CFG_BAR);
        let offset = self.config.u32_at(cap + PCI_CFG_OFFSET);
        let length = self.config.u32_at(cap + PCI_CFG_LENGTH) as usize;
        let ok = usize::from(bar) == BAR_INDEX
            && matches!(length, 1 | 2 | 4)
            && offset as usize % length == 0;
        if !ok {
            guest_warn!(
                "virtio-pci: access window with bar {bar}, offset {offset:#x}, length {length}"
            );
            return None;
        }
        Some((u64::from(offset), length))
    }

    fn after_config_write(&mut self, offset: usize, len: usize) {
        if overlaps(offset, len, self.pci_cfg_cap + PCI_CFG_DATA, 4) {
            if let Some((at, length)) = self.window() {
                let mut data = [0u8; 4];
                self.config.read(self.pci_cfg_cap + PCI_CFG_DATA, &mut data);
                self.write_bar(BAR_INDEX, at, &data[..length]);
            }
        }
        if overlaps(offset, len, self.msix_cap + 2, 2) {
            self.irq
                .msix()
                .set_control(self.config.u16_at(self.msix_cap + 2));
        }
        if overlaps(offset, len, COMMAND, 2) {
            let disabled = self.config.command() & COMMAND_INTX_DISABLE != 0;
            self.irq.set_intx_disabled(disabled);
        }
    }
}

impl PciDevice for VirtioPciDevice {
    fn config(&self) -> &ConfigSpace {
        &self.config
    }

    fn read_config(&mut self, offset: usize, data: &mut [u8]) {
        let data_at = self.pci_cfg_cap + PCI_CFG_DATA;
        if overlaps(offset, data.len(), data_at, 4) {
            if let Some((at, length)) = self.window() {
                let mut bytes = [0u8; 4];
                self.read_bar(BAR_INDEX, at, &mut bytes[..length]);
                self.config.set_u32(data_at, u32::from_le_bytes(bytes));
            }
        }
        self.config.read(offset, data);
    }

    fn write_config(&mut self, offset: usize, data: &[u8]) {
        self.config.write(offset, data);
        self.after_config_write(offset, data.len());
    }

    fn read_bar(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if bar != BAR_INDEX {
            return;
        }
        let msix = self.irq.msix();
        match offset / REGION_SIZE * REGION_SIZE {
            COMMON_OFFSET => common_cfg::read(&self.core, &self.irq, offset, data),
            ISR_OFFSET if offset == ISR_OFFSET && !data.is_empty() => {
                data[0] = self.core.interrupt().take_status() as u8;
            }
            DEVICE_OFFSET => self.core.read_device_config(offset - DEVICE_OFFSET, data),
            MSIX_TABLE_OFFSET => msix.read_table(offset - MSIX_TABLE_OFFSET, data),
            MSIX_PBA_OFFSET => msix.read_pba(offset - MSIX_PBA_OFFSET, data),
            _ => {}
        }
    }

    fn write_bar(&mut self, bar: usize, offset: u64, data: &[u8]) {
        if bar != BAR_INDEX {
            return;
        }
        match offset / REGION_SIZE * REGION_SIZE {
            COMMON_OFFSET => common_cfg::write(&mut self.core, &self.irq, offset, data),
            NOTIFY_OFFSET => {
                let queue = (offset - NOTIFY_OFFSET) / u64::from(NOTIFY_MULTIPLIER);
                self.core.notify(queue as u32);
            }
            MSIX_TABLE_OFFSET => self
                .irq
                .msix()
                .write_table(offset - MSIX_TABLE_OFFSET, data),
            _ => guest_warn!("virtio-pci: write to read-only BAR 0 offset {offset:#x}"),
        }
    }

    fn ioeventfds(&self, bar: usize) -> Vec<(u64, &EventFd)> {
        if bar != BAR_INDEX {
            return Vec::new();
        }
        self.core
            .queue_evts()
            .iter()
            .enumerate()
            .map(|(i, evt)| (NOTIFY_OFFSET + i as u64 * u64::from(NOTIFY_MULTIPLIER), evt))
            .collect()
    }
}

impl VirtioTransport for VirtioPciDevice {
    fn core(&self) -> &VirtioCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut VirtioCore {
        &mut self.core
    }

    /// A machine reset: configuration space back to what the VMM assigned, MSI-X off and every
    /// vector masked, the device reset.
    fn hardware_reset(&mut self) {
        self.config = self.power_on.clone();
        self.irq.msix().reset();
        self.irq.reset_vectors();
        self.irq.set_intx_disabled(false);
        self.core.reset();
    }

    fn snapshot(&self) -> TransportSnapshot {
        let queues = self.core.queue_count();
        TransportSnapshot::Pci(Box::new(VirtioPciState {
            transport: self.core.state(),
            config_vector: self.irq.config_vector(),
            queue_vectors: (0..queues).map(|q| self.irq.queue_vector(q)).collect(),
            config: self.config.save(),
            msix: self.irq.msix().snapshot(),
        }))
    }

    fn restore(&mut self, snapshot: &TransportSnapshot) -> Result<(), RestoreTransportError> {
        let TransportSnapshot::Pci(state) = snapshot else {
            return Err(RestoreTransportError::Pci(
                "a virtio-mmio state for a virtio-pci device".into(),
            ));
        };
        if state.queue_vectors.len() != self.core.queue_count() {
            return Err(RestoreTransportError::Pci(format!(
                "{} queue vectors where the device has {} queues",
                state.queue_vectors.len(),
                self.core.queue_count()
            )));
        }
        let mut config = self.power_on.clone();
        config
            .restore(&state.config)
            .map_err(|e| RestoreTransportError::Pci(e.to_string()))?;
        let control = config.u16_at(self.msix_cap + 2);
        self.irq
            .msix()
            .restore(&state.msix, control)
            .map_err(|e| RestoreTransportError::Pci(e.to_string()))?;
        self.config = config;
        self.irq.set_config_vector(state.config_vector);
        for (queue, vector) in state.queue_vectors.iter().enumerate() {
            self.irq.set_queue_vector(queue, *vector);
        }
        self.irq
            .set_intx_disabled(self.config.command() & COMMAND_INTX_DISABLE != 0);
        self.core.restore(&state.transport)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
