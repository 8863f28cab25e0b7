//! Boot: what the VM boots and why, by direct kernel boot, in the order of ARCHITECTURE.md's
//! "How a VM boots":
//! 1. `firmware.kernelBoot`: the kernel (and initrd) of the kernel-boot container the Pod
//!    mounts, with its `kernelArgs`.
//! 2. The user's own OS: the kernel, initrd and command line of the default boot entry that the
//!    launcher's boot discovery found on the boot disk ([`BootDiscovery::Found`]). The image's
//!    command line is kept whole; `console=ttyS0` is added when it names no ttyS0 console, so
//!    that the serial console (`virtctl console`) shows the guest.
//! 3. `firmware.bootloader` (firmware on QEMU) is not implemented: validation refuses it with
//!    its path, so it never reaches the converter.
//! 4. A bare root filesystem (no partition table, no kernel, Firecracker and Kata style): the
//!    kernel Ferrovirt ships, with that disk as `root=/dev/vda`.
//! 5. A VMI without an OS disk (no disk, or only emptyDisks and cloud-init seeds) has nothing
//!    of its own to boot. It runs "guestless", as KubeVirt runs such VMIs (its functional suite
//!    makes most of its VMIs so): no kernel ([`PayloadConfig::guestless`]), its vCPUs idle, and
//!    it answers pause, unpause, shutdown (nothing in it reacts: it is stopped when the grace
//!    period ends) and kill like any VM. A launcher given a bundled initramfs
//!    ([`HostFacts::default_initramfs`], `--initramfs`: the project's test guests run that way)
//!    boots its bundled kernel and initramfs alone instead; the launcher Pod gives none.
//!
//! Anything else is an error with the reason, so that the VMI fails with it: a partitioned disk
//! without a kernel, or a disk that holds nothing to boot, never boots the bundled kernel (its
//! initramfs would run the project's own init, not the user's OS).

use std::path::PathBuf;

use api::VirtualMachineInstanceSpec;
use vmm::config::{DiskConfig, PayloadConfig};

use super::host::{BootDiscovery, FoundKernel};
use super::{FieldProblem, HostFacts};

/// Command line of the bundled kernel before the root disk: the serial console is ttyS0.
pub const DEFAULT_CMDLINE: &str = "console=ttyS0";

/// Where the kernel the VM boots comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOrigin {
    /// `firmware.kernelBoot`.
    KernelBoot,
    /// Found on the boot disk: the user's own OS.
    UserDisk,
    /// The kernel Ferrovirt ships.
    Bundled,
    /// No kernel: a guestless VM.
    Guestless,
}

/// How the VM boots and why, as the VMI reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootChoice {
    pub origin: KernelOrigin,
    pub description: String,
}

/// The boot piece's result: the payload and the choice behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootPlan {
    pub payload: PayloadConfig,
    pub choice: BootChoice,
}

/// What the VM boots; `disks` are the VM's disks, boot disk first.
pub fn plan(
    spec: &VirtualMachineInstanceSpec,
    facts: &HostFacts,
    disks: &[DiskConfig],
) -> Result<BootPlan, FieldProblem> {
    let kernel_boot = spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.kernel_boot.as_ref());
    if let Some(kernel_boot) = kernel_boot {
        return kernel_boot_plan(kernel_boot, facts);
    }
    let disk_path = |disk: &str| {
        spec.domain
            .devices
            .disks
            .iter()
            .position(|d| d.name == disk)
            .map_or_else(
                || "spec.domain.devices.disks".to_string(),
                |index| format!("spec.domain.devices.disks[{index}]"),
            )
    };
    match &facts.boot {
        BootDiscovery::Found(found) => Ok(user_disk_plan(found)),
        BootDiscovery::BareFilesystem { disk, filesystem } => {
            let mut cmdline = DEFAULT_CMDLINE.to_string();
            if let Some(root) = disks.first() {
                let mode = if root.readonly { "ro" } else { "rw" };
                cmdline.push_str(&format!(" root=/dev/vda {mode}"));
            }
            Ok(bundled(
                cmdline,
                facts,
                format!(
                    "the bundled kernel: disk {disk} is a bare filesystem ({filesystem}) without \
                     a kernel, booted as its root (root=/dev/vda)"
                ),
            ))
        }
        BootDiscovery::NoOsDisk { reason }
            if facts.default_initramfs.is_some() || facts.no_os_disk_boots_kernel =>
        {
            Ok(bundled(
                DEFAULT_CMDLINE.to_string(),
                facts,
                format!("the bundled kernel and initramfs: {reason}"),
            ))
        }
        BootDiscovery::NoOsDisk { reason } => Ok(BootPlan {
            payload: PayloadConfig::guestless(),
            choice: BootChoice {
                origin: KernelOrigin::Guestless,
                description: format!(
                    "guestless: {reason}, so nothing boots (no kernel; the vCPUs idle)"
                ),
            },
        }),
        BootDiscovery::PartitionedWithoutKernel { disk, layout } => Err(FieldProblem::new(
            disk_path(disk),
            format!(
                "disk {disk} is a partitioned disk ({layout}) without a kernel: no grub.cfg, \
                 BLS entry, extlinux.conf or /vmlinuz on any partition, so there is no OS on it \
                 to boot"
            ),
        )),
        BootDiscovery::Nothing { disk, reason } => Err(FieldProblem::new(
            disk_path(disk),
            format!("disk {disk} holds nothing to boot: {reason}"),
        )),
        BootDiscovery::NotLooked => Err(FieldProblem::new(
            "spec.domain.devices.disks",
            "the launcher did not examine the boot disk (a launcher bug)",
        )),
    }
}

