//! Helpers for tests that need small disk images (feature `testing`; bootdisk's own tests and
//! the launcher's use it): the committed fixtures of `tests/fixtures/` (ext2/ext4, vfat and
//! qcow2 images, gzip-compressed), the content pattern their files follow, and builders for MBR
//! and GPT disks around filesystem images.
//!
//! Not for production code: the builders index and cast freely and panic on a bad layout.

use std::io::Read;

use crate::partition::Guid;

/// The decompressed fixture `name` (without `.gz`) from `tests/fixtures`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}.gz", env!("CARGO_MANIFEST_DIR"));
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut out)
        .expect("gunzip fixture");
    out
}

/// The content of a fixture file (see `tests/fixtures/make.sh`): 256-byte lines
/// `"<name> <n>"`, space-padded, newline-terminated, cut to `len`.
pub fn pattern(name: &str, len: usize) -> Vec<u8> {
    let mut s = Vec::with_capacity(len + 256);
    let mut i = 0;
    while s.len() < len {
        s.extend_from_slice(format!("{:<255}\n", format!("{name} {i}")).as_bytes());
        i += 1;
    }
    s.truncate(len);
    s
}

pub const SECTOR: usize = 512;

/// One partition for [`gpt`] or [`mbr`]: its table slot (1-based), type, first sector, the
/// filesystem bytes placed there and the size in sectors (at least the data).
pub struct Part {
    pub index: u32,
    pub gpt_type: Guid,
    pub mbr_type: u8,
    pub start: u64,
    pub sectors: u64,
    pub data: Vec<u8>,
    pub name: &'static str,
    pub bootable: bool,
}

impl Part {
    pub fn new(index: u32, start: u64, data: Vec<u8>) -> Self {
        let sectors = (data.len() as u64).div_ceil(SECTOR as u64).max(1);
        Self {
            index,
            gpt_type: crate::partition::types::LINUX_FS,
            mbr_type: 0x83,
            start,
            sectors,
            data,
            name: "",
            bootable: false,
        }
    }
    pub fn gpt_type(mut self, t: Guid) -> Self {
        self.gpt_type = t;
        self
    }
    pub fn mbr_type(mut self, t: u8) -> Self {
        self.mbr_type = t;
        self
    }
    pub fn name(mut self, n: &'static str) -> Self {
        self.name = n;
        self
    }
    pub fn sectors(mut self, n: u64) -> Self {
        self.sectors = n;
        self
    }
    pub fn bootable(mut self) -> Self {
        self.bootable = true;
        self
    }
    pub fn end(&self) -> u64 {
        self.start + self.sectors
    }
}

fn place(disk: &mut [u8], parts: &[Part]) {
    for p in parts.iter().filter(|p| !p.data.is_empty()) {
        let off = p.start as usize * SECTOR;
        disk[off..off + p.data.len()].copy_from_slice(&p.data);
    }
}

fn mbr_entry(sector: &mut [u8], slot: usize, status: u8, kind: u8, start: u32, sectors: u32) {
    let e = &mut sector[446 + 16 * slot..446 + 16 * (slot + 1)];
    e[0] = status;
    e[4] = kind;
    e[8..12].copy_from_slice(&start.to_le_bytes());
    e[12..16].copy_from_slice(&sectors.to_le_bytes());
}

/// An MBR disk of `total` sectors with `parts` as primary partitions (slots 1-4).
pub fn mbr(total: u64, parts: &[Part]) -> Vec<u8> {
    let mut disk = vec![0u8; total as usize * SECTOR];
    place(&mut disk, parts);
    disk[440..444].copy_from_slice(&0xC0FFEE00u32.to_le_bytes());
    for p in parts {
        let status = if p.bootable { 0x80 } else { 0 };
        mbr_entry(
            &mut disk,
            p.index as usize - 1,
            status,
            p.mbr_type,
            p.start as u32,
            p.sectors as u32,
        );
    }
    disk[510] = 0x55;
    disk[511] = 0xAA;
    disk
}

