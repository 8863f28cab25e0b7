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
fn firmware_boots_the_disks_own_boot_loader() {
    use api::domain::{Bios, Bootloader, Efi};
    let with_bootloader = |bootloader: Bootloader, kb: Option<KernelBoot>| {
        let mut spec = spec(None);
        spec.domain.firmware = Some(Firmware {
            bootloader: Some(bootloader),
            kernel_boot: kb,
            ..Default::default()
        });
        spec
    };
    let bios = |use_serial| Bootloader {
        bios: Some(Bios {
            use_serial,
            ..Default::default()
        }),
        ..Default::default()
    };
    let efi = |secure_boot| Bootloader {
        efi: Some(Efi {
            secure_boot,
            ..Default::default()
        }),
        ..Default::default()
    };
    let ovmf = super::Firmware::Ovmf {
        code: "/usr/share/OVMF/OVMF_CODE_4M.fd".into(),
        vars_template: "/usr/share/OVMF/OVMF_VARS_4M.fd".into(),
    };
    let cases = [
        (
            bios(None),
            super::Firmware::SeaBios { serial: false },
            "firmware: SeaBIOS, booting the boot loader of disk root",
        ),
        (
            Bootloader::default(),
            super::Firmware::SeaBios { serial: false },
            "firmware: SeaBIOS, booting the boot loader of disk root",
        ),
        (
            bios(Some(true)),
            super::Firmware::SeaBios { serial: true },
            "firmware: SeaBIOS, its output on the serial console, booting the boot loader \
             of disk root",
        ),
        (
            efi(Some(false)),
            ovmf.clone(),
            "firmware: OVMF (UEFI), Secure Boot off, booting the boot loader of disk root",
        ),
    ];
    // The launcher does not look at the disk for a firmware VMI.
    let facts = facts(BootDiscovery::NotLooked);
    for (bootloader, firmware, description) in cases {
        let got = plan(&with_bootloader(bootloader, None), &facts, &[disk(false)]).unwrap();
        assert_eq!(got.firmware, Some(firmware));
        assert_eq!(got.payload, PayloadConfig::guestless());
        assert_eq!(got.choice.origin, KernelOrigin::Firmware);
        assert_eq!(got.choice.description, description);
        assert_eq!(transport(got.choice.origin), vmm::config::Transport::Pci);
    }
    // With kernelBoot the firmware boots that kernel.
    let kb = kernel_boot(Some("/boot/vmlinuz"), None, None);
    let got = plan(&with_bootloader(efi(Some(false)), Some(kb)), &facts, &[]).unwrap();
    assert_eq!(got.firmware, Some(ovmf));
    assert_eq!(got.choice.origin, KernelOrigin::KernelBoot);
    assert_eq!(
        got.payload.kernel,
        test_facts().kernel_boot_dir.join("boot/vmlinuz")
    );
    assert_eq!(
        got.choice.description,
        "firmware: OVMF (UEFI), booting the kernelBoot: kernel /boot/vmlinuz of the \
         container image img"
    );
    // Secure Boot never gets this far (validation), and would be refused here.
    let err = plan(&with_bootloader(efi(None), None), &facts, &[]).unwrap_err();
    assert_eq!(err.path, "spec.domain.firmware.bootloader.efi.secureBoot");
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
