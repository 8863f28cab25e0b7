//! The unix sockets in a VMI's socket directory: one directory per launcher Pod, its `sockets`
//! emptyDir, which the launcher sees at [`crate::layout::LAUNCHER_SOCKET_DIR`] and virt-handler
//! at `<layout::HOST_SOCKET_ROOT>/<VMI UID>/` (a symlink it makes to the emptyDir in the
//! kubelet's directory, [`crate::layout::pod_socket_dir`]). It is the only directory the
//! launcher Pod shares with the node.
//!
//! | socket | served by | what |
//! |---|---|---|
//! | [`LAUNCHER_SOCKET`] | launcher | gRPC `launcher.v1.Launcher` |
//! | [`CONSOLE_SOCKET`] | launcher | the guest's serial port as a raw byte stream, both ways; several clients may connect |
//! | [`VNC_SOCKET`] | QEMU, started by the launcher | the VM's screen, keyboard and mouse over VNC (RFB), when the VM has a graphics device |
//! | [`NOTIFY_SOCKET`] | handler | gRPC `launcher.v1.Notify`: the launcher's domain events |
//! | [`MIGRATION_SOURCE_SOCKET`] | handler | a migration source launcher sends its stream here |
//! | [`MIGRATION_TARGET_SOCKET`] | launcher | a migration target launcher receives the stream here |

use std::path::Path;

/// The launcher's gRPC socket.
pub const LAUNCHER_SOCKET: &str = "launcher-sock";
/// The serial console socket.
pub const CONSOLE_SOCKET: &str = "console-sock";
/// QEMU's VNC server, for a VM with a graphics device (QEMU backend).
pub const VNC_SOCKET: &str = "vnc-sock";
/// virt-handler's `Notify` socket; the handler names it to the launcher in `SyncVMI`.
pub const NOTIFY_SOCKET: &str = "handler-notify";
/// Where the handler takes a source launcher's migration stream.
pub const MIGRATION_SOURCE_SOCKET: &str = "migration-source-sock";
/// Where a target launcher takes the migration stream from the handler.
pub const MIGRATION_TARGET_SOCKET: &str = "migration-target-sock";

/// Longest unix socket path (`sun_path` is 108 bytes with the terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Checks that `path` fits in a unix socket address.
pub fn check_socket_path(path: &Path) -> Result<(), String> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        Err(format!(
            "socket path {} is {len} bytes, longer than the {MAX_SOCKET_PATH} a unix socket allows",
            path.display()
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{HOST_SOCKET_ROOT, LAUNCHER_SOCKET_DIR};

    #[test]
    fn socket_path_limit() {
        assert!(check_socket_path(Path::new(&"a".repeat(MAX_SOCKET_PATH))).is_ok());
        let err = check_socket_path(Path::new(&"a".repeat(MAX_SOCKET_PATH + 1))).unwrap_err();
        assert!(err.contains("108 bytes"), "{err}");
    }

    #[test]
    fn every_socket_fits_on_both_sides() {
        // A VMI UID is 36 characters.
        let uid = "0123abcd-0123-abcd-0123-0123456789ab";
        for name in [
            LAUNCHER_SOCKET,
            CONSOLE_SOCKET,
            VNC_SOCKET,
            NOTIFY_SOCKET,
            MIGRATION_SOURCE_SOCKET,
            MIGRATION_TARGET_SOCKET,
        ] {
            let host = Path::new(HOST_SOCKET_ROOT).join(uid).join(name);
            assert!(check_socket_path(&host).is_ok(), "{}", host.display());
            let pod = Path::new(LAUNCHER_SOCKET_DIR).join(name);
            assert!(check_socket_path(&pod).is_ok(), "{}", pod.display());
        }
    }
}
