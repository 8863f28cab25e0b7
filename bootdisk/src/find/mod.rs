//! Finding what to boot: [`find_boot`] walks a disk in the order a firmware and boot loader
//! would and returns the default entry's kernel, initrd and command line; [`probe`] only says
//! what the disk holds.
//!
//! [`find_boot`], step by step:
//! 1. The image format by magic (qcow2 or raw; others refused by name).
//! 2. The partition table (GPT, MBR) or a whole-disk filesystem; each volume's filesystem and its
//!    UUID and label ([`volumes`]).
//! 3. Boot configurations, volume by volume in boot order (ESPs, XBOOTLDR, MBR-bootable, then
//!    table order) ([`scan`]): on each, `EFI/*/grub.cfg` (ESP), `/boot/grub/grub.cfg`,
//!    `/boot/grub2/grub.cfg`, `/grub/grub.cfg`, `/grub2/grub.cfg` (a separate /boot), following
//!    `configfile` and `search` to the volume they name and `blscfg` to the BLS entries; then BLS
//!    entries on their own (`/loader/entries`, `/boot/loader/entries`, systemd-boot's
//!    `loader.conf` default); then extlinux/syslinux configurations.
//! 4. When no configuration is found on any volume: Debian's `/vmlinuz` and `/initrd.img`
//!    symlinks (also under `/boot`), with `root=UUID=<that filesystem> ro`.
//! 5. The default entry's paths are resolved on the filesystem the configuration names (grub's
//!    `root`, `search --fs-uuid`, `(hd0,gptN)`) or else its own; a path that is missing there is
//!    tried with `/boot` added or removed (a separate /boot partition). The kernel and initrds
//!    are read within [`Limits`]; initrds are concatenated.
//!
//! A configuration whose kernel is missing does not end the search: a later one may boot. When
//! none does, the first such failure is the error; when no configuration was found at all, the
//! disk is a bare root filesystem ([`FindBootError::NoKernel`]).

mod scan;
mod volumes;

use std::fmt;

pub use volumes::{probe, DiskKind, DiskProbe, Volume};

use crate::fs::{FsError, FsInfo};
use crate::image::{DiskImage, ImageError, ImageFormat};
use crate::partition::PartitionError;
use crate::source::BlockSource;
use crate::{LimitError, Limits};

/// How the entry was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootMethod {
    Grub,
    /// BLS entries, through grub's `blscfg` or on their own (systemd-boot).
    Bls,
    Extlinux,
    /// Debian's `/vmlinuz` and `/initrd.img` symlinks.
    KernelSymlinks,
}

/// A file on a volume, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// The partition number; `None` for a whole-disk filesystem.
    pub partition: Option<u32>,
    pub path: String,
}

impl fmt::Display for FileRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.partition {
            Some(p) => write!(f, "{} on partition {p}", self.path),
            None => write!(f, "{}", self.path),
        }
    }
}

/// Where the kernel came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootSource {
    pub image: ImageFormat,
    pub method: BootMethod,
    /// The partition holding the kernel; `None` for a whole-disk filesystem.
    pub partition: Option<u32>,
    /// The filesystem holding the kernel.
    pub fs: FsInfo,
    /// The configuration that chose the entry (`None` for [`BootMethod::KernelSymlinks`]).
    pub config: Option<FileRef>,
    /// Configurations that led to it (an EFI stub grub.cfg, grub.cfg for `blscfg`).
    pub via: Vec<FileRef>,
    pub entry_title: String,
    /// The kernel's path with symlinks resolved.
    pub kernel_path: String,
    pub initrd_paths: Vec<String>,
}

impl fmt::Display for BootSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel {} from ", self.kernel_path)?;
        match self.partition {
            Some(p) => write!(f, "partition {p} ({})", self.fs)?,
            None => write!(f, "the whole disk ({})", self.fs)?,
        }
        match &self.config {
            Some(c) => write!(f, " per {c}")?,
            None => write!(f, " per the /vmlinuz symlink")?,
        }
        if !self.via.is_empty() {
            let via: Vec<String> = self.via.iter().map(|v| v.to_string()).collect();
            write!(f, " (via {})", via.join(", "))?;
        }
        if !self.entry_title.is_empty() {
            write!(f, " entry '{}'", self.entry_title)?;
        }
        Ok(())
    }
}

/// What to boot.
#[derive(Clone, PartialEq, Eq)]
pub struct BootSelection {
    pub kernel: Vec<u8>,
    /// The initrds concatenated; empty when the entry has none.
    pub initrd: Vec<u8>,
    pub cmdline: String,
    pub source: BootSource,
}

impl fmt::Debug for BootSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootSelection")
            .field("kernel", &format_args!("{} bytes", self.kernel.len()))
            .field("initrd", &format_args!("{} bytes", self.initrd.len()))
            .field("cmdline", &self.cmdline)
            .field("source", &self.source)
            .finish()
    }
}

/// Why [`find_boot`] found nothing to boot.
#[derive(Debug, thiserror::Error)]
pub enum FindBootError {
    #[error("disk image")]
    Image(#[from] ImageError),
    #[error("corrupt partition table")]
    CorruptPartitionTable(#[source] PartitionError),
    #[error("no partition table and no filesystem")]
    NoFilesystem,
    #[error("no filesystem that can be read: {0}")]
    NoReadableFilesystem(String),
    /// Readable filesystems, but no boot configuration and no kernel: a bare root filesystem.
    #[error("no kernel found on {0}")]
    NoKernel(String),
    #[error("{config} entry '{entry}': {path} not found")]
    KernelMissing {
        config: String,
        entry: String,
        path: String,
    },
    #[error("{config} entry '{entry}': read {path}")]
    ReadBootFile {
        config: String,
        entry: String,
        path: String,
        #[source]
        source: FsError,
    },
    #[error("{context}")]
    LimitExceeded {
        context: String,
        #[source]
        source: LimitError,
    },
}

/// Why [`probe`] could not tell what a disk holds.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("disk image")]
    Image(#[from] ImageError),
    #[error("corrupt partition table")]
    PartitionTable(#[source] PartitionError),
    #[error(transparent)]
    Limit(LimitError),
}

/// Finds the default boot entry of the OS on `disk` and reads its kernel and initrd.
pub fn find_boot(
    disk: &mut impl BlockSource,
    limits: &Limits,
) -> Result<BootSelection, FindBootError> {
    let mut img = DiskImage::open(disk)?;
    let format = img.format();
    let kind = volumes::layout(&mut img, limits).map_err(|e| match e {
        PartitionError::Limit(source) => FindBootError::LimitExceeded {
            context: "partition table".into(),
            source,
        },
        e => FindBootError::CorruptPartitionTable(e),
    })?;
    let vols = volumes::volumes_of(kind)?;
    if !vols.iter().any(Volume::is_readable) {
        let found: Vec<String> = vols
            .iter()
            .filter(|v| v.fs.is_some())
            .map(|v| v.to_string())
            .collect();
        return Err(FindBootError::NoReadableFilesystem(found.join(", ")));
    }
    let mut scan = scan::Scan::new(&mut img, &vols, limits, format);
    scan.run()
}
