//! A type 0 configuration space as a register file: 256 bytes of values and, per byte, which
//! bits the guest may write and which it clears by writing 1. Everything the guest may do to it
//! follows from the masks:
//!
//! * read-only registers (ids, class, capability bodies the device owns) ignore writes;
//! * status error bits are write-1-to-clear;
//! * a BAR's low bits (size - 1, type flags) are read-only, so writing all ones and reading
//!   back yields the size mask (BAR sizing), and writing an address moves the BAR (aligned to
//!   its size by the same mask);
//! * capabilities are linked from the pointer at 0x34, each `[id, next, body...]` at a 4-byte
//!   aligned offset from 0x40 on; the device says which body bits are writable.
//!
//! The extended space past 256 bytes (reachable through ECAM) reads as zero: no extended
//! capabilities.

/// Bytes of the conventional configuration space.
pub const CONFIG_SPACE_SIZE: usize = 256;

pub const VENDOR_ID: usize = 0x00;
pub const DEVICE_ID: usize = 0x02;
pub const COMMAND: usize = 0x04;
pub const STATUS: usize = 0x06;
pub const REVISION_ID: usize = 0x08;
pub const CLASS_CODE: usize = 0x09;
pub const CACHE_LINE_SIZE: usize = 0x0c;
pub const LATENCY_TIMER: usize = 0x0d;
pub const HEADER_TYPE: usize = 0x0e;
pub const BAR0: usize = 0x10;
pub const SUBSYSTEM_VENDOR_ID: usize = 0x2c;
pub const SUBSYSTEM_ID: usize = 0x2e;
pub const CAPABILITIES_POINTER: usize = 0x34;
pub const INTERRUPT_LINE: usize = 0x3c;
pub const INTERRUPT_PIN: usize = 0x3d;

pub const COMMAND_IO: u16 = 1 << 0;
pub const COMMAND_MEMORY: u16 = 1 << 1;
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
pub const COMMAND_PARITY: u16 = 1 << 6;
pub const COMMAND_SERR: u16 = 1 << 8;
pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
/// The command bits a guest may change (no I/O BARs here: I/O decoding stays off).
const COMMAND_WRITABLE: u16 =
    COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_PARITY | COMMAND_SERR | COMMAND_INTX_DISABLE;
pub const STATUS_CAP_LIST: u16 = 1 << 4;
/// Status error bits, write-1-to-clear.
const STATUS_W1C: u16 = 0xf900;

/// BARs of a type 0 header.
pub const BARS: usize = 6;
const FIRST_CAPABILITY: usize = 0x40;
const BAR_MEMORY_64: u32 = 0b10 << 1;
const BAR_PREFETCHABLE: u32 = 1 << 3;

/// What identifies a function: the header fields the device fixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciHeader {
    pub vendor_id: u16,
    pub device_id: u16,
    pub revision_id: u8,
    /// Base class, sub-class, programming interface.
    pub class: (u8, u8, u8),
    pub subsystem_vendor_id: u16,
    pub subsystem_id: u16,
    /// INTA# (1) for a device with an INTx line; `None` for none (the host bridge).
    pub interrupt_pin: Option<u8>,
}

/// A memory BAR's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarKind {
    /// 32-bit address, one BAR register.
    Memory32,
    /// 64-bit address, two BAR registers (this one and the next).
    Memory64,
}

/// A memory BAR: its type and size (a power of two of at least 16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bar {
    pub kind: BarKind,
    pub size: u64,
    pub prefetchable: bool,
}

/// A BAR or capability that does not fit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigSpaceError {
    #[error("BAR {index}: size {size:#x} is not a power of two of at least 16 bytes")]
    BarSize { index: usize, size: u64 },
    #[error(
        "BAR {index}: address {address:#x} is not aligned to its size or does not fit its type"
    )]
    BarAddress { index: usize, address: u64 },
    #[error("BAR {0} is taken or past the last BAR")]
    BarIndex(usize),
    #[error("a capability of {0} bytes does not fit")]
    CapabilityTooLarge(usize),
    #[error("a saved configuration space has {0} bytes")]
    SavedLength(usize),
    #[error("the saved configuration space differs from this device in read-only byte {0:#x}")]
    SavedReadOnly(usize),
}

/// A function's configuration space.
#[derive(Clone, Debug)]
pub struct ConfigSpace {
    regs: [u8; CONFIG_SPACE_SIZE],
    writable: [u8; CONFIG_SPACE_SIZE],
    w1c: [u8; CONFIG_SPACE_SIZE],
    bars: [Option<Bar>; BARS],
    next_capability: usize,
    last_capability: Option<usize>,
}

