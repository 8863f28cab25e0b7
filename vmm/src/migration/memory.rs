//! Guest memory on the wire: the source's batches of pages (every non-zero page in round 0,
//! then the pages dirtied since) and the target writing them into its memory.

use super::*;

/// Pages of one MEMORY section being built: runs of consecutive pages.
pub(super) struct Batch {
    pub(super) buf: Vec<u8>,
    pub(super) run_header: Option<usize>,
    pub(super) next_gpa: u64,
    pub(super) run_pages: u32,
}

impl Batch {
    pub(super) fn new(round: u32) -> Batch {
        let mut buf = Vec::with_capacity(MEMORY_SECTION_BYTES + PAGE_SIZE as usize + 16);
        buf.extend_from_slice(&round.to_le_bytes());
        Batch {
            buf,
            run_header: None,
            next_gpa: u64::MAX,
            run_pages: 0,
        }
    }

    pub(super) fn push(&mut self, gpa: u64, page: &[u8]) {
        if self.run_header.is_none() || gpa != self.next_gpa {
            self.run_header = Some(self.buf.len());
            self.buf.extend_from_slice(&gpa.to_le_bytes());
            self.buf.extend_from_slice(&0u32.to_le_bytes());
            self.run_pages = 0;
        }
        self.buf.extend_from_slice(page);
        self.run_pages += 1;
        self.next_gpa = gpa + PAGE_SIZE;
        if let Some(at) = self.run_header {
            self.buf[at + 8..at + 12].copy_from_slice(&self.run_pages.to_le_bytes());
        }
    }

    pub(super) fn is_full(&self) -> bool {
        self.buf.len() >= MEMORY_SECTION_BYTES
    }

    pub(super) fn has_pages(&self) -> bool {
        self.run_header.is_some()
    }
}

/// Sends pages `gpas` (ascending) of `mem` as MEMORY sections of round `round`; with
/// `skip_zero`, pages that are all zero are left out. Returns the pages sent.
pub(super) fn send_pages<S: Write>(
    stream: &mut S,
    mem: &GuestMemoryMmap,
    round: u32,
    gpas: impl Iterator<Item = u64>,
    skip_zero: bool,
    stats: &mut MigrationStats,
) -> Result<u64, SendError> {
    let mut page = vec![0u8; PAGE_SIZE as usize];
    let mut batch = Batch::new(round);
    let mut sent = 0u64;
    for gpa in gpas {
        mem.read_slice(&mut page, GuestAddress(gpa))
            .map_err(|e| SendError::ReadMemory(gpa, e))?;
        if skip_zero && page.iter().all(|b| *b == 0) {
            continue;
        }
        batch.push(gpa, &page);
        sent += 1;
        if batch.is_full() {
            flush_batch(stream, &mut batch, round, stats)?;
        }
    }
    if batch.has_pages() {
        flush_batch(stream, &mut batch, round, stats)?;
    }
    stats.pages_sent += sent;
    Ok(sent)
}

pub(super) fn flush_batch<S: Write>(
    stream: &mut S,
    batch: &mut Batch,
    round: u32,
    stats: &mut MigrationStats,
) -> Result<(), SendError> {
    wire::write_section(stream, wire::TAG_MEMORY, &batch.buf)?;
    stats.bytes_sent += batch.buf.len() as u64 + 12;
    *batch = Batch::new(round);
    Ok(())
}

/// Every page of guest memory, ascending.
pub(super) fn all_pages(mem: &GuestMemoryMmap) -> Vec<u64> {
    mem.iter()
        .flat_map(|r| {
            let start = r.start_addr().0;
            (0..r.len() / PAGE_SIZE).map(move |i| start + i * PAGE_SIZE)
        })
        .collect()
}

/// The pages set in per-region dirty bitmaps, ascending.
pub(super) fn dirty_gpas(mem: &GuestMemoryMmap, bitmaps: &[Vec<u64>]) -> Vec<u64> {
    let mut gpas = Vec::new();
    for (region, bitmap) in mem.iter().zip(bitmaps) {
        let start = region.start_addr().0;
        let pages = region.len() / PAGE_SIZE;
        for (w, word) in bitmap.iter().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let bit = u64::from(bits.trailing_zeros());
                let page = w as u64 * 64 + bit;
                if page < pages {
                    gpas.push(start + page * PAGE_SIZE);
                }
                bits &= bits - 1;
            }
        }
    }
    gpas
}

/// The set bits of `bitmap` below `limit`, ascending.
pub(super) fn set_bits(bitmap: &[u64], limit: u64) -> Vec<u64> {
    let mut bits = Vec::new();
    for (w, word) in bitmap.iter().enumerate() {
        let mut rest = *word;
        while rest != 0 {
            let bit = w as u64 * 64 + u64::from(rest.trailing_zeros());
            if bit < limit {
                bits.push(bit);
            }
            rest &= rest - 1;
        }
    }
    bits
}

pub(super) fn apply_memory(mem: &GuestMemoryMmap, payload: &[u8]) -> Result<(), ReceiveError> {
    let mut d = Decoder::new(payload, "MEMORY");
    let _round = d.u32()?;
    while !d.is_empty() {
        let gpa = d.u64()?;
        let pages = d.u32()?;
        let len = u64::from(pages) * PAGE_SIZE;
        let data = d.raw(len as usize)?;
        let inside = gpa % PAGE_SIZE == 0
            && mem.iter().any(|r| {
                let start = r.start_addr().0;
                gpa >= start
                    && gpa
                        .checked_add(len)
                        .is_some_and(|end| end <= start + r.len())
            });
        if !inside {
            return Err(ReceiveError::PageOutsideMemory { gpa, pages });
        }
        mem.write_slice(data, GuestAddress(gpa))
            .map_err(|_| ReceiveError::PageOutsideMemory { gpa, pages })?;
    }
    Ok(())
}
