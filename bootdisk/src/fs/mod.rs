//! Read-only filesystems, enough to read files by path: ext2/3/4 ([`ext4`]) and vfat
//! ([`fat`]), plus recognition by magic of filesystems that are not read here, so reports can
//! name them ("partition 2: btrfs").
//!
//! [`Filesystem`] is the common face of both: [`Filesystem::read_file`] follows symlinks (ext4)
//! and checks the file size limit before reading, [`Filesystem::read_dir`] lists a directory,
//! [`Filesystem::info`] gives the type, UUID and label that boot configurations refer to
//! (`root=UUID=...`, `search --fs-uuid`).

pub mod ext4;
pub mod fat;

use std::fmt;

use crate::source::{BlockSource, SourceError};
use crate::{LimitError, Limits};

/// A filesystem type, read here or only recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    Ext2,
    Ext3,
    Ext4,
    Fat12,
    Fat16,
    Fat32,
    /// Recognised by its magic but not read: `xfs`, `btrfs`, `swap`, `LVM2_member`, ...
    Other(&'static str),
}

impl FsKind {
    /// Whether this crate can read files from it.
    pub fn is_readable(&self) -> bool {
        !matches!(self, Self::Other(_))
    }
}

impl fmt::Display for FsKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ext2 => "ext2",
            Self::Ext3 => "ext3",
            Self::Ext4 => "ext4",
            Self::Fat12 | Self::Fat16 | Self::Fat32 => "vfat",
            Self::Other(name) => name,
        })
    }
}

/// A filesystem's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsInfo {
    pub kind: FsKind,
    /// As `blkid` prints it: `8-4-4-4-12` lower-case hex for ext, `XXXX-XXXX` for FAT.
    pub uuid: String,
    /// Volume label, trailing spaces and NULs removed; empty when none.
    pub label: String,
}

impl fmt::Display for FsInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if !self.uuid.is_empty() {
            write!(f, ", UUID {}", self.uuid)?;
        }
        if !self.label.is_empty() {
            write!(f, ", label {:?}", self.label)?;
        }
        Ok(())
    }
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Other,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: FileKind,
}

/// Why a filesystem or a file in it cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("read")]
    Read(#[from] SourceError),
    #[error("{fs} superblock: {reason} ({value})")]
    Superblock {
        fs: &'static str,
        reason: &'static str,
        value: u64,
    },
    #[error("{fs} feature {feature} not supported")]
    Unsupported { fs: &'static str, feature: String },
    #[error("{fs} corrupt {what} ({value})")]
    Corrupt {
        fs: &'static str,
        what: &'static str,
        value: u64,
    },
    #[error("{0}: not found")]
    NotFound(String),
    #[error("{0}: not a directory")]
    NotADirectory(String),
    #[error("{0}: not a regular file")]
    NotAFile(String),
    #[error("{path}: more than {hops} symlinks")]
    SymlinkLoop { path: String, hops: u32 },
    #[error("{0}: path too long")]
    PathTooLong(String),
    #[error(transparent)]
    Limit(#[from] LimitError),
}

impl FsError {
    /// Whether the error means "no such file" rather than a damaged filesystem.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_) | Self::NotADirectory(_))
    }
}

/// The path components of `path`, without empty and `.` components.
pub(crate) fn components(path: &str) -> impl DoubleEndedIterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// An open filesystem of a readable kind.
#[derive(Debug)]
pub enum Filesystem<S> {
    Ext4(Box<ext4::Ext4<S>>),
    Fat(Box<fat::Fat<S>>),
}

impl<S: BlockSource> Filesystem<S> {
    /// Opens the filesystem in `src` if it is of a readable kind; `Ok(None)` when `src` holds
    /// no filesystem this crate reads (see [`detect`] for what it is).
    pub fn open(mut src: S, limits: &Limits) -> Result<Option<Self>, FsError> {
        match detect(&mut src)? {
            Some(FsKind::Ext2 | FsKind::Ext3 | FsKind::Ext4) => {
                Ok(Some(Self::Ext4(Box::new(ext4::Ext4::open(src, limits)?))))
            }
            Some(FsKind::Fat12 | FsKind::Fat16 | FsKind::Fat32) => {
                Ok(Some(Self::Fat(Box::new(fat::Fat::open(src, limits)?))))
            }
            _ => Ok(None),
        }
    }

    pub fn info(&self) -> FsInfo {
        match self {
            Self::Ext4(fs) => fs.info(),
            Self::Fat(fs) => fs.info(),
        }
    }

    /// Reads the regular file at `path` (absolute, from this filesystem's root), following
    /// symlinks; at most `max` bytes or a [`LimitError`].
    pub fn read_file(&mut self, path: &str, max: u64) -> Result<Vec<u8>, FsError> {
        match self {
            Self::Ext4(fs) => fs.read_file(path, max),
            Self::Fat(fs) => fs.read_file(path, max),
        }
    }

    /// The entries of the directory at `path`, `.` and `..` excluded.
    pub fn read_dir(&mut self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        match self {
            Self::Ext4(fs) => fs.read_dir(path),
            Self::Fat(fs) => fs.read_dir(path),
        }
    }

    /// The path `path` resolves to with every symlink followed (the file's real name).
    pub fn canonical_path(&mut self, path: &str) -> Result<String, FsError> {
        match self {
            Self::Ext4(fs) => fs.canonical_path(path),
            Self::Fat(fs) => fs.canonical_path(path),
        }
    }

    /// Whether `path` names a regular file (after symlinks).
    pub fn is_file(&mut self, path: &str) -> Result<bool, FsError> {
        match self {
            Self::Ext4(fs) => fs.is_file(path),
            Self::Fat(fs) => fs.is_file(path),
        }
    }
}

/// Says which filesystem `src` holds, by magic: `Ok(None)` when none is recognised.
pub fn detect(src: &mut (impl BlockSource + ?Sized)) -> Result<Option<FsKind>, SourceError> {
    let len = src.len();
    let mut head = vec![0u8; len.min(0x1_0080) as usize];
    src.read_at(0, &mut head)?;
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    if at(1080, &[0x53, 0xEF]) {
        return Ok(Some(ext4::kind_from_superblock(crate::bytes::sub(
            &head, 1024, 1024,
        ))));
    }
    if let Some(first) = head.get(..512) {
        if let Some(kind) = fat::kind_from_boot_sector(first) {
            return Ok(Some(kind));
        }
    }
    let other = [
        (0usize, &b"XFSB"[..], "xfs"),
        (0x1_0040, b"_BHRfS_M", "btrfs"),
        (4086, b"SWAPSPACE2", "swap"),
        (4086, b"SWAP-SPACE", "swap"),
        (536, b"LVM2 001", "LVM2_member"),
        (0, b"LUKS\xba\xbe", "crypto_LUKS"),
        (0x8001, b"CD001", "iso9660"),
        (0, b"hsqs", "squashfs"),
        (3, b"NTFS    ", "ntfs"),
        (1024, b"\x10\x20\xf5\xf2", "f2fs"),
        (1024, b"\xe2\xe1\xf5\xe0", "erofs"),
    ];
    for (off, magic, name) in other {
        if at(off, magic) {
            return Ok(Some(FsKind::Other(name)));
        }
    }
    Ok(None)
}
