//! Reads a VM disk image the way a firmware and boot loader would, without running either: the
//! image format (qcow2 or raw), the partition table (GPT or MBR), the filesystems (ext2/3/4 and
//! vfat), the boot loader configuration (BLS entries, grub.cfg, extlinux.conf, Debian's
//! `/vmlinuz` symlinks) and finally the default entry's kernel, initrd and command line, so the
//! launcher can boot the user's own OS directly.
//!
//! Everything read here is attacker-controlled. Every read is bounded ([`Limits`]), every
//! length is checked before it allocates, tree walks have depth limits, loops have iteration
//! limits, and every failure is a variant of an error enum; nothing panics on bad input (the
//! tests flip bits in every fixture and the fuzz targets in `fuzz/` run every parser).
//!
//! The layers, bottom up:
//! 1. [`source`]: [`BlockSource`], a random-access byte source, with adapters for files and
//!    byte slices and a [`source::Window`] for partitions.
//! 2. [`image`] and [`qcow2`]: format detection by magic; qcow2 clusters mapped to guest bytes.
//! 3. [`partition`]: MBR and GPT.
//! 4. [`fs`]: ext2/3/4 and vfat, read-only, files by path.
//! 5. [`config`]: boot configuration parsers, pure functions over text.
//! 6. [`find`]: [`find_boot`] and [`probe`], which walk all of the above in boot order.

#![forbid(unsafe_code)]

mod bytes;
pub mod config;
pub mod find;
pub mod fs;
pub mod image;
pub mod partition;
pub mod qcow2;
pub mod source;
#[cfg(feature = "testing")]
pub mod testing;

pub use bytes::crc32;
pub use find::{
    find_boot, probe, BootMethod, BootSelection, BootSource, DiskKind, DiskProbe, FindBootError,
    ProbeError, Volume,
};
pub use source::{BlockSource, FileSource, ReadSeekSource, SourceError, Window};

/// Bounds on what reading an image may cost. [`Limits::default`] suits real cloud images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file read from a filesystem (kernel, one initrd).
    pub max_file_size: u64,
    /// Largest kernel plus initrds together.
    pub max_boot_size: u64,
    /// Largest configuration file (grub.cfg, BLS entry, extlinux.conf, grubenv).
    pub max_config_size: u64,
    /// Most lines parsed in one configuration file.
    pub max_config_lines: usize,
    /// Most boot entries kept from one configuration.
    pub max_entries: usize,
    /// Largest directory read.
    pub max_dir_size: u64,
    /// Most entries listed from one directory.
    pub max_dir_entries: usize,
    /// Most symlinks followed while resolving one path.
    pub max_symlink_hops: u32,
    /// Most path components walked while resolving one path (symlink targets included).
    pub max_path_components: usize,
    /// Deepest ext4 extent tree (the format's own maximum is 5).
    pub max_extent_depth: u16,
    /// Most GPT entries.
    pub max_partitions: usize,
    /// Longest MBR extended-partition chain.
    pub max_logical_partitions: usize,
    /// Deepest grub `submenu` / `if` nesting.
    pub max_nesting: usize,
    /// Most `configfile` redirections followed (EFI stub grub.cfg -> real grub.cfg).
    pub max_config_hops: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_file_size: 512 << 20,
            max_boot_size: 1 << 30,
            max_config_size: 4 << 20,
            max_config_lines: 100_000,
            max_entries: 1024,
            max_dir_size: 64 << 20,
            max_dir_entries: 100_000,
            max_symlink_hops: 16,
            max_path_components: 256,
            max_extent_depth: 5,
            max_partitions: 256,
            max_logical_partitions: 64,
            max_nesting: 16,
            max_config_hops: 4,
        }
    }
}

/// A limit from [`Limits`] (or a format's own bound) that an image exceeded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value} exceeds limit {limit}")]
pub struct LimitError {
    pub what: &'static str,
    pub value: u64,
    pub limit: u64,
}

impl LimitError {
    /// `Ok` when `value <= limit`.
    pub fn check(what: &'static str, value: u64, limit: u64) -> Result<(), LimitError> {
        if value <= limit {
            Ok(())
        } else {
            Err(LimitError { what, value, limit })
        }
    }
}
