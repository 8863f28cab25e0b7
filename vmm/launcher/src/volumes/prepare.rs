//! Carrying out the volume plan (I/O), before the VM starts.
//!
//! - containerDisk: the disk is read where its container holds it ([`super::container_disk`]:
//!   `containerDisk.path`, else the first file under `disk/`, else the first file at the top).
//!   It is never written: the VM gets a private writable raw copy. Raw images are copied
//!   sparsely (all-zero 64 KiB blocks become holes, so a mostly empty image costs little);
//!   qcow2 images are converted to raw with `qemu-img convert` (Debian package `qemu-utils`).
//!   One raw format serves both backends (the KVM VMM reads raw files only). The copy lives in
//!   the Pod's ephemeral storage and goes with it.
//! - emptyDisk: a sparse file of the capacity (created once; kept while the Pod lives).
//! - cloudInitNoCloud: a fresh `cidata` ISO ([`super::cloud_init`]).
//! - persistentVolumeClaim: `disk.img` must exist in the mounted volume; it is used in place.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::cloud_init::{write_seed_iso, SeedError};
use super::container_disk::{self, LocateError};
use super::plan::{VolumePlan, VolumeSource};

const BLOCK: usize = 64 * 1024;
const QCOW2_MAGIC: &[u8; 4] = b"QFI\xfb";

/// Why a volume could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    ContainerDisk(#[from] LocateError),
    #[error("containerDisk volume {volume:?}: cannot copy {from} to {to}")]
    Copy {
        volume: String,
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("containerDisk volume {volume:?}: qemu-img convert of {from} failed: {detail} (qemu-img is in the Debian package qemu-utils)")]
    Convert {
        volume: String,
        from: PathBuf,
        detail: String,
    },
    #[error("emptyDisk volume {volume:?}: cannot create {path}")]
    EmptyDisk {
        volume: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cloudInitNoCloud volume {volume:?}")]
    CloudInit {
        volume: String,
        #[source]
        source: SeedError,
    },
    #[error("persistentVolumeClaim volume {volume:?}: {path} does not exist")]
    PvcDiskMissing { volume: String, path: PathBuf },
    #[error("cannot create the disk directory {0}")]
    DiskDir(PathBuf, #[source] std::io::Error),
}

/// Prepares every planned volume.
pub fn prepare(plans: &[VolumePlan]) -> Result<(), PrepareError> {
    for plan in plans {
        prepare_one(plan)?;
    }
    Ok(())
}

fn prepare_one(plan: &VolumePlan) -> Result<(), PrepareError> {
    let volume = plan.name.clone();
    if let Some(dir) = plan.disk.parent() {
        if !matches!(plan.source, VolumeSource::PersistentVolumeClaim) {
            std::fs::create_dir_all(dir).map_err(|e| PrepareError::DiskDir(dir.into(), e))?;
        }
    }
    match &plan.source {
        VolumeSource::ContainerDisk {
            mount,
            path_in_image,
        } => {
            let source = container_disk::locate(&volume, mount, path_in_image.as_deref())?;
            private_raw_copy(&volume, &source, &plan.disk)
        }
        VolumeSource::EmptyDisk { capacity } => {
            let err = |source| PrepareError::EmptyDisk {
                volume: volume.clone(),
                path: plan.disk.clone(),
                source,
            };
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&plan.disk)
                .map_err(err)?;
            if file.metadata().map_err(err)?.len() < *capacity {
                file.set_len(*capacity).map_err(err)?;
            }
            Ok(())
        }
        VolumeSource::CloudInitNoCloud(seed) => write_seed_iso(seed, &plan.disk)
            .map_err(|source| PrepareError::CloudInit { volume, source }),
        VolumeSource::PersistentVolumeClaim => {
            if plan.disk.is_file() {
                Ok(())
            } else {
                Err(PrepareError::PvcDiskMissing {
                    volume,
                    path: plan.disk.clone(),
                })
            }
        }
    }
}

