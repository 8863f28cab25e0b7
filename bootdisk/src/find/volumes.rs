//! The volumes of a disk: its partitions, or the whole disk when it holds a filesystem directly,
//! each with the filesystem found on it; and [`probe`], which reports just that.

use std::fmt;

use super::{FindBootError, ProbeError};
use crate::fs::{detect, Filesystem, FsInfo};
use crate::image::{DiskImage, ImageFormat};
use crate::partition::{read_partition_table, Partition, PartitionError, TableKind};
use crate::source::{BlockSource, Window};
use crate::Limits;

/// A place a filesystem can be: a partition, or the whole disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// `None` for a whole-disk filesystem.
    pub partition: Option<Partition>,
    pub start: u64,
    pub size: u64,
    /// The filesystem recognised on it, readable or not.
    pub fs: Option<FsInfo>,
    /// Why a filesystem of a readable kind could not be opened.
    pub fs_error: Option<String>,
}

impl Volume {
    /// Whether files can be read from it.
    pub fn is_readable(&self) -> bool {
        self.fs_error.is_none() && self.fs.as_ref().is_some_and(|f| f.kind.is_readable())
    }
    pub(crate) fn is_esp(&self) -> bool {
        self.partition.as_ref().is_some_and(|p| p.kind.is_esp())
    }
    pub(crate) fn is_xbootldr(&self) -> bool {
        self.partition
            .as_ref()
            .is_some_and(|p| p.kind.is_xbootldr())
    }
}

impl fmt::Display for Volume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.partition {
            Some(p) => write!(f, "partition {}", p.index)?,
            None => write!(f, "whole disk")?,
        }
        match (&self.fs, &self.fs_error) {
            (Some(info), None) => write!(f, " ({info})"),
            (Some(info), Some(e)) => write!(f, " ({}: {e})", info.kind),
            (None, _) => write!(f, " (no filesystem)"),
        }
    }
}

/// What a disk is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskKind {
    /// A filesystem without a partition table.
    Filesystem(Volume),
    /// A partition table and what is on each partition.
    Partitioned {
        table: TableKind,
        volumes: Vec<Volume>,
    },
    /// Neither a partition table nor a filesystem this crate recognises.
    Unknown,
}

/// A disk's image format and layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskProbe {
    pub format: ImageFormat,
    pub kind: DiskKind,
}

/// Says what `disk` holds: image format, partition table, filesystems with UUID and label.
pub fn probe(disk: &mut impl BlockSource, limits: &Limits) -> Result<DiskProbe, ProbeError> {
    let mut img = DiskImage::open(disk)?;
    let format = img.format();
    let kind = layout(&mut img, limits).map_err(|e| match e {
        PartitionError::Limit(l) => ProbeError::Limit(l),
        e => ProbeError::PartitionTable(e),
    })?;
    Ok(DiskProbe { format, kind })
}

/// Reads the partition table and recognises the filesystem of every volume.
pub(crate) fn layout(
    img: &mut impl BlockSource,
    limits: &Limits,
) -> Result<DiskKind, PartitionError> {
    let Some(table) = read_partition_table(img, limits)? else {
        let len = img.len();
        let v = volume(img, None, 0, len, limits);
        return Ok(if v.fs.is_some() {
            DiskKind::Filesystem(v)
        } else {
            DiskKind::Unknown
        });
    };
    let volumes = table
        .partitions
        .iter()
        .map(|p| volume(img, Some(p.clone()), p.start, p.size, limits))
        .collect();
    Ok(DiskKind::Partitioned {
        table: table.kind,
        volumes,
    })
}

fn volume(
    img: &mut impl BlockSource,
    partition: Option<Partition>,
    start: u64,
    size: u64,
    limits: &Limits,
) -> Volume {
    let mut v = Volume {
        partition,
        start,
        size,
        fs: None,
        fs_error: None,
    };
    if v.partition
        .as_ref()
        .is_some_and(|p| p.kind.is_never_filesystem())
    {
        return v;
    }
    let mut w = Window::new(&mut *img, start, size);
    let kind = match detect(&mut w) {
        Ok(Some(k)) => k,
        Ok(None) => return v,
        Err(e) => {
            v.fs_error = Some(e.to_string());
            return v;
        }
    };
    v.fs = Some(FsInfo {
        kind,
        uuid: String::new(),
        label: String::new(),
    });
    if kind.is_readable() {
        match Filesystem::open(w, limits) {
            Ok(Some(fs)) => v.fs = Some(fs.info()),
            Ok(None) => {}
            Err(e) => v.fs_error = Some(error_chain(&e)),
        }
    }
    v
}

/// An error and its sources, `: `-separated.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The volumes of `kind`, or the error for a disk with none.
pub(crate) fn volumes_of(kind: DiskKind) -> Result<Vec<Volume>, FindBootError> {
    match kind {
        DiskKind::Unknown => Err(FindBootError::NoFilesystem),
        DiskKind::Filesystem(v) => Ok(vec![v]),
        DiskKind::Partitioned { volumes, .. } => {
            if volumes.iter().all(|v| v.fs.is_none()) {
                return Err(FindBootError::NoFilesystem);
            }
            Ok(volumes)
        }
    }
}

/// The order a firmware and boot loader look at volumes: ESPs, XBOOTLDR, MBR-bootable, rest.
pub(crate) fn boot_order(volumes: &[Volume]) -> Vec<usize> {
    let rank = |v: &Volume| {
        if v.is_esp() {
            0
        } else if v.is_xbootldr() {
            1
        } else if v.partition.as_ref().is_some_and(|p| p.bootable) {
            2
        } else {
            3
        }
    };
    let mut order: Vec<usize> = (0..volumes.len())
        .filter(|&i| volumes[i].is_readable())
        .collect();
    order.sort_by_key(|&i| rank(&volumes[i]));
    order
}
