//! Byte sources: the [`BlockSource`] trait every parser reads through, its adapters for files,
//! byte slices and any `Read + Seek`, a window onto a part of a source ([`Window`], used for
//! partitions), and bounded read helpers.
//!
//! Every read names its offset and length; a read past the end of the source is an error, never
//! a short read, so parsers never see stale buffer contents. Allocation for a read happens only
//! after its length has been checked against a limit and against the source length.

use std::io::{Read, Seek, SeekFrom};

use crate::LimitError;

/// Why a read from a [`BlockSource`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The read does not fit in the source.
    #[error("read of {len} bytes at offset {off} past end {size}")]
    OutOfRange { off: u64, len: u64, size: u64 },
    /// The underlying file failed.
    #[error("read of {len} bytes at offset {off}")]
    Io {
        off: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },
    /// The qcow2 layer failed to map or decompress a cluster. The cause is that layer's
    /// `qcow2::Qcow2Error`, boxed as a trait object so this bottom layer does not depend on the
    /// format layers above it.
    #[error("qcow2")]
    Qcow2(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A read would allocate more than a limit allows.
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// A random-access, read-only source of bytes: a disk image, a partition, a file in memory.
pub trait BlockSource {
    /// Fills `buf` with the bytes at `off`; all of it or an error.
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), SourceError>;
    /// The size of the source in bytes.
    fn len(&self) -> u64;
    /// Whether the source has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Checks that `len` bytes at `off` lie inside a source of `size` bytes.
pub(crate) fn check_range(off: u64, len: u64, size: u64) -> Result<(), SourceError> {
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(SourceError::OutOfRange { off, len, size }),
    }
}

impl<T: BlockSource + ?Sized> BlockSource for &mut T {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        (**self).read_at(off, buf)
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
}

impl BlockSource for &[u8] {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        let size = <[u8]>::len(self) as u64;
        check_range(off, buf.len() as u64, size)?;
        // Both bounds were checked against the slice length just above.
        let start = usize::try_from(off).map_err(|_| SourceError::OutOfRange {
            off,
            len: buf.len() as u64,
            size,
        })?;
        let src = self
            .get(start..start + buf.len())
            .ok_or(SourceError::OutOfRange {
                off,
                len: buf.len() as u64,
                size,
            })?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
}

impl BlockSource for Vec<u8> {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.as_slice().read_at(off, buf)
    }
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }
}

/// Adapter for any `Read + Seek` (a [`std::fs::File`], a `Cursor`), with its length taken once.
#[derive(Debug)]
pub struct ReadSeekSource<R> {
    inner: R,
    len: u64,
}

impl<R: Read + Seek> ReadSeekSource<R> {
    /// Wraps `inner`, seeking to its end once to learn its length.
    pub fn new(mut inner: R) -> std::io::Result<Self> {
        let len = inner.seek(SeekFrom::End(0))?;
        Ok(Self { inner, len })
    }
    /// Gives the wrapped reader back.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read + Seek> BlockSource for ReadSeekSource<R> {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        let len = buf.len() as u64;
        check_range(off, len, self.len)?;
        let io = |source| SourceError::Io { off, len, source };
        self.inner.seek(SeekFrom::Start(off)).map_err(io)?;
        self.inner.read_exact(buf).map_err(io)
    }
    fn len(&self) -> u64 {
        self.len
    }
}

/// A file on disk as a source.
pub type FileSource = ReadSeekSource<std::fs::File>;

impl FileSource {
    /// Opens the image at `path` read-only.
    pub fn open(path: impl AsRef<std::path::Path>) -> std::io::Result<Self> {
        Self::new(std::fs::File::open(path)?)
    }
}

/// The bytes `start..start + len` of another source, e.g. one partition of a disk.
#[derive(Debug)]
pub struct Window<S> {
    inner: S,
    start: u64,
    len: u64,
}

impl<S: BlockSource> Window<S> {
    /// A window of `len` bytes at `start`; clipped to the end of `inner` (a partition table may
    /// claim more than a truncated image holds; reads past the real end then fail).
    pub fn new(inner: S, start: u64, len: u64) -> Self {
        let avail = inner.len().saturating_sub(start);
        Self {
            inner,
            start,
            len: len.min(avail),
        }
    }
}

impl<S: BlockSource> BlockSource for Window<S> {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        check_range(off, buf.len() as u64, self.len)?;
        self.inner.read_at(self.start + off, buf)
    }
    fn len(&self) -> u64 {
        self.len
    }
}

/// Reads `len` bytes at `off` into a new vector, after checking `len` against `limit` (named
/// `what` in the error) and against the source length, so a corrupt length never allocates.
pub fn read_vec(
    src: &mut (impl BlockSource + ?Sized),
    off: u64,
    len: u64,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, SourceError> {
    LimitError::check(what, len, limit)?;
    check_range(off, len, src.len())?;
    let n = usize::try_from(len).map_err(|_| LimitError {
        what,
        value: len,
        limit,
    })?;
    let mut buf = vec![0u8; n];
    src.read_at(off, &mut buf)?;
    Ok(buf)
}

/// Reads exactly `N` bytes at `off`.
pub fn read_array<const N: usize>(
    src: &mut (impl BlockSource + ?Sized),
    off: u64,
) -> Result<[u8; N], SourceError> {
    let mut buf = [0u8; N];
    src.read_at(off, &mut buf)?;
    Ok(buf)
}
