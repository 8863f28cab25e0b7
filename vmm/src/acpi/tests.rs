//! The tables as a guest reads them: from the RSDP through the XSDT to every table, each
//! header's signature, length and checksum, and the fields Linux depends on.

use vm_memory::{Bytes, GuestAddress};

use super::*;

fn platform() -> AcpiPlatform {
    AcpiPlatform {
        vcpus: 3,
        ecam: Window {
            start: 0xe000_0000,
            end: 0xe010_0000,
        },
        mmio32: Window {
            start: 0xd100_0000,
            end: 0xe000_0000,
        },
        mmio64: Window {
            start: 0x1_0000_0000,
            end: 0x5_0000_0000,
        },
        intx: vec![(1, 17), (2, 18), (3, 19)],
    }
}

fn written() -> GuestMemoryMmap {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 2 << 20)]).unwrap();
    AcpiTables::build(&platform()).unwrap().write(&mem).unwrap();
    mem
}

fn read(mem: &GuestMemoryMmap, at: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    mem.read_slice(&mut bytes, GuestAddress(at)).unwrap();
    bytes
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap())
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b))
}

/// Reads the table at `at`: its header must carry `signature`, a length and a checksum that
/// makes the whole table sum to zero.
fn table(mem: &GuestMemoryMmap, at: u64, signature: &[u8; 4]) -> Vec<u8> {
    let header = read(mem, at, 36);
    assert_eq!(&header[0..4], signature, "signature at {at:#x}");
    let len = u32_at(&header, 4) as usize;
    assert!(len >= 36, "{signature:?} length {len}");
    let bytes = read(mem, at, len);
    assert_eq!(sum(&bytes), 0, "{signature:?} checksum");
    assert_eq!(&bytes[10..16], &OEM_ID);
    bytes
}

fn xsdt_entries(mem: &GuestMemoryMmap) -> Vec<u64> {
    let rsdp = read(mem, ACPI_START, 36);
    assert_eq!(&rsdp[0..8], b"RSD PTR ");
    assert_eq!(sum(&rsdp[0..20]), 0, "ACPI 1.0 checksum");
    assert_eq!(sum(&rsdp), 0, "extended checksum");
    assert_eq!(rsdp[15], 2, "revision 2: an XSDT");
    assert_eq!(u32_at(&rsdp, 20), 36, "length");
    let xsdt = table(mem, u64_at(&rsdp, 24), b"XSDT");
    xsdt[36..].chunks(8).map(|c| u64_at(c, 0)).collect()
}

#[test]
fn the_rsdp_leads_to_every_table_with_valid_headers() {
    let mem = written();
    let entries = xsdt_entries(&mem);
    let signatures: Vec<[u8; 4]> = entries
        .iter()
        .map(|at| read(&mem, *at, 4).try_into().unwrap())
        .collect();
    assert_eq!(signatures, vec![*b"FACP", *b"APIC", *b"MCFG"]);
    for (at, signature) in entries.iter().zip(&signatures) {
        table(&mem, *at, signature);
    }
    let tables = AcpiTables::build(&platform()).unwrap();
    for (at, bytes) in &tables.tables {
        assert!(*at >= ACPI_START && at + bytes.len() as u64 <= ACPI_END);
    }
    assert_eq!(tables.rsdp, ACPI_START);
}

#[test]
fn the_fadt_describes_the_pm_blocks_sci_reset_and_power_button() {
    let mem = written();
    let fadt = table(&mem, xsdt_entries(&mem)[0], b"FACP");
    assert_eq!(fadt.len(), 276, "ACPI 6 FADT");
    assert_eq!(fadt[8], 6, "major version");
    table(&mem, u64_at(&fadt, 140), b"DSDT");
    let facs = read(&mem, u64_at(&fadt, 132), 64);
    assert_eq!(&facs[0..4], b"FACS");
    assert_eq!(u32_at(&facs, 4), 64);
    assert_eq!(u64_at(&fadt, 132) % 64, 0, "the FACS is 64-byte aligned");
    assert_eq!(u16_at(&fadt, 46), 9, "SCI_INT");
    assert_eq!(u32_at(&fadt, 48), 0, "no SMI_CMD: always in ACPI mode");
    assert_eq!(u32_at(&fadt, 56), 0x600, "PM1a_EVT_BLK");
    assert_eq!(u32_at(&fadt, 64), 0x604, "PM1a_CNT_BLK");
    assert_eq!(
        (fadt[88], fadt[89], fadt[91]),
        (4, 2, 0),
        "PM1 lengths, no PM timer"
    );
    let flags = u32_at(&fadt, 112);
    assert_eq!(flags & 1 << 4, 0, "a fixed power button");
    assert_ne!(flags & 1 << 5, 0, "no fixed sleep button");
    assert_ne!(flags & 1 << 10, 0, "reset register supported");
    assert_eq!(flags & 1 << 20, 0, "not hardware-reduced");
    assert_eq!(u16_at(&fadt, 109), 0b10_0110, "8042, no VGA, no CMOS RTC");
    assert_eq!(fadt[116], 1, "reset register in port I/O");
    assert_eq!(u64_at(&fadt, 120), 0x608);
    assert_eq!(fadt[128], 1, "reset value");
    assert_eq!(fadt[148], 1, "X_PM1a_EVT_BLK in port I/O");
    assert_eq!((fadt[149], u64_at(&fadt, 152)), (32, 0x600));
    assert_eq!((fadt[173], u64_at(&fadt, 176)), (16, 0x604));
}

