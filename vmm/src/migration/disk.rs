//! The copied disks (KubeVirt's block migration): the source sends the blocks the guest wrote,
//! the target checks it has the same writable disk in each slot and writes them into its file.

use super::*;

/// A disk whose content the migration copies, and its blocks written and not sent yet.
pub(super) struct CopiedDisk {
    pub(super) slot: u32,
    pub(super) handle: DiskHandle,
    pub(super) size: u64,
    pub(super) pending: Vec<u64>,
}

impl CopiedDisk {
    pub(super) fn blocks(&self) -> u64 {
        self.size.div_ceil(DIRTY_BLOCK)
    }

    /// Takes the blocks written since the last call into `pending`.
    pub(super) fn take_written(&mut self) {
        let written = self.handle.take_written();
        for (a, b) in self.pending.iter_mut().zip(written) {
            *a |= b;
        }
    }

    /// Sends the pending blocks (all blocks, zero ones left out, when `all`) as DISK sections.
    pub(super) fn send<S: Write>(
        &mut self,
        stream: &mut S,
        round: u32,
        all: bool,
        stats: &mut MigrationStats,
    ) -> Result<(), SendError> {
        let blocks: Vec<u64> = if all {
            (0..self.blocks()).collect()
        } else {
            set_bits(&self.pending, self.blocks())
        };
        self.pending.fill(0);
        let mut payload = Encoder::default();
        payload.u32(self.slot).u32(round);
        let header = payload.0.len();
        let mut buf = vec![0u8; DIRTY_BLOCK as usize];
        for block in blocks {
            let offset = block * DIRTY_BLOCK;
            let len = DIRTY_BLOCK.min(self.size - offset) as usize;
            self.handle
                .read_at(&mut buf[..len], offset)
                .map_err(|source| SendError::ReadDisk {
                    id: self.handle.id().to_string(),
                    offset,
                    source,
                })?;
            if all && buf[..len].iter().all(|b| *b == 0) {
                continue;
            }
            payload.u64(offset).bytes(&buf[..len]);
            stats.disk_blocks_sent += 1;
            if payload.0.len() >= MEMORY_SECTION_BYTES {
                wire::write_section(stream, wire::TAG_DISK, &payload.0)?;
                stats.bytes_sent += payload.0.len() as u64 + 12;
                payload.0.truncate(header);
            }
        }
        if payload.0.len() > header {
            wire::write_section(stream, wire::TAG_DISK, &payload.0)?;
            stats.bytes_sent += payload.0.len() as u64 + 12;
        }
        Ok(())
    }
}

pub(super) fn merge(into: &mut [Vec<u64>], more: Vec<Vec<u64>>) {
    for (a, b) in into.iter_mut().zip(more) {
        for (x, y) in a.iter_mut().zip(b) {
            *x |= y;
        }
    }
}

/// This VM's disks for the copied disks the HELLO announces, checked: same slot, writable,
/// same size.
pub(super) fn target_disks(
    machine: &Machine,
    hello: &Hello,
) -> Result<Vec<(u32, DiskHandle)>, ReceiveError> {
    let mut disks = Vec::new();
    for &(slot, size) in &hello.disks {
        let mismatch = |why: String| ReceiveError::DiskMismatch { slot, why };
        let handle = machine
            .virtio
            .get(slot as usize)
            .and_then(|t| t.lock().unwrap_or_else(crate::poison::fatal).disk())
            .ok_or_else(|| mismatch("this VM has no disk there".into()))?;
        if handle.readonly() {
            return Err(mismatch(format!(
                "disk {:?} is read-only here",
                handle.id()
            )));
        }
        let here = handle.size_bytes();
        if here != size {
            return Err(mismatch(format!(
                "the source's disk has {size} bytes, disk {:?} here {here}",
                handle.id()
            )));
        }
        disks.push((slot, handle));
    }
    Ok(disks)
}

pub(super) fn apply_disk(disks: &[(u32, DiskHandle)], payload: &[u8]) -> Result<(), ReceiveError> {
    let mut d = Decoder::new(payload, "DISK");
    let slot = d.u32()?;
    let _round = d.u32()?;
    let handle = disks
        .iter()
        .find(|(s, _)| *s == slot)
        .map(|(_, h)| h)
        .ok_or(ReceiveError::UnknownDisk { slot })?;
    let size = handle.size_bytes();
    while !d.is_empty() {
        let offset = d.u64()?;
        let data = d.bytes()?;
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > size)
        {
            return Err(d
                .malformed(format!(
                    "{} bytes at {offset:#x} are past the end of the {size}-byte disk",
                    data.len()
                ))
                .into());
        }
        handle
            .write_at(data, offset)
            .map_err(|source| ReceiveError::WriteDisk {
                slot,
                offset,
                source,
            })?;
    }
    Ok(())
}
