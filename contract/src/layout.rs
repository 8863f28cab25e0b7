//! Directories: on the node (hostPath volumes of virt-handler and of the launcher Pods) and
//! inside the launcher Pod (where virt-controller mounts what the launcher reads, and the
//! defaults of virt-launcher's flags).
//!
//! Node:
//! - [`HOST_RUN_DIR`]: virt-handler's run directory (hostPath into the handler DaemonSet);
//! - [`HOST_SOCKET_ROOT`]: inside it, one socket directory per VMI UID (hostPath into that
//!   VMI's launcher Pod; the `sockets` module names the sockets in it);
//! - [`DEVICE_PLUGIN_DIR`]: the kubelet's device-plugin sockets (hostPath into virt-handler).
//!
//! Launcher Pod:
//! - [`LAUNCHER_SOCKET_DIR`]: the VMI's socket directory;
//! - [`CONTAINER_DISK_DIR`]`/<volume>/`: the copy of containerDisk volume `<volume>`;
//! - [`KERNEL_BOOT_DIR`]: the kernel and initrd of `firmware.kernelBoot.container`;
//! - [`PRIVATE_DIR`], [`PVC_DISK_DIR`]`/<volume>/disk.img`: persistentVolumeClaim volumes
//!   (KubeVirt's layout);
//! - [`EPHEMERAL_DISK_DIR`]: where the launcher writes containerDisk copies, emptyDisks and
//!   cloud-init seeds (`<volume>.img`), in the container's own writable layer.

/// virt-handler's run directory on the node.
pub const HOST_RUN_DIR: &str = "/var/run/kubevirt";
/// The socket directories on the node: `<this>/<VMI UID>/`.
pub const HOST_SOCKET_ROOT: &str = "/var/run/kubevirt/sockets";
/// The kubelet's device-plugin directory on the node.
pub const DEVICE_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";

/// Where the launcher sees its socket directory.
pub const LAUNCHER_SOCKET_DIR: &str = "/var/run/kubevirt/sockets";
/// Where the launcher finds containerDisk copies: `<this>/<volume name>/<file>`.
pub const CONTAINER_DISK_DIR: &str = "/var/run/kubevirt/container-disks";
/// Where the launcher finds a kernelBoot kernel and initrd: `<this>/<file name>`.
pub const KERNEL_BOOT_DIR: &str = "/var/run/kubevirt/kernel-boot";
/// The launcher Pod's private directory (an emptyDir); PVCs are mounted below it.
pub const PRIVATE_DIR: &str = "/var/run/kubevirt-private";
/// Where PVC volumes are mounted: `<this>/<volume name>/disk.img`, as in KubeVirt.
pub const PVC_DISK_DIR: &str = "/var/run/kubevirt-private/vmi-disks";
/// Where the launcher writes the disks it makes: `<this>/<volume name>.img`.
pub const EPHEMERAL_DISK_DIR: &str = "/var/run/kubevirt-ephemeral-disks";

/// The path, as the launcher sees it, of socket `name` of its socket directory (what the
/// handler names in `SyncOptions.notify_socket` and `MigrateRequest.socket`).
pub fn in_launcher_socket_dir(name: &str) -> String {
    format!("{LAUNCHER_SOCKET_DIR}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting() {
        assert!(HOST_SOCKET_ROOT.starts_with(&format!("{HOST_RUN_DIR}/")));
        assert!(PVC_DISK_DIR.starts_with(&format!("{PRIVATE_DIR}/")));
        assert_eq!(
            in_launcher_socket_dir(crate::sockets::NOTIFY_SOCKET),
            "/var/run/kubevirt/sockets/handler-notify"
        );
    }
}
