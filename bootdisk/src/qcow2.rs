//! qcow2 (versions 2 and 3), read-only, as a [`BlockSource`] of the guest-visible disk.
//!
//! The format, step by step:
//! 1. A big-endian header at offset 0: magic `QFI\xfb`, version, backing file, `cluster_bits`
//!    (clusters of 512 B to 2 MiB), virtual size, encryption method, the L1 table's size and
//!    offset. Version 3 adds feature bit masks, the header length and (incompatible feature bit 3)
//!    a compression type byte.
//! 2. Guest offset `o` lies in guest cluster `o >> cluster_bits`. Its L1 index is that divided by
//!    the number of 8-byte entries in one cluster (`l2_entries`), its L2 index the remainder.
//! 3. An L1 entry holds (bits 9..55) the host offset of an L2 table, one cluster long; zero means
//!    the whole range is unallocated.
//! 4. A standard L2 entry holds (bits 9..55) the host offset of the data cluster; bit 0 (version
//!    3) says "reads as zeros"; offset zero means unallocated. With no backing file both read as
//!    zeros.
//! 5. A compressed L2 entry (bit 62) holds the host byte offset in its low `62 - (cluster_bits -
//!    8)` bits and, above them, the number of additional 512-byte sectors the raw deflate stream
//!    spans. The stream inflates to one cluster.
//!
//! Refused, each with its own [`Qcow2Error`] variant: backing files (with the file name),
//! encryption, external data files, extended L2 entries, compression types other than deflate,
//! unknown incompatible features. The dirty and corrupt bits are accepted: this reader writes
//! nothing and checks every offset it follows.

use std::io::Read;

use crate::bytes::{be32, be64};
use crate::source::{check_range, read_vec, BlockSource, SourceError};
use crate::LimitError;

/// The qcow2 magic, `QFI\xfb`.
pub const MAGIC: [u8; 4] = *b"QFI\xfb";

const L2_OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
const COMPRESSED: u64 = 1 << 62;
const ZERO_FLAG: u64 = 1;
const INCOMPAT_DIRTY: u64 = 1;
const INCOMPAT_CORRUPT: u64 = 2;
const INCOMPAT_DATA_FILE: u64 = 4;
const INCOMPAT_COMPRESSION: u64 = 8;
const INCOMPAT_EXTL2: u64 = 16;
/// The largest L1 table accepted (QEMU's own limit).
const MAX_L1_BYTES: u64 = 32 << 20;

