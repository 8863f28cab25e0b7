//! The PCI root bus: the host bridge at 00:00.0 and a device per slot, configuration space
//! through port I/O (CONFIG_ADDRESS 0xcf8, CONFIG_DATA 0xcfc) and ECAM, and each device's BARs
//! kept mapped where its configuration says (see the module docs of [`super`]).
//!
//! After every configuration write the root compares, BAR by BAR, where the BAR should be
//! (memory decoding on, the address inside a window) with where it is, and moves it with the
//! [`BarMapper`]: off the MMIO bus and its ioeventfds unregistered at the old address, onto the
//! bus and registered at the new one. While the guest sizes a BAR it turns decoding off first,
//! so the all-ones value is never mapped.

use std::sync::{Arc, Mutex};

use vmm_sys_util::eventfd::EventFd;

use super::allocator::Window;
use super::config_space::{ConfigSpace, PciHeader, BARS, COMMAND_MEMORY, HEADER_TYPE};
use super::{PciDevice, SLOTS};
use crate::devices::bus::{BusDevice, SharedDevice};

/// Red Hat's vendor id and its PCIe host bridge (what QEMU's generic host bridge reports).
const HOST_BRIDGE_VENDOR: u16 = 0x1b36;
const HOST_BRIDGE_DEVICE: u16 = 0x0008;
/// Class 06.00.00: host bridge.
const CLASS_HOST_BRIDGE: (u8, u8, u8) = (0x06, 0x00, 0x00);
/// Bytes of configuration space per function through ECAM.
const ECAM_FUNCTION_SIZE: usize = 4096;
const CONFIG_ADDRESS_ENABLE: u32 = 1 << 31;

/// Moving a BAR failed.
#[derive(Debug, thiserror::Error)]
pub enum MapBarError {
    #[error("place the BAR on the MMIO bus")]
    Bus(#[source] crate::devices::bus::BusError),
    #[error("register an ioeventfd at {0:#x}")]
    Ioevent(u64, #[source] std::io::Error),
    #[error("the VM is gone")]
    VmGone,
}

/// Where BARs live: the MMIO bus and KVM's ioeventfds (a fake in tests).
pub trait BarMapper: Send + Sync {
    fn map(&self, region: SharedDevice, base: u64, len: u64) -> Result<(), MapBarError>;
    fn unmap(&self, base: u64);
    fn register_ioevent(&self, evt: &EventFd, addr: u64) -> Result<(), MapBarError>;
    fn unregister_ioevent(&self, evt: &EventFd, addr: u64);
}

/// The host bridge: identity only, no BARs or interrupts.
pub struct HostBridge {
    config: ConfigSpace,
}

impl HostBridge {
    pub fn new() -> Self {
        HostBridge {
            config: ConfigSpace::new(&PciHeader {
                vendor_id: HOST_BRIDGE_VENDOR,
                device_id: HOST_BRIDGE_DEVICE,
                revision_id: 0,
                class: CLASS_HOST_BRIDGE,
                subsystem_vendor_id: 0,
                subsystem_id: 0,
                interrupt_pin: None,
            }),
        }
    }
}

impl Default for HostBridge {
    fn default() -> Self {
        HostBridge::new()
    }
}

impl PciDevice for HostBridge {
    fn config(&self) -> &ConfigSpace {
        &self.config
    }
    fn write_config(&mut self, offset: usize, data: &[u8]) {
        self.config.write(offset, data);
    }
    fn read_bar(&mut self, _bar: usize, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }
    fn write_bar(&mut self, _bar: usize, _offset: u64, _data: &[u8]) {}
}

/// A shared PCI function.
pub type SharedPciDevice = Arc<Mutex<dyn PciDevice>>;

/// One BAR of a device on the MMIO bus.
struct BarRegion {
    device: SharedPciDevice,
    bar: usize,
}

impl BusDevice for BarRegion {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        lock(&self.device).read_bar(self.bar, offset, data);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        lock(&self.device).write_bar(self.bar, offset, data);
    }
}

fn lock(device: &SharedPciDevice) -> std::sync::MutexGuard<'_, dyn PciDevice + 'static> {
    device.lock().unwrap_or_else(crate::poison::fatal)
}

struct Slot {
    device: SharedPciDevice,
    /// Where each BAR is mapped now.
    mapped: [Option<u64>; BARS],
}

/// Adding a device failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("all {SLOTS} PCI slots are taken")]
pub struct SlotsFull;

/// The root bus.
pub struct PciRoot {
    slots: Vec<Option<Slot>>,
    mapper: Arc<dyn BarMapper>,
    windows: Vec<Window>,
}

impl PciRoot {
    /// A bus with the host bridge in slot 0; BARs may live in `windows`.
    pub fn new(mapper: Arc<dyn BarMapper>, windows: Vec<Window>) -> Self {
        let mut root = PciRoot {
            slots: (0..SLOTS).map(|_| None).collect(),
            mapper,
            windows,
        };
        root.slots[0] = Some(Slot {
            device: Arc::new(Mutex::new(HostBridge::new())),
            mapped: [None; BARS],
        });
        root
    }

