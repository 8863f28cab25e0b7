//! x86_64 boot state: the guest physical memory layout and what a vCPU needs to start in long
//! mode (page tables, GDT, CPUID, MSRs, the Linux zero page).
//!
//! Guest physical layout:
//!
//! | range | what |
//! |---|---|
//! | `0x500..0x520` | GDT (null, code64 0x08, data 0x10, TSS 0x18) |
//! | `0x520..0x528` | IDT (empty) |
//! | `0x7000..0x8000` | Linux zero page (`boot_params`), passed in `rsi` |
//! | `0x8000..0x8ff0` | boot stack |
//! | `0x9000..0xc000` | PML4, PDPT, PD: identity map of the first 1 GiB with 2 MiB pages |
//! | `0x20000..` | kernel command line |
//! | `0x100000..` | kernel (ELF segments at their physical addresses, or bzImage) |
//! | top of low RAM | initramfs |
//! | `0xd0000000..` | virtio-mmio devices, 4 KiB each, IRQ 5 upwards |
//! | `4 GiB..` | RAM above the 32-bit MMIO gap, when memory is larger than 3.25 GiB |

pub mod boot_params;
pub mod cpuid;
pub mod msr;
pub mod regs;

/// Where the GDT goes.
pub const GDT_START: u64 = 0x500;
/// Where the (empty) IDT goes.
pub const IDT_START: u64 = 0x520;
/// The Linux zero page.
pub const ZERO_PAGE_START: u64 = 0x7000;
/// Initial stack pointer.
pub const BOOT_STACK_POINTER: u64 = 0x8ff0;
/// PML4 of the boot page tables; the PDPT and PD follow.
pub const PML4_START: u64 = 0x9000;
/// The kernel command line.
pub const CMDLINE_START: u64 = 0x20000;
/// Longest command line we accept, NUL included.
pub const CMDLINE_MAX_SIZE: usize = 4096;
/// Start of the Extended BIOS Data Area: end of the first RAM range in the e820 map.
pub const EBDA_START: u64 = 0x9fc00;
/// Kernels load at or above 1 MiB.
pub const HIMEM_START: u64 = 0x100000;
/// Start of the 32-bit MMIO gap; RAM beyond it moves above 4 GiB.
pub const MMIO_GAP_START: u64 = 0xd000_0000;
/// First address above 32 bits.
pub const FIRST_ADDR_PAST_32BITS: u64 = 1 << 32;
/// KVM's TSS (three pages) and identity map page, just below the IOAPIC/LAPIC range.
pub const KVM_TSS_ADDRESS: u64 = 0xfffb_d000;
/// Base of the virtio-mmio device windows.
pub const VIRTIO_MMIO_START: u64 = MMIO_GAP_START;
/// Size of one virtio-mmio device window.
pub const VIRTIO_MMIO_SIZE: u64 = 0x1000;
/// GSI of the first virtio-mmio device; the next ones follow.
pub const VIRTIO_FIRST_IRQ: u32 = 5;
/// Last GSI the IOAPIC has.
pub const LAST_IRQ: u32 = 23;
/// Most virtio devices a VM can have: one virtio-mmio window and one IOAPIC pin each, GSI
/// [`VIRTIO_FIRST_IRQ`] to [`LAST_IRQ`] (the builder refuses the next one). `contract::limits`
/// admits no more than this.
pub const MAX_VIRTIO_DEVICES: usize = (LAST_IRQ - VIRTIO_FIRST_IRQ + 1) as usize;

/// The guest RAM ranges for `size` bytes: below the MMIO gap, then above 4 GiB.
pub fn ram_ranges(size: u64) -> Vec<(u64, u64)> {
    if size <= MMIO_GAP_START {
        vec![(0, size)]
    } else {
        vec![
            (0, MMIO_GAP_START),
            (FIRST_ADDR_PAST_32BITS, size - MMIO_GAP_START),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_is_split_around_the_mmio_gap() {
        assert_eq!(ram_ranges(64 << 20), vec![(0, 64 << 20)]);
        assert_eq!(
            ram_ranges(4 << 30),
            vec![(0, MMIO_GAP_START), (1 << 32, (4 << 30) - MMIO_GAP_START)]
        );
    }
}