impl ConfigSpace {
    /// A type 0 header with `header`'s identity, memory decoding on (the VMM is the firmware
    /// that assigned the BARs) and no BARs or capabilities yet.
    pub fn new(header: &PciHeader) -> Self {
        let mut space = ConfigSpace {
            regs: [0; CONFIG_SPACE_SIZE],
            writable: [0; CONFIG_SPACE_SIZE],
            w1c: [0; CONFIG_SPACE_SIZE],
            bars: [None; BARS],
            next_capability: FIRST_CAPABILITY,
            last_capability: None,
        };
        space.set_u16(VENDOR_ID, header.vendor_id);
        space.set_u16(DEVICE_ID, header.device_id);
        space.set_u16(COMMAND, COMMAND_MEMORY);
        space.regs[REVISION_ID] = header.revision_id;
        let (base, sub, prog_if) = header.class;
        space.regs[CLASS_CODE] = prog_if;
        space.regs[CLASS_CODE + 1] = sub;
        space.regs[CLASS_CODE + 2] = base;
        space.set_u16(SUBSYSTEM_VENDOR_ID, header.subsystem_vendor_id);
        space.set_u16(SUBSYSTEM_ID, header.subsystem_id);
        space.set_mask(COMMAND, &COMMAND_WRITABLE.to_le_bytes());
        space.w1c[STATUS..STATUS + 2].copy_from_slice(&STATUS_W1C.to_le_bytes());
        space.writable[CACHE_LINE_SIZE] = 0xff;
        space.writable[LATENCY_TIMER] = 0xff;
        if let Some(pin) = header.interrupt_pin {
            space.regs[INTERRUPT_PIN] = pin;
            space.writable[INTERRUPT_LINE] = 0xff;
        }
        space
    }

    fn set_mask(&mut self, offset: usize, mask: &[u8]) {
        self.writable[offset..offset + mask.len()].copy_from_slice(mask);
    }

    /// Sets a register as the device (not the guest): masks do not apply.
    pub fn set_u8(&mut self, offset: usize, value: u8) {
        if let Some(byte) = self.regs.get_mut(offset) {
            *byte = value;
        }
    }

    /// Sets a 16-bit register as the device.
    pub fn set_u16(&mut self, offset: usize, value: u16) {
        self.set_bytes(offset, &value.to_le_bytes());
    }

    /// Sets a 32-bit register as the device.
    pub fn set_u32(&mut self, offset: usize, value: u32) {
        self.set_bytes(offset, &value.to_le_bytes());
    }

    fn set_bytes(&mut self, offset: usize, bytes: &[u8]) {
        if let Some(regs) = self.regs.get_mut(offset..offset + bytes.len()) {
            regs.copy_from_slice(bytes);
        }
    }

    pub fn u8_at(&self, offset: usize) -> u8 {
        self.regs.get(offset).copied().unwrap_or(0)
    }

    pub fn u16_at(&self, offset: usize) -> u16 {
        let mut bytes = [0u8; 2];
        self.read(offset, &mut bytes);
        u16::from_le_bytes(bytes)
    }

    pub fn u32_at(&self, offset: usize) -> u32 {
        let mut bytes = [0u8; 4];
        self.read(offset, &mut bytes);
        u32::from_le_bytes(bytes)
    }

    pub fn command(&self) -> u16 {
        self.u16_at(COMMAND)
    }

