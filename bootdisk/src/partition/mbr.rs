//! MBR partition tables.
//!
//! Sector 0 ends in `55 AA` and holds four 16-byte entries at offset 446: status (0x80 =
//! bootable), CHS start, type byte, CHS end, start LBA and sector count (little-endian u32; CHS is
//! ignored). A type 0x05, 0x0F or 0x85 entry is an extended partition: its first sector is an EBR
//! (same layout) whose entry 0 is a logical partition, relative to that EBR, and whose entry 1
//! points to the next EBR, relative to the start of the extended partition. The chain is followed
//! at most [`Limits::max_logical_partitions`] links and a sector seen twice is a loop.

use super::{Partition, PartitionError, PartitionTable, PartitionType, TableKind};
use crate::bytes::le32;
use crate::source::BlockSource;
use crate::{LimitError, Limits};

const SECTOR: u64 = 512;

/// One raw 16-byte entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawEntry {
    pub status: u8,
    pub kind: u8,
    pub start: u32,
    pub sectors: u32,
}

/// The four entries of an MBR or EBR sector.
pub fn raw_entries(sector: &[u8; 512]) -> [RawEntry; 4] {
    let e = |i: usize| {
        let b = &sector[446 + 16 * i..446 + 16 * (i + 1)];
        RawEntry {
            status: b[0],
            kind: b[4],
            start: le32(b, 8),
            sectors: le32(b, 12),
        }
    };
    [e(0), e(1), e(2), e(3)]
}

fn is_extended(kind: u8) -> bool {
    matches!(kind, 0x05 | 0x0F | 0x85)
}

/// Reads the MBR in `s0` (already read from sector 0) and its logical partitions.
pub fn read(
    disk: &mut (impl BlockSource + ?Sized),
    s0: &[u8; 512],
    limits: &Limits,
) -> Result<PartitionTable, PartitionError> {
    let disk_sectors = disk.len() / SECTOR;
    let mut partitions = Vec::new();
    let mut extended = None;
    for (i, e) in raw_entries(s0).iter().enumerate() {
        let index = i as u32 + 1;
        if e.kind == 0 || e.sectors == 0 {
            continue;
        }
        check_entry(
            index,
            u64::from(e.start),
            u64::from(e.sectors),
            disk_sectors,
        )?;
        if is_extended(e.kind) {
            if extended.is_none() {
                extended = Some((u64::from(e.start), u64::from(e.sectors)));
            }
            continue;
        }
        partitions.push(partition(index, u64::from(e.start), e));
    }
    if let Some((ext_start, ext_sectors)) = extended {
        read_logical(disk, ext_start, ext_sectors, limits, &mut partitions)?;
    }
    Ok(PartitionTable {
        kind: TableKind::Mbr {
            disk_signature: le32(s0, 440),
        },
        partitions,
    })
}

fn partition(index: u32, start_sector: u64, e: &RawEntry) -> Partition {
    Partition {
        index,
        start: start_sector * SECTOR,
        size: u64::from(e.sectors) * SECTOR,
        kind: PartitionType::Mbr(e.kind),
        name: String::new(),
        unique_guid: None,
        bootable: e.status == 0x80,
    }
}

fn check_entry(index: u32, start: u64, sectors: u64, disk: u64) -> Result<(), PartitionError> {
    let bad = |reason| PartitionError::MbrEntry {
        index,
        reason,
        start,
        sectors,
    };
    if start == 0 {
        return Err(bad("starts at sector 0"));
    }
    if start >= disk {
        return Err(bad("starts past the end of the disk"));
    }
    Ok(())
}

fn read_logical(
    disk: &mut (impl BlockSource + ?Sized),
    ext_start: u64,
    ext_sectors: u64,
    limits: &Limits,
    out: &mut Vec<Partition>,
) -> Result<(), PartitionError> {
    let disk_sectors = disk.len() / SECTOR;
    let mut seen = Vec::new();
    let mut ebr = ext_start;
    let mut index = 5u32;
    loop {
        if seen.contains(&ebr) {
            return Err(PartitionError::MbrLoop(ebr));
        }
        if seen.len() >= limits.max_logical_partitions {
            return Err(LimitError {
                what: "MBR logical partitions",
                value: seen.len() as u64 + 1,
                limit: limits.max_logical_partitions as u64,
            }
            .into());
        }
        seen.push(ebr);
        let mut sector = [0u8; 512];
        disk.read_at(ebr * SECTOR, &mut sector)?;
        if sector[510] != 0x55 || sector[511] != 0xAA {
            log::warn!("EBR at sector {ebr} has no signature; logical partitions end there");
            return Ok(());
        }
        let [first, next, ..] = raw_entries(&sector);
        if first.kind != 0 && first.sectors != 0 {
            let start = ebr + u64::from(first.start);
            check_entry(index, start, u64::from(first.sectors), disk_sectors)?;
            out.push(partition(index, start, &first));
            index += 1;
        }
        if next.kind == 0 || next.sectors == 0 || !is_extended(next.kind) {
            return Ok(());
        }
        let rel = u64::from(next.start);
        if rel == 0 || rel >= ext_sectors {
            log::warn!("EBR at sector {ebr} links outside the extended partition ({rel})");
            return Ok(());
        }
        ebr = ext_start + rel;
    }
}