    /// The first free slot.
    pub fn next_slot(&self) -> Result<u8, SlotsFull> {
        self.slots
            .iter()
            .position(Option::is_none)
            .map(|s| s as u8)
            .ok_or(SlotsFull)
    }

    /// Puts `device` in slot `slot` (from [`PciRoot::next_slot`]); its BARs are mapped by the
    /// next [`PciRoot::sync_all`].
    pub fn add(&mut self, slot: u8, device: SharedPciDevice) -> Result<(), SlotsFull> {
        match self.slots.get_mut(usize::from(slot)) {
            Some(free @ None) => {
                *free = Some(Slot {
                    device,
                    mapped: [None; BARS],
                });
                Ok(())
            }
            _ => Err(SlotsFull),
        }
    }

    /// The host bridge's configuration space values (for live migration).
    pub fn host_bridge_state(&self) -> Vec<u8> {
        self.slots[0]
            .as_ref()
            .map(|s| lock(&s.device).config().save())
            .unwrap_or_default()
    }

    /// Restores the host bridge's guest-writable registers.
    pub fn restore_host_bridge(&mut self, saved: &[u8]) -> Result<(), String> {
        let mut bridge = HostBridge::new();
        bridge.config.restore(saved).map_err(|e| e.to_string())?;
        if let Some(slot) = self.slots[0].as_mut() {
            slot.device = Arc::new(Mutex::new(bridge));
        }
        Ok(())
    }

    /// The host bridge back to its power-on state (a machine reset).
    pub fn reset_host_bridge(&mut self) {
        if let Some(slot) = self.slots[0].as_mut() {
            slot.device = Arc::new(Mutex::new(HostBridge::new()));
        }
    }

    fn device(&self, bus: u8, device: u8, function: u8) -> Option<&Slot> {
        if bus != 0 || function != 0 {
            return None;
        }
        self.slots.get(usize::from(device))?.as_ref()
    }

    /// A configuration read of function `bus:device.function` at `offset`.
    pub fn config_read(&self, bus: u8, device: u8, function: u8, offset: usize, data: &mut [u8]) {
        match self.device(bus, device, function) {
            Some(slot) if offset < ECAM_FUNCTION_SIZE => {
                let mut device = lock(&slot.device);
                device.read_config(offset, data);
                if offset <= HEADER_TYPE && HEADER_TYPE < offset + data.len() {
                    // Single-function devices: functions 1..7 are never probed.
                    data[HEADER_TYPE - offset] &= 0x7f;
                }
            }
            _ => data.fill(0xff),
        }
    }

    /// A configuration write; BARs follow what it changed.
    pub fn config_write(&mut self, bus: u8, device: u8, function: u8, offset: usize, data: &[u8]) {
        let Some(slot) = self.device(bus, device, function) else {
            return;
        };
        if offset >= ECAM_FUNCTION_SIZE {
            return;
        }
        lock(&slot.device).write_config(offset, data);
        self.sync_slot(usize::from(device));
    }

    /// Maps every device's BARs where their configuration says (after build, a restore or a
    /// reset).
    pub fn sync_all(&mut self) {
        for slot in 0..SLOTS {
            self.sync_slot(slot);
        }
    }

