//! Mapping an ext4 file's logical blocks to disk blocks, and reading its data.
//!
//! Three layouts:
//! - Extent tree (`EXTENTS_FL`): `i_block` starts with a 12-byte header (magic `0xF30A`,
//!   entries, max, depth). At depth 0 the 12-byte entries are extents (first logical block,
//!   length — above 32768 an unwritten extent that reads as zeros — and a 48-bit start block);
//!   above, they are indexes (first logical block, 48-bit child block). A child's depth must be
//!   its parent's minus one, the depth at most [`Limits::max_extent_depth`], and the number of
//!   nodes visited is bounded by the file's block count, so a tree whose indexes all point at
//!   one node cannot blow up.
//! - Block map: 12 direct pointers, then single, double and triple indirect blocks of 32-bit
//!   pointers; pointer 0 is a hole.
//! - Inline data (`INLINE_DATA_FL`): the first 60 bytes in `i_block`, the rest in the
//!   `system.data` xattr.
//!
//! Blocks that map to nothing (holes, unwritten extents) read as zeros.
//!
//! [`Limits::max_extent_depth`]: crate::Limits::max_extent_depth

use super::inode::{Inode, ENCRYPT_FL, EXTENTS_FL, INLINE_DATA_FL};
use super::{Ext4, FS};
use crate::bytes::{le16, le32};
use crate::fs::FsError;
use crate::source::BlockSource;
use crate::LimitError;

/// `len` blocks of the file from `logical` are on disk from `physical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    logical: u64,
    physical: u64,
    len: u64,
}

fn push_run(runs: &mut Vec<Run>, run: Run) {
    if let Some(last) = runs.last_mut() {
        if last.logical + last.len == run.logical && last.physical + last.len == run.physical {
            last.len += run.len;
            return;
        }
    }
    runs.push(run);
}

impl<S: BlockSource> Ext4<S> {
    /// Reads the whole data of `ino`, refusing more than `max` bytes.
    pub(crate) fn read_data(&mut self, ino: &Inode, max: u64) -> Result<Vec<u8>, FsError> {
        LimitError::check("file size", ino.size, max)?;
        let fs_bytes = self.sb.blocks_count * self.sb.block_size;
        if ino.flags & INLINE_DATA_FL == 0 && ino.size > fs_bytes {
            return Err(FsError::Corrupt {
                fs: FS,
                what: "file size",
                value: ino.size,
            });
        }
        if ino.flags & ENCRYPT_FL != 0 {
            return Err(FsError::Unsupported {
                fs: FS,
                feature: format!("encrypted inode {}", ino.ino),
            });
        }
        let size = ino.size as usize;
        if ino.flags & INLINE_DATA_FL != 0 {
            let mut data = ino.block.to_vec();
            data.extend_from_slice(ino.inline_tail().unwrap_or(&[]));
            if data.len() < size {
                return Err(FsError::Corrupt {
                    fs: FS,
                    what: "inline data size",
                    value: ino.size,
                });
            }
            data.truncate(size);
            return Ok(data);
        }
        let bs = self.sb.block_size;
        let nblocks = ino.size.div_ceil(bs);
        let mut runs = Vec::new();
        if ino.flags & EXTENTS_FL != 0 {
            let mut budget = nblocks.saturating_add(16);
            let root = ino.block;
            self.extent_node(&root, None, nblocks, &mut runs, &mut budget)?;
        } else {
            self.block_map(ino, nblocks, &mut runs)?;
        }
        let mut out = vec![0u8; size];
        for r in runs {
            if r.physical
                .checked_add(r.len)
                .is_none_or(|e| e > self.sb.blocks_count)
            {
                return Err(FsError::Corrupt {
                    fs: FS,
                    what: "data block",
                    value: r.physical,
                });
            }
            let start = (r.logical * bs) as usize;
            let end = ((r.logical + r.len) * bs).min(ino.size) as usize;
            if let Some(dst) = out.get_mut(start..end) {
                self.src.read_at(r.physical * bs, dst)?;
            }
        }
        Ok(out)
    }

