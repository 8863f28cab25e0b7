//! ext2, ext3 and ext4, read-only.
//!
//! 1. The superblock is 1024 bytes at offset 1024 (magic `0xEF53` at 56): block size
//!    `1024 << s_log_block_size`, blocks and inodes per group, inode size, feature masks, UUID
//!    and label. Unknown or unreadable incompatible features are refused by name.
//! 2. Group descriptors (32 bytes, or `s_desc_size` with the 64bit feature) follow the
//!    superblock's block; with meta_bg, those of later meta groups sit at the start of their own
//!    groups. A descriptor gives its group's inode table.
//! 3. Inode `n` is entry `(n - 1) % inodes_per_group` of the inode table of group
//!    `(n - 1) / inodes_per_group` ([`inode`]).
//! 4. A file's data is mapped by an extent tree, by the classic direct/indirect block map, or is
//!    inline in the inode ([`map`]).
//! 5. Directories are read whole and scanned linearly; hashed (htree) directories keep their
//!    index in blocks that look like empty entries to a linear scan ([`dir`]).
//!
//! Journals are not replayed: a cloud image is cleanly unmounted, and `needs_recovery` is logged.

mod dir;
mod inode;
mod map;

use crate::bytes::{le16, le32, sub};
use crate::fs::{DirEntry, FileKind, FsError, FsInfo, FsKind};
use crate::source::{read_vec, BlockSource};
use crate::Limits;

pub(crate) use inode::Inode;

const FS: &str = "ext4";
const ROOT_INODE: u32 = 2;

const COMPAT_HAS_JOURNAL: u32 = 0x4;
const INCOMPAT_COMPRESSION: u32 = 0x1;
const INCOMPAT_FILETYPE: u32 = 0x2;
const INCOMPAT_RECOVER: u32 = 0x4;
const INCOMPAT_JOURNAL_DEV: u32 = 0x8;
const INCOMPAT_META_BG: u32 = 0x10;
const INCOMPAT_EXTENTS: u32 = 0x40;
const INCOMPAT_64BIT: u32 = 0x80;
const INCOMPAT_MMP: u32 = 0x100;
const INCOMPAT_FLEX_BG: u32 = 0x200;
const INCOMPAT_EA_INODE: u32 = 0x400;
const INCOMPAT_DIRDATA: u32 = 0x1000;
const INCOMPAT_CSUM_SEED: u32 = 0x2000;
const INCOMPAT_LARGEDIR: u32 = 0x4000;
const INCOMPAT_INLINE_DATA: u32 = 0x8000;
const INCOMPAT_ENCRYPT: u32 = 0x10000;
const INCOMPAT_CASEFOLD: u32 = 0x20000;
const INCOMPAT_KNOWN: u32 = INCOMPAT_FILETYPE
    | INCOMPAT_RECOVER
    | INCOMPAT_META_BG
    | INCOMPAT_EXTENTS
    | INCOMPAT_64BIT
    | INCOMPAT_MMP
    | INCOMPAT_FLEX_BG
    | INCOMPAT_EA_INODE
    | INCOMPAT_CSUM_SEED
    | INCOMPAT_LARGEDIR
    | INCOMPAT_INLINE_DATA
    | INCOMPAT_ENCRYPT
    | INCOMPAT_CASEFOLD;

/// ext2, ext3 or ext4 from the superblock's feature flags (as blkid tells them apart).
pub(crate) fn kind_from_superblock(sb: &[u8]) -> FsKind {
    let compat = le32(sb, 92);
    let incompat = le32(sb, 96);
    let ro_compat = le32(sb, 100);
    if incompat & !(INCOMPAT_FILETYPE | INCOMPAT_RECOVER | INCOMPAT_META_BG) != 0
        || ro_compat & !0x7 != 0
    {
        FsKind::Ext4
    } else if compat & COMPAT_HAS_JOURNAL != 0 {
        FsKind::Ext3
    } else {
        FsKind::Ext2
    }
}

/// The parts of the superblock this reader uses.
#[derive(Debug, Clone)]
struct Superblock {
    block_size: u64,
    blocks_count: u64,
    first_data_block: u64,
    blocks_per_group: u64,
    inodes_per_group: u32,
    inodes_count: u32,
    inode_size: u64,
    desc_size: u64,
    groups: u64,
    incompat: u32,
    first_meta_bg: u64,
    kind: FsKind,
    uuid: [u8; 16],
    label: String,
}

