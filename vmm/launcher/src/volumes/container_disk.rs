//! Where a containerDisk's image is, read in place.
//!
//! In the launcher Pod each containerDisk image runs as a container of its own
//! (`volume<NAME>`, virt-controller's `pod` module) that only sleeps, with
//! [`CONTAINER_DISK_ENV`]`=<NAME>` in its environment. The Pod shares one PID namespace, so
//! the launcher finds that process in `/proc` and reads the image's files under
//! `/proc/<pid>/root`, where containerd unpacked them: no init container copies the image
//! first. The kernel lets a process open another's root when both run as the same user and
//! the other holds no capability the reader lacks: the container runs as the launcher's user
//! with every capability dropped. (KubeVirt's virt-handler bind-mounts the file into the
//! launcher's mount namespace instead, which needs a privileged agent on the node.)
//!
//! Outside a Pod (tests, benchmarks) the image is a directory, `<container disk dir>/<NAME>/`:
//! it is used when `<container disk dir>` exists.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use contract::layout::CONTAINER_DISK_ENV;

const PROC: &str = "/proc";
/// How long the launcher waits for a containerDisk's container to run its program.
pub const CONTAINER_WAIT: Duration = Duration::from_secs(10);
const CONTAINER_POLL: Duration = Duration::from_millis(50);

/// Why a containerDisk's image or disk file was not found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("containerDisk volume {volume:?}: no disk image under {mount}")]
    NoDisk { volume: String, mount: PathBuf },
    #[error("containerDisk volume {volume:?}: no process in the launcher Pod has {CONTAINER_DISK_ENV}={volume} in its environment after {} s (its container `volume{volume}` is not running, or runs as another user), and there is no directory above {mount}", waited.as_secs_f32())]
    NoContainer {
        volume: String,
        mount: PathBuf,
        waited: Duration,
    },
}

/// The disk file of containerDisk volume `volume`: under `mount` when the directory that holds
/// it exists (a launcher outside a Pod), else under the root of its container's process.
pub fn locate(
    volume: &str,
    mount: &Path,
    path_in_image: Option<&str>,
) -> Result<PathBuf, LocateError> {
    locate_in(
        Path::new(PROC),
        CONTAINER_WAIT,
        volume,
        mount,
        path_in_image,
    )
}

fn locate_in(
    proc: &Path,
    wait: Duration,
    volume: &str,
    mount: &Path,
    path_in_image: Option<&str>,
) -> Result<PathBuf, LocateError> {
    // Outside a Pod, the directory of the volumes' directories exists; in a Pod, nothing is
    // mounted there.
    let root = if mount.parent().is_some_and(Path::is_dir) {
        mount.to_path_buf()
    } else {
        wait_for_container(proc, volume, wait).ok_or_else(|| LocateError::NoContainer {
            volume: volume.to_string(),
            mount: mount.to_path_buf(),
            waited: wait,
        })?
    };
    find_container_disk(&root, path_in_image).ok_or(LocateError::NoDisk {
        volume: volume.to_string(),
        mount: root,
    })
}

/// [`container_root`], looked for again every [`CONTAINER_POLL`] up to `wait`: the
/// kubelet starts the containerDisk's container just before the launcher's, and until runc has
/// executed its program, the process carries runc's environment, not the container's. (A
/// process coming into being has no event to wait on.)
fn wait_for_container(proc: &Path, volume: &str, wait: Duration) -> Option<PathBuf> {
    let deadline = Instant::now() + wait;
    loop {
        let found = container_root(proc, volume);
        if found.is_some() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(CONTAINER_POLL);
    }
}

/// `<proc>/<pid>/root` of the process whose environment holds [`CONTAINER_DISK_ENV`]`=volume`.
/// Processes whose environment cannot be read (another user's, such as the Pod's pause
/// process) are passed over.
fn container_root(proc: &Path, volume: &str) -> Option<PathBuf> {
    let wanted = format!("{CONTAINER_DISK_ENV}={volume}");
    let mut pids: Vec<u32> = std::fs::read_dir(proc)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter().find_map(|pid| {
        let dir = proc.join(pid.to_string());
        let environ = std::fs::read(dir.join("environ")).ok()?;
        environ
            .split(|b| *b == 0)
            .any(|entry| entry == wanted.as_bytes())
            .then(|| dir.join("root"))
    })
}

/// The disk file of a containerDisk image whose root is `root`: `containerDisk.path` when set,
/// else the first file under `disk/`, else the first file at the top.
pub fn find_container_disk(root: &Path, path_in_image: Option<&str>) -> Option<PathBuf> {
    if let Some(path) = path_in_image {
        let candidate = root.join(path.trim_start_matches('/'));
        return candidate.is_file().then_some(candidate);
    }
    [root.join("disk"), root.to_path_buf()]
        .into_iter()
        .find_map(|dir| first_file(&dir))
}

fn first_file(dir: &Path) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files.into_iter().next()
}

#[cfg(test)]
#[path = "container_disk_tests.rs"]
mod tests;
