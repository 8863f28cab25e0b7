//! Where virt-handler reaches a launcher's sockets: `<socket root>/<VMI UID>`, a symlink to the
//! launcher Pod's `sockets` emptyDir in the kubelet's directory
//! ([`contract::layout::pod_socket_dir`]). The launcher Pod so needs no hostPath volume, and the
//! socket paths virt-handler uses stay short (a unix socket path has at most 107 bytes; the
//! kubelet's own path to an emptyDir is longer than that with a socket name on it).
//!
//! The link follows the launcher Pod of the VMI on this node: made when the Pod's emptyDir
//! appears, pointed anew when another Pod of the same VMI comes to this node (a migration back),
//! left alone when it is right. A real directory there is the hostPath of a launcher Pod of an
//! earlier release, which keeps working as before while no Pod with an emptyDir replaces it.
//!
//! When the kubelet removes a deleted Pod's emptyDir, its link dangles: [`sweep`] removes those
//! (virt-handler runs it every [`SWEEP_INTERVAL`]), so the socket root does not fill with the
//! links of every VMI the node ever ran.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contract::layout::pod_socket_dir;
use contract::sockets::LAUNCHER_SOCKET;

/// What [`link`] found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum Linked {
    /// The link was made or pointed anew, to this directory.
    Made(PathBuf),
    /// The link pointed at the right directory already.
    Already,
    /// None of the Pods has a `sockets` emptyDir on this node (yet), and there is no directory
    /// of an earlier release's Pod either.
    NoPod,
    /// A directory of a launcher Pod of an earlier release (a hostPath), and no Pod with an
    /// emptyDir: left as it is.
    Legacy,
}

/// Points `<socket_root>/<vmi_uid>` at the `sockets` emptyDir of the VMI's launcher Pod on this
/// node, among `pod_uids` (the VMI's Pods here; `pods_dir` is the kubelet's Pod directory). Of
/// several Pods with an emptyDir, the one whose launcher serves its socket wins.
pub fn link(
    socket_root: &Path,
    pods_dir: &Path,
    vmi_uid: &str,
    pod_uids: &[&str],
) -> io::Result<Linked> {
    let dirs: Vec<PathBuf> = pod_uids
        .iter()
        .map(|pod| pod_socket_dir(pods_dir, pod))
        .filter(|dir| dir.is_dir())
        .collect();
    let target = dirs
        .iter()
        .find(|dir| dir.join(LAUNCHER_SOCKET).exists())
        .or(dirs.first());
    let path = socket_root.join(vmi_uid);
    let existing = std::fs::symlink_metadata(&path).ok();
    let is_dir = existing.as_ref().is_some_and(|m| m.is_dir());
    let Some(target) = target else {
        return Ok(if is_dir {
            Linked::Legacy
        } else {
            Linked::NoPod
        });
    };
    if existing
        .as_ref()
        .is_some_and(|m| m.file_type().is_symlink())
        && std::fs::read_link(&path)? == *target
    {
        return Ok(Linked::Already);
    }
    if is_dir {
        // The hostPath directory of an earlier release's Pod, which is no longer here.
        std::fs::remove_dir_all(&path)?;
    }
    std::fs::create_dir_all(socket_root)?;
    // A new link renamed over the old one: a reader sees one or the other, never none.
    let staging = socket_root.join(format!(".{vmi_uid}.link"));
    let _ = std::fs::remove_file(&staging);
    std::os::unix::fs::symlink(target, &staging)?;
    std::fs::rename(&staging, &path)?;
    Ok(Linked::Made(target.clone()))
}

/// [`link`], logging what it changed and why it failed (the launcher's socket then stays out of
/// reach, and the caller waits for it as for a launcher still starting).
pub fn link_logged(socket_root: &Path, pods_dir: &Path, vmi: &str, vmi_uid: &str, pods: &[&str]) {
    match link(socket_root, pods_dir, vmi_uid, pods) {
        Ok(Linked::Made(target)) => log::info!(
            "{vmi}: its launcher's sockets are in {}, linked from {}",
            target.display(),
            socket_root.join(vmi_uid).display()
        ),
        Ok(_) => {}
        Err(e) => log::warn!(
            "{vmi}: cannot link {} to its launcher Pod's sockets: {e}",
            socket_root.join(vmi_uid).display()
        ),
    }
}

