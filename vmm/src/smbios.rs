//! SMBIOS tables: what the guest reads in `/sys/class/dmi/id/` (and `dmidecode`), built as bytes
//! from [`SmbiosConfig`] and written once into guest memory at boot (and again at a reset in
//! place).
//!
//! How the guest finds them: Linux (booted without EFI) scans 0xf0000..0x100000 on 16-byte
//! boundaries for an entry point. The VMM writes the 32-bit entry point (`_SM_`, SMBIOS 2.8) at
//! [`SMBIOS_START`] and the structure table right after it:
//!
//! - type 0, BIOS Information: vendor Ferrovirt, this VMM's version, "BIOS characteristics not
//!   supported", and the flag that says the tables describe a virtual machine;
//! - type 1, System Information: manufacturer, product, version, serial number, UUID, SKU and
//!   family from the config (KubeVirt's `firmware.uuid`, `firmware.serial` and `smBIOS`);
//! - type 127, End of Table.
//!
//! The UUID is stored as SMBIOS 2.6 and later lay it out: its first three fields little-endian,
//! so the guest reads back the string it was given. The same bytes serve the QEMU backend: its
//! microvm firmware (qboot) takes the entry point and the table from fw_cfg, fills in the
//! table's address and installs them where the guest looks.

use vm_memory::{Bytes, GuestAddress, GuestMemoryError};

use crate::config::SmbiosConfig;
use crate::guest_memory::GuestMemoryMmap;

/// Where the entry point goes: the start of the area Linux scans.
pub const SMBIOS_START: u64 = 0xf_0000;
/// The end of that area.
pub const SMBIOS_END: u64 = 0x10_0000;
/// Bytes of the 32-bit entry point.
pub const ENTRY_POINT_LEN: usize = 0x1f;
/// Where the structure table goes, after the entry point.
pub const TABLE_START: u64 = SMBIOS_START + 0x20;

/// The SMBIOS version the tables follow (2.8).
const VERSION: (u8, u8) = (2, 8);
/// Byte 2 of the BIOS characteristics extension: "SMBIOS table describes a virtual machine".
const CHARACTERISTICS_VIRTUAL_MACHINE: u8 = 1 << 4;
/// BIOS characteristics: "BIOS characteristics not supported".
const CHARACTERISTICS_NOT_SUPPORTED: u64 = 1 << 3;
/// System wake-up type: power switch.
const WAKE_UP_POWER_SWITCH: u8 = 6;

/// Building or writing the tables failed.
#[derive(Debug, thiserror::Error)]
pub enum SmbiosError {
    #[error("smbios.uuid {0:?} is not a UUID")]
    Uuid(String),
    #[error("the SMBIOS tables need {0} bytes, more than fit below 1 MiB")]
    TooLarge(usize),
    #[error("write the SMBIOS tables")]
    Write(#[source] GuestMemoryError),
}

/// The entry point and the structure table it points to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmbiosTables {
    pub entry_point: Vec<u8>,
    pub structures: Vec<u8>,
}

/// One structure: its formatted area (after the 4-byte header) and its strings, which the
/// formatted area refers to by number from 1 in the order they are added.
struct Structure {
    bytes: Vec<u8>,
    strings: Vec<u8>,
    count: u8,
}

impl Structure {
    fn new(kind: u8, handle: u16) -> Self {
        let mut bytes = vec![kind, 0];
        bytes.extend(handle.to_le_bytes());
        Structure {
            bytes,
            strings: Vec::new(),
            count: 0,
        }
    }

    /// Adds the string's number to the formatted area (0, "not specified", when unset or
    /// empty).
    fn string(&mut self, value: Option<&str>) -> &mut Self {
        let number = match value.filter(|v| !v.is_empty()) {
            Some(value) => {
                self.strings.extend(value.as_bytes());
                self.strings.push(0);
                self.count += 1;
                self.count
            }
            None => 0,
        };
        self.bytes.push(number);
        self
    }

    fn put(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes.extend(bytes);
        self
    }

    /// The structure with its length set and its string set ended (two NULs when it has none).
    fn finish(&mut self, table: &mut Vec<u8>) {
        self.bytes[1] = self.bytes.len() as u8;
        table.extend(&self.bytes);
        if self.strings.is_empty() {
            table.extend([0, 0]);
        } else {
            table.extend(&self.strings);
            table.push(0);
        }
    }
}

