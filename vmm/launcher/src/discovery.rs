//! Boot discovery: before it converts a VMI, the launcher reads the boot disk to find the OS on
//! it (ARCHITECTURE.md, "How a VM boots", step 2) and hands the converter what it found as plain
//! data ([`BootDiscovery`], in [`HostFacts::boot`](crate::converter::HostFacts)), so that the
//! converter stays pure and decides from it what the VM boots.
//!
//! Step by step, for a VMI without `firmware.kernelBoot` (`firmware.bootloader` is refused by
//! validation before this):
//! 1. A VMI without an OS disk (no disk, or none that is a containerDisk or a PVC: only
//!    emptyDisks and cloud-init seeds) is [`BootDiscovery::NoOsDisk`] (the converter makes it a
//!    guestless VM, or boots the bundled initramfs when the launcher has one). Otherwise the
//!    boot disk is the converter's: [`disks::boot_disk`], the first by `bootOrder`, else the
//!    first declared.
//! 2. Its file comes from the volume plan ([`crate::converter::volumes`]) and is read where it
//!    is, before the volumes are prepared and without writing it: a containerDisk's image in its
//!    container (raw or qcow2; the file [`container_disk::locate`] picks, the one the VM's
//!    private copy is made from), a PVC's `disk.img`, an emptyDisk's file when a VM before made
//!    it (a new one is blank). A cloud-init seed is not an OS disk.
//! 3. [`bootdisk::find_boot`] within [`boot_limits`] (no mounting, no privileges, image contents
//!    are untrusted): the default boot entry's kernel, initrd and command line. The kernel and
//!    initrd are written to `<run dir>/boot/` for the VMM to load: [`BootDiscovery::Found`].
//! 4. No boot configuration and no kernel: [`bootdisk::probe`] tells a bare filesystem
//!    ([`BootDiscovery::BareFilesystem`]) from a partitioned disk
//!    ([`BootDiscovery::PartitionedWithoutKernel`]). Any other outcome (no filesystem, a
//!    configuration whose kernel is missing, a refused image format, a corrupt table) is
//!    [`BootDiscovery::Nothing`] with bootdisk's reason.
//!
//! What the disk holds is for the converter to judge; the errors here are the launcher's own
//! I/O failures: a disk file that is not there or cannot be opened, a run directory that cannot
//! be written.

use std::io;
use std::path::{Path, PathBuf};

use api::VirtualMachineInstance;
use bootdisk::{DiskKind, DiskProbe, FileSource, FindBootError, Limits};

use crate::converter::disks;
use crate::converter::volumes::{VolumePlan, VolumeSource};
use crate::converter::{BootDiscovery, FoundKernel};
use crate::util::chain;
use crate::volumes::container_disk;
use crate::volumes::prepare::PrepareError;

/// The directory of the run directory that holds the kernel and initrd taken from the disk.
pub const BOOT_FILES_DIR: &str = "boot";

/// What reading a boot disk may cost. The kernel and the initrds are held in the launcher's
/// memory until they are written out, so their sizes are bounded below bootdisk's defaults
/// (distribution kernels are 5 to 15 MiB, their initrds up to about 100 MiB); the other
/// bounds are bootdisk's.
pub fn boot_limits() -> Limits {
    Limits {
        max_file_size: 256 << 20,
        max_boot_size: 384 << 20,
        ..Limits::default()
    }
}

