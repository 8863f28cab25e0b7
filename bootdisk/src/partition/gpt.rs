//! GUID partition tables.
//!
//! 1. LBA 1 holds the header: signature `EFI PART`, revision, header size (92 up to one
//!    sector), header CRC32 (computed over the header size with the CRC field zeroed), its own
//!    LBA, the backup header's LBA, the usable LBA range, the disk GUID, the entry array's LBA,
//!    the number of entries and their size (128 << n) and the entry array's CRC32.
//! 2. Each entry: type GUID (zero = unused), unique GUID, first and last LBA (inclusive),
//!    attributes (bit 2: legacy BIOS bootable) and a 36-character UTF-16LE name.
//! 3. The backup header sits in the last LBA and points at its own copy of the array. When the
//!    primary header or array fails any check, the backup is tried; when both fail, the error
//!    names the check each one failed ([`GptCheck`]).
//!
//! Sector sizes of 512 and 4096 bytes are tried, in that order.

use std::fmt;

use super::{Guid, Partition, PartitionError, PartitionTable, PartitionType, TableKind};
use crate::bytes::{array, crc32, le32, le64};
use crate::source::{read_vec, BlockSource};
use crate::Limits;

const SIGNATURE: &[u8; 8] = b"EFI PART";

/// The check a GPT header or entry array failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GptCheck {
    Unreadable(String),
    Signature,
    HeaderSize(u32),
    HeaderCrc { stored: u32, computed: u32 },
    MyLba { stored: u64, expected: u64 },
    EntrySize(u32),
    EntryCount(u32),
    EntriesOutsideDisk { lba: u64 },
    EntriesCrc { stored: u32, computed: u32 },
}

impl fmt::Display for GptCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable(e) => write!(f, "unreadable ({e})"),
            Self::Signature => write!(f, "no EFI PART signature"),
            Self::HeaderSize(s) => write!(f, "header size {s}"),
            Self::HeaderCrc { stored, computed } => {
                write!(f, "header CRC32 {stored:#010x}, computed {computed:#010x}")
            }
            Self::MyLba { stored, expected } => {
                write!(f, "header LBA {stored}, expected {expected}")
            }
            Self::EntrySize(s) => write!(f, "entry size {s}"),
            Self::EntryCount(n) => write!(f, "entry count {n}"),
            Self::EntriesOutsideDisk { lba } => {
                write!(f, "entry array at LBA {lba} outside the disk")
            }
            Self::EntriesCrc { stored, computed } => {
                write!(f, "entries CRC32 {stored:#010x}, computed {computed:#010x}")
            }
        }
    }
}

