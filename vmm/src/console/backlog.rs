//! The output a socket console keeps for its next client: the newest [`BACKLOG_CAPACITY`] bytes
//! that no client has read, like a serial log with a size limit. When older bytes had to go, the
//! client is told how many before it gets the rest.

use std::collections::VecDeque;

/// How much unread console output is kept (the last 64 KiB).
pub const BACKLOG_CAPACITY: usize = 64 << 10;

/// Unread console output, bounded: the oldest bytes are dropped first and counted.
#[derive(Debug)]
pub struct Backlog {
    bytes: VecDeque<u8>,
    capacity: usize,
    dropped: u64,
}

impl Backlog {
    pub fn new(capacity: usize) -> Backlog {
        Backlog {
            bytes: VecDeque::with_capacity(capacity.min(BACKLOG_CAPACITY)),
            capacity,
            dropped: 0,
        }
    }

    /// Appends `data`, dropping the oldest bytes beyond the capacity.
    pub fn push(&mut self, data: &[u8]) {
        let data = if data.len() > self.capacity {
            let skip = data.len() - self.capacity;
            self.dropped += skip as u64;
            &data[skip..]
        } else {
            data
        };
        let overflow = (self.bytes.len() + data.len()).saturating_sub(self.capacity);
        self.bytes.drain(..overflow);
        self.dropped += overflow as u64;
        self.bytes.extend(data);
    }

    /// How many bytes are kept.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.dropped == 0
    }

    /// How many bytes were dropped since the last [`Backlog::take`].
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Empties the backlog and returns what a client should get: a note saying how many bytes
    /// were dropped (when some were), then the kept bytes, oldest first.
    pub fn take(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + 80);
        if self.dropped > 0 {
            out.extend_from_slice(dropped_note(self.dropped).as_bytes());
            self.dropped = 0;
        }
        out.extend(self.bytes.drain(..));
        out
    }
}

/// The line a client gets in front of the kept output when older output was dropped.
pub fn dropped_note(dropped: u64) -> String {
    format!("\r\n[ferrovirt: {dropped} earlier bytes of console output were dropped]\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_below_the_capacity() {
        let mut backlog = Backlog::new(16);
        assert!(backlog.is_empty());
        backlog.push(b"hello ");
        backlog.push(b"world");
        assert_eq!(backlog.len(), 11);
        assert_eq!(backlog.dropped(), 0);
        assert_eq!(backlog.take(), b"hello world");
        assert!(backlog.is_empty());
        assert_eq!(backlog.take(), b"");
    }

    #[test]
    fn overflow_keeps_the_newest_bytes_and_counts_the_dropped() {
        let mut backlog = Backlog::new(8);
        backlog.push(b"0123456");
        backlog.push(b"789ab");
        assert_eq!(backlog.len(), 8);
        assert_eq!(backlog.dropped(), 4);
        let mut want = dropped_note(4).into_bytes();
        want.extend_from_slice(b"456789ab");
        assert_eq!(backlog.take(), want);
        // The count starts again after a take.
        backlog.push(b"xy");
        assert_eq!(backlog.dropped(), 0);
        assert_eq!(backlog.take(), b"xy");
    }

    #[test]
    fn one_write_larger_than_the_capacity_keeps_its_tail() {
        let mut backlog = Backlog::new(4);
        backlog.push(b"ab");
        backlog.push(b"0123456789");
        assert_eq!(backlog.dropped(), 8);
        let mut want = dropped_note(8).into_bytes();
        want.extend_from_slice(b"6789");
        assert_eq!(backlog.take(), want);
    }

    #[test]
    fn the_default_capacity_is_64_kib_of_newest_output() {
        let mut backlog = Backlog::new(BACKLOG_CAPACITY);
        for i in 0..100_000u32 {
            backlog.push(format!("{i:08}\n").as_bytes());
        }
        assert_eq!(backlog.len(), BACKLOG_CAPACITY);
        assert_eq!(backlog.dropped(), 900_000 - BACKLOG_CAPACITY as u64);
        let out = backlog.take();
        let note = dropped_note(900_000 - BACKLOG_CAPACITY as u64);
        assert!(out.starts_with(note.as_bytes()));
        assert!(out.ends_with(b"00099999\n"));
        assert_eq!(out.len(), note.len() + BACKLOG_CAPACITY);
    }
}
