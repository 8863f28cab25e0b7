//! FAT12, FAT16 and FAT32 (vfat), read-only.
//!
//! 1. The boot sector (BPB): bytes per sector (512..=4096), sectors per cluster (a power of
//!    two), reserved sectors, number of FATs, root directory entries (FAT12/16), total sectors,
//!    sectors per FAT (16-bit field; 0 means FAT32, whose 32-bit field, root cluster and active
//!    FAT follow). The volume id and label sit after the BPB, at 39/43 or, on FAT32, 67/71.
//! 2. The FAT type is FAT32 when the 16-bit FAT size is 0 (as Linux decides), else FAT12 below
//!    4085 clusters and FAT16 from there.
//! 3. Data clusters are numbered from 2; cluster `c` starts at sector
//!    `reserved + fats * fat_size + root_dir_sectors + (c - 2) * sectors_per_cluster`.
//! 4. The FAT maps each cluster to the next of its file (12-bit packed, 16-bit, or the low 28 bits
//!    of 32), with end-of-chain markers from 0xFF8 / 0xFFF8 / 0x0FFFFFF8. Chains are bounded by
//!    the cluster count, so a loop ends as an error.
//! 5. Directories ([`dir`]): 32-byte entries with 8.3 names, preceded by long-name entries.
//!
//! The label is the root directory's volume-label entry if there is one, else the BPB's (as
//! blkid reports it); `NO NAME` means none.

mod dir;

use crate::bytes::{le16, le32};
use crate::fs::{DirEntry, FileKind, FsError, FsInfo, FsKind};
use crate::source::{read_vec, BlockSource};
use crate::{LimitError, Limits};

pub(crate) use dir::FatEntry;

const FS: &str = "vfat";

/// Boot sector geometry.
#[derive(Debug, Clone)]
struct Bpb {
    bytes_per_sector: u64,
    sectors_per_cluster: u64,
    reserved: u64,
    fats: u64,
    root_entries: u64,
    total_sectors: u64,
    fat_size: u64,
    root_cluster: u32,
    active_fat: u64,
    volume_id: u32,
    label: [u8; 11],
}

fn parse_bpb(s: &[u8]) -> Option<Bpb> {
    if s.len() < 512 || !matches!(s[0], 0xEB | 0xE9) {
        return None;
    }
    let bytes_per_sector = u64::from(le16(s, 11));
    let sectors_per_cluster = u64::from(s[13]);
    let reserved = u64::from(le16(s, 14));
    let fats = u64::from(s[16]);
    let root_entries = u64::from(le16(s, 17));
    let total16 = u64::from(le16(s, 19));
    let fat16 = u64::from(le16(s, 22));
    let total = if total16 != 0 {
        total16
    } else {
        u64::from(le32(s, 32))
    };
    let is32 = fat16 == 0;
    let fat_size = if is32 { u64::from(le32(s, 36)) } else { fat16 };
    let ok = matches!(bytes_per_sector, 512 | 1024 | 2048 | 4096)
        && sectors_per_cluster.is_power_of_two()
        && reserved >= 1
        && (1..=4).contains(&fats)
        && total > 0
        && fat_size > 0
        && (is32 || root_entries > 0);
    if !ok {
        return None;
    }
    let (id_off, label_off) = if is32 { (67, 71) } else { (39, 43) };
    let flags = le16(s, 40);
    Some(Bpb {
        bytes_per_sector,
        sectors_per_cluster,
        reserved,
        fats,
        root_entries,
        total_sectors: total,
        fat_size,
        root_cluster: if is32 { le32(s, 44) } else { 0 },
        active_fat: if is32 && flags & 0x80 != 0 {
            u64::from(flags & 0xF)
        } else {
            0
        },
        volume_id: le32(s, id_off),
        label: crate::bytes::array(s, label_off),
    })
}

impl Bpb {
    fn root_dir_sectors(&self) -> u64 {
        (self.root_entries * 32).div_ceil(self.bytes_per_sector)
    }
    fn first_data_sector(&self) -> u64 {
        self.reserved + self.fats * self.fat_size + self.root_dir_sectors()
    }
    fn clusters(&self) -> u64 {
        self.total_sectors.saturating_sub(self.first_data_sector()) / self.sectors_per_cluster
    }
    fn kind(&self) -> FsKind {
        if self.root_cluster != 0 || self.root_entries == 0 {
            FsKind::Fat32
        } else if self.clusters() < 4085 {
            FsKind::Fat12
        } else {
            FsKind::Fat16
        }
    }
}

/// Whether sector 0 is a FAT boot sector (and so not an MBR).
pub(crate) fn looks_like_boot_sector(s: &[u8]) -> bool {
    parse_bpb(s).is_some_and(|b| b.first_data_sector() < b.total_sectors)
}

/// The FAT type of the boot sector `s`, if it is one.
pub(crate) fn kind_from_boot_sector(s: &[u8]) -> Option<FsKind> {
    let b = parse_bpb(s)?;
    (b.first_data_sector() < b.total_sectors).then(|| b.kind())
}