/// Whether LBA 1 (512- or 4096-byte sectors) starts with `EFI PART`.
pub fn has_header_signature(
    disk: &mut (impl BlockSource + ?Sized),
) -> Result<bool, crate::source::SourceError> {
    for ss in [512u64, 4096] {
        if disk.len() >= ss + 8 {
            let mut sig = [0u8; 8];
            disk.read_at(ss, &mut sig)?;
            if &sig == SIGNATURE {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Reads the GPT of `disk` (primary, else backup).
pub fn read(
    disk: &mut (impl BlockSource + ?Sized),
    limits: &Limits,
) -> Result<PartitionTable, PartitionError> {
    let mut sector_size = 512;
    for ss in [512u64, 4096] {
        let mut sig = [0u8; 8];
        if disk.len() >= ss + 8 && disk.read_at(ss, &mut sig).is_ok() && &sig == SIGNATURE {
            sector_size = ss;
            break;
        }
    }
    let last_lba = (disk.len() / sector_size).saturating_sub(1);
    let primary = match read_at_lba(disk, sector_size, 1, limits) {
        Ok(t) => return Ok(t),
        Err(check) => check,
    };
    // The backup header is in the last LBA of the disk.
    match read_at_lba(disk, sector_size, last_lba, limits) {
        Ok(mut t) => {
            log::warn!("GPT primary header: {primary}; using the backup header");
            if let TableKind::Gpt { used_backup, .. } = &mut t.kind {
                *used_backup = Some(primary);
            }
            Ok(t)
        }
        Err(backup) => Err(PartitionError::Gpt { primary, backup }),
    }
}

fn read_at_lba(
    disk: &mut (impl BlockSource + ?Sized),
    ss: u64,
    lba: u64,
    limits: &Limits,
) -> Result<PartitionTable, GptCheck> {
    let unreadable = |e: crate::source::SourceError| GptCheck::Unreadable(e.to_string());
    let hdr = read_vec(disk, lba * ss, ss, 4096, "GPT header").map_err(unreadable)?;
    if hdr.get(..8) != Some(&SIGNATURE[..]) {
        return Err(GptCheck::Signature);
    }
    let header_size = le32(&hdr, 12);
    if header_size < 92 || u64::from(header_size) > ss {
        return Err(GptCheck::HeaderSize(header_size));
    }
    let mut h = hdr[..header_size as usize].to_vec();
    let stored = le32(&h, 16);
    h[16..20].fill(0);
    let computed = crc32(&h);
    if stored != computed {
        return Err(GptCheck::HeaderCrc { stored, computed });
    }
    let my_lba = le64(&h, 24);
    if my_lba != lba {
        return Err(GptCheck::MyLba {
            stored: my_lba,
            expected: lba,
        });
    }
    let entries_lba = le64(&h, 72);
    let count = le32(&h, 80);
    let entry_size = le32(&h, 84);
    if entry_size < 128 || !entry_size.is_power_of_two() || entry_size > 4096 {
        return Err(GptCheck::EntrySize(entry_size));
    }
    if count as usize > limits.max_partitions {
        return Err(GptCheck::EntryCount(count));
    }
    let array_len = u64::from(count) * u64::from(entry_size);
    let outside = GptCheck::EntriesOutsideDisk { lba: entries_lba };
    let array_off = entries_lba.checked_mul(ss).ok_or(outside.clone())?;
    if array_off
        .checked_add(array_len)
        .is_none_or(|end| end > disk.len())
        || entries_lba < 2 && lba == 1
    {
        return Err(outside);
    }
    let array =
        read_vec(disk, array_off, array_len, 1 << 20, "GPT entry array").map_err(unreadable)?;
    let stored = le32(&h, 88);
    let computed = crc32(&array);
    if stored != computed {
        return Err(GptCheck::EntriesCrc { stored, computed });
    }
    let partitions = array
        .chunks_exact(entry_size as usize)
        .enumerate()
        .filter_map(|(i, e)| entry(i as u32 + 1, e, ss))
        .collect();
    Ok(PartitionTable {
        kind: TableKind::Gpt {
            disk_guid: Guid(array16(&h, 56)),
            sector_size: ss,
            used_backup: None,
        },
        partitions,
    })
}

fn array16(b: &[u8], off: usize) -> [u8; 16] {
    array(b, off)
}

fn entry(index: u32, e: &[u8], ss: u64) -> Option<Partition> {
    let kind = Guid(array16(e, 0));
    if kind.is_zero() {
        return None;
    }
    let first = le64(e, 32);
    let last = le64(e, 40);
    if last < first {
        log::warn!("GPT entry {index}: last LBA {last} before first LBA {first}; skipped");
        return None;
    }
    let (Some(start), Some(size)) = (first.checked_mul(ss), (last - first + 1).checked_mul(ss))
    else {
        log::warn!("GPT entry {index}: LBA {first}..{last} overflows; skipped");
        return None;
    };
    let units: Vec<u16> = (0..36)
        .map(|k| crate::bytes::le16(e, 56 + 2 * k))
        .take_while(|&c| c != 0)
        .collect();
    Some(Partition {
        index,
        start,
        size,
        kind: PartitionType::Gpt(kind),
        name: String::from_utf16_lossy(&units),
        unique_guid: Some(Guid(array16(e, 16))),
        bootable: le64(e, 48) & (1 << 2) != 0,
    })
}
