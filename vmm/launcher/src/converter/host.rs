//! `HostFacts`: what the converter needs to know about the Pod and the node it runs on.
//!
//! Everything here is gathered by the launcher before it converts (probing KVM, reading its own
//! flags, reading the boot disk: the launcher's `discovery` module); the converter itself does
//! no I/O.

use std::path::PathBuf;

/// Facts about the launcher Pod and its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    /// Whether `/dev/kvm` can run a standard guest (see `contract::capability`).
    pub kvm_usable: bool,
    /// Where the Pod mounts containerDisk volumes: volume `NAME` is at `<dir>/NAME/`.
    pub container_disk_dir: PathBuf,
    /// Where the Pod mounts the image of `firmware.kernelBoot.container`.
    pub kernel_boot_dir: PathBuf,
    /// Where the Pod mounts persistentVolumeClaim volumes: volume `NAME` is at `<dir>/NAME/`,
    /// holding `disk.img` (KubeVirt's layout).
    pub pvc_dir: PathBuf,
    /// Where the launcher writes the disks it makes: containerDisk overlays, cloud-init seeds,
    /// emptyDisks (`<dir>/NAME.img`).
    pub generated_disk_dir: PathBuf,
    /// The guest kernel the launcher ships, booted when the VMI has no `kernelBoot`.
    pub default_kernel: PathBuf,
    /// The initramfs shipped with `default_kernel`, if any.
    pub default_initramfs: Option<PathBuf>,
    /// A VMI without an OS disk boots `default_kernel` (the project's test guests, which are
    /// kernels of their own: `--no-os-disk-boots-kernel`) instead of running guestless.
    pub no_os_disk_boots_kernel: bool,
    /// The tap device that backs the pod network interface.
    pub tap_device: String,
    /// The directory shared with virt-handler (`launcher-sock`, `console-sock`).
    pub socket_dir: PathBuf,
    /// The private directory of the VMM's own sockets (serial, vsock, QMP) and of the kernel and
    /// initrd taken from the boot disk.
    pub run_dir: PathBuf,
    /// Where Debian's `ovmf` puts OVMF (`/usr/share/OVMF`): the UEFI firmware of
    /// `firmware.bootloader.efi`.
    pub ovmf_dir: PathBuf,
    /// What the launcher found on the boot disk.
    pub boot: BootDiscovery,
    /// The cluster's SMBIOS settings (the KubeVirt CR's, from virt-handler).
    pub smbios: super::smbios::ClusterSmbios,
}

/// What the boot disk holds, as the launcher's boot discovery (the `discovery` module) found it
/// before conversion: plain data, so that [`super::boot`] decides what the VM boots without
/// reading anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BootDiscovery {
    /// Not looked for: the VMI boots the kernel of `firmware.kernelBoot`.
    #[default]
    NotLooked,
    /// The VMI has no OS disk: no disk at all, or none that is a containerDisk or a
    /// persistentVolumeClaim (only emptyDisks and cloud-init seeds). Why, in words.
    NoOsDisk { reason: String },
    /// The default entry of the boot configuration on the boot disk; its kernel and initrd
    /// were copied into the run directory.
    Found(FoundKernel),
    /// The boot disk is a filesystem without a partition table, with no boot configuration and
    /// no kernel: a bare root filesystem (Firecracker and Kata style).
    BareFilesystem {
        disk: String,
        /// Its filesystem: `ext4, UUID ..., label "..."`.
        filesystem: String,
    },
    /// The boot disk has a partition table and readable filesystems, but no boot configuration
    /// and no kernel on any of them.
    PartitionedWithoutKernel {
        disk: String,
        /// The table and what is on each partition: `GPT: partition 1 (ext4, UUID ...)`.
        layout: String,
    },
    /// Nothing bootable on the boot disk, and why.
    Nothing { disk: String, reason: String },
}

/// A kernel found on the boot disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundKernel {
    /// The VMI's name of the boot disk.
    pub disk: String,
    /// The kernel, copied into the run directory.
    pub kernel: PathBuf,
    /// The initrds of the entry concatenated, copied into the run directory; `None` when the
    /// entry has none.
    pub initrd: Option<PathBuf>,
    /// The entry's command line, as the image's boot configuration writes it.
    pub cmdline: String,
    /// Where the kernel came from: `kernel /boot/vmlinuz-... from partition 1 (ext4, UUID ...)
    /// per /boot/grub/grub.cfg on partition 1 entry 'Debian GNU/Linux'`.
    pub source: String,
}

impl HostFacts {
    /// The unix socket the VMM serves the guest's serial port on (the launcher relays it to
    /// `console-sock`).
    pub fn serial_socket(&self) -> PathBuf {
        self.run_dir.join("serial.sock")
    }

    /// The host side of the guest's vsock device.
    pub fn vsock_socket(&self) -> PathBuf {
        self.run_dir.join("vsock.sock")
    }

    /// The file a generated disk of volume `name` lives in.
    pub fn generated_disk(&self, name: &str) -> PathBuf {
        self.generated_disk_dir.join(format!("{name}.img"))
    }
}

#[cfg(test)]
pub(crate) fn test_facts() -> HostFacts {
    HostFacts {
        kvm_usable: false,
        container_disk_dir: contract::layout::CONTAINER_DISK_DIR.into(),
        kernel_boot_dir: contract::layout::KERNEL_BOOT_DIR.into(),
        pvc_dir: contract::layout::PVC_DISK_DIR.into(),
        generated_disk_dir: contract::layout::EPHEMERAL_DISK_DIR.into(),
        default_kernel: "/usr/share/ferrovirt/vmlinux".into(),
        default_initramfs: Some("/usr/share/ferrovirt/initramfs.cpio.gz".into()),
        no_os_disk_boots_kernel: false,
        tap_device: "tap0".into(),
        socket_dir: contract::layout::LAUNCHER_SOCKET_DIR.into(),
        run_dir: contract::layout::LAUNCHER_RUN_DIR.into(),
        ovmf_dir: "/usr/share/OVMF".into(),
        boot: BootDiscovery::NotLooked,
        smbios: Default::default(),
    }
}

/// [`test_facts`] with the boot discovery of `vmi` as if its boot disk were a bare ext4 root
/// filesystem (nothing is read): kernelBoot VMIs are not looked at, VMIs without disks have none.
#[cfg(test)]
pub(crate) fn test_facts_for(vmi: &api::VirtualMachineInstance) -> HostFacts {
    let kernel_boot = vmi
        .spec
        .domain
        .firmware
        .as_ref()
        .is_some_and(|f| f.kernel_boot.is_some());
    let boot = match super::disks::boot_disk(vmi) {
        _ if kernel_boot => BootDiscovery::NotLooked,
        Some((_, disk)) => BootDiscovery::BareFilesystem {
            disk: disk.name.clone(),
            filesystem: "ext4".into(),
        },
        None => BootDiscovery::NoOsDisk {
            reason: "the VMI has no disk".into(),
        },
    };
    HostFacts {
        boot,
        ..test_facts()
    }
}