    /// The guest reads `data.len()` bytes at `offset`; bytes past the 256 read as zero.
    pub fn read(&self, offset: usize, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            *byte = offset
                .checked_add(i)
                .and_then(|o| self.regs.get(o))
                .copied()
                .unwrap_or(0);
        }
    }

    /// The guest writes `data` at `offset`: writable bits take the new value, write-1-to-clear
    /// bits written as 1 clear, everything else stays.
    pub fn write(&mut self, offset: usize, data: &[u8]) {
        for (i, value) in data.iter().enumerate() {
            let Some(o) = offset.checked_add(i).filter(|o| *o < CONFIG_SPACE_SIZE) else {
                break;
            };
            let writable = self.writable[o];
            let cleared = value & self.w1c[o];
            self.regs[o] = ((self.regs[o] & !writable) | (value & writable)) & !cleared;
        }
    }

    /// Declares BAR `index` at `address`: its size and type bits become read-only.
    pub fn add_bar(
        &mut self,
        index: usize,
        bar: Bar,
        address: u64,
    ) -> Result<(), ConfigSpaceError> {
        let registers = match bar.kind {
            BarKind::Memory32 => 1,
            BarKind::Memory64 => 2,
        };
        if index + registers > BARS || (index..index + registers).any(|i| self.taken(i)) {
            return Err(ConfigSpaceError::BarIndex(index));
        }
        if !bar.size.is_power_of_two() || bar.size < 16 {
            return Err(ConfigSpaceError::BarSize {
                index,
                size: bar.size,
            });
        }
        let fits = match bar.kind {
            BarKind::Memory32 => address
                .checked_add(bar.size)
                .is_some_and(|end| end <= 1 << 32),
            BarKind::Memory64 => address.checked_add(bar.size).is_some(),
        };
        if address % bar.size != 0 || !fits {
            return Err(ConfigSpaceError::BarAddress { index, address });
        }
        let mut flags = 0;
        if bar.kind == BarKind::Memory64 {
            flags |= BAR_MEMORY_64;
        }
        if bar.prefetchable {
            flags |= BAR_PREFETCHABLE;
        }
        let mask = !(bar.size - 1);
        let low = BAR0 + 4 * index;
        self.set_u32(low, (address as u32 & 0xffff_fff0) | flags);
        self.set_mask(low, &((mask as u32) & 0xffff_fff0).to_le_bytes());
        if bar.kind == BarKind::Memory64 {
            self.set_u32(low + 4, (address >> 32) as u32);
            self.set_mask(low + 4, &((mask >> 32) as u32).to_le_bytes());
        }
        self.bars[index] = Some(bar);
        Ok(())
    }

    /// Whether BAR register `index` is used (by a BAR or as the upper half of a 64-bit one).
    fn taken(&self, index: usize) -> bool {
        self.bars[index].is_some()
            || (index > 0 && self.bars[index - 1].is_some_and(|b| b.kind == BarKind::Memory64))
    }

    /// BAR `index` and the address the guest (or the VMM) programmed in it.
    pub fn bar(&self, index: usize) -> Option<(Bar, u64)> {
        let bar = (*self.bars.get(index)?)?;
        let low = BAR0 + 4 * index;
        let mut address = u64::from(self.u32_at(low) & 0xffff_fff0);
        if bar.kind == BarKind::Memory64 {
            address |= u64::from(self.u32_at(low + 4)) << 32;
        }
        Some((bar, address))
    }

    /// Every BAR with its index and current address.
    pub fn bars(&self) -> impl Iterator<Item = (usize, Bar, u64)> + '_ {
        (0..BARS).filter_map(|i| self.bar(i).map(|(bar, address)| (i, bar, address)))
    }

    /// Appends capability `id` with `body` (the bytes after id and next) and the body bits the
    /// guest may write; returns its offset.
    pub fn add_capability(
        &mut self,
        id: u8,
        body: &[u8],
        writable: &[u8],
    ) -> Result<usize, ConfigSpaceError> {
        let offset = self.next_capability;
        let len = 2 + body.len();
        if writable.len() > body.len() || offset + len > CONFIG_SPACE_SIZE {
            return Err(ConfigSpaceError::CapabilityTooLarge(len));
        }
        self.regs[offset] = id;
        self.regs[offset + 1] = 0;
        self.regs[offset + 2..offset + len].copy_from_slice(body);
        self.set_mask(offset + 2, writable);
        match self.last_capability {
            Some(last) => self.regs[last + 1] = offset as u8,
            None => {
                self.regs[CAPABILITIES_POINTER] = offset as u8;
                let status = self.u16_at(STATUS) | STATUS_CAP_LIST;
                self.set_u16(STATUS, status);
            }
        }
        self.last_capability = Some(offset);
        self.next_capability = (offset + len).next_multiple_of(4);
        Ok(offset)
    }

    /// The capability list as a driver walks it: `(id, offset)` from the pointer at 0x34,
    /// stopping at a loop or a pointer outside the space.
    pub fn capabilities(&self) -> Vec<(u8, usize)> {
        let mut found = Vec::new();
        if self.u16_at(STATUS) & STATUS_CAP_LIST == 0 {
            return found;
        }
        let mut next = usize::from(self.regs[CAPABILITIES_POINTER] & 0xfc);
        while next >= FIRST_CAPABILITY && found.len() < CONFIG_SPACE_SIZE / 4 {
            if found.iter().any(|(_, o)| *o == next) {
                break;
            }
            found.push((self.regs[next], next));
            next = usize::from(self.regs[next + 1] & 0xfc);
        }
        found
    }

    /// The register values (for live migration).
    pub fn save(&self) -> Vec<u8> {
        self.regs.to_vec()
    }

    /// Takes over saved register values; they must be of a device laid out like this one (the
    /// same read-only bytes).
    pub fn restore(&mut self, saved: &[u8]) -> Result<(), ConfigSpaceError> {
        let saved: &[u8; CONFIG_SPACE_SIZE] = saved
            .try_into()
            .map_err(|_| ConfigSpaceError::SavedLength(saved.len()))?;
        for (o, (new, old)) in saved.iter().zip(&self.regs).enumerate() {
            let fixed = !self.writable[o] & !self.w1c[o];
            if new & fixed != old & fixed {
                return Err(ConfigSpaceError::SavedReadOnly(o));
            }
        }
        self.regs = *saved;
        Ok(())
    }
}

#[cfg(test)]
#[path = "config_space_tests.rs"]
mod tests;