    fn sync_slot(&mut self, index: usize) {
        let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) else {
            return;
        };
        let device = slot.device.clone();
        let device = lock(&device);
        let memory_on = device.config().command() & COMMAND_MEMORY != 0;
        for (bar, info, address) in device.config().bars().collect::<Vec<_>>() {
            let inside = self.windows.iter().any(|w| w.holds(address, info.size));
            let wanted = (memory_on && inside).then_some(address);
            if slot.mapped[bar] == wanted {
                continue;
            }
            if let Some(old) = slot.mapped[bar].take() {
                for (offset, evt) in device.ioeventfds(bar) {
                    self.mapper.unregister_ioevent(evt, old + offset);
                }
                self.mapper.unmap(old);
            }
            if memory_on && !inside {
                guest_warn!(
                    "pci: 00:{index:02x}.0 BAR {bar} at {address:#x} (+{:#x}) is outside the \
                     PCI windows: left unmapped",
                    info.size
                );
            }
            let Some(new) = wanted else { continue };
            let region = Arc::new(Mutex::new(BarRegion {
                device: slot.device.clone(),
                bar,
            }));
            if let Err(e) = self.mapper.map(region, new, info.size) {
                guest_warn!("pci: 00:{index:02x}.0 BAR {bar} at {new:#x}: {e}; left unmapped");
                continue;
            }
            slot.mapped[bar] = Some(new);
            for (offset, evt) in device.ioeventfds(bar) {
                if let Err(e) = self.mapper.register_ioevent(evt, new + offset) {
                    guest_warn!("pci: 00:{index:02x}.0 BAR {bar}: {e}");
                }
            }
        }
    }

    /// Where BAR `bar` of the device in `slot` is mapped (for tests and diagnostics).
    pub fn mapped_bar(&self, slot: u8, bar: usize) -> Option<u64> {
        self.slots
            .get(usize::from(slot))?
            .as_ref()?
            .mapped
            .get(bar)
            .copied()
            .flatten()
    }
}

fn lock_root(root: &Mutex<PciRoot>) -> std::sync::MutexGuard<'_, PciRoot> {
    root.lock().unwrap_or_else(crate::poison::fatal)
}

/// CONFIG_ADDRESS (0xcf8) and CONFIG_DATA (0xcfc), on the port I/O bus at 0xcf8, 8 ports.
pub struct PciConfigIo {
    root: Arc<Mutex<PciRoot>>,
    address: u32,
}

impl PciConfigIo {
    pub fn new(root: Arc<Mutex<PciRoot>>) -> Self {
        PciConfigIo { root, address: 0 }
    }

    /// The function and register CONFIG_ADDRESS selects, plus `byte` (0..3 into CONFIG_DATA).
    fn target(&self, byte: u64) -> Option<(u8, u8, u8, usize)> {
        if self.address & CONFIG_ADDRESS_ENABLE == 0 {
            return None;
        }
        let bus = (self.address >> 16) as u8;
        let device = ((self.address >> 11) & 0x1f) as u8;
        let function = ((self.address >> 8) & 0x7) as u8;
        let register = (self.address & 0xfc) as usize + byte as usize;
        Some((bus, device, function, register))
    }
}

impl BusDevice for PciConfigIo {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset < 4 {
            let bytes = self.address.to_le_bytes();
            for (i, b) in data.iter_mut().enumerate() {
                *b = bytes.get(offset as usize + i).copied().unwrap_or(0xff);
            }
            return;
        }
        match self.target(offset - 4) {
            Some((bus, device, function, register)) => {
                lock_root(&self.root).config_read(bus, device, function, register, data)
            }
            None => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset < 4 {
            // Byte writes too: Linux's type 1 probe writes 0xcfb alone.
            let mut bytes = self.address.to_le_bytes();
            for (i, b) in data.iter().enumerate() {
                if let Some(slot) = bytes.get_mut(offset as usize + i) {
                    *slot = *b;
                }
            }
            self.address = u32::from_le_bytes(bytes);
            return;
        }
        if let Some((bus, device, function, register)) = self.target(offset - 4) {
            lock_root(&self.root).config_write(bus, device, function, register, data);
        }
    }
}

/// The ECAM window on the MMIO bus: function `b:d.f` at `b << 20 | d << 15 | f << 12`.
pub struct PciConfigMmio {
    root: Arc<Mutex<PciRoot>>,
}

impl PciConfigMmio {
    pub fn new(root: Arc<Mutex<PciRoot>>) -> Self {
        PciConfigMmio { root }
    }
}

fn ecam_target(offset: u64) -> (u8, u8, u8, usize) {
    (
        (offset >> 20) as u8,
        ((offset >> 15) & 0x1f) as u8,
        ((offset >> 12) & 0x7) as u8,
        (offset & 0xfff) as usize,
    )
}

impl BusDevice for PciConfigMmio {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let (bus, device, function, register) = ecam_target(offset);
        lock_root(&self.root).config_read(bus, device, function, register, data);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let (bus, device, function, register) = ecam_target(offset);
        lock_root(&self.root).config_write(bus, device, function, register, data);
    }
}

#[cfg(test)]
#[path = "bus_tests.rs"]
mod tests;
