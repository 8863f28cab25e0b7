//! What a launcher that is not root cannot take itself, virt-handler hands it before the VM
//! starts, as KubeVirt's virt-handler does for its non-root launcher: the launcher container's
//! `/dev/kvm` and `/dev/net/tun` (the device plugins' nodes, which the runtime creates with
//! the host's owner and mode) and the `disk.img` of each writable PVC volume become the
//! launcher's user's. (The tap, and DHCP's port, are [`crate::podnet`]'s.)
//!
//! Paths are resolved inside the launcher's root (`/proc/<pid>/root`, with `RESOLVE_IN_ROOT`:
//! the image's absolute symlinks such as `/var/run -> /run` stay in it) and the last component
//! is never followed: a PVC's `disk.img` that is a symlink, or anything but a regular file,
//! is refused, so that what a PVC holds cannot make virt-handler change a file elsewhere.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;

use api::VirtualMachineInstance;
use contract::layout::PVC_DISK_DIR;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::process::{Gid, Uid};

/// The device nodes a launcher opens: the KVM backend's and QEMU's tap device.
pub const DEVICES: [&str; 2] = ["/dev/kvm", "/dev/net/tun"];

/// Why something could not be handed to the launcher's user.
#[derive(Debug, thiserror::Error)]
pub enum OwnershipError {
    #[error("cannot open the root of launcher process {pid}")]
    Root {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} in the launcher's container")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} in the launcher's container is {found}, not {expected}: not handed to the launcher's user")]
    Kind {
        path: String,
        found: &'static str,
        expected: &'static str,
    },
}

/// What [`claim`] found at one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It is the launcher's user's now.
    Changed,
    /// It was already.
    Owned,
    /// Nothing is there.
    Missing,
}

/// What one file needs to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Device,
    RegularFile,
}

/// The files of `vmi` that a launcher running as a user other than root needs to own: the
/// [`DEVICES`] and the `disk.img` of each PVC volume not mounted read-only, as paths in the
/// launcher's container.
fn wanted(vmi: &VirtualMachineInstance) -> Vec<(String, Kind)> {
    let devices = DEVICES.iter().map(|d| (d.to_string(), Kind::Device));
    let disks = vmi.spec.volumes.iter().filter_map(|volume| {
        let claim = volume.persistent_volume_claim.as_ref()?;
        (claim.read_only != Some(true)).then(|| {
            (
                format!("{PVC_DISK_DIR}/{}/disk.img", volume.name),
                Kind::RegularFile,
            )
        })
    });
    devices.chain(disks).collect()
}

/// Hands what `vmi`'s launcher needs to `uid` (its group the same number, as KubeVirt's 107),
/// in the container whose root is `root`. A root launcher (`uid` 0) needs nothing; a path that
/// does not exist is left for the launcher to report (a VMI without a tap has no
/// `/dev/net/tun`). Returns what it found at each path.
pub fn claim(
    vmi: &VirtualMachineInstance,
    root: &File,
    uid: u32,
) -> Result<Vec<(String, Outcome)>, OwnershipError> {
    if uid == 0 {
        return Ok(Vec::new());
    }
    wanted(vmi)
        .into_iter()
        .map(|(path, kind)| hand_over(root, &path, kind, uid).map(|outcome| (path, outcome)))
        .collect()
}

/// Makes `path` (absolute, in `root`) `uid`'s, if it exists and is of `kind`.
fn hand_over(root: &File, path: &str, kind: Kind, uid: u32) -> Result<Outcome, OwnershipError> {
    let io = |e: Errno| OwnershipError::Io {
        path: path.to_string(),
        source: e.into(),
    };
    let relative = path.trim_start_matches('/');
    let fd = match rustix::fs::openat2(
        root.as_fd(),
        relative,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(Outcome::Missing),
        Err(e) => return Err(io(e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(io)?;
    let found = FileType::from_raw_mode(stat.st_mode);
    let (ok, expected) = match kind {
        Kind::Device => (found == FileType::CharacterDevice, "a character device"),
        Kind::RegularFile => (found == FileType::RegularFile, "a regular file"),
    };
    if !ok {
        return Err(OwnershipError::Kind {
            path: path.to_string(),
            found: describe(found),
            expected,
        });
    }
    if stat.st_uid == uid && stat.st_gid == uid {
        return Ok(Outcome::Owned);
    }
    rustix::fs::chownat(
        &fd,
        "",
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(uid)),
        AtFlags::EMPTY_PATH,
    )
    .map_err(io)?;
    Ok(Outcome::Changed)
}

fn describe(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

/// [`claim`] for the launcher process `pid` run by `uid`, on a blocking thread, logging what
/// changed owner.
pub async fn claim_blocking(
    vmi: &VirtualMachineInstance,
    pid: u32,
    uid: u32,
) -> Result<(), OwnershipError> {
    let owned = vmi.clone();
    let found = tokio::task::spawn_blocking(move || {
        let root = File::open(PathBuf::from(format!("/proc/{pid}/root")))
            .map_err(|source| OwnershipError::Root { pid, source })?;
        claim(&owned, &root, uid)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
    let changed: Vec<&str> = (found.iter())
        .filter(|(_, outcome)| *outcome == Outcome::Changed)
        .map(|(path, _)| path.as_str())
        .collect();
    if !changed.is_empty() {
        log::info!(
            "{}: handed {} to the launcher's user {uid}",
            kube::ResourceExt::name_any(vmi),
            changed.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
#[path = "ownership_tests.rs"]
mod tests;
