//! ACPI tables, built as data with rust-vmm's `acpi_tables` and written once into guest memory
//! at boot (and again at a reset in place), for a stock kernel on the PCI machine.
//!
//! How the guest finds them, step by step:
//!
//! 1. the RSDP, at [`ACPI_START`] (0xe0000, where Linux scans the BIOS area) and in the zero
//!    page's `acpi_rsdp_addr`, points to the XSDT;
//! 2. the XSDT lists the FADT, the MADT and the MCFG;
//! 3. the FADT points to the DSDT and the FACS and describes the fixed hardware: the PM1a event
//!    and control blocks and the reset register in port I/O (see
//!    [`crate::devices::legacy::acpi_pm`]), the SCI on IRQ 9, a fixed power button (no sleep
//!    button), the i8042, no VGA and no CMOS RTC;
//! 4. the MADT gives a local APIC per vCPU, the IOAPIC at 0xfec00000 (GSIs 0-23), the legacy
//!    PICs (PCAT_COMPAT) and one interrupt source override: the SCI, level-triggered, active
//!    high;
//! 5. the MCFG gives the ECAM window of bus 0;
//! 6. the DSDT ([`dsdt`]) holds the PCI root bridge (its resources and INTx routing), the
//!    motherboard resources (ECAM, PM ports), COM1 and `\_S5_`.
//!
//! Everything lies between 0xe0000 and 0xf0000, outside the RAM the e820 map reports.

pub mod dsdt;
mod tables;

use vm_memory::{Bytes, GuestAddress, GuestMemoryError};

use crate::devices::pci::allocator::Window;
use crate::guest_memory::GuestMemoryMmap;

/// Where the tables go: the RSDP first.
pub const ACPI_START: u64 = 0xe_0000;
/// The end of the area they must fit in: the SMBIOS tables (`crate::smbios`) take the last
/// 64 KiB below 1 MiB.
pub const ACPI_END: u64 = 0xf_0000;
pub const OEM_ID: [u8; 6] = *b"FRVIRT";
pub const OEM_TABLE_ID: [u8; 8] = *b"FVMICROV";
pub const OEM_REVISION: u32 = 1;

/// What the tables describe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpiPlatform {
    pub vcpus: u8,
    /// The ECAM window (bus 0 only).
    pub ecam: Window,
    /// The PCI memory windows BARs live in.
    pub mmio32: Window,
    pub mmio64: Window,
    /// The INTx GSI of each occupied PCI slot (INTA#), for `_PRT`.
    pub intx: Vec<(u8, u32)>,
}

/// Building or writing the tables failed.
#[derive(Debug, thiserror::Error)]
pub enum AcpiError {
    #[error("the ACPI tables need {0} bytes, more than fit below 0xf0000")]
    TooLarge(u64),
    #[error("write the ACPI tables")]
    Write(#[source] GuestMemoryError),
}

/// The tables, each with its guest address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpiTables {
    pub rsdp: u64,
    pub tables: Vec<(u64, Vec<u8>)>,
}

/// Hands out addresses after the RSDP.
struct Placement(u64);

impl Placement {
    fn take(&mut self, len: usize, align: u64) -> u64 {
        let at = self.0.next_multiple_of(align);
        self.0 = at + len as u64;
        at
    }
}

impl AcpiTables {
    /// Builds every table for `platform` and places it.
    pub fn build(platform: &AcpiPlatform) -> Result<Self, AcpiError> {
        let mut place = Placement(ACPI_START + tables::RSDP_LEN as u64);
        let dsdt = dsdt::dsdt(platform);
        let dsdt_at = place.take(dsdt.len(), 16);
        let facs = tables::facs();
        let facs_at = place.take(facs.len(), 64);
        let fadt = tables::fadt(dsdt_at, facs_at);
        let fadt_at = place.take(fadt.len(), 16);
        let madt = tables::madt(platform.vcpus);
        let madt_at = place.take(madt.len(), 16);
        let mcfg = tables::mcfg(platform.ecam);
        let mcfg_at = place.take(mcfg.len(), 16);
        let xsdt = tables::xsdt(&[fadt_at, madt_at, mcfg_at]);
        let xsdt_at = place.take(xsdt.len(), 16);
        if place.0 > ACPI_END {
            return Err(AcpiError::TooLarge(place.0 - ACPI_START));
        }
        let rsdp = tables::rsdp(xsdt_at);
        Ok(AcpiTables {
            rsdp: ACPI_START,
            tables: vec![
                (ACPI_START, rsdp),
                (dsdt_at, dsdt),
                (facs_at, facs),
                (fadt_at, fadt),
                (madt_at, madt),
                (mcfg_at, mcfg),
                (xsdt_at, xsdt),
            ],
        })
    }

    /// Writes every table into guest memory.
    pub fn write(&self, mem: &GuestMemoryMmap) -> Result<(), AcpiError> {
        for (at, bytes) in &self.tables {
            mem.write_slice(bytes, GuestAddress(*at))
                .map_err(AcpiError::Write)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