    fn extent_node(
        &mut self,
        node: &[u8],
        expect_depth: Option<u16>,
        nblocks: u64,
        runs: &mut Vec<Run>,
        budget: &mut u64,
    ) -> Result<(), FsError> {
        let corrupt = |what, value| FsError::Corrupt {
            fs: FS,
            what,
            value,
        };
        if le16(node, 0) != 0xF30A {
            return Err(corrupt("extent header magic", u64::from(le16(node, 0))));
        }
        let entries = usize::from(le16(node, 2));
        let max = usize::from(le16(node, 4));
        let depth = le16(node, 6);
        LimitError::check(
            "ext4 extent tree depth",
            u64::from(depth),
            u64::from(self.limits.max_extent_depth),
        )?;
        if expect_depth.is_some_and(|d| d != depth) {
            return Err(corrupt("extent node depth", u64::from(depth)));
        }
        if entries > max || 12 + 12 * max > node.len() {
            return Err(corrupt("extent entry count", entries as u64));
        }
        for i in 0..entries {
            let e = &node[12 + 12 * i..24 + 12 * i];
            let logical = u64::from(le32(e, 0));
            if depth == 0 {
                let raw_len = u64::from(le16(e, 4));
                let physical = u64::from(le16(e, 6)) << 32 | u64::from(le32(e, 8));
                if logical >= nblocks {
                    continue;
                }
                if runs.len() as u64 >= nblocks {
                    return Err(corrupt("extent count", runs.len() as u64));
                }
                if raw_len > 32768 {
                    continue; // Unwritten: reads as zeros, which the buffer already is.
                }
                let len = raw_len.min(nblocks - logical);
                push_run(
                    runs,
                    Run {
                        logical,
                        physical,
                        len,
                    },
                );
            } else {
                if logical >= nblocks {
                    continue;
                }
                let child = u64::from(le16(e, 8)) << 32 | u64::from(le32(e, 4));
                *budget = budget
                    .checked_sub(1)
                    .ok_or_else(|| corrupt("extent tree node count", nblocks))?;
                let block = self.read_blocks(child, 1)?;
                self.extent_node(&block, Some(depth - 1), nblocks, runs, budget)?;
            }
        }
        Ok(())
    }

    fn block_map(&mut self, ino: &Inode, nblocks: u64, runs: &mut Vec<Run>) -> Result<(), FsError> {
        for i in 0..12u64 {
            let ptr = u64::from(le32(&ino.block, 4 * i as usize));
            if i < nblocks && ptr != 0 {
                push_run(
                    runs,
                    Run {
                        logical: i,
                        physical: ptr,
                        len: 1,
                    },
                );
            }
        }
        let per = self.sb.block_size / 4;
        let mut base = 12u64;
        for level in 1..=3u32 {
            let ptr = u64::from(le32(&ino.block, 44 + 4 * level as usize));
            if ptr != 0 {
                self.indirect(ptr, level, base, nblocks, runs)?;
            }
            base = base.saturating_add(per.saturating_pow(level));
        }
        Ok(())
    }

    fn indirect(
        &mut self,
        ptr: u64,
        level: u32,
        base: u64,
        nblocks: u64,
        runs: &mut Vec<Run>,
    ) -> Result<(), FsError> {
        if base >= nblocks {
            return Ok(());
        }
        let block = self.read_blocks(ptr, 1)?;
        let per = self.sb.block_size / 4;
        let span = per.saturating_pow(level - 1);
        for j in 0..per {
            let logical = base.saturating_add(j.saturating_mul(span));
            if logical >= nblocks {
                break;
            }
            let child = u64::from(le32(&block, 4 * j as usize));
            if child == 0 {
                continue;
            }
            if level == 1 {
                push_run(
                    runs,
                    Run {
                        logical,
                        physical: child,
                        len: 1,
                    },
                );
            } else {
                self.indirect(child, level - 1, logical, nblocks, runs)?;
            }
        }
        Ok(())
    }
}