/// Why the boot disk could not be examined.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The disk file is not there (the same error as when preparing the volume).
    #[error(transparent)]
    Missing(#[from] PrepareError),
    #[error("volume {volume:?}: cannot open the boot disk {path}")]
    Open {
        volume: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write {0}")]
    Write(PathBuf, #[source] io::Error),
}

/// Reads the boot disk of `vmi` (whose volumes are planned in `plans`) and says what it holds;
/// a kernel found there is written to `run_dir/boot/`.
pub fn discover_boot(
    vmi: &VirtualMachineInstance,
    plans: &[VolumePlan],
    run_dir: &Path,
) -> Result<BootDiscovery, DiscoveryError> {
    // kernelBoot names its kernel; with a bootloader the firmware finds it on the disk.
    let not_ours = vmi
        .spec
        .domain
        .firmware
        .as_ref()
        .is_some_and(|f| f.kernel_boot.is_some() || f.bootloader.is_some());
    if not_ours {
        return Ok(BootDiscovery::NotLooked);
    }
    let Some((_, disk)) = disks::boot_disk(vmi) else {
        return Ok(BootDiscovery::NoOsDisk {
            reason: "the VMI has no disk".into(),
        });
    };
    let os_disk = vmi.spec.domain.devices.disks.iter().any(|d| {
        plans.iter().any(|p| {
            p.name == d.name
                && matches!(
                    p.source,
                    VolumeSource::ContainerDisk { .. } | VolumeSource::PersistentVolumeClaim
                )
        })
    });
    if !os_disk {
        return Ok(BootDiscovery::NoOsDisk {
            reason: "no disk of the VMI is a containerDisk or persistentVolumeClaim".into(),
        });
    }
    let name = disk.name.clone();
    let nothing = |reason: &str| BootDiscovery::Nothing {
        disk: name.clone(),
        reason: reason.to_string(),
    };
    let Some(plan) = plans.iter().find(|p| p.name == disk.name) else {
        // The converter refuses the disk itself, with its field path.
        return Ok(nothing("it has no volume"));
    };
    let path = match &plan.source {
        VolumeSource::ContainerDisk {
            mount,
            path_in_image,
        } => container_disk::locate(&plan.name, mount, path_in_image.as_deref())
            .map_err(PrepareError::from)?,
        VolumeSource::PersistentVolumeClaim if plan.disk.is_file() => plan.disk.clone(),
        VolumeSource::PersistentVolumeClaim => {
            return Err(PrepareError::PvcDiskMissing {
                volume: plan.name.clone(),
                path: plan.disk.clone(),
            }
            .into())
        }
        VolumeSource::EmptyDisk { .. } if plan.disk.is_file() => plan.disk.clone(),
        VolumeSource::EmptyDisk { .. } => return Ok(nothing("it is a new, blank emptyDisk")),
        VolumeSource::CloudInitNoCloud(_) => {
            return Ok(nothing(
                "it is the cloudInitNoCloud seed (a cidata ISO 9660 disk), not an OS disk",
            ))
        }
    };
    let mut source = FileSource::open(&path).map_err(|source| DiscoveryError::Open {
        volume: plan.name.clone(),
        path: path.clone(),
        source,
    })?;
    let limits = boot_limits();
    let discovery = match bootdisk::find_boot(&mut source, &limits) {
        Ok(selection) => BootDiscovery::Found(write_boot_files(&name, selection, run_dir)?),
        Err(FindBootError::NoKernel(_)) => without_kernel(name, &mut source, &limits),
        Err(e) => nothing(&chain(&e)),
    };
    log::info!(
        "boot disk {} ({}): {discovery:?}",
        disk.name,
        path.display()
    );
    Ok(discovery)
}

/// What a disk with readable filesystems but no kernel is.
fn without_kernel(disk: String, source: &mut FileSource, limits: &Limits) -> BootDiscovery {
    match bootdisk::probe(source, limits) {
        Ok(DiskProbe {
            kind: DiskKind::Filesystem(volume),
            ..
        }) => BootDiscovery::BareFilesystem {
            disk,
            filesystem: volume.fs.map(|fs| fs.to_string()).unwrap_or_default(),
        },
        Ok(DiskProbe {
            kind: DiskKind::Partitioned { table, volumes },
            ..
        }) => {
            let table = match table {
                bootdisk::partition::TableKind::Mbr { .. } => "MBR",
                bootdisk::partition::TableKind::Gpt { .. } => "GPT",
            };
            let volumes: Vec<String> = volumes.iter().map(ToString::to_string).collect();
            BootDiscovery::PartitionedWithoutKernel {
                disk,
                layout: format!("{table}: {}", volumes.join(", ")),
            }
        }
        Ok(DiskProbe {
            kind: DiskKind::Unknown,
            ..
        }) => BootDiscovery::Nothing {
            disk,
            reason: FindBootError::NoFilesystem.to_string(),
        },
        Err(e) => BootDiscovery::Nothing {
            disk,
            reason: chain(&e),
        },
    }
}

/// Writes the kernel and initrd of `selection` to `run_dir/boot/{kernel,initrd}`.
fn write_boot_files(
    disk: &str,
    selection: bootdisk::BootSelection,
    run_dir: &Path,
) -> Result<FoundKernel, DiscoveryError> {
    let dir = run_dir.join(BOOT_FILES_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| DiscoveryError::Write(dir.clone(), e))?;
    let kernel = dir.join("kernel");
    std::fs::write(&kernel, &selection.kernel)
        .map_err(|e| DiscoveryError::Write(kernel.clone(), e))?;
    let initrd_path = dir.join("initrd");
    let initrd = if selection.initrd.is_empty() {
        match std::fs::remove_file(&initrd_path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(DiscoveryError::Write(initrd_path, e)),
        }
        None
    } else {
        std::fs::write(&initrd_path, &selection.initrd)
            .map_err(|e| DiscoveryError::Write(initrd_path.clone(), e))?;
        Some(initrd_path)
    };
    let mut source = selection.source.to_string();
    if let bootdisk::image::ImageFormat::Qcow2(_) = selection.source.image {
        source.push_str(", in a qcow2 image");
    }
    Ok(FoundKernel {
        disk: disk.to_string(),
        kernel,
        initrd,
        cmdline: selection.cmdline,
        source,
    })
}

#[cfg(test)]
mod tests {
    use bootdisk::testing::{fixture, gpt, gpt_total, mbr, pattern, Part};
    use serde_json::json;

    use super::*;
    use crate::converter::host::test_facts;
    use crate::converter::HostFacts;

    const DEBIAN_UUID: &str = "6f1c2a5e-0d3b-4b8e-9a51-1c2d3e4f5a6b";
    const BARE_FS: &str = "ext4, UUID 99999999-8888-4777-8666-555555555555, label \"bare\"";

    struct Dirs {
        root: PathBuf,
    }

    impl Dirs {
        fn new(name: &str) -> Dirs {
            let root = std::env::temp_dir()
                .join(format!("launcher-discovery-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            // The containerDisks' directory: a launcher outside a Pod.
            std::fs::create_dir_all(root.join("cd")).unwrap();
            Dirs { root }
        }

        fn facts(&self) -> HostFacts {
            HostFacts {
                container_disk_dir: self.root.join("cd"),
                pvc_dir: self.root.join("pvc"),
                generated_disk_dir: self.root.join("disks"),
                run_dir: self.root.join("run"),
                ..test_facts()
            }
        }

        /// Mounts `image` as containerDisk volume `volume` (at `disk/<file>`).
        fn container_disk(&self, volume: &str, file: &str, image: &[u8]) {
            let dir = self.root.join("cd").join(volume).join("disk");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(file), image).unwrap();
        }

        fn pvc(&self, volume: &str, image: &[u8]) {
            let dir = self.root.join("pvc").join(volume);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("disk.img"), image).unwrap();
        }

        fn discover(&self, vmi: &VirtualMachineInstance) -> Result<BootDiscovery, DiscoveryError> {
            let facts = self.facts();
            let plans = disks::volume_plans(vmi, &facts).unwrap();
            discover_boot(vmi, &plans, &facts.run_dir)
        }
    }

    impl Drop for Dirs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    /// A VMI with the given disks (name, bootOrder) and volumes (name, source).
    fn vmi(
        disks: &[(&str, Option<u32>)],
        volumes: &[(&str, serde_json::Value)],
    ) -> VirtualMachineInstance {
        let disks: Vec<_> = disks
            .iter()
            .map(|(name, order)| match order {
                Some(order) => json!({"name": name, "bootOrder": order, "disk": {"bus": "virtio"}}),
                None => json!({"name": name, "disk": {"bus": "virtio"}}),
            })
            .collect();
        let volumes: Vec<_> = volumes
            .iter()
            .map(|(name, source)| {
                let mut volume = source.clone();
                volume["name"] = json!(name);
                volume
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"domain": {"devices": {"disks": disks}}, "volumes": volumes}
        }))
        .unwrap()
    }

    fn container_disk() -> serde_json::Value {
        json!({"containerDisk": {"image": "registry/cloud:latest"}})
    }

    fn pvc() -> serde_json::Value {
        json!({"persistentVolumeClaim": {"claimName": "claim"}})
    }

    /// Debian genericcloud's root partition (grub.cfg, kernels, initrds) on a GPT disk.
    fn debian_gpt() -> Vec<u8> {
        gpt(
            gpt_total(4096),
            &[Part::new(1, 2048, fixture("ext4-debian-root.img")).sectors(2048)],
        )
    }

    #[test]
    fn a_cloud_image_boots_its_own_kernel() {
        let dirs = Dirs::new("found");
        dirs.container_disk("rootdisk", "disk.img", &debian_gpt());
        let found = dirs
            .discover(&vmi(
                &[("rootdisk", None)],
                &[("rootdisk", container_disk())],
            ))
            .unwrap();
        let run = dirs.root.join("run/boot");
        assert_eq!(
            found,
            BootDiscovery::Found(FoundKernel {
                disk: "rootdisk".into(),
                kernel: run.join("kernel"),
                initrd: Some(run.join("initrd")),
                cmdline: format!(
                    "root=UUID={DEBIAN_UUID} ro console=tty0 console=ttyS0,115200 \
                     earlyprintk=ttyS0,115200 consoleblank=0"
                ),
                source: format!(
                    "kernel /boot/vmlinuz-6.1.0-28-cloud-amd64 from partition 1 (ext4, UUID \
                     {DEBIAN_UUID}, label \"debian-root\") per /boot/grub/grub.cfg on partition \
                     1 entry 'Debian GNU/Linux'"
                ),
            })
        );
        assert!(
            std::fs::read(run.join("kernel")).unwrap()
                == pattern("vmlinuz-6.1.0-28-cloud-amd64", 6000)
        );
        assert!(
            std::fs::read(run.join("initrd")).unwrap()
                == pattern("initrd.img-6.1.0-28-cloud-amd64", 9000)
        );
        // The image is read, never written.
        assert!(
            std::fs::read(dirs.root.join("cd/rootdisk/disk/disk.img")).unwrap() == debian_gpt()
        );
    }

    #[test]
    fn a_qcow2_container_disk_is_read_as_it_is() {
        let dirs = Dirs::new("qcow2");
        dirs.container_disk(
            "root",
            "alpine.qcow2",
            &fixture("alpine-v3-compressed.qcow2"),
        );
        let discovery = dirs
            .discover(&vmi(&[("root", None)], &[("root", container_disk())]))
            .unwrap();
        let BootDiscovery::Found(found) = discovery else {
            panic!("not found: {discovery:?}");
        };
        assert!(
            found
                .source
                .starts_with("kernel /boot/vmlinuz-virt from the whole disk (ext4")
                && found
                    .source
                    .ends_with("entry 'Linux virt', in a qcow2 image"),
            "{}",
            found.source
        );
        assert!(found.cmdline.contains("modules=sd-mod,usb-storage,ext4"));
        assert!(std::fs::read(&found.kernel).unwrap() == pattern("vmlinuz-virt", 5000));
    }

    #[test]
    fn disks_without_a_kernel() {
        let bare = fixture("ext4-bare.img");
        let sectors = (bare.len() / 512) as u64;
        let gpt_bare = gpt(
            gpt_total(2048 + sectors),
            &[Part::new(1, 2048, bare.clone())],
        );
        let mbr_bare = mbr(2048 + sectors, &[Part::new(1, 2048, bare.clone())]);
        let cases = [
            (
                bare,
                BootDiscovery::BareFilesystem {
                    disk: "data".into(),
                    filesystem: BARE_FS.into(),
                },
            ),
            (
                gpt_bare,
                BootDiscovery::PartitionedWithoutKernel {
                    disk: "data".into(),
                    layout: format!("GPT: partition 1 ({BARE_FS})"),
                },
            ),
            (
                mbr_bare,
                BootDiscovery::PartitionedWithoutKernel {
                    disk: "data".into(),
                    layout: format!("MBR: partition 1 ({BARE_FS})"),
                },
            ),
            (
                vec![0u8; 1 << 20],
                BootDiscovery::Nothing {
                    disk: "data".into(),
                    reason: "no partition table and no filesystem".into(),
                },
            ),
        ];
        for (image, want) in cases {
            let dirs = Dirs::new("nokernel");
            dirs.pvc("data", &image);
            let got = dirs.discover(&vmi(&[("data", None)], &[("data", pvc())]));
            assert_eq!(got.unwrap(), want);
        }
    }

    #[test]
    fn the_boot_disk_is_the_converters() {
        let dirs = Dirs::new("order");
        dirs.container_disk("first", "disk.img", &fixture("ext4-bare.img"));
        dirs.pvc("second", &debian_gpt());
        let volumes = [("first", container_disk()), ("second", pvc())];
        // Declared first: the bare filesystem.
        let declared = dirs
            .discover(&vmi(&[("first", None), ("second", None)], &volumes))
            .unwrap();
        assert!(
            matches!(&declared, BootDiscovery::BareFilesystem { disk, .. } if disk == "first"),
            "{declared:?}"
        );
        // bootOrder wins over declaration order.
        let ordered = dirs
            .discover(&vmi(&[("first", Some(2)), ("second", Some(1))], &volumes))
            .unwrap();
        assert!(
            matches!(&ordered, BootDiscovery::Found(f) if f.disk == "second"),
            "{ordered:?}"
        );
    }

    #[test]
    fn what_is_not_looked_at() {
        let dirs = Dirs::new("skip");
        let scratch = || json!({"emptyDisk": {"capacity": "1Mi"}});
        let seed = || json!({"cloudInitNoCloud": {"userData": "#!/bin/sh\n"}});
        let no_os_disk = BootDiscovery::NoOsDisk {
            reason: "no disk of the VMI is a containerDisk or persistentVolumeClaim".into(),
        };
        let cases = [
            (
                vmi(&[], &[]),
                BootDiscovery::NoOsDisk {
                    reason: "the VMI has no disk".into(),
                },
            ),
            (
                vmi(&[("scratch", None)], &[("scratch", scratch())]),
                no_os_disk.clone(),
            ),
            (
                vmi(
                    &[("ci", None), ("scratch", None)],
                    &[("ci", seed()), ("scratch", scratch())],
                ),
                no_os_disk,
            ),
            // With an OS disk among them, the boot disk must be one.
            (
                vmi(
                    &[("scratch", None), ("root", None)],
                    &[("scratch", scratch()), ("root", container_disk())],
                ),
                BootDiscovery::Nothing {
                    disk: "scratch".into(),
                    reason: "it is a new, blank emptyDisk".into(),
                },
            ),
            (
                vmi(
                    &[("ci", Some(1)), ("data", Some(2))],
                    &[("ci", seed()), ("data", pvc())],
                ),
                BootDiscovery::Nothing {
                    disk: "ci".into(),
                    reason:
                        "it is the cloudInitNoCloud seed (a cidata ISO 9660 disk), not an OS disk"
                            .into(),
                },
            ),
        ];
        for (vmi, want) in cases {
            assert_eq!(dirs.discover(&vmi).unwrap(), want);
        }
        let mut kernel_boot = vmi(&[("root", None)], &[("root", container_disk())]);
        kernel_boot.spec.domain.firmware = Some(api::domain::Firmware {
            kernel_boot: Some(api::domain::KernelBoot::default()),
            ..Default::default()
        });
        assert_eq!(
            dirs.discover(&kernel_boot).unwrap(),
            BootDiscovery::NotLooked
        );
        // Firmware finds the kernel itself: the disk is not read either.
        let mut firmware = vmi(&[("root", None)], &[("root", container_disk())]);
        firmware.spec.domain.firmware = Some(api::domain::Firmware {
            bootloader: Some(api::domain::Bootloader::default()),
            ..Default::default()
        });
        assert_eq!(dirs.discover(&firmware).unwrap(), BootDiscovery::NotLooked);
        // An emptyDisk a VM before made is read.
        std::fs::create_dir_all(dirs.root.join("disks")).unwrap();
        std::fs::write(dirs.root.join("disks/scratch.img"), debian_gpt()).unwrap();
        let written = vmi(
            &[("scratch", None), ("root", None)],
            &[("scratch", scratch()), ("root", container_disk())],
        );
        assert!(matches!(
            dirs.discover(&written).unwrap(),
            BootDiscovery::Found(_)
        ));
    }

    #[test]
    fn missing_disk_files_are_errors() {
        let dirs = Dirs::new("missing");
        let err = dirs
            .discover(&vmi(&[("root", None)], &[("root", container_disk())]))
            .unwrap_err();
        assert!(
            matches!(err, DiscoveryError::Missing(PrepareError::ContainerDisk(_))),
            "{err}"
        );
        let err = dirs
            .discover(&vmi(&[("data", None)], &[("data", pvc())]))
            .unwrap_err();
        assert!(
            matches!(
                err,
                DiscoveryError::Missing(PrepareError::PvcDiskMissing { .. })
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .ends_with("pvc/data/disk.img does not exist"),
            "{err}"
        );
        // A directory where the image would be is no disk image.
        std::fs::create_dir_all(dirs.root.join("cd/root/disk/disk.img")).unwrap();
        let err = dirs
            .discover(&vmi(&[("root", None)], &[("root", container_disk())]))
            .unwrap_err();
        assert!(matches!(err, DiscoveryError::Missing(_)), "{err}");
    }
}