/// Why a qcow2 image cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Qcow2Error {
    #[error("read qcow2 metadata")]
    Read(#[source] SourceError),
    #[error("bad qcow2 magic")]
    BadMagic,
    #[error("unsupported qcow2 version {0}")]
    Version(u32),
    #[error("qcow2 cluster_bits {0} outside 9..=21")]
    ClusterBits(u32),
    #[error("qcow2 header length {0} too short")]
    HeaderLength(u32),
    #[error("qcow2 backing file {name:?} not supported (the image is an overlay)")]
    BackingFile { name: String },
    #[error("qcow2 encryption method {0} not supported")]
    Encrypted(u32),
    #[error("qcow2 external data file not supported")]
    ExternalDataFile,
    #[error("qcow2 extended L2 entries not supported")]
    ExtendedL2,
    #[error("qcow2 compression type {0} not supported (only deflate)")]
    CompressionType(u8),
    #[error("qcow2 incompatible features {0:#x} not supported")]
    IncompatibleFeatures(u64),
    #[error("qcow2 L1 table of {l1_size} entries too small for virtual size {size}")]
    L1TooSmall { l1_size: u32, size: u64 },
    #[error("qcow2 L1 table of {0} entries too large")]
    L1TooLarge(u32),
    #[error("qcow2 {what} offset {off:#x} unaligned or outside the file")]
    BadOffset { what: &'static str, off: u64 },
    #[error("qcow2 compressed cluster at {off:#x} does not inflate to {cluster_size} bytes")]
    Inflate { off: u64, cluster_size: u64 },
    #[error(transparent)]
    Limit(#[from] LimitError),
}

impl From<Qcow2Error> for SourceError {
    fn from(e: Qcow2Error) -> Self {
        match e {
            Qcow2Error::Read(e) => e,
            e => SourceError::Qcow2(Box::new(e)),
        }
    }
}

/// What the header says, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qcow2Info {
    pub version: u32,
    pub cluster_size: u64,
    pub virtual_size: u64,
}

/// An open qcow2 image; reads return guest-visible bytes.
#[derive(Debug)]
pub struct Qcow2<S> {
    file: S,
    info: Qcow2Info,
    cluster_bits: u32,
    l1_offset: u64,
    l1_size: u32,
    /// The last L2 table read: its host offset and contents.
    l2_cache: Option<(u64, Vec<u8>)>,
    /// The last compressed cluster inflated: its L2 entry and contents.
    zcache: Option<(u64, Vec<u8>)>,
}

impl<S: BlockSource> Qcow2<S> {
    /// Parses and checks the header of the qcow2 image in `file`.
    pub fn open(mut file: S) -> Result<Self, Qcow2Error> {
        let mut h = [0u8; 112];
        let n = (file.len().min(112)) as usize;
        file.read_at(0, &mut h[..n]).map_err(Qcow2Error::Read)?;
        if h[..4] != MAGIC {
            return Err(Qcow2Error::BadMagic);
        }
        let version = be32(&h, 4);
        if version != 2 && version != 3 {
            return Err(Qcow2Error::Version(version));
        }
        if n < 72 || (version == 3 && n < 104) {
            return Err(Qcow2Error::HeaderLength(n as u32));
        }
        let backing_off = be64(&h, 8);
        if backing_off != 0 {
            let len = u64::from(be32(&h, 16)).min(1023);
            let name = read_vec(&mut file, backing_off, len, 1023, "qcow2 backing file name")
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            return Err(Qcow2Error::BackingFile { name });
        }
        let cluster_bits = be32(&h, 20);
        if !(9..=21).contains(&cluster_bits) {
            return Err(Qcow2Error::ClusterBits(cluster_bits));
        }
        let virtual_size = be64(&h, 24);
        let crypt = be32(&h, 32);
        if crypt != 0 {
            return Err(Qcow2Error::Encrypted(crypt));
        }
        let l1_size = be32(&h, 36);
        let l1_offset = be64(&h, 40);
        if version == 3 {
            let header_len = be32(&h, 100);
            if header_len < 104 {
                return Err(Qcow2Error::HeaderLength(header_len));
            }
            let incompat = be64(&h, 72);
            if incompat & INCOMPAT_DATA_FILE != 0 {
                return Err(Qcow2Error::ExternalDataFile);
            }
            if incompat & INCOMPAT_EXTL2 != 0 {
                return Err(Qcow2Error::ExtendedL2);
            }
            if incompat & INCOMPAT_COMPRESSION != 0 {
                let ctype = if header_len > 104 { h[104] } else { 0 };
                if ctype != 0 {
                    return Err(Qcow2Error::CompressionType(ctype));
                }
            }
            let unknown = incompat
                & !(INCOMPAT_DIRTY
                    | INCOMPAT_CORRUPT
                    | INCOMPAT_COMPRESSION
                    | INCOMPAT_DATA_FILE
                    | INCOMPAT_EXTL2);
            if unknown != 0 {
                return Err(Qcow2Error::IncompatibleFeatures(unknown));
            }
            if incompat & INCOMPAT_CORRUPT != 0 {
                log::warn!("qcow2 image is marked corrupt; reading it with every offset checked");
            }
        }
        if u64::from(l1_size) * 8 > MAX_L1_BYTES {
            return Err(Qcow2Error::L1TooLarge(l1_size));
        }
        let cluster_size = 1u64 << cluster_bits;
        let l2_entries = cluster_size / 8;
        let clusters = virtual_size.div_ceil(cluster_size);
        if clusters.div_ceil(l2_entries) > u64::from(l1_size) {
            return Err(Qcow2Error::L1TooSmall {
                l1_size,
                size: virtual_size,
            });
        }
        if l1_size > 0 && (l1_offset % 512 != 0 || l1_offset >= file.len()) {
            return Err(Qcow2Error::BadOffset {
                what: "L1 table",
                off: l1_offset,
            });
        }
        Ok(Self {
            file,
            info: Qcow2Info {
                version,
                cluster_size,
                virtual_size,
            },
            cluster_bits,
            l1_offset,
            l1_size,
            l2_cache: None,
            zcache: None,
        })
    }

    /// What the header says.
    pub fn info(&self) -> Qcow2Info {
        self.info
    }

    /// The L2 entry for guest cluster `cluster`, or 0 when unallocated.
    fn l2_entry(&mut self, cluster: u64) -> Result<u64, Qcow2Error> {
        let l2_entries = self.info.cluster_size / 8;
        let l1_index = cluster / l2_entries;
        if l1_index >= u64::from(self.l1_size) {
            return Ok(0);
        }
        let mut e = [0u8; 8];
        self.file
            .read_at(self.l1_offset + l1_index * 8, &mut e)
            .map_err(Qcow2Error::Read)?;
        let l2_off = u64::from_be_bytes(e) & L2_OFFSET_MASK;
        if l2_off == 0 {
            return Ok(0);
        }
        let cached = matches!(&self.l2_cache, Some((off, _)) if *off == l2_off);
        if !cached {
            if l2_off % self.info.cluster_size != 0 {
                return Err(Qcow2Error::BadOffset {
                    what: "L2 table",
                    off: l2_off,
                });
            }
            let cs = self.info.cluster_size;
            let table = read_vec(&mut self.file, l2_off, cs, cs, "qcow2 L2 table")
                .map_err(Qcow2Error::Read)?;
            self.l2_cache = Some((l2_off, table));
        }
        let table = self
            .l2_cache
            .as_ref()
            .map(|(_, t)| t.as_slice())
            .unwrap_or(&[]);
        let idx = ((cluster % l2_entries) * 8) as usize;
        Ok(u64::from_be_bytes(crate::bytes::array(table, idx)))
    }

    /// Inflates the compressed cluster described by `entry` into the cache.
    fn inflate(&mut self, entry: u64) -> Result<&[u8], Qcow2Error> {
        let cached = matches!(&self.zcache, Some((e, _)) if *e == entry);
        if !cached {
            let x = 62 - (self.cluster_bits - 8);
            let off = entry & ((1u64 << x) - 1);
            let sectors = ((entry & !COMPRESSED & !(1 << 63)) >> x) + 1;
            let cs = self.info.cluster_size;
            // The stream ends somewhere in its last sector; the file may end before that.
            let want = (sectors * 512).saturating_sub(off % 512);
            let len = want.min(self.file.len().saturating_sub(off));
            if len == 0 {
                return Err(Qcow2Error::BadOffset {
                    what: "compressed cluster",
                    off,
                });
            }
            let raw = read_vec(
                &mut self.file,
                off,
                len,
                2 * cs + 512,
                "qcow2 compressed cluster",
            )
            .map_err(Qcow2Error::Read)?;
            let mut out = Vec::with_capacity(cs as usize);
            let got = flate2::read::DeflateDecoder::new(raw.as_slice())
                .take(cs)
                .read_to_end(&mut out);
            if got.is_err() || out.len() as u64 != cs {
                return Err(Qcow2Error::Inflate {
                    off,
                    cluster_size: cs,
                });
            }
            self.zcache = Some((entry, out));
        }
        Ok(self
            .zcache
            .as_ref()
            .map(|(_, d)| d.as_slice())
            .unwrap_or(&[]))
    }

    fn read_cluster_part(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Qcow2Error> {
        let cs = self.info.cluster_size;
        let entry = self.l2_entry(off >> self.cluster_bits)?;
        let in_cluster = off % cs;
        if entry & COMPRESSED != 0 {
            let data = self.inflate(entry)?;
            let src = crate::bytes::sub(data, in_cluster as usize, buf.len());
            if src.len() != buf.len() {
                return Err(Qcow2Error::Inflate {
                    off,
                    cluster_size: cs,
                });
            }
            buf.copy_from_slice(src);
            return Ok(());
        }
        let host = entry & L2_OFFSET_MASK;
        if host == 0 || (self.info.version == 3 && entry & ZERO_FLAG != 0) {
            buf.fill(0);
            return Ok(());
        }
        if host % cs != 0 {
            return Err(Qcow2Error::BadOffset {
                what: "data cluster",
                off: host,
            });
        }
        self.file
            .read_at(host + in_cluster, buf)
            .map_err(Qcow2Error::Read)
    }
}

impl<S: BlockSource> BlockSource for Qcow2<S> {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        check_range(off, buf.len() as u64, self.info.virtual_size)?;
        let cs = self.info.cluster_size;
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let n = ((cs - pos % cs) as usize).min(buf.len() - done);
            self.read_cluster_part(pos, &mut buf[done..done + n])?;
            done += n;
        }
        Ok(())
    }
    fn len(&self) -> u64 {
        self.info.virtual_size
    }
}

/// Whether `head` (the first bytes of an image) starts with the qcow2 magic.
pub fn is_qcow2(head: &[u8]) -> bool {
    head.get(..4) == Some(&MAGIC[..])
}
