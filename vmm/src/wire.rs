//! The migration stream's framing: a preamble (magic and version), then sections, each a
//! 4-byte tag, an 8-byte length and that many payload bytes (all integers little-endian).
//! Payloads are built with [`Encoder`] and taken apart with [`Decoder`], which reports a short
//! or malformed payload by name.
//!
//! The same encoding holds saved KVM state (`vstate::state`, the power-on state a reset goes
//! back to among it), so this module sits at the bottom of the crate, below `vstate` and
//! `migration` alike; `migration::wire` is this module.

use std::io::{self, Read, Write};

/// The first 8 bytes of each direction of a migration stream.
pub const MAGIC: [u8; 8] = *b"FVMIGRAT";
/// The version this VMM writes and the only one it reads.
pub const VERSION: u32 = 1;

/// Section tags.
pub const TAG_HELLO: u32 = 1;
pub const TAG_MEMORY: u32 = 2;
pub const TAG_STATE: u32 = 3;
pub const TAG_END: u32 = 4;
pub const TAG_DISK: u32 = 5;
pub const TAG_REPLY: u32 = 16;

/// Name of a section tag, for errors.
pub fn tag_name(tag: u32) -> &'static str {
    match tag {
        TAG_HELLO => "HELLO",
        TAG_MEMORY => "MEMORY",
        TAG_STATE => "STATE",
        TAG_END => "END",
        TAG_DISK => "DISK",
        TAG_REPLY => "REPLY",
        _ => "unknown",
    }
}

/// The stream is not a migration stream this VMM can read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the stream ended early: {what} is incomplete (truncated stream)")]
    Truncated { what: String },
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("not a Ferrovirt migration stream: magic {0:02x?}")]
    BadMagic([u8; 8]),
    #[error("unsupported migration stream version {got}: this VMM reads version {supported}")]
    UnsupportedVersion { got: u32, supported: u32 },
    #[error("expected section {expected}, got tag {got} ({})", tag_name(*got))]
    UnexpectedSection { expected: &'static str, got: u32 },
    #[error("section {} of {len} bytes is larger than its limit of {limit} bytes", tag_name(*tag))]
    SectionTooLarge { tag: u32, len: u64, limit: u64 },
    #[error("malformed {what}: {why}")]
    Malformed { what: String, why: String },
}

fn read_exact<R: Read>(r: &mut R, buf: &mut [u8], what: &str) -> Result<(), WireError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => WireError::Truncated { what: what.into() },
        _ => WireError::Io {
            what: format!("read {what}"),
            source: e,
        },
    })
}

pub fn write_all<W: Write>(w: &mut W, buf: &[u8], what: &str) -> Result<(), WireError> {
    w.write_all(buf).map_err(|e| WireError::Io {
        what: format!("write {what}"),
        source: e,
    })
}

/// Writes the magic and version.
pub fn write_preamble<W: Write>(w: &mut W) -> Result<(), WireError> {
    let mut buf = MAGIC.to_vec();
    buf.extend_from_slice(&VERSION.to_le_bytes());
    write_all(w, &buf, "preamble")
}

/// Reads and checks the magic and version.
pub fn read_preamble<R: Read>(r: &mut R) -> Result<(), WireError> {
    let mut magic = [0u8; 8];
    read_exact(r, &mut magic, "preamble (magic)")?;
    if magic != MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    let mut version = [0u8; 4];
    read_exact(r, &mut version, "preamble (version)")?;
    let version = u32::from_le_bytes(version);
    if version != VERSION {
        return Err(WireError::UnsupportedVersion {
            got: version,
            supported: VERSION,
        });
    }
    Ok(())
}

/// Writes a section header.
pub fn write_section_header<W: Write>(w: &mut W, tag: u32, len: u64) -> Result<(), WireError> {
    let mut buf = tag.to_le_bytes().to_vec();
    buf.extend_from_slice(&len.to_le_bytes());
    write_all(w, &buf, tag_name(tag))
}

/// Writes a whole section.
pub fn write_section<W: Write>(w: &mut W, tag: u32, payload: &[u8]) -> Result<(), WireError> {
    write_section_header(w, tag, payload.len() as u64)?;
    write_all(w, payload, tag_name(tag))
}