#[test]
fn the_madt_has_each_vcpu_the_ioapic_and_the_sci_override() {
    let mem = written();
    let madt = table(&mem, xsdt_entries(&mem)[1], b"APIC");
    assert_eq!(u32_at(&madt, 36), 0xfee0_0000, "local APIC address");
    assert_eq!(u32_at(&madt, 40), 1, "PCAT_COMPAT");
    let mut at = 44;
    let (mut apics, mut ioapics, mut overrides) = (Vec::new(), Vec::new(), Vec::new());
    while at < madt.len() {
        let (kind, len) = (madt[at], usize::from(madt[at + 1]));
        let entry = &madt[at..at + len];
        match kind {
            0 => apics.push((entry[2], entry[3], u32_at(entry, 4))),
            1 => ioapics.push((entry[2], u32_at(entry, 4), u32_at(entry, 8))),
            2 => overrides.push((entry[2], entry[3], u32_at(entry, 4), u16_at(entry, 8))),
            other => panic!("unexpected MADT entry type {other}"),
        }
        at += len;
    }
    assert_eq!(at, madt.len());
    assert_eq!(
        apics,
        vec![(0, 0, 1), (1, 1, 1), (2, 2, 1)],
        "uid, APIC id, enabled"
    );
    assert_eq!(ioapics, vec![(0, 0xfec0_0000, 0)]);
    assert_eq!(
        overrides,
        vec![(0, 9, 9, 0b1101)],
        "SCI: level, active high"
    );
}

#[test]
fn the_mcfg_gives_the_ecam_window() {
    let mem = written();
    let mcfg = table(&mem, xsdt_entries(&mem)[2], b"MCFG");
    assert_eq!(mcfg.len(), 36 + 8 + 16);
    assert_eq!(u64_at(&mcfg, 44), 0xe000_0000);
    assert_eq!(u16_at(&mcfg, 52), 0, "segment");
    assert_eq!((mcfg[54], mcfg[55]), (0, 0), "bus 0 only");
}

fn find(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_dsdt_has_the_root_bridge_routing_com1_and_s5() {
    let mem = written();
    let fadt = table(&mem, xsdt_entries(&mem)[0], b"FACP");
    let dsdt = table(&mem, u64_at(&fadt, 140), b"DSDT");
    for name in [
        &b"_SB_"[..],
        b"PCI0",
        b"_CRS",
        b"_PRT",
        b"MBRD",
        b"COM1",
        b"_S5_",
    ] {
        assert!(find(&dsdt, name), "{}", String::from_utf8_lossy(name));
    }
    let eisa = |id: &str| {
        let mut bytes = Vec::new();
        acpi_tables::aml::EISAName::new(id).to_aml_bytes(&mut bytes);
        bytes
    };
    use acpi_tables::Aml;
    for id in ["PNP0A08", "PNP0A03", "PNP0C02", "PNP0501"] {
        assert!(find(&dsdt, &eisa(id)), "{id}");
    }
    // Each _PRT entry: DWordPrefix, slot << 16 | 0xffff, INTA#, GSI mode, BytePrefix GSI.
    for (slot, gsi) in [(1u8, 17u8), (2, 18), (3, 19)] {
        let entry = [0x0c, 0xff, 0xff, slot, 0, 0x00, 0x00, 0x0a, gsi];
        assert!(find(&dsdt, &entry), "_PRT entry of slot {slot}");
    }
    // The I/O window: WordIO, producer, min 0x0d00, max 0xffff, length 0xf300.
    let io = [
        0x88, 0x0d, 0x00, 0x01, 0x0c, 0x03, 0, 0, 0x00, 0x0d, 0xff, 0xff, 0, 0, 0x00, 0xf3,
    ];
    assert!(find(&dsdt, &io), "the I/O window");
    // The ECAM window as a fixed memory resource of the motherboard.
    let mut ecam = vec![0x86, 0x09, 0x00, 0x00];
    ecam.extend_from_slice(&0xe000_0000u32.to_le_bytes());
    ecam.extend_from_slice(&0x10_0000u32.to_le_bytes());
    assert!(find(&dsdt, &ecam));
    // \_S5_: Package (2) { 5, 5 }.
    assert!(find(
        &dsdt,
        &[b'_', b'S', b'5', b'_', 0x12, 0x06, 0x02, 0x0a, 5, 0x0a, 5]
    ));
}