/// Adds an extended partition in MBR slot `slot` (1-based) at `ext_start` holding `logical`,
/// chained through EBRs one sector before each logical partition.
pub fn add_extended(
    disk: &mut [u8],
    slot: usize,
    ext_start: u64,
    ext_sectors: u64,
    logical: &[Part],
) {
    mbr_entry(
        disk,
        slot - 1,
        0,
        0x05,
        ext_start as u32,
        ext_sectors as u32,
    );
    place(disk, logical);
    for (i, p) in logical.iter().enumerate() {
        let ebr = p.start - 1;
        let s = &mut disk[ebr as usize * SECTOR..(ebr as usize + 1) * SECTOR];
        mbr_entry(s, 0, 0, p.mbr_type, 1, p.sectors as u32);
        if let Some(next) = logical.get(i + 1) {
            mbr_entry(
                s,
                1,
                0,
                0x05,
                (next.start - 1 - ext_start) as u32,
                (next.sectors + 1) as u32,
            );
        }
        s[510] = 0x55;
        s[511] = 0xAA;
    }
}

pub const DISK_GUID: Guid = Guid::from_str_const("3B8F8425-20E0-4F3B-907F-1A25A76F98E8");

/// A GPT disk of `total` 512-byte sectors with `parts` (128 entries, arrays at LBA 2 and
/// before the backup header).
pub fn gpt(total: u64, parts: &[Part]) -> Vec<u8> {
    let mut disk = vec![0u8; total as usize * SECTOR];
    place(&mut disk, parts);
    mbr_entry(
        &mut disk,
        0,
        0,
        0xEE,
        1,
        (total - 1).min(u32::MAX as u64) as u32,
    );
    disk[510] = 0x55;
    disk[511] = 0xAA;
    let mut array = vec![0u8; 128 * 128];
    for p in parts {
        let e = &mut array[(p.index as usize - 1) * 128..p.index as usize * 128];
        e[0..16].copy_from_slice(&p.gpt_type.0);
        let mut unique = [0u8; 16];
        unique[0] = p.index as u8;
        unique[15] = 0x42;
        e[16..32].copy_from_slice(&unique);
        e[32..40].copy_from_slice(&p.start.to_le_bytes());
        e[40..48].copy_from_slice(&(p.end() - 1).to_le_bytes());
        let attrs: u64 = if p.bootable { 1 << 2 } else { 0 };
        e[48..56].copy_from_slice(&attrs.to_le_bytes());
        for (i, u) in p.name.encode_utf16().enumerate() {
            e[56 + 2 * i..58 + 2 * i].copy_from_slice(&u.to_le_bytes());
        }
    }
    let array_crc = crate::crc32(&array);
    let array_sectors = (array.len() / SECTOR) as u64;
    let last = total - 1;
    for (my, alt, entries) in [(1, last, 2), (last, 1, last - array_sectors)] {
        let mut h = vec![0u8; 92];
        h[0..8].copy_from_slice(b"EFI PART");
        h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
        h[12..16].copy_from_slice(&92u32.to_le_bytes());
        h[24..32].copy_from_slice(&my.to_le_bytes());
        h[32..40].copy_from_slice(&alt.to_le_bytes());
        h[40..48].copy_from_slice(&(2 + array_sectors).to_le_bytes());
        h[48..56].copy_from_slice(&(last - array_sectors - 1).to_le_bytes());
        h[56..72].copy_from_slice(&DISK_GUID.0);
        h[72..80].copy_from_slice(&entries.to_le_bytes());
        h[80..84].copy_from_slice(&128u32.to_le_bytes());
        h[84..88].copy_from_slice(&128u32.to_le_bytes());
        h[88..92].copy_from_slice(&array_crc.to_le_bytes());
        let crc = crate::crc32(&h);
        h[16..20].copy_from_slice(&crc.to_le_bytes());
        let off = my as usize * SECTOR;
        disk[off..off + 92].copy_from_slice(&h);
        let aoff = entries as usize * SECTOR;
        disk[aoff..aoff + array.len()].copy_from_slice(&array);
    }
    disk
}

/// Sector count for a disk holding partitions up to `end` plus the backup GPT.
pub fn gpt_total(end: u64) -> u64 {
    end + 34
}