/// How often virt-handler removes the links of launcher Pods that are gone.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Removes the links in `socket_root` that lead nowhere (their Pod's emptyDir is gone), and
/// staging links left by a [`link`] that was cut short; returns the names removed. Directories
/// (an earlier release's hostPath) and links that still lead somewhere stay.
pub fn sweep(socket_root: &Path) -> io::Result<Vec<String>> {
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(socket_root)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let staging = name.starts_with('.') && name.ends_with(".link");
        if !entry.file_type()?.is_symlink() || (!staging && path.exists()) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(name),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    removed.sort();
    Ok(removed)
}

/// [`sweep`] every [`SWEEP_INTERVAL`] until the process ends, logging what it removed.
pub async fn sweep_forever(socket_root: PathBuf) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        every.tick().await;
        match sweep(&socket_root) {
            Ok(removed) if !removed.is_empty() => log::info!(
                "removed {} link(s) to launcher Pods that are gone from {}: {}",
                removed.len(),
                socket_root.display(),
                removed.join(", ")
            ),
            Ok(_) => {}
            Err(e) => log::warn!("cleaning up {}: {e}", socket_root.display()),
        }
    }
}

/// Gives socket `path`, which virt-handler serves in a launcher's socket directory for the
/// launcher to connect to (notify, migration), to the owner of the launcher's own socket there:
/// a launcher that is not root may connect only to a socket it can write. The socket is never
/// followed if it is a symlink.
pub fn hand_to_launcher(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let launcher = std::fs::symlink_metadata(dir.join(LAUNCHER_SOCKET))?;
    std::os::unix::fs::lchown(path, Some(launcher.uid()), Some(launcher.gid()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Node {
        _dir: tempfile::TempDir,
        sockets: PathBuf,
        pods: PathBuf,
    }

    fn node() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let (sockets, pods) = (dir.path().join("sockets"), dir.path().join("pods"));
        std::fs::create_dir_all(&sockets).unwrap();
        std::fs::create_dir_all(&pods).unwrap();
        Node {
            _dir: dir,
            sockets,
            pods,
        }
    }

    impl Node {
        /// Pod `uid`'s emptyDir, as the kubelet makes it, with the launcher's socket if `serving`.
        fn pod(&self, uid: &str, serving: bool) -> PathBuf {
            let dir = pod_socket_dir(&self.pods, uid);
            std::fs::create_dir_all(&dir).unwrap();
            if serving {
                std::fs::write(dir.join(LAUNCHER_SOCKET), "").unwrap();
            }
            dir
        }

        fn link(&self, pods: &[&str]) -> Linked {
            link(&self.sockets, &self.pods, "vmi-1", pods).unwrap()
        }

        fn points_to(&self) -> PathBuf {
            std::fs::read_link(self.sockets.join("vmi-1")).unwrap()
        }
    }

    #[test]
    fn links_the_pods_empty_dir_once_and_the_sockets_are_reached_through_it() {
        let node = node();
        assert_eq!(node.link(&["pod-a"]), Linked::NoPod, "no emptyDir yet");
        let dir = node.pod("pod-a", true);
        assert_eq!(node.link(&["pod-a"]), Linked::Made(dir.clone()));
        assert_eq!(node.points_to(), dir);
        assert!(node.sockets.join("vmi-1").join(LAUNCHER_SOCKET).exists());
        assert_eq!(node.link(&["pod-a"]), Linked::Already);
    }

    #[test]
    fn a_new_pod_of_the_vmi_on_this_node_gets_the_link() {
        let node = node();
        node.pod("pod-a", true);
        node.link(&["pod-a"]);
        // The VMI migrated away and back: a new Pod, the old one's emptyDir still there.
        // Until its launcher serves, either may be linked: nothing is reached through it.
        let new = node.pod("pod-b", false);
        std::fs::remove_file(pod_socket_dir(&node.pods, "pod-a").join(LAUNCHER_SOCKET)).unwrap();
        node.link(&["pod-a", "pod-b"]);
        // The new launcher serves: the link moves to it, whatever the order.
        std::fs::write(new.join(LAUNCHER_SOCKET), "").unwrap();
        assert_eq!(node.link(&["pod-a", "pod-b"]), Linked::Made(new.clone()));
        assert_eq!(node.points_to(), new);
        assert_eq!(node.link(&["pod-b", "pod-a"]), Linked::Already);
        // Only the new Pod given: linked to it even before it serves.
        let newer = node.pod("pod-c", false);
        assert_eq!(node.link(&["pod-c"]), Linked::Made(newer));
    }

    #[test]
    fn a_dangling_link_is_replaced() {
        let node = node();
        std::os::unix::fs::symlink(node.pods.join("gone"), node.sockets.join("vmi-1")).unwrap();
        let dir = node.pod("pod-b", false);
        assert_eq!(node.link(&["pod-b"]), Linked::Made(dir.clone()));
        assert_eq!(node.points_to(), dir);
    }

    #[test]
    fn an_earlier_releases_directory_stays_until_a_pod_with_an_empty_dir_comes() {
        let node = node();
        let legacy = node.sockets.join("vmi-1");
        std::fs::create_dir_all(&legacy).unwrap();
        std::fs::write(legacy.join(LAUNCHER_SOCKET), "").unwrap();
        assert_eq!(node.link(&["old-pod"]), Linked::Legacy);
        assert!(legacy.join(LAUNCHER_SOCKET).exists(), "left alone");
        let dir = node.pod("new-pod", false);
        assert_eq!(
            node.link(&["old-pod", "new-pod"]),
            Linked::Made(dir.clone())
        );
        assert_eq!(node.points_to(), dir);
    }

    #[test]
    fn the_sweep_removes_the_links_of_pods_that_are_gone_and_nothing_else() {
        let node = node();
        node.pod("pod-a", true);
        node.link(&["pod-a"]);
        link(&node.sockets, &node.pods, "vmi-2", &["pod-b"]).unwrap();
        node.pod("pod-b", false);
        link(&node.sockets, &node.pods, "vmi-2", &["pod-b"]).unwrap();
        let legacy = node.sockets.join("vmi-legacy");
        std::fs::create_dir_all(&legacy).unwrap();
        std::os::unix::fs::symlink(
            pod_socket_dir(&node.pods, "pod-a"),
            node.sockets.join(".vmi-3.link"),
        )
        .unwrap();
        assert_eq!(
            sweep(&node.sockets).unwrap(),
            vec![".vmi-3.link"],
            "a staging link only"
        );
        // The kubelet removes pod-b's directory once its Pod is deleted.
        std::fs::remove_dir_all(node.pods.join("pod-b")).unwrap();
        assert_eq!(sweep(&node.sockets).unwrap(), vec!["vmi-2"]);
        assert!(
            node.sockets.join("vmi-1").join(LAUNCHER_SOCKET).exists(),
            "a live link stays"
        );
        assert!(legacy.is_dir(), "an earlier release's directory stays");
        assert!(std::fs::symlink_metadata(node.sockets.join("vmi-2")).is_err());
        assert_eq!(sweep(&node.sockets).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_socket_served_for_the_launcher_becomes_its_users() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let launcher = dir.path().join(LAUNCHER_SOCKET);
        std::fs::write(&launcher, "").unwrap();
        if rustix::process::geteuid().is_root() {
            let id = contract::layout::LAUNCHER_USER_ID;
            std::os::unix::fs::chown(&launcher, Some(id), Some(id)).unwrap();
        }
        let served = dir.path().join("handler-notify");
        let _listener = std::os::unix::net::UnixListener::bind(&served).unwrap();
        hand_to_launcher(&served).unwrap();
        let (want, got) = (
            std::fs::metadata(&launcher).unwrap(),
            std::fs::symlink_metadata(&served).unwrap(),
        );
        assert_eq!((got.uid(), got.gid()), (want.uid(), want.gid()));
        // No launcher socket: nobody to give it to.
        std::fs::remove_file(&launcher).unwrap();
        assert!(hand_to_launcher(&served).is_err());
    }
}
