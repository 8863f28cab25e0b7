//! The Linux zero page (`boot_params`), written at [`ZERO_PAGE_START`](super::ZERO_PAGE_START)
//! and handed to the kernel in `rsi`: the bzImage setup header (or a minimal one for ELF
//! kernels), the command line pointer, the initramfs and the e820 memory map.

use crate::guest_memory::GuestMemoryMmap;
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, setup_header};
use vm_memory::{Bytes, GuestAddress, GuestMemoryError};

use super::{ram_ranges, CMDLINE_START, EBDA_START, HIMEM_START, ZERO_PAGE_START};

const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xaa55;
const KERNEL_HDR_MAGIC: u32 = 0x5372_6448; // "HdrS"
const KERNEL_LOADER_OTHER: u8 = 0xff;
const KERNEL_MIN_ALIGNMENT_BYTES: u32 = 0x0100_0000;
const E820_RAM: u32 = 1;
const E820_RESERVED: u32 = 2;

/// What the PCI machine adds to the zero page: ranges the e820 map reports as reserved (the
/// ECAM window, so Linux trusts MMCONFIG) and where the RSDP is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlatformInfo {
    pub reserved: Vec<(u64, u64)>,
    pub acpi_rsdp: Option<u64>,
}

/// The initramfs as loaded in guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitramfsRange {
    pub address: u64,
    pub size: u64,
}

/// Building the zero page failed.
#[derive(Debug, thiserror::Error)]
pub enum ZeroPageError {
    #[error("e820 map has more than {0} entries")]
    E820TooLong(usize),
    #[error("initramfs at {0:#x} does not fit the 32-bit boot protocol fields")]
    InitramfsAbove4G(u64),
    #[error("write zero page")]
    Write(#[source] GuestMemoryError),
}

/// Builds and writes the zero page.
pub fn write_zero_page(
    mem: &GuestMemoryMmap,
    memory_size: u64,
    bzimage_header: Option<setup_header>,
    cmdline_size: usize,
    initramfs: Option<InitramfsRange>,
    platform: &PlatformInfo,
) -> Result<(), ZeroPageError> {
    let mut params = boot_params::default();
    if let Some(hdr) = bzimage_header {
        params.hdr = hdr;
    }
    params.hdr.type_of_loader = KERNEL_LOADER_OTHER;
    params.hdr.boot_flag = KERNEL_BOOT_FLAG_MAGIC;
    params.hdr.header = KERNEL_HDR_MAGIC;
    params.hdr.cmd_line_ptr = CMDLINE_START as u32;
    params.hdr.cmdline_size = cmdline_size as u32;
    params.hdr.kernel_alignment = KERNEL_MIN_ALIGNMENT_BYTES;
    if let Some(initramfs) = initramfs {
        let address = u32::try_from(initramfs.address)
            .map_err(|_| ZeroPageError::InitramfsAbove4G(initramfs.address))?;
        let size = u32::try_from(initramfs.size)
            .map_err(|_| ZeroPageError::InitramfsAbove4G(initramfs.address))?;
        params.hdr.ramdisk_image = address;
        params.hdr.ramdisk_size = size;
    }
    if let Some(rsdp) = platform.acpi_rsdp {
        params.acpi_rsdp_addr = rsdp;
    }
    let mut e820 = vec![(0, EBDA_START, E820_RAM)];
    for (start, size) in ram_ranges(memory_size) {
        let end = start + size;
        let start = start.max(HIMEM_START);
        if end > start {
            e820.push((start, end - start, E820_RAM));
        }
    }
    e820.extend(
        platform
            .reserved
            .iter()
            .map(|(a, s)| (*a, *s, E820_RESERVED)),
    );
    e820.sort_unstable();
    if e820.len() > params.e820_table.len() {
        return Err(ZeroPageError::E820TooLong(params.e820_table.len()));
    }
    for (slot, (addr, size, kind)) in params.e820_table.iter_mut().zip(&e820) {
        *slot = boot_e820_entry {
            addr: *addr,
            size: *size,
            r#type: *kind,
        };
    }
    params.e820_entries = e820.len() as u8;
    mem.write_obj(params, GuestAddress(ZERO_PAGE_START))
        .map_err(ZeroPageError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e820_and_header() {
        let size = 64 << 20;
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)]).unwrap();
        let initramfs = InitramfsRange {
            address: 0x300_0000,
            size: 0x1000,
        };
        write_zero_page(
            &mem,
            size as u64,
            None,
            10,
            Some(initramfs),
            &PlatformInfo::default(),
        )
        .unwrap();
        let params: boot_params = mem.read_obj(GuestAddress(ZERO_PAGE_START)).unwrap();
        assert_eq!(params.e820_entries, 2);
        let rsdp = params.acpi_rsdp_addr;
        assert_eq!(rsdp, 0, "no ACPI");
        let (addr, len) = (params.e820_table[1].addr, params.e820_table[1].size);
        assert_eq!((addr, len), (HIMEM_START, size as u64 - HIMEM_START));
        let (image, cmdline) = (params.hdr.ramdisk_image, params.hdr.cmd_line_ptr);
        assert_eq!(image, 0x300_0000);
        assert_eq!(cmdline, CMDLINE_START as u32);
    }

    #[test]
    fn the_pci_machine_reserves_ecam_and_points_at_the_rsdp() {
        let size = 64 << 20;
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)]).unwrap();
        let platform = PlatformInfo {
            reserved: vec![(0xe000_0000, 1 << 20)],
            acpi_rsdp: Some(0xe_0000),
        };
        write_zero_page(&mem, size as u64, None, 10, None, &platform).unwrap();
        let params: boot_params = mem.read_obj(GuestAddress(ZERO_PAGE_START)).unwrap();
        assert_eq!(params.e820_entries, 3);
        let ecam = params.e820_table[2];
        let (addr, len, kind) = (ecam.addr, ecam.size, ecam.r#type);
        assert_eq!((addr, len, kind), (0xe000_0000, 1 << 20, E820_RESERVED));
        let rsdp = params.acpi_rsdp_addr;
        assert_eq!(rsdp, 0xe_0000);
    }
}
