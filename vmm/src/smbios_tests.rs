//! The tables as a guest reads them: the entry point found by Linux's scan of 0xf0000..1 MiB,
//! its checksums, then each structure of the table it points to, with its strings.

use super::*;
use crate::vstate::memory::create_guest_memory;

fn config() -> SmbiosConfig {
    SmbiosConfig {
        uuid: Some("5B1E36BA-1b7b-4d6a-9a65-0f2cd1c2ad63".into()),
        serial: Some("serial-1".into()),
        manufacturer: Some("KubeVirt".into()),
        product: Some("None".into()),
        version: None,
        sku: Some(String::new()),
        family: Some("KubeVirt".into()),
    }
}

/// One structure as a guest parses it: type, formatted area, strings.
#[derive(Debug)]
struct Parsed {
    kind: u8,
    formatted: Vec<u8>,
    strings: Vec<String>,
}

impl Parsed {
    /// The string the byte at `offset` of the structure names (None for 0).
    fn string_at(&self, offset: usize) -> Option<&str> {
        let number = self.formatted[offset];
        (number != 0).then(|| self.strings[usize::from(number) - 1].as_str())
    }
}

/// Walks a structure table as Linux's `dmi_decode_table` does, until type 127.
fn parse(table: &[u8]) -> Vec<Parsed> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let len = usize::from(table[at + 1]);
        assert!(len >= 4, "structure at {at} has length {len}");
        let formatted = table[at..at + len].to_vec();
        let mut end = at + len;
        let mut strings = Vec::new();
        if table[end] == 0 && table[end + 1] == 0 {
            end += 2;
        } else {
            while table[end] != 0 {
                let nul = end + table[end..].iter().position(|b| *b == 0).unwrap();
                strings.push(String::from_utf8(table[end..nul].to_vec()).unwrap());
                end = nul + 1;
            }
            end += 1;
        }
        let kind = formatted[0];
        out.push(Parsed {
            kind,
            formatted,
            strings,
        });
        at = end;
        if kind == 127 {
            assert_eq!(at, table.len(), "bytes after the end-of-table structure");
            return out;
        }
    }
}

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |s, b| s.wrapping_add(*b))
}

/// Linux's `dmi_present`: the anchor, the length, both checksums; returns the table's length,
/// address and structure count and the version.
fn entry_point(entry: &[u8]) -> (usize, u32, u16, (u8, u8)) {
    assert_eq!(&entry[..4], b"_SM_");
    let len = usize::from(entry[5]);
    assert_eq!(len, 0x1f);
    assert_eq!(sum(&entry[..len]), 0, "entry point checksum");
    assert_eq!(&entry[0x10..0x15], b"_DMI_");
    assert_eq!(sum(&entry[0x10..0x1f]), 0, "intermediate checksum");
    let table_len = u16::from_le_bytes([entry[0x16], entry[0x17]]);
    let address = u32::from_le_bytes(entry[0x18..0x1c].try_into().unwrap());
    let count = u16::from_le_bytes([entry[0x1c], entry[0x1d]]);
    (usize::from(table_len), address, count, (entry[6], entry[7]))
}

/// Linux prints the UUID of SMBIOS 2.6 and later with `%pUl`: the first three fields
/// little-endian.
fn uuid_as_linux_prints_it(bytes: &[u8]) -> String {
    let b = bytes;
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{}",
        b[3],
        b[2],
        b[1],
        b[0],
        b[5],
        b[4],
        b[7],
        b[6],
        b[8],
        b[9],
        b[10..]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    )
}

#[test]
fn the_guest_finds_the_system_information_it_was_given() {
    let mem = create_guest_memory(crate::config::MIN_MEMORY_BYTES).unwrap();
    let tables = SmbiosTables::build_in_place(&config()).unwrap();
    tables.write(&mem).unwrap();

    // Linux's scan: every 16 bytes from 0xf0000 for the anchor.
    let mut area = vec![0u8; (SMBIOS_END - SMBIOS_START) as usize];
    mem.read_slice(&mut area, GuestAddress(SMBIOS_START))
        .unwrap();
    let found = (0..area.len())
        .step_by(16)
        .find(|at| area[*at..].starts_with(b"_SM_"))
        .expect("no entry point in 0xf0000..1 MiB");
    let (len, address, count, version) = entry_point(&area[found..]);
    assert_eq!(version, (2, 8));
    assert_eq!(u64::from(address), TABLE_START);
    let start = (u64::from(address) - SMBIOS_START) as usize;
    let structures = parse(&area[start..start + len]);
    assert_eq!(usize::from(count), structures.len());
    let kinds: Vec<u8> = structures.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, [0, 1, 127]);

    let bios = &structures[0];
    assert_eq!(bios.formatted.len(), 0x18);
    assert_eq!(bios.string_at(4), Some("Ferrovirt"));
    assert_eq!(bios.formatted[0x13] & (1 << 4), 1 << 4, "not marked a VM");

    let system = &structures[1];
    assert_eq!(system.formatted.len(), 0x1b);
    assert_eq!(system.string_at(4), Some("KubeVirt"));
    assert_eq!(system.string_at(5), Some("None"));
    assert_eq!(system.string_at(6), None, "version unset");
    assert_eq!(system.string_at(7), Some("serial-1"));
    assert_eq!(
        uuid_as_linux_prints_it(&system.formatted[8..24]),
        "5b1e36ba-1b7b-4d6a-9a65-0f2cd1c2ad63"
    );
    assert_eq!(
        system.string_at(0x19),
        None,
        "an empty SKU is not specified"
    );
    assert_eq!(system.string_at(0x1a), Some("KubeVirt"));
    // The largest structure's size is in the entry point.
    let largest = u16::from_le_bytes([area[found + 8], area[found + 9]]);
    assert!(usize::from(largest) >= 0x1b + "KubeVirt\0None\0serial-1\0KubeVirt\0\0".len());
}

#[test]
fn a_table_for_the_firmware_to_place_has_no_address() {
    let tables = SmbiosTables::build(&SmbiosConfig::default(), 0).unwrap();
    let (len, address, count, _) = entry_point(&tables.entry_point);
    assert_eq!((len, address, count), (tables.structures.len(), 0, 3));
    let structures = parse(&tables.structures);
    // Nothing given: every string of the system is "not specified", the UUID all zeros.
    let system = &structures[1];
    assert!((4..8)
        .chain([0x19, 0x1a])
        .all(|at| system.formatted[at] == 0));
    assert_eq!(system.formatted[8..24], [0; 16]);
}

#[test]
fn what_cannot_be_written_is_an_error() {
    let bad_uuid = SmbiosConfig {
        uuid: Some("fake-uuid".into()),
        ..SmbiosConfig::default()
    };
    assert!(matches!(
        SmbiosTables::build_in_place(&bad_uuid),
        Err(SmbiosError::Uuid(u)) if u == "fake-uuid"
    ));
    let huge = "x".repeat(40_000);
    let too_large = SmbiosConfig {
        serial: Some(huge.clone()),
        family: Some(huge),
        ..SmbiosConfig::default()
    };
    assert!(matches!(
        SmbiosTables::build_in_place(&too_large),
        Err(SmbiosError::TooLarge(_))
    ));
}