fn private_raw_copy(volume: &str, from: &Path, to: &Path) -> Result<(), PrepareError> {
    let copy_err = |source| PrepareError::Copy {
        volume: volume.to_string(),
        from: from.into(),
        to: to.into(),
        source,
    };
    let mut magic = [0u8; 4];
    let mut source = File::open(from).map_err(copy_err)?;
    let is_qcow2 = source.read_exact(&mut magic).is_ok() && &magic == QCOW2_MAGIC;
    let _ = std::fs::remove_file(to);
    if is_qcow2 {
        let output = Command::new("qemu-img")
            .args(["convert", "-f", "qcow2", "-O", "raw"])
            .arg(from)
            .arg(to)
            .output()
            .map_err(|e| PrepareError::Convert {
                volume: volume.to_string(),
                from: from.into(),
                detail: e.to_string(),
            })?;
        if !output.status.success() {
            return Err(PrepareError::Convert {
                volume: volume.to_string(),
                from: from.into(),
                detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        return Ok(());
    }
    source.seek(SeekFrom::Start(0)).map_err(copy_err)?;
    sparse_copy(&mut source, to).map_err(copy_err)
}

/// Copies `source` to a new file at `to`, leaving holes where whole blocks are zero.
pub fn sparse_copy(source: &mut File, to: &Path) -> std::io::Result<()> {
    let len = source.metadata()?.len();
    let mut target = OpenOptions::new().create_new(true).write(true).open(to)?;
    let mut buf = vec![0u8; BLOCK];
    loop {
        let n = read_full(source, &mut buf)?;
        if n == 0 {
            break;
        }
        if buf[..n].iter().all(|b| *b == 0) {
            target.seek(SeekFrom::Current(i64::try_from(n).unwrap_or(i64::MAX)))?;
        } else {
            target.write_all(&buf[..n])?;
        }
    }
    target.set_len(len)?;
    target.sync_all()
}

fn read_full(source: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match source.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        crate::util::scratch_dir(&format!("prepare-{name}"))
    }

    #[test]
    fn container_disk_is_copied_sparsely_and_never_written() {
        let dir = temp_dir("cd");
        let mount = dir.join("mount");
        std::fs::create_dir_all(mount.join("disk")).unwrap();
        let image = mount.join("disk/disk.img");
        let mut data = vec![0u8; 4 * BLOCK];
        data[BLOCK + 7] = 0xaa;
        std::fs::write(&image, &data).unwrap();
        let plan = VolumePlan {
            name: "root".into(),
            source: VolumeSource::ContainerDisk {
                mount: mount.clone(),
                path_in_image: None,
            },
            disk: dir.join("out/root.img"),
            readonly: false,
        };
        prepare(std::slice::from_ref(&plan)).unwrap();
        assert_eq!(std::fs::read(&plan.disk).unwrap(), data);
        // Three of the four blocks are holes.
        assert!(std::fs::metadata(&plan.disk).unwrap().blocks() * 512 < data.len() as u64);
        // Writing the copy leaves the image alone; preparing again starts from the image.
        std::fs::write(&plan.disk, b"changed").unwrap();
        assert_eq!(std::fs::read(&image).unwrap(), data);
        prepare(std::slice::from_ref(&plan)).unwrap();
        assert_eq!(std::fs::read(&plan.disk).unwrap(), data);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn qcow2_container_disk_becomes_a_raw_copy() {
        assert!(
            crate::util::find_in_path("qemu-img").is_some(),
            "qemu-img is missing: apt-get install qemu-utils"
        );
        let dir = temp_dir("qcow2");
        let mount = dir.join("mount");
        std::fs::create_dir_all(mount.join("disk")).unwrap();
        let mut data = vec![0u8; 2 * BLOCK];
        data[3] = 0x5a;
        data[BLOCK + 9] = 0xa5;
        std::fs::write(dir.join("source.raw"), &data).unwrap();
        let converted = Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "qcow2"])
            .arg(dir.join("source.raw"))
            .arg(mount.join("disk/disk.qcow2"))
            .status()
            .unwrap();
        assert!(converted.success());
        let image = std::fs::read(mount.join("disk/disk.qcow2")).unwrap();
        assert_eq!(&image[..4], QCOW2_MAGIC);
        let plan = VolumePlan {
            name: "root".into(),
            source: VolumeSource::ContainerDisk {
                mount,
                path_in_image: None,
            },
            disk: dir.join("root.img"),
            readonly: false,
        };
        prepare(std::slice::from_ref(&plan)).unwrap();
        assert_eq!(std::fs::read(&plan.disk).unwrap(), data);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_disk_is_sparse_and_missing_sources_are_named() {
        let dir = temp_dir("empty");
        let empty = VolumePlan {
            name: "scratch".into(),
            source: VolumeSource::EmptyDisk { capacity: 1 << 30 },
            disk: dir.join("scratch.img"),
            readonly: false,
        };
        prepare(std::slice::from_ref(&empty)).unwrap();
        let meta = std::fs::metadata(&empty.disk).unwrap();
        assert_eq!(meta.len(), 1 << 30);
        assert!(meta.blocks() < 64);

        let missing_pvc = VolumePlan {
            name: "data".into(),
            source: VolumeSource::PersistentVolumeClaim,
            disk: dir.join("pvc/data/disk.img"),
            readonly: false,
        };
        let err = prepare(&[missing_pvc]).unwrap_err();
        assert!(matches!(err, PrepareError::PvcDiskMissing { .. }), "{err}");
        let missing_cd = VolumePlan {
            name: "root".into(),
            source: VolumeSource::ContainerDisk {
                mount: dir.join("nothing"),
                path_in_image: None,
            },
            disk: dir.join("root.img"),
            readonly: false,
        };
        let err = prepare(&[missing_cd]).unwrap_err();
        assert!(
            matches!(err, PrepareError::ContainerDisk(LocateError::NoDisk { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("nothing"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
