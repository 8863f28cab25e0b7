//! BAR addresses: the VMM, as firmware, hands out naturally aligned ranges from the two PCI
//! memory windows, the 32-bit one in the MMIO gap below 4 GiB and the 64-bit one above RAM.
//! Allocation only moves forward (BARs are assigned once, at build).

use super::config_space::BarKind;

/// An address range `[start, end)` BARs may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub end: u64,
}

impl Window {
    /// Whether `[address, address + size)` lies inside the window.
    pub fn holds(&self, address: u64, size: u64) -> bool {
        address >= self.start && address.checked_add(size).is_some_and(|end| end <= self.end)
    }
}

/// No room left for a BAR.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("no room for a {kind:?} BAR of {size:#x} bytes in {window:#x?}")]
pub struct AllocError {
    pub kind: BarKind,
    pub size: u64,
    pub window: Window,
}

/// Hands out BAR addresses from the 32-bit and 64-bit windows.
#[derive(Clone, Debug)]
pub struct BarAllocator {
    mmio32: Window,
    next32: u64,
    mmio64: Window,
    next64: u64,
}

impl BarAllocator {
    pub fn new(mmio32: Window, mmio64: Window) -> Self {
        BarAllocator {
            mmio32,
            next32: mmio32.start,
            mmio64,
            next64: mmio64.start,
        }
    }

    /// The windows, for the host bridge's resources (ACPI `_CRS`) and to check guest-moved BARs.
    pub fn windows(&self) -> [Window; 2] {
        [self.mmio32, self.mmio64]
    }

    /// A `size`-aligned range of `size` bytes (a power of two) for a BAR of `kind`: 32-bit BARs
    /// from the 32-bit window, 64-bit ones from the 64-bit window.
    pub fn allocate(&mut self, kind: BarKind, size: u64) -> Result<u64, AllocError> {
        let (window, next) = match kind {
            BarKind::Memory32 => (self.mmio32, &mut self.next32),
            BarKind::Memory64 => (self.mmio64, &mut self.next64),
        };
        let error = AllocError { kind, size, window };
        if !size.is_power_of_two() {
            return Err(error);
        }
        let address = next.checked_next_multiple_of(size).ok_or(error.clone())?;
        if !window.holds(address, size) {
            return Err(error);
        }
        *next = address + size;
        Ok(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_are_aligned_and_stay_in_their_window() {
        let mut allocator = BarAllocator::new(
            Window {
                start: 0xd100_0000,
                end: 0xd101_0000,
            },
            Window {
                start: 0x1_4000_1000,
                end: 0x1_8000_0000,
            },
        );
        assert_eq!(
            allocator.allocate(BarKind::Memory32, 0x1000),
            Ok(0xd100_0000)
        );
        assert_eq!(
            allocator.allocate(BarKind::Memory32, 0x8000),
            Ok(0xd100_8000)
        );
        let full = allocator.allocate(BarKind::Memory32, 0x100).unwrap_err();
        assert_eq!(full.size, 0x100, "the 32-bit window is full");
        assert_eq!(
            allocator.allocate(BarKind::Memory64, 0x8000),
            Ok(0x1_4000_8000),
            "aligned up from the window's start"
        );
        assert_eq!(
            allocator.allocate(BarKind::Memory64, 0x1000),
            Ok(0x1_4001_0000)
        );
        assert!(
            allocator.allocate(BarKind::Memory64, 0x3000).is_err(),
            "not a power of two"
        );
        assert!(allocator.allocate(BarKind::Memory64, 1 << 40).is_err());
        let [w32, w64] = allocator.windows();
        assert!(w32.holds(0xd100_0000, 0x1_0000));
        assert!(!w32.holds(0xd100_0000, 0x1_0001));
        assert!(!w64.holds(u64::MAX, 2));
    }
}
