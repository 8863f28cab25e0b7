//! FAT directory entries.
//!
//! Each entry is 32 bytes: an 8.3 name (first byte 0x00 ends the directory, 0xE5 marks a deleted
//! entry, 0x05 stands for a leading 0xE5), attributes (0x10 directory, 0x08 volume label, 0x0F a
//! long-name entry), NT case flags (0x08 lower-case base, 0x10 lower-case extension), the first
//! cluster (high half at 20, low half at 26) and the size. Long names precede their short entry
//! as a run of entries numbered down to 1 (the first one carries 0x40), each holding 13 UCS-2
//! characters and the checksum of the short name; a run with a wrong order or checksum is
//! ignored and the short name used. Lookups compare names case-insensitively, long or short.

use crate::bytes::{le16, sub};
use crate::fs::FsError;
use crate::LimitError;

const ATTR_VOLUME: u8 = 0x08;
const ATTR_DIR: u8 = 0x10;
const ATTR_LFN: u8 = 0x0F;

/// One directory entry, long name resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FatEntry {
    /// The long name if it has one, else the short name as displayed.
    pub(crate) name: String,
    pub(crate) short: String,
    pub(crate) attr: u8,
    pub(crate) cluster: u32,
    pub(crate) size: u32,
}

impl FatEntry {
    pub(crate) fn is_dir(&self) -> bool {
        self.attr & ATTR_DIR != 0
    }
    pub(crate) fn matches(&self, name: &str) -> bool {
        eq_ignore_case(&self.name, name) || eq_ignore_case(&self.short, name)
    }
}

fn eq_ignore_case(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b) || a.to_lowercase() == b.to_lowercase()
}

/// The checksum of an 11-byte short name that long-name entries carry.
pub(crate) fn short_checksum(name: &[u8]) -> u8 {
    name.iter()
        .fold(0u8, |sum, &b| (sum >> 1 | (sum & 1) << 7).wrapping_add(b))
}

fn short_name(raw: &[u8], nt: u8) -> String {
    let conv = |part: &[u8], lower: bool| -> String {
        let s: String = part
            .iter()
            .enumerate()
            .map(|(i, &b)| if i == 0 && b == 0x05 { 0xE5 } else { b })
            .map(char::from)
            .collect();
        let s = s.trim_end_matches(' ').to_string();
        if lower {
            s.to_ascii_lowercase()
        } else {
            s
        }
    };
    let base = conv(sub(raw, 0, 8), nt & 0x08 != 0);
    let ext = conv(sub(raw, 8, 3), nt & 0x10 != 0);
    if ext.is_empty() {
        base
    } else {
        format!("{base}.{ext}")
    }
}

/// The volume label entry of a root directory, if any.
pub(crate) fn volume_label(raw: &[u8]) -> Option<String> {
    for e in raw.chunks_exact(32) {
        match e[0] {
            0x00 => return None,
            0xE5 => continue,
            _ => {}
        }
        if e[11] != ATTR_LFN && e[11] & ATTR_VOLUME != 0 && e[11] & ATTR_DIR == 0 {
            let s: String = e[..11].iter().map(|&b| char::from(b)).collect();
            return Some(s.trim_end().to_string());
        }
    }
    None
}

/// Parses a directory's raw bytes into entries (volume labels excluded).
pub(crate) fn parse(raw: &[u8], max_entries: usize) -> Result<Vec<FatEntry>, FsError> {
    let mut out = Vec::new();
    // The long name being collected: its UCS-2 units by position, the next expected sequence
    // number and the checksum its entries carry.
    let mut lfn: Vec<u16> = Vec::new();
    let mut expect = 0u8;
    let mut csum = 0u8;
    for e in raw.chunks_exact(32) {
        if e[0] == 0x00 {
            break;
        }
        if e[0] == 0xE5 {
            expect = 0;
            continue;
        }
        let attr = e[11];
        if attr == ATTR_LFN {
            let seq = e[0] & 0x1F;
            if e[0] & 0x40 != 0 {
                lfn = vec![0xFFFF; 13 * usize::from(seq)];
                expect = seq;
                csum = e[13];
            }
            if seq == 0 || seq != expect || e[13] != csum {
                expect = 0;
                continue;
            }
            let base = 13 * usize::from(seq - 1);
            let units = (0..5)
                .map(|i| le16(e, 1 + 2 * i))
                .chain((0..6).map(|i| le16(e, 14 + 2 * i)))
                .chain((0..2).map(|i| le16(e, 28 + 2 * i)));
            for (i, u) in units.enumerate() {
                if let Some(slot) = lfn.get_mut(base + i) {
                    *slot = u;
                }
            }
            expect = seq - 1;
            continue;
        }
        let long = if expect == 0 && !lfn.is_empty() && short_checksum(&e[..11]) == csum {
            let units: Vec<u16> = lfn
                .iter()
                .copied()
                .take_while(|&u| u != 0 && u != 0xFFFF)
                .collect();
            Some(String::from_utf16_lossy(&units))
        } else {
            None
        };
        lfn.clear();
        expect = 0;
        if attr & ATTR_VOLUME != 0 {
            continue;
        }
        LimitError::check(
            "directory entries",
            out.len() as u64 + 1,
            max_entries as u64,
        )?;
        let short = short_name(&e[..11], e[12]);
        let cluster = u32::from(le16(e, 20)) << 16 | u32::from(le16(e, 26));
        out.push(FatEntry {
            name: long.unwrap_or_else(|| short.clone()),
            short,
            attr,
            cluster,
            size: crate::bytes::le32(e, 28),
        });
    }
    Ok(out)
}