/// The UUID's 16 bytes in SMBIOS order: time_low, time_mid and time_hi_and_version
/// little-endian, the rest as written.
fn uuid_bytes(text: &str) -> Result<[u8; 16], SmbiosError> {
    let mut bytes =
        contract::smbios::parse_uuid(text).ok_or_else(|| SmbiosError::Uuid(text.into()))?;
    bytes[0..4].reverse();
    bytes[4..6].reverse();
    bytes[6..8].reverse();
    Ok(bytes)
}

fn checksum(bytes: &[u8]) -> u8 {
    bytes
        .iter()
        .fold(0u8, |sum, b| sum.wrapping_add(*b))
        .wrapping_neg()
}

impl SmbiosTables {
    /// Builds the tables of `config`, the structure table at `table_address` (0 when the
    /// firmware places it, as qboot does).
    pub fn build(config: &SmbiosConfig, table_address: u32) -> Result<Self, SmbiosError> {
        let mut table = Vec::new();
        let mut largest = 0;
        let mut count = 0u16;
        let mut add = |structure: &mut Structure, table: &mut Vec<u8>| {
            let start = table.len();
            structure.finish(table);
            largest = largest.max(table.len() - start);
            count += 1;
        };

        let mut bios = Structure::new(0, 0);
        bios.string(Some("Ferrovirt"))
            .string(Some(env!("CARGO_PKG_VERSION")))
            .put(&0xe800u16.to_le_bytes()) // BIOS starting address segment
            .string(None) // release date
            .put(&[0]) // ROM size: 64 KiB
            .put(&CHARACTERISTICS_NOT_SUPPORTED.to_le_bytes())
            .put(&[0, CHARACTERISTICS_VIRTUAL_MACHINE])
            .put(&[0, 0, 0xff, 0xff]); // BIOS release 0.0, no embedded controller
        add(&mut bios, &mut table);

        let uuid = match &config.uuid {
            Some(text) => uuid_bytes(text)?,
            None => [0; 16],
        };
        let mut system = Structure::new(1, 0x100);
        system
            .string(config.manufacturer.as_deref())
            .string(config.product.as_deref())
            .string(config.version.as_deref())
            .string(config.serial.as_deref())
            .put(&uuid)
            .put(&[WAKE_UP_POWER_SWITCH])
            .string(config.sku.as_deref())
            .string(config.family.as_deref());
        add(&mut system, &mut table);

        add(&mut Structure::new(127, 0x7f00), &mut table);

        let end = TABLE_START + table.len() as u64;
        if end > SMBIOS_END || table.len() > usize::from(u16::MAX) {
            return Err(SmbiosError::TooLarge(ENTRY_POINT_LEN + table.len()));
        }
        let mut entry = Vec::with_capacity(ENTRY_POINT_LEN);
        entry.extend(b"_SM_");
        entry.push(0); // checksum
        entry.push(ENTRY_POINT_LEN as u8);
        entry.extend([VERSION.0, VERSION.1]);
        entry.extend((largest as u16).to_le_bytes());
        entry.extend([0; 6]); // entry point revision 0, formatted area
        entry.extend(b"_DMI_");
        entry.push(0); // intermediate checksum
        entry.extend((table.len() as u16).to_le_bytes());
        entry.extend(table_address.to_le_bytes());
        entry.extend(count.to_le_bytes());
        entry.push((VERSION.0 << 4) | VERSION.1);
        entry[0x15] = checksum(&entry[0x10..]);
        entry[4] = checksum(&entry);
        Ok(SmbiosTables {
            entry_point: entry,
            structures: table,
        })
    }

    /// Builds the tables where the VMM writes them.
    pub fn build_in_place(config: &SmbiosConfig) -> Result<Self, SmbiosError> {
        SmbiosTables::build(config, TABLE_START as u32)
    }

    /// Writes the entry point and the table into guest memory.
    pub fn write(&self, mem: &GuestMemoryMmap) -> Result<(), SmbiosError> {
        mem.write_slice(&self.entry_point, GuestAddress(SMBIOS_START))
            .and_then(|()| mem.write_slice(&self.structures, GuestAddress(TABLE_START)))
            .map_err(SmbiosError::Write)
    }
}

#[cfg(test)]
#[path = "smbios_tests.rs"]
mod tests;