fn superblock(b: &[u8], device_len: u64) -> Result<Superblock, FsError> {
    let bad = |reason, value: u64| FsError::Superblock {
        fs: FS,
        reason,
        value,
    };
    if le16(b, 56) != 0xEF53 {
        return Err(bad("magic", u64::from(le16(b, 56))));
    }
    let log = le32(b, 24);
    if log > 6 {
        return Err(bad("block size log", u64::from(log)));
    }
    let block_size = 1024u64 << log;
    let incompat = le32(b, 96);
    for (bit, name) in [
        (INCOMPAT_COMPRESSION, "compression"),
        (INCOMPAT_JOURNAL_DEV, "journal_dev"),
        (INCOMPAT_DIRDATA, "dirdata"),
    ] {
        if incompat & bit != 0 {
            return Err(FsError::Unsupported {
                fs: FS,
                feature: name.into(),
            });
        }
    }
    if incompat & !INCOMPAT_KNOWN != 0 {
        return Err(FsError::Unsupported {
            fs: FS,
            feature: format!("incompat {:#x}", incompat & !INCOMPAT_KNOWN),
        });
    }
    if incompat & INCOMPAT_RECOVER != 0 {
        log::warn!("ext4 journal needs recovery; reading without replaying it");
    }
    let is64 = incompat & INCOMPAT_64BIT != 0;
    let blocks_lo = u64::from(le32(b, 4));
    let blocks_count = if is64 {
        blocks_lo | u64::from(le32(b, 336)) << 32
    } else {
        blocks_lo
    };
    if blocks_count == 0 || blocks_count.saturating_mul(block_size) > device_len {
        return Err(bad("block count larger than the device", blocks_count));
    }
    let first_data_block = u64::from(le32(b, 20));
    if first_data_block >= blocks_count || first_data_block > 1 {
        return Err(bad("first data block", first_data_block));
    }
    let blocks_per_group = u64::from(le32(b, 32));
    if blocks_per_group == 0 || blocks_per_group > 8 * block_size {
        return Err(bad("blocks per group", blocks_per_group));
    }
    let inodes_per_group = le32(b, 40);
    if inodes_per_group == 0 || u64::from(inodes_per_group) > 8 * block_size {
        return Err(bad("inodes per group", u64::from(inodes_per_group)));
    }
    let rev = le32(b, 76);
    let inode_size = if rev == 0 {
        128
    } else {
        u64::from(le16(b, 88))
    };
    if inode_size < 128 || inode_size > block_size || !inode_size.is_power_of_two() {
        return Err(bad("inode size", inode_size));
    }
    let desc_size = if is64 { u64::from(le16(b, 254)) } else { 32 };
    if !(32..=1024).contains(&desc_size) || !desc_size.is_power_of_two() || is64 && desc_size < 64 {
        return Err(bad("group descriptor size", desc_size));
    }
    let groups = (blocks_count - first_data_block).div_ceil(blocks_per_group);
    let label_raw = sub(b, 120, 16);
    let label_len = label_raw.iter().position(|&c| c == 0).unwrap_or(16);
    Ok(Superblock {
        block_size,
        blocks_count,
        first_data_block,
        blocks_per_group,
        inodes_per_group,
        inodes_count: le32(b, 0),
        inode_size,
        desc_size,
        groups,
        incompat,
        first_meta_bg: u64::from(le32(b, 260)),
        kind: kind_from_superblock(b),
        uuid: crate::bytes::array(b, 104),
        label: String::from_utf8_lossy(label_raw.get(..label_len).unwrap_or(&[]))
            .trim_end()
            .to_string(),
    })
}

/// An open ext2/3/4 filesystem.
#[derive(Debug)]
pub struct Ext4<S> {
    src: S,
    sb: Superblock,
    limits: Limits,
}

impl<S: BlockSource> Ext4<S> {
    /// Reads and checks the superblock of the filesystem in `src`.
    pub fn open(mut src: S, limits: &Limits) -> Result<Self, FsError> {
        let raw = read_vec(&mut src, 1024, 1024, 1024, "ext4 superblock")?;
        let sb = superblock(&raw, src.len())?;
        Ok(Self {
            src,
            sb,
            limits: *limits,
        })
    }

    pub fn info(&self) -> FsInfo {
        let u = &self.sb.uuid;
        let hex: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
        let uuid = if u.iter().all(|&b| b == 0) {
            String::new()
        } else {
            format!(
                "{}-{}-{}-{}-{}",
                hex[0..4].concat(),
                hex[4..6].concat(),
                hex[6..8].concat(),
                hex[8..10].concat(),
                hex[10..16].concat()
            )
        };
        FsInfo {
            kind: self.sb.kind,
            uuid,
            label: self.sb.label.clone(),
        }
    }

    pub(crate) fn block_size(&self) -> u64 {
        self.sb.block_size
    }

    pub(crate) fn has_filetype(&self) -> bool {
        self.sb.incompat & INCOMPAT_FILETYPE != 0
    }

