//! Little- and big-endian field access on byte slices that never panics: a field that does not
//! fit in the slice reads as zero (callers size their buffers so that this only happens on
//! corrupt, already-rejected input), and CRC32 (IEEE 802.3, as GPT uses it).

fn field<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = off.checked_add(N).and_then(|end| b.get(off..end)) {
        out.copy_from_slice(s);
    }
    out
}

pub(crate) fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(field(b, off))
}

pub(crate) fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(field(b, off))
}

pub(crate) fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(field(b, off))
}

pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(field(b, off))
}

pub(crate) fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(field(b, off))
}

pub(crate) fn array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    field(b, off)
}

/// `b[off..off + len]`, or an empty slice when that is out of range.
pub(crate) fn sub(b: &[u8], off: usize, len: usize) -> &[u8] {
    off.checked_add(len)
        .and_then(|end| b.get(off..end))
        .unwrap_or(&[])
}

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CRC_TABLE: [u32; 256] = crc_table();

/// CRC32 (reflected, polynomial 0xEDB88320, initial and final xor 0xFFFFFFFF).
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn fields_out_of_range_read_zero() {
        assert_eq!(le32(&[1, 2], 0), 0);
        assert_eq!(le16(&[1, 2], 0), 0x0201);
        assert_eq!(le64(&[], usize::MAX), 0);
        assert!(sub(&[1, 2, 3], 2, 5).is_empty());
    }
}
