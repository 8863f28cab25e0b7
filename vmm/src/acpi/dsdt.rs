//! The DSDT, in AML built with `acpi_tables::aml`:
//!
//! ```text
//! Scope (\_SB) {
//!     Device (PCI0) {                  // the root bridge, bus 0, segment 0
//!         _HID PNP0A08, _CID PNP0A03, _ADR 0, _SEG 0, _UID 0, _BBN 0
//!         _CRS: bus 0, ports 0xcf8-0xcff, the I/O window 0xd00-0xffff (no I/O BARs yet), the
//!               32-bit and the 64-bit memory window
//!         _PRT: slot s, INTA# -> GSI (level, active low), for every occupied slot
//!     }
//!     Device (MBRD) { _HID PNP0C02, _CRS: the ECAM window and the ACPI PM ports }
//!     Device (COM1) { _HID PNP0501, _CRS: ports 0x3f8-0x3ff, IRQ 4 }
//! }
//! Name (\_S5, Package { 5, 5 })        // SLP_TYP for soft off
//! ```
//!
//! The power button is the FADT's fixed one: nothing for it here.

use acpi_tables::aml::{
    AddressSpace, AddressSpaceCacheable, Device, EISAName, Interrupt, Memory32Fixed, Name, Package,
    Path, ResourceTemplate, Scope, IO, ZERO,
};
use acpi_tables::sdt::Sdt;
use acpi_tables::Aml;

use super::{AcpiPlatform, OEM_ID, OEM_REVISION, OEM_TABLE_ID};
use crate::devices::legacy::acpi_pm::{PM_BASE, PM_LEN, S5_SLP_TYP};
use crate::devices::legacy::{COM1_BASE, COM1_IRQ};

const PCI_CONFIG_PORT: u16 = 0xcf8;
/// The PCI I/O window: past the legacy ports (0x000-0xcf7, where COM1 and the ACPI PM block
/// live, outside PCI0).
const PCI_IO_WINDOW: (u16, u16) = (0x0d00, 0xffff);

/// The DSDT for `platform`.
pub fn dsdt(platform: &AcpiPlatform) -> Vec<u8> {
    let mut aml = Vec::new();
    let pci0 = PciRoot::new(platform);
    let motherboard = Motherboard::new(platform);
    let com1 = Com1::new();
    Scope::new(Path::new("\\_SB_"), vec![&pci0, &motherboard, &com1]).to_aml_bytes(&mut aml);
    let s5 = S5_SLP_TYP as u8;
    Name::new(Path::new("\\_S5_"), &Package::new(vec![&s5, &s5])).to_aml_bytes(&mut aml);
    let mut sdt = Sdt::new(*b"DSDT", 36, 2, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    sdt.append_slice(&aml);
    sdt.as_slice().to_vec()
}

/// `Device (PCI0)`.
struct PciRoot<'a> {
    platform: &'a AcpiPlatform,
}

impl<'a> PciRoot<'a> {
    fn new(platform: &'a AcpiPlatform) -> Self {
        PciRoot { platform }
    }
}

impl Aml for PciRoot<'_> {
    fn to_aml_bytes(&self, sink: &mut dyn acpi_tables::AmlSink) {
        let p = self.platform;
        let hid = Name::new(Path::new("_HID"), &EISAName::new("PNP0A08"));
        let cid = Name::new(Path::new("_CID"), &EISAName::new("PNP0A03"));
        let adr = Name::new(Path::new("_ADR"), &ZERO);
        let seg = Name::new(Path::new("_SEG"), &ZERO);
        let uid = Name::new(Path::new("_UID"), &ZERO);
        let bbn = Name::new(Path::new("_BBN"), &ZERO);
        let bus = AddressSpace::<u16>::new_bus_number(0, 0);
        let config_ports = IO::new(PCI_CONFIG_PORT, PCI_CONFIG_PORT, 1, 8);
        let io = AddressSpace::<u16>::new_io(PCI_IO_WINDOW.0, PCI_IO_WINDOW.1, None);
        let mmio32 = AddressSpace::<u32>::new_memory(
            AddressSpaceCacheable::NotCacheable,
            true,
            p.mmio32.start as u32,
            (p.mmio32.end - 1) as u32,
            None,
        );
        let mmio64 = AddressSpace::<u64>::new_memory(
            AddressSpaceCacheable::NotCacheable,
            true,
            p.mmio64.start,
            p.mmio64.end - 1,
            None,
        );
        let crs = Name::new(
            Path::new("_CRS"),
            &ResourceTemplate::new(vec![&bus, &config_ports, &io, &mmio32, &mmio64]),
        );
        // _PRT entries: (address: slot << 16 | 0xffff, pin 0 = INTA#, source 0 = a GSI, GSI).
        let entries: Vec<(u32, u32)> = p
            .intx
            .iter()
            .map(|(slot, gsi)| (u32::from(*slot) << 16 | 0xffff, *gsi))
            .collect();
        let packages: Vec<Package<'_>> = entries
            .iter()
            .map(|(address, gsi)| Package::new(vec![address, &ZERO, &ZERO, gsi]))
            .collect();
        let prt = Name::new(
            Path::new("_PRT"),
            &Package::new(packages.iter().map(|p| p as &dyn Aml).collect()),
        );
        Device::new(
            Path::new("PCI0"),
            vec![&hid, &cid, &adr, &seg, &uid, &bbn, &crs, &prt],
        )
        .to_aml_bytes(sink);
    }
}

/// `Device (MBRD)`: resources no other device claims, so that the OS leaves them alone (Linux
/// checks the ECAM window is reserved here before it uses MMCONFIG).
struct Motherboard {
    ecam_base: u32,
    ecam_size: u32,
}

impl Motherboard {
    fn new(platform: &AcpiPlatform) -> Self {
        Motherboard {
            ecam_base: platform.ecam.start as u32,
            ecam_size: (platform.ecam.end - platform.ecam.start) as u32,
        }
    }
}

impl Aml for Motherboard {
    fn to_aml_bytes(&self, sink: &mut dyn acpi_tables::AmlSink) {
        let hid = Name::new(Path::new("_HID"), &EISAName::new("PNP0C02"));
        let uid = Name::new(Path::new("_UID"), &ZERO);
        let ecam = Memory32Fixed::new(false, self.ecam_base, self.ecam_size);
        let pm = IO::new(PM_BASE as u16, PM_BASE as u16, 1, PM_LEN as u8);
        let crs = Name::new(Path::new("_CRS"), &ResourceTemplate::new(vec![&ecam, &pm]));
        Device::new(Path::new("MBRD"), vec![&hid, &uid, &crs]).to_aml_bytes(sink);
    }
}

/// `Device (COM1)`: the 16550 at 0x3f8, IRQ 4 (edge, active high).
struct Com1;

impl Com1 {
    fn new() -> Self {
        Com1
    }
}

impl Aml for Com1 {
    fn to_aml_bytes(&self, sink: &mut dyn acpi_tables::AmlSink) {
        let hid = Name::new(Path::new("_HID"), &EISAName::new("PNP0501"));
        let uid = Name::new(Path::new("_UID"), &ZERO);
        let ports = IO::new(COM1_BASE as u16, COM1_BASE as u16, 1, 8);
        let irq = Interrupt::new(true, true, false, false, COM1_IRQ);
        let crs = Name::new(
            Path::new("_CRS"),
            &ResourceTemplate::new(vec![&ports, &irq]),
        );
        Device::new(Path::new("COM1"), vec![&hid, &uid, &crs]).to_aml_bytes(sink);
    }
}
