//! `HostFacts`: what the converter needs to know about the Pod and the node it runs on.
//!
//! Everything here is gathered by the launcher before it converts (probing KVM, reading its own
//! flags); the converter itself does no I/O.

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
    /// The tap device that backs the pod network interface.
    pub tap_device: String,
    /// The directory shared with virt-handler (`launcher-sock`, `console-sock`).
    pub socket_dir: PathBuf,
    /// The private directory of the VMM's own sockets (serial, vsock, QMP).
    pub run_dir: PathBuf,
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
        tap_device: "tap0".into(),
        socket_dir: contract::layout::LAUNCHER_SOCKET_DIR.into(),
        run_dir: "/var/run/ferrovirt".into(),
    }
}
