//! Step 5 of building a VM, which every reset in place repeats: the boot payload in guest
//! memory. `load_payload` loads the kernel, initramfs and command line (with the virtio-mmio
//! entries; [`crate::loader`]), writes the ACPI tables of the PCI machine ([`crate::acpi`]), the
//! SMBIOS tables ([`crate::smbios`]), the zero page and the boot tables ([`crate::arch`]), and returns the kernel's 64-bit entry; a
//! guestless VM gets the idle code and the boot tables instead.
//!
//! The builder (`builder`) calls it once the devices exist, and the reset thread (`reset`) calls
//! it again with what the builder kept (`Platform`), so both sit above this module.

use crate::acpi::{AcpiError, AcpiTables};
use crate::arch::boot_params::{write_zero_page, PlatformInfo, ZeroPageError};
use crate::arch::regs::{write_boot_tables, WriteBootTablesError};
use crate::arch::{PCI_ECAM_SIZE, PCI_ECAM_START};
use crate::config::PayloadConfig;
use crate::guest_memory::GuestMemoryMmap;
use crate::loader::{self, CmdlineError, LoadInitramfsError, LoadKernelError};
use crate::smbios::{SmbiosError, SmbiosTables};

/// Loading the payload failed. The builder reports each variant as the `builder::StartVmError`
/// variant of the same name and message, a reset as the cause of its `Payload` error.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("ACPI tables")]
    Acpi(#[source] AcpiError),
    #[error("SMBIOS tables")]
    Smbios(#[source] SmbiosError),
    #[error("load kernel")]
    LoadKernel(#[source] LoadKernelError),
    #[error("load initramfs")]
    LoadInitramfs(#[source] LoadInitramfsError),
    #[error("load the idle code of a guestless VM")]
    LoadIdleCode(#[source] vm_memory::GuestMemoryError),
    #[error("kernel command line")]
    Cmdline(#[source] CmdlineError),
    #[error("zero page")]
    ZeroPage(#[source] ZeroPageError),
    #[error("boot tables")]
    BootTables(#[source] WriteBootTablesError),
}

/// What step 5 writes besides the kernel, per transport.
#[derive(Clone)]
pub(crate) enum Platform {
    /// The virtio-mmio windows and irqs, announced on the command line.
    Mmio { slots: Vec<(u64, u32)> },
    /// The ACPI tables; the e820 map reserves the ECAM window.
    Pci { acpi: AcpiTables },
}

/// Step 5: loads the kernel, initramfs and command line (with the virtio-mmio entries), writes
/// the ACPI tables (PCI machine), the SMBIOS tables (when the VM has them), the zero page and
/// boot tables; returns the kernel's 64-bit entry.
pub(crate) fn load_payload(
    mem: &GuestMemoryMmap,
    payload: &PayloadConfig,
    memory_size: u64,
    platform: &Platform,
    smbios: Option<&SmbiosTables>,
) -> Result<u64, PayloadError> {
    if payload.guestless {
        // No kernel, so no zero page, command line or ACPI tables: the idle code and the page
        // tables and GDT of the long-mode entry.
        let entry = loader::load_idle_code(mem).map_err(PayloadError::LoadIdleCode)?;
        write_boot_tables(mem).map_err(PayloadError::BootTables)?;
        return Ok(entry);
    }
    let kernel = loader::load_kernel(mem, &payload.kernel).map_err(PayloadError::LoadKernel)?;
    let initramfs = match &payload.initramfs {
        Some(path) => Some(
            loader::load_initramfs(mem, path, memory_size, kernel.end)
                .map_err(PayloadError::LoadInitramfs)?,
        ),
        None => None,
    };
    if let Some(tables) = smbios {
        tables.write(mem).map_err(PayloadError::Smbios)?;
    }
    let (virtio_slots, info) = match platform {
        Platform::Mmio { slots } => (slots.as_slice(), PlatformInfo::default()),
        Platform::Pci { acpi } => {
            acpi.write(mem).map_err(PayloadError::Acpi)?;
            let info = PlatformInfo {
                reserved: vec![(PCI_ECAM_START, PCI_ECAM_SIZE)],
                acpi_rsdp: Some(acpi.rsdp),
            };
            (&[][..], info)
        }
    };
    let cmdline =
        loader::build_cmdline(&payload.cmdline, virtio_slots).map_err(PayloadError::Cmdline)?;
    let cmdline_size = loader::write_cmdline(mem, &cmdline).map_err(PayloadError::Cmdline)?;
    write_zero_page(
        mem,
        memory_size,
        kernel.bzimage_header,
        cmdline_size,
        initramfs,
        &info,
    )
    .map_err(PayloadError::ZeroPage)?;
    write_boot_tables(mem).map_err(PayloadError::BootTables)?;
    Ok(kernel.entry)
}

/// The boot payloads, without /dev/kvm: only guest memory is written.
#[cfg(test)]
mod tests {
    use vm_memory::{Bytes, GuestAddress};

    use super::*;
    use crate::config::MIN_MEMORY_BYTES;

    /// A guestless payload loads the idle code and the long-mode tables, nothing of a kernel: no
    /// command line, no zero page (no /dev/kvm needed: only guest memory is written).
    #[test]
    fn a_guestless_payload_is_the_idle_code() {
        use crate::arch::{CMDLINE_START, PML4_START, ZERO_PAGE_START};
        let mem = crate::vstate::memory::create_guest_memory(MIN_MEMORY_BYTES).unwrap();
        let entry = load_payload(
            &mem,
            &PayloadConfig::guestless(),
            MIN_MEMORY_BYTES,
            &Platform::Mmio { slots: Vec::new() },
            None,
        )
        .expect("load the guestless payload");
        assert_eq!(entry, loader::IDLE_CODE_START);
        let mut code = [0u8; 3];
        mem.read_slice(&mut code, GuestAddress(entry)).unwrap();
        assert_eq!(code, loader::IDLE_CODE);
        let pml4: u64 = mem.read_obj(GuestAddress(PML4_START)).unwrap();
        assert_ne!(pml4, 0, "the long-mode page tables are written");
        let cmdline: u8 = mem.read_obj(GuestAddress(CMDLINE_START)).unwrap();
        let mut zero_page = [0u8; 512];
        mem.read_slice(&mut zero_page, GuestAddress(ZERO_PAGE_START))
            .unwrap();
        assert_eq!(cmdline, 0, "no command line");
        assert!(zero_page.iter().all(|b| *b == 0), "no zero page");
    }
}