/// An open FAT filesystem.
#[derive(Debug)]
pub struct Fat<S> {
    src: S,
    bpb: Bpb,
    kind: FsKind,
    limits: Limits,
    info: FsInfo,
    /// One cached FAT sector: its number and contents.
    fat_cache: Option<(u64, Vec<u8>)>,
}

impl<S: BlockSource> Fat<S> {
    /// Reads and checks the boot sector of the filesystem in `src`.
    pub fn open(mut src: S, limits: &Limits) -> Result<Self, FsError> {
        let s = read_vec(&mut src, 0, 512, 512, "FAT boot sector")?;
        let bpb = parse_bpb(&s).ok_or(FsError::Superblock {
            fs: FS,
            reason: "invalid BPB",
            value: u64::from(le16(&s, 11)),
        })?;
        if bpb.first_data_sector() >= bpb.total_sectors {
            return Err(FsError::Superblock {
                fs: FS,
                reason: "data area starts past the end",
                value: bpb.first_data_sector(),
            });
        }
        if bpb.total_sectors.saturating_mul(bpb.bytes_per_sector) > src.len() {
            return Err(FsError::Superblock {
                fs: FS,
                reason: "total sectors larger than the device",
                value: bpb.total_sectors,
            });
        }
        let kind = bpb.kind();
        let mut fs = Self {
            src,
            bpb,
            kind,
            limits: *limits,
            info: FsInfo {
                kind,
                uuid: String::new(),
                label: String::new(),
            },
            fat_cache: None,
        };
        fs.info = fs.read_info();
        Ok(fs)
    }

    pub fn info(&self) -> FsInfo {
        self.info.clone()
    }

    fn read_info(&mut self) -> FsInfo {
        let id = self.bpb.volume_id;
        let mut label = self.root_label().unwrap_or_default();
        if label.is_empty() {
            label = trim_label(&self.bpb.label);
        }
        if label == "NO NAME" {
            label.clear();
        }
        FsInfo {
            kind: self.kind,
            uuid: format!("{:04X}-{:04X}", id >> 16, id & 0xFFFF),
            label,
        }
    }

    fn cluster_bytes(&self) -> u64 {
        self.bpb.sectors_per_cluster * self.bpb.bytes_per_sector
    }

    /// The FAT entry for `cluster`.
    fn next_cluster(&mut self, cluster: u32) -> Result<u32, FsError> {
        let bps = self.bpb.bytes_per_sector;
        let byte = match self.kind {
            FsKind::Fat12 => u64::from(cluster) + u64::from(cluster) / 2,
            FsKind::Fat16 => u64::from(cluster) * 2,
            _ => u64::from(cluster) * 4,
        };
        let fat_start =
            self.bpb.reserved + self.bpb.active_fat.min(self.bpb.fats - 1) * self.bpb.fat_size;
        let sector = fat_start + byte / bps;
        // A FAT12 entry may straddle two sectors: read them together.
        let cached = matches!(&self.fat_cache, Some((s, _)) if *s == sector);
        if !cached {
            let data = read_vec(&mut self.src, sector * bps, 2 * bps, 8192, "FAT sector")
                .or_else(|_| read_vec(&mut self.src, sector * bps, bps, 8192, "FAT sector"))?;
            self.fat_cache = Some((sector, data));
        }
        let data = self
            .fat_cache
            .as_ref()
            .map(|(_, d)| d.as_slice())
            .unwrap_or(&[]);
        let off = (byte % bps) as usize;
        Ok(match self.kind {
            FsKind::Fat12 => {
                let v = le16(data, off);
                u32::from(if cluster % 2 == 1 { v >> 4 } else { v & 0xFFF })
            }
            FsKind::Fat16 => u32::from(le16(data, off)),
            _ => le32(data, off) & 0x0FFF_FFFF,
        })
    }

    fn is_end(&self, v: u32) -> bool {
        match self.kind {
            FsKind::Fat12 => v >= 0xFF8,
            FsKind::Fat16 => v >= 0xFFF8,
            _ => v >= 0x0FFF_FFF8,
        }
    }