fn bundled(cmdline: String, facts: &HostFacts, description: String) -> BootPlan {
    BootPlan {
        payload: PayloadConfig {
            kernel: facts.default_kernel.clone(),
            initramfs: facts.default_initramfs.clone(),
            cmdline,
            guestless: false,
        },
        choice: BootChoice {
            origin: KernelOrigin::Bundled,
            description,
        },
    }
}

fn user_disk_plan(found: &FoundKernel) -> BootPlan {
    let (cmdline, added) = with_serial_console(&found.cmdline);
    let mut description = format!("disk {}: {}", found.disk, found.source);
    if added {
        description.push_str(", with console=ttyS0 added for the serial console");
    }
    BootPlan {
        payload: PayloadConfig {
            kernel: found.kernel.clone(),
            initramfs: found.initrd.clone(),
            cmdline,
            guestless: false,
        },
        choice: BootChoice {
            origin: KernelOrigin::UserDisk,
            description,
        },
    }
}

/// `cmdline` with `console=ttyS0` appended when none of its `console=` options is ttyS0 (with
/// or without options such as `,115200n8`); whether it was added. Nothing is removed: a
/// `console=tty0` stays, and the last `console=` is the one `/dev/console` follows.
pub fn with_serial_console(cmdline: &str) -> (String, bool) {
    let cmdline = cmdline.trim();
    let has_serial = cmdline.split_whitespace().any(|option| {
        option
            .strip_prefix("console=")
            .is_some_and(|c| c == "ttyS0" || c.starts_with("ttyS0,"))
    });
    if has_serial {
        (cmdline.to_string(), false)
    } else if cmdline.is_empty() {
        (DEFAULT_CMDLINE.to_string(), true)
    } else {
        (format!("{cmdline} {DEFAULT_CMDLINE}"), true)
    }
}

fn kernel_boot_plan(
    kernel_boot: &api::domain::KernelBoot,
    facts: &HostFacts,
) -> Result<BootPlan, FieldProblem> {
    const PATH: &str = "spec.domain.firmware.kernelBoot";
    let container = kernel_boot.container.as_ref().ok_or_else(|| {
        FieldProblem::new(
            format!("{PATH}.container"),
            "is required: ferrovirt boots the kernel of a container image",
        )
    })?;
    let in_image = |field: &str, path: &str| -> Result<PathBuf, FieldProblem> {
        let relative = path.trim_start_matches('/');
        if relative.is_empty() || relative.split('/').any(|c| c == "..") {
            return Err(FieldProblem::new(
                format!("{PATH}.container.{field}"),
                format!("{path:?} is not a path inside the image"),
            ));
        }
        Ok(facts.kernel_boot_dir.join(relative))
    };
    let kernel_path = container
        .kernel_path
        .as_deref()
        .ok_or_else(|| FieldProblem::new(format!("{PATH}.container.kernelPath"), "is required"))?;
    let kernel = in_image("kernelPath", kernel_path)?;
    let initramfs = container
        .initrd_path
        .as_deref()
        .map(|p| in_image("initrdPath", p))
        .transpose()?;
    let cmdline = kernel_boot
        .kernel_args
        .clone()
        .unwrap_or_else(|| DEFAULT_CMDLINE.to_string());
    let mut description = format!("kernelBoot: kernel {kernel_path}");
    if let Some(initrd) = &container.initrd_path {
        description.push_str(&format!(" and initrd {initrd}"));
    }
    description.push_str(&format!(" of the container image {}", container.image));
    Ok(BootPlan {
        payload: PayloadConfig {
            kernel,
            initramfs,
            cmdline,
            guestless: false,
        },
        choice: BootChoice {
            origin: KernelOrigin::KernelBoot,
            description,
        },
    })
}

