//! Disk image formats: detection by magic and a [`DiskImage`] that reads guest-visible bytes
//! whatever the container format is.
//!
//! qcow2 is opened through [`crate::qcow2`]; anything without a known magic is a raw image.
//! Formats that are recognised but not read here (VMDK, VHDX, VDI, QED) are refused by name
//! instead of being misread as raw.

use crate::qcow2::{Qcow2, Qcow2Error, Qcow2Info};
use crate::source::{BlockSource, SourceError};

/// The container format of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Raw,
    Qcow2(Qcow2Info),
}

/// Why an image cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("read image header")]
    Read(#[source] SourceError),
    #[error("qcow2")]
    Qcow2(#[from] Qcow2Error),
    #[error("image format {0} not supported")]
    UnsupportedFormat(&'static str),
}

/// An opened image: raw bytes or a qcow2 mapping.
#[derive(Debug)]
pub enum DiskImage<S> {
    Raw(S),
    Qcow2(Box<Qcow2<S>>),
}

impl<S: BlockSource> DiskImage<S> {
    /// Detects the format of `src` by magic and opens it.
    pub fn open(mut src: S) -> Result<Self, ImageError> {
        let mut head = [0u8; 72];
        let n = src.len().min(head.len() as u64) as usize;
        src.read_at(0, &mut head[..n]).map_err(ImageError::Read)?;
        let head = &head[..n];
        if crate::qcow2::is_qcow2(head) {
            return Ok(Self::Qcow2(Box::new(Qcow2::open(src)?)));
        }
        if let Some(name) = foreign_format(head) {
            return Err(ImageError::UnsupportedFormat(name));
        }
        Ok(Self::Raw(src))
    }

    /// The container format.
    pub fn format(&self) -> ImageFormat {
        match self {
            Self::Raw(_) => ImageFormat::Raw,
            Self::Qcow2(q) => ImageFormat::Qcow2(q.info()),
        }
    }
}

/// Names a known non-raw, non-qcow2 image format from its first bytes.
fn foreign_format(head: &[u8]) -> Option<&'static str> {
    let starts = |m: &[u8]| head.starts_with(m);
    if starts(b"KDMV") || starts(b"# Disk DescriptorFile") {
        Some("vmdk")
    } else if starts(b"vhdxfile") {
        Some("vhdx")
    } else if starts(b"QFI\0") || starts(b"QED\0") {
        Some("qed")
    } else if head.get(64..68) == Some(&[0x7f, 0x10, 0xda, 0xbe][..]) {
        Some("vdi")
    } else {
        None
    }
}

impl<S: BlockSource> BlockSource for DiskImage<S> {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        match self {
            Self::Raw(s) => s.read_at(off, buf),
            Self::Qcow2(q) => q.read_at(off, buf),
        }
    }
    fn len(&self) -> u64 {
        match self {
            Self::Raw(s) => s.len(),
            Self::Qcow2(q) => q.len(),
        }
    }
}
