//! The static tables: RSDP, XSDT, FADT, FACS, MADT, MCFG (one function each, bytes out).

use acpi_tables::facs::FACS;
use acpi_tables::fadt::{FADTBuilder, Flags, PmProfile};
use acpi_tables::gas::{AccessSize, AddressSpace, GAS};
use acpi_tables::madt::{EnabledStatus, IoApic, ProcessorLocalApic};
use acpi_tables::mcfg::MCFG;
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::xsdt::XSDT;
use acpi_tables::Aml;
use zerocopy::byteorder::{LE, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes};

use super::{OEM_ID, OEM_REVISION, OEM_TABLE_ID};
use crate::devices::legacy::acpi_pm::{
    PM1_CNT_LEN, PM1_CNT_OFFSET, PM1_EVT_LEN, PM1_EVT_OFFSET, PM_BASE, RESET_OFFSET, RESET_VALUE,
    SCI_IRQ,
};
use crate::devices::pci::allocator::Window;

/// Bytes of an ACPI 2.0+ RSDP.
pub const RSDP_LEN: usize = 36;
const LOCAL_APIC_ADDRESS: u32 = 0xfee0_0000;
pub const IOAPIC_ADDRESS: u32 = 0xfec0_0000;
/// MADT flags: the machine also has the two 8259 PICs.
const MADT_PCAT_COMPAT: u32 = 1;
/// MADT interrupt source override flags: active high (01), level-triggered (11).
const ISO_LEVEL_ACTIVE_HIGH: u16 = 0b1101;
/// IA-PC boot architecture flags: an 8042, no VGA, no CMOS RTC.
const BOOT_ARCH_8042: u16 = 1 << 1;
const BOOT_ARCH_NO_VGA: u16 = 1 << 2;
const BOOT_ARCH_NO_CMOS_RTC: u16 = 1 << 5;

fn bytes(table: &dyn Aml) -> Vec<u8> {
    let mut out = Vec::new();
    table.to_aml_bytes(&mut out);
    out
}

/// The RSDP, pointing to the XSDT at `xsdt`.
pub fn rsdp(xsdt: u64) -> Vec<u8> {
    bytes(&Rsdp::new(OEM_ID, xsdt))
}

/// The XSDT listing `entries`.
pub fn xsdt(entries: &[u64]) -> Vec<u8> {
    let mut xsdt = XSDT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    for entry in entries {
        xsdt.add_entry(*entry);
    }
    bytes(&xsdt)
}

pub fn facs() -> Vec<u8> {
    bytes(&FACS::new())
}

fn io_gas(port: u64, bits: u8, access: AccessSize) -> GAS {
    GAS::new(AddressSpace::SystemIo, bits, 0, access, port)
}

/// The FADT: DSDT and FACS, the PM1a blocks, the SCI, the reset register, a fixed power
/// button.
pub fn fadt(dsdt: u64, facs: u64) -> Vec<u8> {
    let evt = PM_BASE + PM1_EVT_OFFSET;
    let cnt = PM_BASE + PM1_CNT_OFFSET;
    let mut fadt = FADTBuilder::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION)
        .dsdt_64(dsdt)
        .firmware_ctrl_64(facs)
        .preferred_pm_profile(PmProfile::EnterpriseServer)
        .flag(Flags::Wbinvd)
        .flag(Flags::ProcC1)
        .flag(Flags::SlpButton)
        .flag(Flags::ResetRegSup);
    fadt.sci_int = (SCI_IRQ as u16).into();
    fadt.pm1a_evt_blk = (evt as u32).into();
    fadt.pm1a_cnt_blk = (cnt as u32).into();
    fadt.pm1_evt_len = PM1_EVT_LEN;
    fadt.pm1_cnt_len = PM1_CNT_LEN;
    fadt.x_pm1a_evt_blk = io_gas(evt, PM1_EVT_LEN * 8, AccessSize::WordAccess);
    fadt.x_pm1a_cnt_blk = io_gas(cnt, PM1_CNT_LEN * 8, AccessSize::WordAccess);
    // No C2 or C3 (latencies above 100 and 1000 us say so).
    fadt.p_lvl2_lat = 0x0fff.into();
    fadt.p_lvl3_lat = 0x0fff.into();
    fadt.iapc_boot_arch = (BOOT_ARCH_8042 | BOOT_ARCH_NO_VGA | BOOT_ARCH_NO_CMOS_RTC).into();
    fadt.reset_reg = io_gas(PM_BASE + RESET_OFFSET, 8, AccessSize::ByteAccess);
    fadt.reset_value = RESET_VALUE;
    bytes(&fadt.finalize())
}

/// A MADT interrupt source override (type 2): ISA IRQ `source` is GSI `gsi` with `flags`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, IntoBytes, Immutable, FromBytes)]
struct InterruptSourceOverride {
    kind: u8,
    length: u8,
    bus: u8,
    source: u8,
    gsi: U32<LE>,
    flags: U16<LE>,
}

impl InterruptSourceOverride {
    fn new(source: u8, gsi: u32, flags: u16) -> Self {
        InterruptSourceOverride {
            kind: 2,
            length: std::mem::size_of::<Self>() as u8,
            bus: 0,
            source,
            gsi: gsi.into(),
            flags: flags.into(),
        }
    }
}

/// The MADT: local APICs `0..vcpus` (APIC id = vCPU index), the IOAPIC, the SCI override.
pub fn madt(vcpus: u8) -> Vec<u8> {
    let mut madt = Sdt::new(*b"APIC", 44, 5, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    madt.write_u32(36, LOCAL_APIC_ADDRESS);
    madt.write_u32(40, MADT_PCAT_COMPAT);
    for id in 0..vcpus {
        madt.append_slice(&bytes(&ProcessorLocalApic::new(
            id,
            id,
            EnabledStatus::Enabled,
        )));
    }
    madt.append_slice(&bytes(&IoApic::new(0, IOAPIC_ADDRESS, 0)));
    madt.append(InterruptSourceOverride::new(
        SCI_IRQ as u8,
        SCI_IRQ,
        ISO_LEVEL_ACTIVE_HIGH,
    ));
    madt.update_checksum();
    madt.as_slice().to_vec()
}

/// The MCFG: the ECAM window of bus 0.
pub fn mcfg(ecam: Window) -> Vec<u8> {
    let mut mcfg = MCFG::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    let last_bus = ((ecam.end - ecam.start) >> 20).saturating_sub(1) as u8;
    mcfg.add_ecam(ecam.start, 0, 0, last_bus);
    bytes(&mcfg)
}
