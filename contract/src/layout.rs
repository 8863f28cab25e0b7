//! Directories: on the node (hostPath volumes of virt-handler and of the launcher Pods) and
//! inside the launcher Pod (where virt-controller mounts what the launcher reads, and the
//! defaults of virt-launcher's flags).
//!
//! Node:
//! - [`HOST_RUN_DIR`]: virt-handler's run directory (hostPath into the handler DaemonSet);
//! - [`HOST_SOCKET_ROOT`]: inside it, `<VMI UID>`, where virt-handler reaches the sockets of
//!   the VMI's launcher on this node (the `sockets` module names them): a symlink virt-handler
//!   makes to the launcher Pod's `sockets` emptyDir in the kubelet's directory
//!   ([`pod_socket_dir`]), so that the launcher Pod needs no hostPath volume. (Launcher Pods of
//!   earlier releases mounted a hostPath directory there; virt-handler leaves those alone.)
//! - [`KUBELET_PODS_DIR`]: the kubelet's Pod directories (hostPath into virt-handler, at the
//!   same path, so that the symlinks resolve there and on the node alike);
//! - [`DEVICE_PLUGIN_DIR`]: the kubelet's device-plugin sockets (hostPath into virt-handler).
//!
//! Launcher Pod:
//! - [`LAUNCHER_SOCKET_DIR`]: the VMI's socket directory;
//! - containerDisk volume `<volume>`: the root of its own container, which sleeps with
//!   [`CONTAINER_DISK_ENV`]`=<volume>` in its environment; the Pod shares one PID namespace, so
//!   the launcher reads the image as `/proc/<pid>/root` (outside a Pod, a directory
//!   [`CONTAINER_DISK_DIR`]`/<volume>/` stands for it);
//! - [`KERNEL_BOOT_DIR`]: the kernel and initrd of `firmware.kernelBoot.container`;
//! - [`PRIVATE_DIR`], [`PVC_DISK_DIR`]`/<volume>/disk.img`: persistentVolumeClaim volumes
//!   (KubeVirt's layout);
//! - [`EPHEMERAL_DISK_DIR`]: where the launcher writes containerDisk copies, emptyDisks and
//!   cloud-init seeds (`<volume>.img`), and [`LAUNCHER_RUN_DIR`], the VMM's and QEMU's own
//!   sockets and files: emptyDirs, which a launcher that is not root can write (the image's
//!   directories are root's).
//!
//! The launcher runs as [`LAUNCHER_USER_ID`], KubeVirt's non-root user, unless the KubeVirt CR
//! enables the `Root` feature gate.

/// virt-handler's run directory on the node.
pub const HOST_RUN_DIR: &str = "/var/run/kubevirt";
/// The socket directories on the node: `<this>/<VMI UID>/`.
pub const HOST_SOCKET_ROOT: &str = "/var/run/kubevirt/sockets";
/// The kubelet's device-plugin directory on the node.
pub const DEVICE_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
/// The kubelet's Pod directories on the node: `<this>/<Pod UID>/volumes/...`.
pub const KUBELET_PODS_DIR: &str = "/var/lib/kubelet/pods";
/// The name of the launcher Pod's emptyDir volume that holds its sockets.
pub const SOCKETS_VOLUME: &str = "sockets";

/// Where the kubelet keeps the `sockets` emptyDir of launcher Pod `pod_uid`, under the kubelet
/// Pod directory `pods_dir` ([`KUBELET_PODS_DIR`] on a node).
pub fn pod_socket_dir(pods_dir: &std::path::Path, pod_uid: &str) -> std::path::PathBuf {
    pods_dir
        .join(pod_uid)
        .join("volumes/kubernetes.io~empty-dir")
        .join(SOCKETS_VOLUME)
}

/// Where the launcher sees its socket directory.
pub const LAUNCHER_SOCKET_DIR: &str = "/var/run/kubevirt/sockets";
/// Where a launcher outside a launcher Pod (tests, benchmarks) finds containerDisk images:
/// `<this>/<volume name>/<file>`. In a Pod nothing is there: see [`CONTAINER_DISK_ENV`].
pub const CONTAINER_DISK_DIR: &str = "/var/run/kubevirt/container-disks";
/// The environment variable that marks the process of containerDisk volume `<value>`'s
/// container in the launcher Pod (whose root filesystem is the image).
pub const CONTAINER_DISK_ENV: &str = "FERROVIRT_CONTAINER_DISK";
/// Where the launcher finds a kernelBoot kernel and initrd: `<this>/<file name>`.
pub const KERNEL_BOOT_DIR: &str = "/var/run/kubevirt/kernel-boot";
/// The launcher Pod's private directory (an emptyDir); PVCs are mounted below it.
pub const PRIVATE_DIR: &str = "/var/run/kubevirt-private";
/// Where PVC volumes are mounted: `<this>/<volume name>/disk.img`, as in KubeVirt.
pub const PVC_DISK_DIR: &str = "/var/run/kubevirt-private/vmi-disks";
/// Where the launcher writes the disks it makes: `<this>/<volume name>.img`.
pub const EPHEMERAL_DISK_DIR: &str = "/var/run/kubevirt-ephemeral-disks";
/// The launcher's private run directory: the VMM's and QEMU's sockets (QMP, serial, agent),
/// OVMF's variable store.
pub const LAUNCHER_RUN_DIR: &str = "/var/run/ferrovirt";
/// The user (and group) the launcher runs as: KubeVirt's `qemu` user of its non-root
/// launcher, so that images and PVCs prepared for KubeVirt (owned by 107) work unchanged.
pub const LAUNCHER_USER_ID: u32 = 107;

/// The path, as the launcher sees it, of socket `name` of its socket directory (what the
/// handler names in `SyncOptions.notify_socket` and `MigrateRequest.socket`).
pub fn in_launcher_socket_dir(name: &str) -> String {
    format!("{LAUNCHER_SOCKET_DIR}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_socket_dir_is_its_empty_dir_in_the_kubelets_tree() {
        assert_eq!(
            pod_socket_dir(std::path::Path::new(KUBELET_PODS_DIR), "p-1"),
            std::path::Path::new(
                "/var/lib/kubelet/pods/p-1/volumes/kubernetes.io~empty-dir/sockets"
            )
        );
    }

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