/// Reads a section header: (tag, length).
pub fn read_section_header<R: Read>(r: &mut R) -> Result<(u32, u64), WireError> {
    let mut buf = [0u8; 12];
    read_exact(r, &mut buf, "section header")?;
    let tag = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let mut len = [0u8; 8];
    len.copy_from_slice(&buf[4..]);
    Ok((tag, u64::from_le_bytes(len)))
}

/// Reads a payload of `len` bytes (at most `limit`) for section `tag`.
pub fn read_payload<R: Read>(
    r: &mut R,
    tag: u32,
    len: u64,
    limit: u64,
) -> Result<Vec<u8>, WireError> {
    if len > limit {
        return Err(WireError::SectionTooLarge { tag, len, limit });
    }
    let mut buf = vec![0u8; len as usize];
    read_exact(r, &mut buf, &format!("section {}", tag_name(tag)))?;
    Ok(buf)
}

/// Reads `buf.len()` bytes of the named part.
pub fn read_part<R: Read>(r: &mut R, buf: &mut [u8], what: &str) -> Result<(), WireError> {
    read_exact(r, buf, what)
}

/// Builds a payload.
#[derive(Default)]
pub struct Encoder(pub Vec<u8>);

impl Encoder {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A length-prefixed (u32) byte string.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
}

/// Takes a payload apart; `what` names it in errors.
pub struct Decoder<'a> {
    buf: &'a [u8],
    what: String,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8], what: impl Into<String>) -> Self {
        Decoder {
            buf,
            what: what.into(),
        }
    }

    pub fn malformed(&self, why: impl Into<String>) -> WireError {
        WireError::Malformed {
            what: self.what.clone(),
            why: why.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(self.malformed(format!("needs {n} more bytes, has {}", self.buf.len())));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, WireError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// The next `n` bytes as they are.
    pub fn raw(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        self.take(n)
    }
    /// A count of `what` that may be at most `max`.
    pub fn count(&mut self, max: u32, what: &str) -> Result<u32, WireError> {
        let n = self.u32()?;
        if n > max {
            return Err(self.malformed(format!("{n} {what}")));
        }
        Ok(n)
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.malformed(format!("{} bytes left over", self.buf.len())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preamble_checks_magic_and_version() {
        let mut buf = Vec::new();
        write_preamble(&mut buf).unwrap();
        read_preamble(&mut buf.as_slice()).unwrap();

        let mut wrong = buf.clone();
        wrong[8] = 9;
        let err = read_preamble(&mut wrong.as_slice()).unwrap_err();
        assert!(matches!(
            err,
            WireError::UnsupportedVersion {
                got: 9,
                supported: VERSION
            }
        ));
        assert_eq!(
            err.to_string(),
            "unsupported migration stream version 9: this VMM reads version 1"
        );

        let mut bad = buf.clone();
        bad[0] = b'X';
        assert!(matches!(
            read_preamble(&mut bad.as_slice()),
            Err(WireError::BadMagic(_))
        ));
        assert!(matches!(
            read_preamble(&mut &buf[..10]),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn sections_and_payloads() {
        let mut buf = Vec::new();
        let mut e = Encoder::default();
        e.u8(1).u16(2).u32(3).u64(4).bytes(b"hi");
        write_section(&mut buf, TAG_STATE, &e.0).unwrap();
        let mut r = buf.as_slice();
        let (tag, len) = read_section_header(&mut r).unwrap();
        assert_eq!(tag, TAG_STATE);
        let payload = read_payload(&mut r, tag, len, 1024).unwrap();
        let mut d = Decoder::new(&payload, "test");
        assert_eq!(d.u8().unwrap(), 1);
        assert_eq!(d.u16().unwrap(), 2);
        assert_eq!(d.u32().unwrap(), 3);
        assert_eq!(d.u64().unwrap(), 4);
        assert_eq!(d.bytes().unwrap(), b"hi");
        d.finish().unwrap();
        assert!(d.u8().is_err());
        assert!(matches!(
            read_payload(&mut buf.as_slice(), TAG_STATE, 4096, 16),
            Err(WireError::SectionTooLarge { .. })
        ));
        assert!(matches!(
            read_payload(&mut &buf[..3], TAG_STATE, 12, 16),
            Err(WireError::Truncated { .. })
        ));
    }
}
