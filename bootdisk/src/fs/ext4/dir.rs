//! ext4 directories and path resolution.
//!
//! A directory's data is a sequence of blocks, each a chain of entries: inode (u32), record
//! length (u16; in 64 KiB blocks 0 or 65535 mean the whole block), name length (u8, or u16
//! without the filetype feature), file type (u8) and the name. Inode 0 marks an unused record.
//! Hashed (htree) directories keep their index in the first block after `.` and `..` (hidden
//! inside the `..` record) and in blocks that hold a single unused record, so a linear scan of
//! every block sees exactly the real entries. An inline directory holds the parent's inode
//! number, then entries, in `i_block` and `system.data`.
//!
//! Paths are resolved from the root inode, one component at a time, keeping the stack of
//! directories walked: `..` pops it, a symlink's target replaces the component (an absolute
//! target restarts at this filesystem's root). At most [`Limits::max_symlink_hops`] symlinks
//! and [`Limits::max_path_components`] components are walked.
//!
//! [`Limits::max_symlink_hops`]: crate::Limits::max_symlink_hops
//! [`Limits::max_path_components`]: crate::Limits::max_path_components

use super::inode::{Inode, INLINE_DATA_FL};
use super::{Ext4, FS, ROOT_INODE};
use crate::bytes::{le16, le32, sub};
use crate::fs::{components, FileKind, FsError};
use crate::source::BlockSource;
use crate::LimitError;

/// One directory entry as stored.
#[derive(Debug, Clone)]
pub(crate) struct RawEntry {
    pub(crate) inode: u32,
    pub(crate) name: String,
    /// From the entry's file type byte, when the filesystem records it.
    pub(crate) kind: Option<FileKind>,
}

fn file_type(t: u8) -> Option<FileKind> {
    match t {
        1 => Some(FileKind::File),
        2 => Some(FileKind::Directory),
        7 => Some(FileKind::Symlink),
        3..=6 => Some(FileKind::Other),
        _ => None,
    }
}

/// Parses the entries of one directory block (or an inline directory's entry area).
fn parse_block(
    block: &[u8],
    filetype: bool,
    dir_ino: u32,
    out: &mut Vec<RawEntry>,
    max_entries: usize,
) -> Result<(), FsError> {
    let corrupt = |value| FsError::Corrupt {
        fs: FS,
        what: "directory entry",
        value,
    };
    let mut off = 0usize;
    while off + 8 <= block.len() {
        let inode = le32(block, off);
        let mut rec_len = usize::from(le16(block, off + 4));
        if (rec_len == 0 || rec_len == 65535) && block.len() == 65536 {
            rec_len = 65536;
        }
        let name_len = if filetype {
            usize::from(block[off + 6])
        } else {
            usize::from(le16(block, off + 6))
        };
        if rec_len < 8 || rec_len % 4 != 0 || off + rec_len > block.len() || 8 + name_len > rec_len
        {
            return Err(corrupt(u64::from(dir_ino)));
        }
        if inode != 0 && name_len > 0 {
            LimitError::check(
                "directory entries",
                out.len() as u64 + 1,
                max_entries as u64,
            )?;
            let name = sub(block, off + 8, name_len);
            out.push(RawEntry {
                inode,
                name: String::from_utf8_lossy(name).into_owned(),
                kind: if filetype {
                    file_type(block[off + 7])
                } else {
                    None
                },
            });
        }
        off += rec_len;
    }
    Ok(())
}

impl<S: BlockSource> Ext4<S> {
    /// Every entry of directory `dir`, `.` and `..` included.
    pub(crate) fn dir_entries(&mut self, dir: &Inode) -> Result<Vec<RawEntry>, FsError> {
        let filetype = self.has_filetype();
        let max_entries = self.limits.max_dir_entries;
        let mut out = Vec::new();
        if dir.flags & INLINE_DATA_FL != 0 {
            let parent = le32(&dir.block, 0);
            out.push(RawEntry {
                inode: parent,
                name: "..".into(),
                kind: Some(FileKind::Directory),
            });
            parse_block(&dir.block[4..], filetype, dir.ino, &mut out, max_entries)?;
            if let Some(tail) = dir.inline_tail() {
                parse_block(tail, filetype, dir.ino, &mut out, max_entries)?;
            }
            return Ok(out);
        }
        let data = self.read_data(dir, self.limits.max_dir_size)?;
        for block in data.chunks(self.block_size() as usize) {
            parse_block(block, filetype, dir.ino, &mut out, max_entries)?;
        }
        Ok(out)
    }

    /// The target of symlink `link`.
    fn link_target(&mut self, link: &Inode) -> Result<String, FsError> {
        let raw = if link.is_fast_symlink() {
            sub(&link.block, 0, link.size as usize).to_vec()
        } else {
            self.read_data(link, 4096)?
        };
        Ok(String::from_utf8_lossy(&raw).into_owned())
    }

    /// Resolves `path` from the root; follows a final symlink when `follow`. Returns the inode
    /// and the canonical path walked.
    pub(crate) fn resolve(&mut self, path: &str, follow: bool) -> Result<(Inode, String), FsError> {
        let mut todo: Vec<String> = components(path).rev().map(String::from).collect();
        let mut stack: Vec<(Inode, String)> = vec![(self.inode(ROOT_INODE)?, String::new())];
        let mut hops = 0u32;
        let mut walked = 0usize;
        while let Some(name) = todo.pop() {
            walked += 1;
            if walked > self.limits.max_path_components {
                return Err(FsError::PathTooLong(path.to_string()));
            }
            if name == ".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            let Some((dir, dir_path)) = stack.last() else {
                return Err(FsError::NotFound(path.to_string()));
            };
            let here = format!("{dir_path}/{name}");
            if dir.kind() != FileKind::Directory {
                return Err(FsError::NotADirectory(dir_path.clone()));
            }
            let dir = dir.clone();
            let entry = self
                .dir_entries(&dir)?
                .into_iter()
                .find(|e| e.name == name)
                .ok_or_else(|| FsError::NotFound(here.clone()))?;
            let ino = self.inode(entry.inode)?;
            if ino.kind() == FileKind::Symlink && (follow || !todo.is_empty()) {
                hops += 1;
                if hops > self.limits.max_symlink_hops {
                    return Err(FsError::SymlinkLoop {
                        path: path.to_string(),
                        hops: self.limits.max_symlink_hops,
                    });
                }
                let target = self.link_target(&ino)?;
                if target.starts_with('/') {
                    stack.truncate(1);
                }
                todo.extend(components(&target).rev().map(String::from));
                continue;
            }
            stack.push((ino, here));
        }
        let (ino, p) = stack
            .pop()
            .ok_or_else(|| FsError::NotFound(path.to_string()))?;
        Ok((ino, if p.is_empty() { "/".into() } else { p }))
    }
}
