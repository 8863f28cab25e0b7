//! Partition tables: MBR (with extended/logical partitions) and GPT.
//!
//! [`read_partition_table`] looks, in this order, for:
//! 1. a GPT: an MBR with a `0xEE` entry (protective or hybrid), then the GPT header at LBA 1 for
//!    512-byte and then 4096-byte sectors, falling back to the backup header at the last LBA when
//!    the primary header or its entry array fails a check ([`gpt`]);
//! 2. an MBR: the `55 AA` signature, every status byte 0x00 or 0x80, at least one entry ([`mbr`]).
//!
//! A disk without either is not an error here: it may hold a filesystem directly (the caller
//! then probes offset 0 for one). A sector 0 that is a FAT boot sector (it also ends in `55 AA`)
//! is recognised as such and is not taken for an MBR.

pub mod gpt;
pub mod mbr;

use std::fmt;

use crate::source::{BlockSource, SourceError};
use crate::{LimitError, Limits};

/// A GUID as GPT stores it (the first three fields little-endian).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// Parses the text form `C12A7328-F81F-11D2-BA4B-00A0C93EC93B` (any case).
    pub const fn from_str_const(s: &str) -> Guid {
        let b = s.as_bytes();
        let mut text = [0u8; 16];
        let (mut i, mut n) = (0, 0);
        while i < b.len() && n < 32 {
            let v = match b[i] {
                c @ b'0'..=b'9' => c - b'0',
                c @ b'a'..=b'f' => c - b'a' + 10,
                c @ b'A'..=b'F' => c - b'A' + 10,
                _ => 16,
            };
            if v < 16 {
                text[n / 2] |= if n % 2 == 0 { v << 4 } else { v };
                n += 1;
            }
            i += 1;
        }
        // Text order to on-disk order: the first three fields are stored little-endian.
        let order = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15];
        let mut out = [0u8; 16];
        let mut k = 0;
        while k < 16 {
            out[k] = text[order[k]];
            k += 1;
        }
        Guid(out)
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02X}{:02X}{:02X}{:02X}-{:02X}{:02X}-{:02X}{:02X}-{:02X}{:02X}-",
            b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9]
        )?;
        b[10..].iter().try_for_each(|x| write!(f, "{x:02X}"))
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guid({self})")
    }
}

/// Well-known partition type GUIDs.
pub mod types {
    use super::Guid;
    pub const ESP: Guid = Guid::from_str_const("C12A7328-F81F-11D2-BA4B-00A0C93EC93B");
    pub const BIOS_BOOT: Guid = Guid::from_str_const("21686148-6449-6E6F-744E-656564454649");
    pub const XBOOTLDR: Guid = Guid::from_str_const("BC13C2FF-59E6-4262-A352-B275FD6F7172");
    pub const LINUX_FS: Guid = Guid::from_str_const("0FC63DAF-8483-4772-8E79-3D69D8477DE4");
    pub const LINUX_ROOT_X86_64: Guid =
        Guid::from_str_const("4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709");
    pub const LINUX_SWAP: Guid = Guid::from_str_const("0657FD6D-A4AB-43C4-84E5-0933C84B4F4F");
    pub const BASIC_DATA: Guid = Guid::from_str_const("EBD0A0A2-B9E5-4433-87C0-68B6B72699C7");
}

/// A partition's type: an MBR type byte or a GPT type GUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionType {
    Mbr(u8),
    Gpt(Guid),
}

impl PartitionType {
    /// An EFI system partition.
    pub fn is_esp(&self) -> bool {
        matches!(self, Self::Mbr(0xEF)) || *self == Self::Gpt(types::ESP)
    }
    /// An extended boot loader partition (BLS `XBOOTLDR`).
    pub fn is_xbootldr(&self) -> bool {
        matches!(self, Self::Mbr(0xEA)) || *self == Self::Gpt(types::XBOOTLDR)
    }
    /// A partition that never holds a filesystem (BIOS boot, swap, MBR extended container).
    pub fn is_never_filesystem(&self) -> bool {
        match self {
            Self::Mbr(t) => matches!(t, 0x05 | 0x0F | 0x85 | 0x82),
            Self::Gpt(g) => *g == types::BIOS_BOOT || *g == types::LINUX_SWAP,
        }
    }
}

impl fmt::Display for PartitionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mbr(t) => write!(f, "0x{t:02x}"),
            Self::Gpt(g) => write!(f, "{g}"),
        }
    }
}

/// One partition, with byte offsets into the disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Linux's numbering: GPT entry index + 1; MBR primaries 1-4, logical partitions from 5.
    pub index: u32,
    pub start: u64,
    pub size: u64,
    pub kind: PartitionType,
    /// GPT partition name (UTF-16 in the entry), empty for MBR.
    pub name: String,
    /// GPT unique partition GUID.
    pub unique_guid: Option<Guid>,
    /// MBR status 0x80, or GPT attribute bit 2 (legacy BIOS bootable).
    pub bootable: bool,
}

/// Which table a disk has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableKind {
    Mbr {
        disk_signature: u32,
    },
    Gpt {
        disk_guid: Guid,
        sector_size: u64,
        /// The primary header failed this check and the backup header was used.
        used_backup: Option<gpt::GptCheck>,
    },
}

/// A partition table and its partitions, in table order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionTable {
    pub kind: TableKind,
    pub partitions: Vec<Partition>,
}

/// Why a partition table cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("read partition table")]
    Read(#[from] SourceError),
    #[error("GPT primary header: {primary}; backup header: {backup}")]
    Gpt {
        primary: gpt::GptCheck,
        backup: gpt::GptCheck,
    },
    #[error("MBR entry {index}: {reason} (start {start}, sectors {sectors})")]
    MbrEntry {
        index: u32,
        reason: &'static str,
        start: u64,
        sectors: u64,
    },
    #[error("MBR extended partition chain loops at sector {0}")]
    MbrLoop(u64),
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// Reads the partition table of `disk`; `Ok(None)` when it has none (see the module docs).
pub fn read_partition_table(
    disk: &mut (impl BlockSource + ?Sized),
    limits: &Limits,
) -> Result<Option<PartitionTable>, PartitionError> {
    if disk.len() < 512 {
        return Ok(None);
    }
    let mut s0 = [0u8; 512];
    disk.read_at(0, &mut s0)?;
    let entries = mbr::raw_entries(&s0);
    let sig = s0[510] == 0x55 && s0[511] == 0xAA;
    if sig && entries.iter().any(|e| e.kind == 0xEE) {
        return gpt::read(disk, limits).map(Some);
    }
    if gpt::has_header_signature(disk)? {
        // A GPT without a protective MBR: not per the spec, but unambiguous.
        return gpt::read(disk, limits).map(Some);
    }
    if !sig || crate::fs::fat::looks_like_boot_sector(&s0) {
        return Ok(None);
    }
    if entries.iter().any(|e| e.status != 0 && e.status != 0x80) {
        return Ok(None);
    }
    if entries.iter().all(|e| e.kind == 0 || e.sectors == 0) {
        return Ok(None);
    }
    mbr::read(disk, &s0, limits).map(Some)
}