/// The virtio transport for a kernel of `origin` on the KVM VMM: Ferrovirt's own kernel (bundled
/// or a kernelBoot container's) finds its devices through `virtio_mmio.device=`; a distribution
/// kernel from the user's disk lacks that and finds them on PCI, described by ACPI.
pub fn transport(origin: KernelOrigin) -> vmm::config::Transport {
    match origin {
        KernelOrigin::UserDisk => vmm::config::Transport::Pci,
        // A guestless VM has no driver for either: mmio needs no ACPI tables.
        KernelOrigin::KernelBoot | KernelOrigin::Bundled | KernelOrigin::Guestless => {
            vmm::config::Transport::Mmio
        }
    }
}

#[cfg(test)]
mod tests {
    use api::domain::{Disk, Firmware, KernelBoot, KernelBootContainer};

    use super::*;
    use crate::converter::host::test_facts;

    fn spec(kernel_boot: Option<KernelBoot>) -> VirtualMachineInstanceSpec {
        let mut spec = VirtualMachineInstanceSpec::default();
        spec.domain.firmware = kernel_boot.map(|kb| Firmware {
            kernel_boot: Some(kb),
            ..Default::default()
        });
        // The boot disk "root" is declared second.
        spec.domain.devices.disks = ["data", "root"]
            .into_iter()
            .map(|name| Disk {
                name: name.into(),
                ..Default::default()
            })
            .collect();
        spec
    }

