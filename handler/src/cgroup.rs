//! The host's memory cgroups as virt-handler reads them, in either version, told apart at run
//! time by what the mounted tree holds:
//! - v1: a `memory` hierarchy of its own (`<root>/memory`), a cgroup's usage in
//!   `memory.usage_in_bytes`, its reclaimable page cache as `total_inactive_file` in
//!   `memory.stat` (the `total_` fields count the cgroup's descendants);
//! - v2: one unified hierarchy (`<root>/cgroup.controllers` exists), usage in `memory.current`,
//!   page cache as `inactive_file` in `memory.stat` (always hierarchical).
//!
//! The working set is what the kubelet (through cAdvisor) and `kubectl top` report: usage minus
//! inactive file pages, in both versions.

use std::path::{Path, PathBuf};

/// Which cgroup version a hierarchy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// The file with a cgroup's memory usage in bytes.
    pub fn usage_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        }
    }

    /// The `memory.stat` key of the cgroup's inactive page cache, descendants included.
    pub fn inactive_file_key(self) -> &'static str {
        match self {
            Version::V1 => "total_inactive_file",
            Version::V2 => "inactive_file",
        }
    }
}

/// A memory cgroup hierarchy: the directory Pod cgroups are searched under, and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryHierarchy {
    pub root: PathBuf,
    pub version: Version,
}

impl MemoryHierarchy {
    /// The memory hierarchy of the cgroup tree mounted at `mount` (a host's `/sys/fs/cgroup`),
    /// or `None` when it has neither a unified hierarchy nor a v1 `memory` one.
    pub fn of(mount: &Path) -> Option<MemoryHierarchy> {
        if mount.join("cgroup.controllers").is_file() {
            return Some(MemoryHierarchy {
                root: mount.to_path_buf(),
                version: Version::V2,
            });
        }
        let memory = mount.join("memory");
        memory.is_dir().then_some(MemoryHierarchy {
            root: memory,
            version: Version::V1,
        })
    }

    /// (usage, working set) of the cgroup directory `dir`.
    pub fn working_set(&self, dir: &Path) -> Option<(u64, u64)> {
        let usage = std::fs::read_to_string(dir.join(self.version.usage_file())).ok()?;
        let stat = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
        working_set(self.version, &usage, &stat)
    }
}

/// (usage, usage - inactive file pages) from a cgroup's usage file and `memory.stat`.
pub fn working_set(version: Version, usage: &str, memory_stat: &str) -> Option<(u64, u64)> {
    let usage: u64 = usage.trim().parse().ok()?;
    let key = version.inactive_file_key();
    let inactive_file = memory_stat
        .lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Some((usage, usage.saturating_sub(inactive_file)))
}

/// The cgroup directory of Pod `uid` under `root` (cgroupfs or systemd naming), found within
/// six levels (the kubelet's cgroup root may be below the hierarchy's root, as
/// `ferrovirt/<node>/kubepods/burstable/pod<uid>` on the local cluster's netns nodes).
pub fn pod_cgroup(root: &Path, uid: &str) -> Option<PathBuf> {
    let names = [format!("pod{uid}"), format!("pod{}", uid.replace('-', "_"))];
    let matches = |dir: &Path| {
        dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            names
                .iter()
                .any(|want| n == want || n.ends_with(&format!("-{want}.slice")))
        })
    };
    let mut level = vec![root.to_path_buf()];
    for _ in 0..6 {
        let mut next = Vec::new();
        for dir in level {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if !path.is_dir() {
                    continue;
                }
                if matches(&path) {
                    return Some(path);
                }
                // Other Pods' directories hold only their containers.
                if !entry.file_name().to_string_lossy().starts_with("pod") {
                    next.push(path);
                }
            }
        }
        level = next;
    }
    None
}

/// The PIDs in a cgroup directory and all below it.
pub fn pids(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.path().is_dir() {
                pids.extend(self::pids(&entry.path()));
            }
        }
    }
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_version_leaves_out_its_own_inactive_page_cache() {
        let v1 = "cache 100\nrss 50\ninactive_file 7\ntotal_cache 4096\ntotal_inactive_file 1000\n";
        assert_eq!(working_set(Version::V1, "5000\n", v1), Some((5000, 4000)));
        let v2 = "anon 3000\nfile 2000\nactive_file 500\ninactive_file 1500\n";
        assert_eq!(working_set(Version::V2, "5000\n", v2), Some((5000, 3500)));
        // v1's own-cgroup field is not v2's, nor the other way round.
        assert_eq!(
            working_set(Version::V2, "5000", "total_inactive_file 1000"),
            Some((5000, 5000))
        );
        assert_eq!(working_set(Version::V1, "garbage", v1), None);
        // More inactive cache than usage (a racy read) is no working set, not a wrap-around.
        assert_eq!(working_set(Version::V2, "10", v2), Some((10, 0)));
    }

    #[test]
    fn the_version_is_told_by_the_mounted_tree() {
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        assert_eq!(
            MemoryHierarchy::of(v2.path()),
            Some(MemoryHierarchy {
                root: v2.path().to_path_buf(),
                version: Version::V2
            })
        );
        let v1 = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(v1.path().join("memory")).unwrap();
        std::fs::create_dir_all(v1.path().join("cpu")).unwrap();
        assert_eq!(
            MemoryHierarchy::of(v1.path()),
            Some(MemoryHierarchy {
                root: v1.path().join("memory"),
                version: Version::V1
            })
        );
        let neither = tempfile::tempdir().unwrap();
        assert_eq!(MemoryHierarchy::of(neither.path()), None);
        assert_eq!(MemoryHierarchy::of(&neither.path().join("missing")), None);
    }

    #[test]
    fn pod_cgroups_are_found_in_both_namings() {
        let root = tempfile::tempdir().unwrap();
        let uid = "0c2b9f6e-1111-2222-3333-444455556666";
        let cgroupfs = root
            .path()
            .join("kubepods/burstable")
            .join(format!("pod{uid}"));
        std::fs::create_dir_all(cgroupfs.join("container1")).unwrap();
        std::fs::create_dir_all(root.path().join("kubepods/besteffort/podother")).unwrap();
        assert_eq!(pod_cgroup(root.path(), uid), Some(cgroupfs));
        assert_eq!(pod_cgroup(root.path(), "missing"), None);

        let systemd = tempfile::tempdir().unwrap();
        let uid = "9a8b7c6d-1111-2222-3333-444455556666";
        let slice = systemd
            .path()
            .join("kubepods.slice/kubepods-besteffort.slice")
            .join(format!(
                "kubepods-besteffort-pod{}.slice",
                uid.replace('-', "_")
            ));
        std::fs::create_dir_all(&slice).unwrap();
        assert_eq!(pod_cgroup(systemd.path(), uid), Some(slice));
    }

    #[test]
    fn pids_are_collected_from_every_level() {
        let pod = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(pod.path().join("a/b")).unwrap();
        std::fs::write(pod.path().join("cgroup.procs"), "1\n").unwrap();
        std::fs::write(pod.path().join("a/cgroup.procs"), "").unwrap();
        std::fs::write(pod.path().join("a/b/cgroup.procs"), "3\n4\n").unwrap();
        let mut found = pids(pod.path());
        found.sort();
        assert_eq!(found, [1, 3, 4]);
    }
}
