//! PCI: one root bus (segment 0, bus 0) with the host bridge at 00:00.0 and up to 31 devices,
//! one function each, as a stock distro kernel expects to find them.
//!
//! How the guest reaches a device, step by step:
//!
//! 1. Configuration space, two ways to the same registers ([`bus::PciRoot`]):
//!    * port I/O: write `0x80000000 | bus << 16 | device << 11 | function << 8 | register` to
//!      CONFIG_ADDRESS (0xcf8), then read or write CONFIG_DATA (0xcfc..0xcff);
//!    * ECAM (PCIe MMCONFIG, announced in ACPI's MCFG): the 4 KiB of function `f` of device `d`
//!      on bus `b` sit at `ECAM base + (b << 20 | d << 15 | f << 12)`.
//!
//!    A function that does not exist reads as all ones (vendor 0xffff) and ignores writes.
//! 2. Each device's 256 bytes are a register file ([`config_space::ConfigSpace`]): every byte has
//!    a value and masks saying which bits the guest may write and which it clears by writing 1
//!    (status errors); everything else is read-only. The standard header comes first, then a
//!    linked list of capabilities from the pointer at 0x34 (for virtio-pci: MSI-X and the
//!    virtio structures).
//! 3. BARs: the VMM, as firmware, gives every BAR an address from the 32-bit or 64-bit window
//!    ([`allocator::BarAllocator`]) and turns memory decoding on. The guest sizes a BAR by writing
//!    all ones and reading back the size mask (the low bits are not writable), and may move it
//!    by writing another address. Whenever memory decoding or a BAR address changes, the root
//!    moves the BAR on the MMIO bus and its KVM ioeventfds ([`bus::BarMapper`]); a BAR outside
//!    the windows or over another device stays unmapped, with a warning.
//! 4. Interrupts: MSI-X ([`msix`]), vectors written by the guest into a table in a BAR and
//!    delivered through KVM irqfds with MSI routes; or the legacy INTx line, level-triggered,
//!    on the IOAPIC pin that ACPI's `_PRT` names for the slot.

pub mod allocator;
pub mod bus;
pub mod config_space;
pub mod msix;

use vmm_sys_util::eventfd::EventFd;

use config_space::ConfigSpace;

/// Slots on bus 0; slot 0 is the host bridge.
pub const SLOTS: usize = 32;
/// Devices a VM can have on PCI: every slot but the host bridge's, one function each.
pub const MAX_DEVICES: usize = SLOTS - 1;

/// A PCI function as the root bus sees it.
pub trait PciDevice: Send {
    /// The configuration space (for the root to read BAR addresses and memory decoding).
    fn config(&self) -> &ConfigSpace;
    /// The guest reads configuration space at `offset` (up to 4 KiB through ECAM).
    fn read_config(&mut self, offset: usize, data: &mut [u8]) {
        self.config().read(offset, data);
    }
    /// The guest writes configuration space at `offset`.
    fn write_config(&mut self, offset: usize, data: &[u8]);
    /// The guest reads BAR `bar` at `offset`.
    fn read_bar(&mut self, bar: usize, offset: u64, data: &mut [u8]);
    /// The guest writes BAR `bar` at `offset`.
    fn write_bar(&mut self, bar: usize, offset: u64, data: &[u8]);
    /// The eventfds KVM signals, without exiting, for writes of any width at these offsets of
    /// BAR `bar` (virtio-pci's queue notify addresses).
    fn ioeventfds(&self, _bar: usize) -> Vec<(u64, &EventFd)> {
        Vec::new()
    }
}
