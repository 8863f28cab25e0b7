//! ext4 inodes: the fields this reader uses, and the in-inode extended attribute area that
//! holds the rest of an inline-data file (`system.data`).
//!
//! Layout (little-endian): `i_mode` at 0, `i_size_lo` at 4, `i_blocks_lo` at 28, `i_flags` at
//! 32, `i_block[15]` (60 bytes: block map, extent tree root or inline data) at 40, `i_file_acl`
//! at 104, `i_size_high` at 108, `i_extra_isize` at 128. In-inode xattrs start at
//! `128 + i_extra_isize` with the magic `0xEA020000`, then entries of name length, name index,
//! value offset (from the first entry), value inode, value size, hash and the padded name.

use crate::bytes::{le16, le32, sub};
use crate::fs::FileKind;

pub(crate) const EXTENTS_FL: u32 = 0x8_0000;
pub(crate) const INLINE_DATA_FL: u32 = 0x1000_0000;
pub(crate) const ENCRYPT_FL: u32 = 0x800;
const XATTR_MAGIC: u32 = 0xEA02_0000;
/// `system.` name index, for `system.data`.
const XATTR_INDEX_SYSTEM: u8 = 7;

/// One inode, parsed.
#[derive(Debug, Clone)]
pub(crate) struct Inode {
    pub(crate) ino: u32,
    pub(crate) mode: u16,
    pub(crate) size: u64,
    pub(crate) flags: u32,
    pub(crate) blocks_lo: u32,
    pub(crate) file_acl: u32,
    pub(crate) block: [u8; 60],
    /// The in-inode xattr area (may be empty).
    pub(crate) xattrs: Vec<u8>,
}

impl Inode {
    pub(crate) fn parse(ino: u32, raw: &[u8]) -> Inode {
        let extra = if raw.len() > 128 {
            usize::from(le16(raw, 128))
        } else {
            0
        };
        let xattr_start = 128 + extra;
        let xattrs = if raw.len() > 128 && xattr_start + 4 <= raw.len() {
            raw.get(xattr_start..).unwrap_or(&[]).to_vec()
        } else {
            Vec::new()
        };
        Inode {
            ino,
            mode: le16(raw, 0),
            size: u64::from(le32(raw, 4)) | u64::from(le32(raw, 108)) << 32,
            flags: le32(raw, 32),
            blocks_lo: le32(raw, 28),
            file_acl: le32(raw, 104),
            block: crate::bytes::array(raw, 40),
            xattrs,
        }
    }

    pub(crate) fn kind(&self) -> FileKind {
        match self.mode & 0xF000 {
            0x8000 => FileKind::File,
            0x4000 => FileKind::Directory,
            0xA000 => FileKind::Symlink,
            _ => FileKind::Other,
        }
    }

    /// The value of the `system.data` xattr (the tail of an inline-data file), if any.
    pub(crate) fn inline_tail(&self) -> Option<&[u8]> {
        let x = &self.xattrs;
        if le32(x, 0) != XATTR_MAGIC {
            return None;
        }
        let entries = x.get(4..)?;
        let mut off = 0usize;
        // Each entry is at least 16 bytes; the list ends with four zero bytes.
        while off + 16 <= entries.len() {
            let name_len = usize::from(entries[off]);
            if name_len == 0 && le32(entries, off) == 0 {
                break;
            }
            let index = entries[off + 1];
            let value_off = usize::from(le16(entries, off + 2));
            let value_inum = le32(entries, off + 4);
            let value_size = le32(entries, off + 8) as usize;
            let name = sub(entries, off + 16, name_len);
            if index == XATTR_INDEX_SYSTEM && name == b"data" && value_inum == 0 {
                let v = sub(entries, value_off, value_size);
                return (v.len() == value_size).then_some(v);
            }
            off += (16 + name_len + 3) & !3;
        }
        None
    }

    /// Whether a symlink keeps its target in `i_block` (a "fast" symlink).
    pub(crate) fn is_fast_symlink(&self) -> bool {
        if self.flags & INLINE_DATA_FL != 0 || self.size >= 60 {
            return false;
        }
        if self.flags & EXTENTS_FL != 0 {
            // A slow symlink with extents starts with the extent header magic.
            return le16(&self.block, 0) != 0xF30A;
        }
        // No data blocks besides a possible xattr block.
        let acl_sectors = if self.file_acl != 0 { 1 } else { 0 };
        self.blocks_lo <= acl_sectors * 8
    }
}