    fn kernel_boot(kernel: Option<&str>, initrd: Option<&str>, args: Option<&str>) -> KernelBoot {
        KernelBoot {
            kernel_args: args.map(Into::into),
            container: Some(KernelBootContainer {
                image: "img".into(),
                kernel_path: kernel.map(Into::into),
                initrd_path: initrd.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn disk(readonly: bool) -> DiskConfig {
        DiskConfig {
            id: "root".into(),
            path: "/d/root.img".into(),
            readonly,
        }
    }

    fn facts(boot: BootDiscovery) -> HostFacts {
        HostFacts {
            boot,
            ..test_facts()
        }
    }

    const SOURCE: &str = "kernel /boot/vmlinuz-6.1.0-28-cloud-amd64 from partition 1 (ext4, \
                          UUID 6f1c2a5e-0d3b-4b8e-9a51-1c2d3e4f5a6b) per /boot/grub/grub.cfg on \
                          partition 1 entry 'Debian GNU/Linux'";

    fn found(initrd: bool, cmdline: &str) -> BootDiscovery {
        BootDiscovery::Found(FoundKernel {
            disk: "root".into(),
            kernel: "/var/run/ferrovirt/boot/kernel".into(),
            initrd: initrd.then(|| "/var/run/ferrovirt/boot/initrd".into()),
            cmdline: cmdline.into(),
            source: SOURCE.into(),
        })
    }

    fn bare() -> BootDiscovery {
        BootDiscovery::BareFilesystem {
            disk: "root".into(),
            filesystem: "ext4, label \"ferrovirt-root\"".into(),
        }
    }

    #[test]
    fn plans() {
        let bundled = |cmdline: &str| PayloadConfig {
            kernel: test_facts().default_kernel,
            initramfs: test_facts().default_initramfs,
            cmdline: cmdline.into(),
            guestless: false,
        };
        let user = |initrd: bool, cmdline: &str| PayloadConfig {
            kernel: "/var/run/ferrovirt/boot/kernel".into(),
            initramfs: initrd.then(|| "/var/run/ferrovirt/boot/initrd".into()),
            cmdline: cmdline.into(),
            guestless: false,
        };
        let debian = "root=UUID=6f1c ro console=tty0 console=ttyS0,115200 consoleblank=0";
        let bare_description = "the bundled kernel: disk root is a bare filesystem (ext4, label \
                                \"ferrovirt-root\") without a kernel, booted as its root \
                                (root=/dev/vda)";
        let kernel_boot_dir = test_facts().kernel_boot_dir;
        // (kernelBoot, discovery, disks, payload, origin, description)
        let cases = [
            // The image's command line, whole: it already has a ttyS0 console.
            (
                None,
                found(true, debian),
                vec![disk(false)],
                user(true, debian),
                KernelOrigin::UserDisk,
                format!("disk root: {SOURCE}"),
            ),
            // No ttyS0 console: one is added, the user's options stay.
            (
                None,
                found(true, "root=LABEL=cloudimg-rootfs ro console=tty1 quiet"),
                vec![disk(false)],
                user(
                    true,
                    "root=LABEL=cloudimg-rootfs ro console=tty1 quiet console=ttyS0",
                ),
                KernelOrigin::UserDisk,
                format!("disk root: {SOURCE}, with console=ttyS0 added for the serial console"),
            ),
            // An entry without initrd or options.
            (
                None,
                found(false, ""),
                vec![disk(true)],
                user(false, "console=ttyS0"),
                KernelOrigin::UserDisk,
                format!("disk root: {SOURCE}, with console=ttyS0 added for the serial console"),
            ),
            // A bare root filesystem: the bundled kernel with it as root.
            (
                None,
                bare(),
                vec![disk(false)],
                bundled("console=ttyS0 root=/dev/vda rw"),
                KernelOrigin::Bundled,
                bare_description.to_string(),
            ),
            (
                None,
                bare(),
                vec![disk(true)],
                bundled("console=ttyS0 root=/dev/vda ro"),
                KernelOrigin::Bundled,
                bare_description.to_string(),
            ),
            // No OS disk: the bundled kernel and initramfs alone.
            (
                None,
                BootDiscovery::NoOsDisk {
                    reason: "the VMI has no disk".into(),
                },
                vec![],
                bundled("console=ttyS0"),
                KernelOrigin::Bundled,
                "the bundled kernel and initramfs: the VMI has no disk".to_string(),
            ),
            (
                None,
                BootDiscovery::NoOsDisk {
                    reason: "no disk of the VMI is a containerDisk or persistentVolumeClaim".into(),
                },
                vec![disk(false)],
                bundled("console=ttyS0"),
                KernelOrigin::Bundled,
                "the bundled kernel and initramfs: no disk of the VMI is a containerDisk or \
                 persistentVolumeClaim"
                    .to_string(),
            ),
            // kernelBoot comes first: the launcher does not look at the disk.
            (
                Some(kernel_boot(
                    Some("/boot/vmlinuz"),
                    Some("/boot/initrd"),
                    Some("console=ttyS0 quiet"),
                )),
                BootDiscovery::NotLooked,
                vec![disk(false)],
                PayloadConfig {
                    kernel: kernel_boot_dir.join("boot/vmlinuz"),
                    initramfs: Some(kernel_boot_dir.join("boot/initrd")),
                    cmdline: "console=ttyS0 quiet".into(),
                    guestless: false,
                },
                KernelOrigin::KernelBoot,
                "kernelBoot: kernel /boot/vmlinuz and initrd /boot/initrd of the container \
                 image img"
                    .to_string(),
            ),
            (
                Some(kernel_boot(Some("vmlinuz"), None, None)),
                found(true, debian),
                vec![],
                PayloadConfig {
                    kernel: kernel_boot_dir.join("vmlinuz"),
                    initramfs: None,
                    cmdline: "console=ttyS0".into(),
                    guestless: false,
                },
                KernelOrigin::KernelBoot,
                "kernelBoot: kernel vmlinuz of the container image img".to_string(),
            ),
        ];
        for (kb, discovery, disks, payload, origin, description) in cases {
            let facts = facts(discovery.clone());
            let got = plan(&spec(kb), &facts, &disks).unwrap();
            assert_eq!(got.payload, payload, "{discovery:?}");
            assert_eq!(got.choice.origin, origin, "{discovery:?}");
            assert_eq!(got.choice.description, description, "{discovery:?}");
        }
    }

    #[test]
    fn without_an_os_disk_and_a_bundled_initramfs_the_vm_is_guestless() {
        let cases = [
            (
                "the VMI has no disk",
                vec![],
                "guestless: the VMI has no disk, so nothing boots (no kernel; the vCPUs idle)",
            ),
            (
                "no disk of the VMI is a containerDisk or persistentVolumeClaim",
                vec![disk(false)],
                "guestless: no disk of the VMI is a containerDisk or persistentVolumeClaim, so \
                 nothing boots (no kernel; the vCPUs idle)",
            ),
        ];
        for (reason, disks, description) in cases {
            let facts = HostFacts {
                default_initramfs: None,
                ..facts(BootDiscovery::NoOsDisk {
                    reason: reason.into(),
                })
            };
            let mut no_disks = spec(None);
            no_disks.domain.devices.disks.clear();
            let got = plan(&no_disks, &facts, &disks).unwrap();
            assert_eq!(got.payload, PayloadConfig::guestless(), "{reason}");
            assert_eq!(got.choice.origin, KernelOrigin::Guestless, "{reason}");
            assert_eq!(got.choice.description, description);
        }
        // A bare filesystem still boots the bundled kernel, initramfs or not.
        let facts = HostFacts {
            default_initramfs: None,
            ..facts(bare())
        };
        let got = plan(&spec(None), &facts, &[disk(false)]).unwrap();
        assert_eq!(got.choice.origin, KernelOrigin::Bundled);
        assert!(!got.payload.guestless);
    }

    #[test]
    fn nothing_to_boot_is_an_error_with_the_reason() {
        let cases = [
            (
                BootDiscovery::PartitionedWithoutKernel {
                    disk: "root".into(),
                    layout: "GPT: partition 1 (ext4, UUID 9999)".into(),
                },
                "spec.domain.devices.disks[1]",
                "disk root is a partitioned disk (GPT: partition 1 (ext4, UUID 9999)) without a \
                 kernel: no grub.cfg, BLS entry, extlinux.conf or /vmlinuz on any partition, so \
                 there is no OS on it to boot",
            ),
            (
                BootDiscovery::Nothing {
                    disk: "root".into(),
                    reason: "no partition table and no filesystem".into(),
                },
                "spec.domain.devices.disks[1]",
                "disk root holds nothing to boot: no partition table and no filesystem",
            ),
            (
                BootDiscovery::Nothing {
                    disk: "gone".into(),
                    reason: "r".into(),
                },
                "spec.domain.devices.disks",
                "disk gone holds nothing to boot: r",
            ),
            (
                BootDiscovery::NotLooked,
                "spec.domain.devices.disks",
                "the launcher did not examine the boot disk (a launcher bug)",
            ),
        ];
        for (discovery, path, reason) in cases {
            let err = plan(&spec(None), &facts(discovery), &[disk(false)]).unwrap_err();
            assert_eq!((err.path.as_str(), err.reason.as_str()), (path, reason));
        }
    }

    #[test]
    fn serial_console_is_added_only_when_missing() {
        let cases = [
            ("console=ttyS0", "console=ttyS0", false),
            (
                "ro console=ttyS0,115200n8 quiet",
                "ro console=ttyS0,115200n8 quiet",
                false,
            ),
            (
                "console=ttyS0 console=tty0",
                "console=ttyS0 console=tty0",
                false,
            ),
            ("ro console=tty0", "ro console=tty0 console=ttyS0", true),
            ("console=ttyS1", "console=ttyS1 console=ttyS0", true),
            ("xconsole=ttyS0", "xconsole=ttyS0 console=ttyS0", true),
            ("console=ttyS01", "console=ttyS01 console=ttyS0", true),
            (
                "  root=/dev/vda1  ro ",
                "root=/dev/vda1  ro console=ttyS0",
                true,
            ),
            ("", "console=ttyS0", true),
        ];
        for (cmdline, want, added) in cases {
            assert_eq!(
                with_serial_console(cmdline),
                (want.to_string(), added),
                "{cmdline:?}"
            );
        }
    }

    #[test]
    fn bad_kernel_boot_names_the_field() {
        let facts = test_facts();
        let no_container = KernelBoot::default();
        let cases = [
            (no_container, "spec.domain.firmware.kernelBoot.container"),
            (
                kernel_boot(None, None, None),
                "spec.domain.firmware.kernelBoot.container.kernelPath",
            ),
            (
                kernel_boot(Some("/../etc/k"), None, None),
                "spec.domain.firmware.kernelBoot.container.kernelPath",
            ),
            (
                kernel_boot(Some("/k"), Some("/"), None),
                "spec.domain.firmware.kernelBoot.container.initrdPath",
            ),
        ];
        for (kb, path) in cases {
            assert_eq!(plan(&spec(Some(kb)), &facts, &[]).unwrap_err().path, path);
        }
    }

    #[test]
    fn a_kernel_from_the_users_disk_gets_the_pci_machine_ours_virtio_mmio() {
        use vmm::config::Transport;
        assert_eq!(transport(KernelOrigin::UserDisk), Transport::Pci);
        assert_eq!(transport(KernelOrigin::Bundled), Transport::Mmio);
        assert_eq!(transport(KernelOrigin::KernelBoot), Transport::Mmio);
        assert_eq!(transport(KernelOrigin::Guestless), Transport::Mmio);
    }
}
