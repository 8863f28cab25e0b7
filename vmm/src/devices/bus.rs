//! An address bus: devices registered on non-overlapping ranges; an access is routed to the
//! device whose range holds it, with the offset inside that range. The vCPU loop owns one bus
//! for port I/O and one for MMIO and only routes exits to them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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

type SharedDevice = Arc<Mutex<dyn BusDevice>>;

/// Devices by base address.
#[derive(Default)]
pub struct Bus {
    devices: BTreeMap<u64, (u64, SharedDevice)>,
}

impl Bus {
    pub fn new() -> Self {
        Bus::default()
    }

    /// Registers `device` at `base..base + len`.
    pub fn insert(&mut self, device: SharedDevice, base: u64, len: u64) -> Result<(), BusError> {
        let overlap = || BusError::Overlap { base, len };
        let end = base
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or_else(overlap)?;
        if let Some((prev_base, (prev_len, _))) = self.devices.range(..end).next_back() {
            if prev_base + prev_len > base {
                return Err(overlap());
            }
        }
        self.devices.insert(base, (len, device));
        Ok(())
    }

    fn find(&self, addr: u64) -> Option<(u64, &SharedDevice)> {
        let (base, (len, device)) = self.devices.range(..=addr).next_back()?;
        (addr - base < *len).then_some((addr - base, device))
    }

    /// Routes a read; returns false when no device is there.
    pub fn read(&self, addr: u64, data: &mut [u8]) -> bool {
        match self.find(addr) {
            Some((offset, device)) => {
                device
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
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
                    .unwrap_or_else(|e| e.into_inner())
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
        let mut bus = Bus::new();
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
}