    /// Reads `count` whole blocks starting at `block`.
    pub(crate) fn read_blocks(&mut self, block: u64, count: u64) -> Result<Vec<u8>, FsError> {
        if block
            .checked_add(count)
            .is_none_or(|end| end > self.sb.blocks_count)
        {
            return Err(FsError::Corrupt {
                fs: FS,
                what: "block number",
                value: block,
            });
        }
        let bs = self.sb.block_size;
        Ok(read_vec(
            &mut self.src,
            block * bs,
            count * bs,
            self.limits.max_file_size.max(bs),
            "ext4 read",
        )?)
    }

    /// Reads bytes `off..off + buf.len()` of block `block`.
    pub(crate) fn read_in_block(
        &mut self,
        block: u64,
        off: u64,
        buf: &mut [u8],
    ) -> Result<(), FsError> {
        if block >= self.sb.blocks_count || off + buf.len() as u64 > self.sb.block_size {
            return Err(FsError::Corrupt {
                fs: FS,
                what: "block number",
                value: block,
            });
        }
        Ok(self.src.read_at(block * self.sb.block_size + off, buf)?)
    }

    /// The block holding group descriptor `group`, and the descriptor's offset in it.
    fn descriptor_location(&self, group: u64) -> (u64, u64) {
        let sb = &self.sb;
        let per_block = sb.block_size / sb.desc_size;
        let desc_block = group / per_block;
        let off = (group % per_block) * sb.desc_size;
        if sb.incompat & INCOMPAT_META_BG != 0 && desc_block >= sb.first_meta_bg {
            // meta_bg: the descriptors of meta group m live in the first group of m, after its
            // superblock backup if it has one.
            let first_group = desc_block * per_block;
            let base = sb.first_data_block + first_group * sb.blocks_per_group;
            let has_super = u64::from(has_superblock_backup(first_group));
            return (base + has_super, off);
        }
        (sb.first_data_block + 1 + desc_block, off)
    }

    /// Reads inode `ino`.
    pub(crate) fn inode(&mut self, ino: u32) -> Result<Inode, FsError> {
        let bad = FsError::Corrupt {
            fs: FS,
            what: "inode number",
            value: u64::from(ino),
        };
        if ino == 0 || ino > self.sb.inodes_count {
            return Err(bad);
        }
        let group = u64::from((ino - 1) / self.sb.inodes_per_group);
        let index = u64::from((ino - 1) % self.sb.inodes_per_group);
        if group >= self.sb.groups {
            return Err(bad);
        }
        let (desc_block, desc_off) = self.descriptor_location(group);
        let mut desc = [0u8; 64];
        let dlen = self.sb.desc_size.min(64) as usize;
        self.read_in_block(desc_block, desc_off, &mut desc[..dlen])?;
        let mut table = u64::from(le32(&desc, 8));
        if self.sb.incompat & INCOMPAT_64BIT != 0 {
            table |= u64::from(le32(&desc, 0x28)) << 32;
        }
        let byte = index * self.sb.inode_size;
        let block = table + byte / self.sb.block_size;
        let mut raw = vec![0u8; self.sb.inode_size as usize];
        self.read_in_block(block, byte % self.sb.block_size, &mut raw)?;
        Ok(Inode::parse(ino, &raw))
    }

    /// Reads the regular file at `path`, at most `max` bytes.
    pub fn read_file(&mut self, path: &str, max: u64) -> Result<Vec<u8>, FsError> {
        let (ino, _) = self.resolve(path, true)?;
        if ino.kind() != FileKind::File {
            return Err(FsError::NotAFile(path.to_string()));
        }
        self.read_data(&ino, max)
    }

    /// The entries of the directory at `path`.
    pub fn read_dir(&mut self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        let (ino, _) = self.resolve(path, true)?;
        if ino.kind() != FileKind::Directory {
            return Err(FsError::NotADirectory(path.to_string()));
        }
        let entries = self.dir_entries(&ino)?;
        let mut out = Vec::new();
        for e in entries
            .into_iter()
            .filter(|e| e.name != "." && e.name != "..")
        {
            let kind = match e.kind {
                Some(k) => k,
                None => self.inode(e.inode)?.kind(),
            };
            out.push(DirEntry { name: e.name, kind });
        }
        Ok(out)
    }

    /// `path` with every symlink followed.
    pub fn canonical_path(&mut self, path: &str) -> Result<String, FsError> {
        Ok(self.resolve(path, true)?.1)
    }

    /// Whether `path` is a regular file (after symlinks); `false` when it does not exist.
    pub fn is_file(&mut self, path: &str) -> Result<bool, FsError> {
        match self.resolve(path, true) {
            Ok((ino, _)) => Ok(ino.kind() == FileKind::File),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Whether group `g` holds a superblock backup under sparse_super (0, 1 and powers of 3, 5, 7).
fn has_superblock_backup(g: u64) -> bool {
    if g <= 1 {
        return true;
    }
    [3u64, 5, 7].iter().any(|&base| {
        let mut p = base;
        while p < g {
            p = p.saturating_mul(base);
        }
        p == g
    })
}
