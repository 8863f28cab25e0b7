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
//! | `0x9fc00..0xe0000` | EBDA, ISA hole (not RAM in the e820 map) |
//! | `0xe0000..0xf0000` | ACPI tables, RSDP first (PCI machine) |
//! | `0xf0000..0x100000` | SMBIOS entry point and tables |
//! | `0xd0000000..` | virtio-mmio devices, 4 KiB each, IRQ 5 upwards (mmio machine) |
//! | `0xd1000000..0xe0000000` | 32-bit PCI BAR window (PCI machine) |
//! | `0xe0000000..0xe0100000` | PCI ECAM of bus 0, reserved in the e820 map (PCI machine) |
//! | `0xfec00000`, `0xfee00000` | IOAPIC, local APICs |
//! | `4 GiB..` | RAM above the 32-bit MMIO gap, when memory is larger than 3.25 GiB |
//! | past RAM, 1 GiB aligned | 64-bit PCI BAR window, 16 GiB (PCI machine) |

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
/// Most virtio devices a VM can have on the mmio transport, the smaller of the two: one
/// virtio-mmio window and one IOAPIC pin each, GSI [`VIRTIO_FIRST_IRQ`] to [`LAST_IRQ`]
/// (`config::max_virtio_devices` has both transports). `contract::limits` admits no more than
/// this, since the API cannot know which transport a VMI's kernel will get.
pub const MAX_VIRTIO_DEVICES: usize = (LAST_IRQ - VIRTIO_FIRST_IRQ + 1) as usize;
/// The 32-bit PCI BAR window.
pub const PCI_MMIO32_START: u64 = 0xd100_0000;
pub const PCI_MMIO32_END: u64 = 0xe000_0000;
/// PCI ECAM (MMCONFIG): 1 MiB per bus, bus 0 only.
pub const PCI_ECAM_START: u64 = 0xe000_0000;
pub const PCI_ECAM_SIZE: u64 = 1 << 20;
/// Size of the 64-bit PCI BAR window.
pub const PCI_MMIO64_SIZE: u64 = 16 << 30;
/// The IOAPIC pins PCI INTx lines use: slot `s`'s INTA# is GSI `16 + s % 8`.
pub const PCI_INTX_FIRST_GSI: u32 = 16;
pub const PCI_INTX_PINS: u32 = 8;

/// The 64-bit PCI BAR window for `memory_size` bytes of RAM: from the first 1 GiB boundary past
/// RAM (and past 4 GiB).
pub fn pci_mmio64_window(memory_size: u64) -> (u64, u64) {
    let ram_end = ram_ranges(memory_size)
        .iter()
        .map(|(start, len)| start + len)
        .max()
        .unwrap_or(0)
        .max(FIRST_ADDR_PAST_32BITS);
    let start = ram_end.next_multiple_of(1 << 30);
    (start, start + PCI_MMIO64_SIZE)
}

// The PCI windows sit in the MMIO gap, below the IOAPIC, apart from each other.
const _: () = assert!(PCI_ECAM_START + PCI_ECAM_SIZE <= 0xfec0_0000);
const _: () = assert!(PCI_MMIO32_END <= PCI_ECAM_START && PCI_MMIO32_START >= MMIO_GAP_START);
const _: () = assert!(VIRTIO_MMIO_START + 0x100 * VIRTIO_MMIO_SIZE <= PCI_MMIO32_START);

/// The GSI of the INTx line (INTA#) of PCI slot `slot`.
pub fn pci_intx_gsi(slot: u8) -> u32 {
    PCI_INTX_FIRST_GSI + u32::from(slot) % PCI_INTX_PINS
}

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
    fn the_64_bit_pci_window_lies_past_ram() {
        assert_eq!(
            pci_mmio64_window(64 << 20),
            (1 << 32, (1 << 32) + (16 << 30))
        );
        let (start, _) = pci_mmio64_window(6 << 30);
        assert_eq!(start, 7 << 30, "RAM ends at 4 GiB + 2.75 GiB");
        assert_eq!(
            (pci_intx_gsi(1), pci_intx_gsi(8), pci_intx_gsi(31)),
            (17, 16, 23)
        );
    }

    #[test]
    fn ram_is_split_around_the_mmio_gap() {
        assert_eq!(ram_ranges(64 << 20), vec![(0, 64 << 20)]);
        assert_eq!(
            ram_ranges(4 << 30),
            vec![(0, MMIO_GAP_START), (1 << 32, (4 << 30) - MMIO_GAP_START)]
        );
    }
}
