//! An address bus: devices registered on non-overlapping ranges; an access is routed to the
//! device whose range holds it, with the offset inside that range. The vCPU loop owns one bus
//! for port I/O and one for MMIO and only routes exits to them.
//!
//! Devices can come and go while the VM runs (a PCI BAR the guest moves is removed at its old
//! address and inserted at the new one), so the map sits behind a lock. The lock is held only to
//! find the device: the access itself runs with the map unlocked, so a device may change the
//! bus it sits on (a PCI configuration write through ECAM that moves a BAR).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

/// A device on a bus. Accesses carry the offset from the device's base.
pub trait BusDevice: Send {
    fn read(&mut self, offset: u64, data: &mut [u8]);
    fn write(&mut self, offset: u64, data: &[u8]);
}

/// Registering a device failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BusError {
    #[error("range {base:#x}+{len:#x} is empty or overlaps another device")]
    Overlap { base: u64, len: u64 },
}

/// A device as the bus holds it.
pub type SharedDevice = Arc<Mutex<dyn BusDevice>>;

/// Devices by base address.
#[derive(Default)]
pub struct Bus {
    devices: RwLock<BTreeMap<u64, (u64, SharedDevice)>>,
}

impl Bus {
    pub fn new() -> Self {
        Bus::default()
    }

    /// Registers `device` at `base..base + len`.
    pub fn insert(&self, device: SharedDevice, base: u64, len: u64) -> Result<(), BusError> {
        let overlap = || BusError::Overlap { base, len };
        let end = base
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or_else(overlap)?;
        let mut devices = self.devices.write().unwrap_or_else(crate::poison::fatal);
        if let Some((prev_base, (prev_len, _))) = devices.range(..end).next_back() {
            if prev_base + prev_len > base {
                return Err(overlap());
            }
        }
        devices.insert(base, (len, device));
        Ok(())
    }

    /// Removes the device registered at `base`; returns whether there was one.
    pub fn remove(&self, base: u64) -> bool {
        self.devices
            .write()
            .unwrap_or_else(crate::poison::fatal)
            .remove(&base)
            .is_some()
    }

    fn find(&self, addr: u64) -> Option<(u64, SharedDevice)> {
        let devices = self.devices.read().unwrap_or_else(crate::poison::fatal);
        let (base, (len, device)) = devices.range(..=addr).next_back()?;
        (addr - base < *len).then(|| (addr - base, device.clone()))
    }

    /// Routes a read; returns false when no device is there.
    pub fn read(&self, addr: u64, data: &mut [u8]) -> bool {
        match self.find(addr) {
            Some((offset, device)) => {
                device
                    .lock()
                    .unwrap_or_else(crate::poison::fatal)
                    .read(offset, data);
                true
            }
            None => false,
        }
    }

    /// Routes a write; returns false when no device is there.
    pub fn write(&self, addr: u64, data: &[u8]) -> bool {
        match self.find(addr) {
            Some((offset, device)) => {
                device
                    .lock()
                    .unwrap_or_else(crate::poison::fatal)
                    .write(offset, data);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo(u8);
    impl BusDevice for Echo {
        fn read(&mut self, offset: u64, data: &mut [u8]) {
            data.fill(self.0.wrapping_add(offset as u8));
        }
        fn write(&mut self, _offset: u64, data: &[u8]) {
            self.0 = data[0];
        }
    }

    #[test]
    fn routing_and_overlaps() {
        let bus = Bus::new();
        bus.insert(Arc::new(Mutex::new(Echo(10))), 0x100, 0x10)
            .unwrap();
        assert!(bus.insert(Arc::new(Mutex::new(Echo(0))), 0x108, 4).is_err());
        assert!(bus.insert(Arc::new(Mutex::new(Echo(0))), 0xf8, 9).is_err());
        assert!(bus.insert(Arc::new(Mutex::new(Echo(0))), 0xf8, 0).is_err());
        assert!(bus
            .insert(Arc::new(Mutex::new(Echo(0))), u64::MAX, 2)
            .is_err());
        bus.insert(Arc::new(Mutex::new(Echo(20))), 0x110, 0x10)
            .unwrap();
        let mut b = [0u8; 1];
        assert!(bus.read(0x102, &mut b));
        assert_eq!(b[0], 12);
        assert!(bus.write(0x110, &[5]));
        assert!(bus.read(0x111, &mut b));
        assert_eq!(b[0], 6);
        assert!(!bus.read(0x120, &mut b));
        assert!(!bus.write(0x0, &b));
    }

    #[test]
    fn a_removed_device_leaves_its_range_free() {
        let bus = Bus::new();
        let device: SharedDevice = Arc::new(Mutex::new(Echo(1)));
        bus.insert(device.clone(), 0x1000, 0x100).unwrap();
        assert!(bus.remove(0x1000));
        assert!(!bus.remove(0x1000));
        let mut b = [0u8; 1];
        assert!(!bus.read(0x1000, &mut b));
        bus.insert(device, 0x2000, 0x100).unwrap();
        assert!(bus.read(0x2001, &mut b));
        assert_eq!(b[0], 2);
    }

    /// A device that moves itself on the bus while it handles an access (an ECAM write that
    /// relocates a BAR) must not deadlock.
    #[test]
    fn a_device_can_change_its_own_bus_during_an_access() {
        struct Mover(std::sync::Weak<Bus>);
        impl BusDevice for Mover {
            fn read(&mut self, _offset: u64, data: &mut [u8]) {
                data.fill(7);
            }
            fn write(&mut self, _offset: u64, _data: &[u8]) {
                let bus = self.0.upgrade().unwrap();
                bus.insert(Arc::new(Mutex::new(Echo(30))), 0x9000, 0x10)
                    .unwrap();
            }
        }
        let bus = Arc::new(Bus::new());
        bus.insert(
            Arc::new(Mutex::new(Mover(Arc::downgrade(&bus)))),
            0x100,
            0x10,
        )
        .unwrap();
        assert!(bus.write(0x100, &[1]));
        let mut b = [0u8; 1];
        assert!(bus.read(0x9000, &mut b));
        assert_eq!(b[0], 30);
    }
}