    /// Reads the chain starting at `first`, at most `max` bytes (`None`: the whole chain, for
    /// directories, bounded by the directory size limit).
    fn read_chain(&mut self, first: u32, size: Option<u64>) -> Result<Vec<u8>, FsError> {
        let cb = self.cluster_bytes();
        let clusters = self.bpb.clusters();
        let limit = size.unwrap_or(self.limits.max_dir_size);
        let mut out = Vec::new();
        let mut c = first;
        let mut steps = 0u64;
        // Clusters already in this chain: a loop inside a file's length is caught too.
        let mut seen = std::collections::HashSet::new();
        loop {
            if size.is_some_and(|s| out.len() as u64 >= s) {
                break;
            }
            if c < 2 || u64::from(c) >= clusters + 2 {
                return Err(FsError::Corrupt {
                    fs: FS,
                    what: "cluster number",
                    value: u64::from(c),
                });
            }
            steps += 1;
            if steps > clusters || !seen.insert(c) {
                return Err(FsError::Corrupt {
                    fs: FS,
                    what: "cluster chain loop at",
                    value: u64::from(c),
                });
            }
            LimitError::check(
                "vfat directory size",
                out.len() as u64 + cb,
                limit.max(cb) + cb,
            )?;
            let sector =
                self.bpb.first_data_sector() + u64::from(c - 2) * self.bpb.sectors_per_cluster;
            let data = read_vec(
                &mut self.src,
                sector * self.bpb.bytes_per_sector,
                cb,
                cb,
                "FAT cluster",
            )?;
            out.extend_from_slice(&data);
            let next = self.next_cluster(c)?;
            if self.is_end(next) {
                break;
            }
            c = next;
        }
        if let Some(s) = size {
            if (out.len() as u64) < s {
                return Err(FsError::Corrupt {
                    fs: FS,
                    what: "chain shorter than file size",
                    value: s,
                });
            }
            out.truncate(s as usize);
        }
        Ok(out)
    }

    /// The raw entries of the root directory.
    fn root_dir(&mut self) -> Result<Vec<u8>, FsError> {
        if self.kind == FsKind::Fat32 {
            let root = self.bpb.root_cluster;
            return self.read_chain(root, None);
        }
        let b = &self.bpb;
        let off = (b.reserved + b.fats * b.fat_size) * b.bytes_per_sector;
        let len = b.root_entries * 32;
        Ok(read_vec(
            &mut self.src,
            off,
            len,
            1 << 21,
            "FAT root directory",
        )?)
    }

    fn root_label(&mut self) -> Option<String> {
        let raw = self.root_dir().ok()?;
        dir::volume_label(&raw)
    }

    /// The entry at `path`, or `None` for the root directory.
    fn lookup(&mut self, path: &str) -> Result<Option<FatEntry>, FsError> {
        let mut current: Option<FatEntry> = None;
        let mut walked = String::new();
        for (i, name) in crate::fs::components(path).enumerate() {
            if i >= self.limits.max_path_components {
                return Err(FsError::PathTooLong(path.into()));
            }
            let raw = match &current {
                None => self.root_dir()?,
                Some(e) if e.is_dir() => {
                    if e.cluster == 0 {
                        self.root_dir()?
                    } else {
                        self.read_chain(e.cluster, None)?
                    }
                }
                Some(_) => return Err(FsError::NotADirectory(walked)),
            };
            walked.push('/');
            walked.push_str(name);
            let entries = dir::parse(&raw, self.limits.max_dir_entries)?;
            let found = entries.into_iter().find(|e| e.matches(name));
            match found {
                Some(e) => current = Some(e),
                None => return Err(FsError::NotFound(walked)),
            }
        }
        Ok(current)
    }

    pub fn read_file(&mut self, path: &str, max: u64) -> Result<Vec<u8>, FsError> {
        let e = self.lookup(path)?;
        match e {
            Some(e) if !e.is_dir() => {
                LimitError::check("file size", u64::from(e.size), max)?;
                if e.size == 0 {
                    return Ok(Vec::new());
                }
                self.read_chain(e.cluster, Some(u64::from(e.size)))
            }
            _ => Err(FsError::NotAFile(path.to_string())),
        }
    }

    pub fn read_dir(&mut self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        let raw = match self.lookup(path)? {
            None => self.root_dir()?,
            Some(e) if e.is_dir() && e.cluster == 0 => self.root_dir()?,
            Some(e) if e.is_dir() => self.read_chain(e.cluster, None)?,
            Some(_) => return Err(FsError::NotADirectory(path.to_string())),
        };
        Ok(dir::parse(&raw, self.limits.max_dir_entries)?
            .into_iter()
            .filter(|e| e.name != "." && e.name != "..")
            .map(|e| DirEntry {
                kind: if e.is_dir() {
                    FileKind::Directory
                } else {
                    FileKind::File
                },
                name: e.name,
            })
            .collect())
    }

    /// FAT has no symlinks; this is `path` with each component's stored name.
    pub fn canonical_path(&mut self, path: &str) -> Result<String, FsError> {
        self.lookup(path)?;
        let mut out = String::new();
        for c in crate::fs::components(path) {
            out.push('/');
            out.push_str(c);
        }
        Ok(if out.is_empty() { "/".into() } else { out })
    }

    pub fn is_file(&mut self, path: &str) -> Result<bool, FsError> {
        match self.lookup(path) {
            Ok(Some(e)) => Ok(!e.is_dir()),
            Ok(None) => Ok(false),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

fn trim_label(raw: &[u8]) -> String {
    let s: String = raw.iter().map(|&b| char::from(b)).collect();
    s.trim_end_matches([' ', '\0']).to_string()
}
