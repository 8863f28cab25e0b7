//! virt-handler's Prometheus metrics, with KubeVirt's names, served as text (exposition format
//! 0.0.4) on `GET /metrics`, plain HTTP on [`METRICS_PORT`].
//!
//! `kubevirt_vmi_launcher_memory_overhead_bytes{namespace,name,node}`: what a running VMI's
//! launcher Pod costs in memory beyond the guest's own, computed at each scrape:
//! 1. the VMIs of this node (by the `kubevirt.io/nodeName` label) in phase Running, and the uid
//!    of their launcher Pod on this node (`status.activePods`);
//! 2. the Pod's memory cgroup (`kubepods/.../pod<uid>`, read from the host's cgroup tree mounted
//!    at [`HOST_CGROUP`], v1 or v2 as the host has it, see [`crate::cgroup`]): its working set,
//!    the usage minus the inactive page cache (what the kubelet and `kubectl top` call the
//!    working set: resident anonymous memory plus active page cache, every container and the
//!    Pod's pause process included);
//! 3. the guest's resident memory: the processes of the Pod's cgroups (`cgroup.procs`, host
//!    PIDs, read in `/proc`, which is the host's since the DaemonSet uses `hostPID`), and in
//!    their `smaps` the anonymous mapping of the guest's RAM (the one whose size is the guest
//!    memory, up to [`GUEST_MAPPING_SLACK`] more), its `Rss`;
//! 4. overhead = working set - guest resident. The two parts are exported too
//!    (`ferrovirt_vmi_launcher_memory_working_set_bytes`,
//!    `ferrovirt_vmi_guest_memory_resident_bytes`).
//!
//! The body also carries `kubevirt_rest_client_requests_total`, this process's API
//! requests ([`api::client_metrics`]).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use api::prometheus_text::encode_labels;
use api::{VirtualMachineInstance, VmiPhase};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::cgroup::{self, MemoryHierarchy};

/// Where `/metrics` is served (plain HTTP).
pub const METRICS_PORT: u16 = 8080;
/// The host's cgroup tree inside the virt-handler container.
pub const HOST_CGROUP: &str = "/host/sys/fs/cgroup";
/// A guest RAM mapping may be this much larger than the guest memory (alignment, guard pages).
pub const GUEST_MAPPING_SLACK: u64 = 8 << 20;

pub const LAUNCHER_MEMORY_OVERHEAD: &str = "kubevirt_vmi_launcher_memory_overhead_bytes";
const WORKING_SET: &str = "ferrovirt_vmi_launcher_memory_working_set_bytes";
const GUEST_RESIDENT: &str = "ferrovirt_vmi_guest_memory_resident_bytes";

/// The memory of one launcher Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LauncherMemory {
    /// The memory usage of the Pod's cgroup (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    pub usage: u64,
    /// usage - inactive page cache.
    pub working_set: u64,
    /// Resident bytes of the guest RAM mappings of the Pod's processes.
    pub guest_resident: u64,
}

impl LauncherMemory {
    pub fn overhead(&self) -> i64 {
        self.working_set as i64 - self.guest_resident as i64
    }
}

/// Where the host's memory cgroups and `/proc` are.
#[derive(Clone, Debug)]
pub struct HostPaths {
    /// `None` when neither tree has a memory hierarchy: no launcher can be measured.
    pub memory: Option<MemoryHierarchy>,
    pub proc: PathBuf,
}

impl HostPaths {
    /// The mounted host tree in the DaemonSet; the own tree when run on the host.
    pub fn detect() -> HostPaths {
        HostPaths {
            memory: MemoryHierarchy::of(Path::new(HOST_CGROUP))
                .or_else(|| MemoryHierarchy::of(Path::new("/sys/fs/cgroup"))),
            proc: PathBuf::from("/proc"),
        }
    }
}

/// The resident bytes of the guest RAM mapping in one process's `smaps`: among the anonymous
/// mappings whose size is `guest_bytes` up to [`GUEST_MAPPING_SLACK`] more, the most resident.
pub fn guest_resident(smaps: &str, guest_bytes: u64) -> u64 {
    let mut best = 0;
    let mut current: Option<bool> = None; // whether the mapping being read is a candidate
    for line in smaps.lines() {
        if let Some((range, rest)) = mapping_header(line) {
            let size = range.1.saturating_sub(range.0);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // perms offset dev inode [path]
            let anonymous = fields.get(3) == Some(&"0")
                && fields.get(4).is_none_or(|path| path.starts_with("[anon"));
            let writable = fields.first().is_some_and(|p| p.starts_with("rw"));
            current = Some(
                anonymous
                    && writable
                    && size >= guest_bytes
                    && size <= guest_bytes + GUEST_MAPPING_SLACK,
            );
        } else if let Some(kib) = line.strip_prefix("Rss:") {
            if current == Some(true) {
                let kib: u64 = kib
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(0);
                best = best.max(kib * 1024);
            }
        }
    }
    best
}

/// `start-end rest` of a mapping line, addresses parsed.
fn mapping_header(line: &str) -> Option<((u64, u64), &str)> {
    let (range, rest) = line.split_once(' ')?;
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    Some(((start, end), rest))
}

/// Measures the launcher Pod `uid` whose guest has `guest_bytes` of RAM.
pub fn launcher_memory(paths: &HostPaths, uid: &str, guest_bytes: u64) -> Option<LauncherMemory> {
    let memory = paths.memory.as_ref()?;
    let dir = cgroup::pod_cgroup(&memory.root, uid)?;
    let (usage, working_set) = memory.working_set(&dir)?;
    let guest = cgroup::pids(&dir)
        .into_iter()
        .map(|pid| {
            let smaps = std::fs::read_to_string(paths.proc.join(pid.to_string()).join("smaps"))
                .unwrap_or_default();
            guest_resident(&smaps, guest_bytes)
        })
        .sum();
    Some(LauncherMemory {
        usage,
        working_set,
        guest_resident: guest,
    })
}

/// The guest memory of a VMI: `memory.guest`, else `resources.requests.memory`.
pub fn guest_memory_bytes(vmi: &VirtualMachineInstance) -> Option<u64> {
    let domain = &vmi.spec.domain;
    let quantity = domain
        .memory
        .as_ref()
        .and_then(|m| m.guest.clone())
        .or_else(|| {
            domain
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("memory").cloned())
        })?;
    api::quantity::to_u64(&quantity).ok()
}

/// One VMI's figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmiMemory {
    pub namespace: String,
    pub name: String,
    pub memory: LauncherMemory,
}

/// A gauge's name, help text and value.
type Gauge = (&'static str, &'static str, fn(&LauncherMemory) -> i64);

/// The metrics in Prometheus' text format.
pub fn encode(node: &str, vmis: &[VmiMemory]) -> String {
    let mut out = String::new();
    let gauges: [Gauge; 3] = [
        (
            LAUNCHER_MEMORY_OVERHEAD,
            "Memory of the virt-launcher Pod beyond the guest's: the Pod cgroup's working set \
             minus the guest RAM resident in it.",
            LauncherMemory::overhead,
        ),
        (
            WORKING_SET,
            "Working set of the virt-launcher Pod's memory cgroup (usage - inactive page cache).",
            |m| m.working_set as i64,
        ),
        (
            GUEST_RESIDENT,
            "Guest RAM resident in the virt-launcher Pod's processes.",
            |m| m.guest_resident as i64,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for vmi in vmis {
            let labels = encode_labels(&[
                ("namespace", &vmi.namespace),
                ("name", &vmi.name),
                ("node", node),
            ]);
            let _ = writeln!(out, "{name}{{{labels}}} {}", value(&vmi.memory));
        }
    }
    out
}

/// Lists the Running VMIs of `node` and measures their launcher Pods.
async fn collect(client: &Client, node: &str, paths: &HostPaths) -> Vec<VmiMemory> {
    let params = ListParams::default().labels(&format!("{}={node}", contract::labels::NODE_NAME));
    let vmis = match Api::<VirtualMachineInstance>::all(client.clone())
        .list(&params)
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            log::warn!("metrics: listing the VMIs of {node}: {e}");
            return Vec::new();
        }
    };
    let node = node.to_string();
    let paths = paths.clone();
    tokio::task::spawn_blocking(move || {
        vmis.iter()
            .filter_map(|vmi| {
                let status = vmi.status.as_ref()?;
                if status.phase != Some(VmiPhase::Running) {
                    return None;
                }
                let uid = status
                    .active_pods
                    .as_ref()?
                    .iter()
                    .find(|(_, on)| **on == node)
                    .map(|(uid, _)| uid.clone())?;
                let memory = launcher_memory(&paths, &uid, guest_memory_bytes(vmi)?)?;
                Some(VmiMemory {
                    namespace: vmi.namespace().unwrap_or_default(),
                    name: vmi.name_any(),
                    memory,
                })
            })
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// Serves `GET /metrics` on [`METRICS_PORT`] until the process ends.
pub async fn serve(client: Client, node: String) {
    let addr = SocketAddr::from(([0, 0, 0, 0], METRICS_PORT));
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            log::warn!("metrics: cannot listen on {addr}: {e}");
            return;
        }
    };
    let paths = HostPaths::detect();
    match &paths.memory {
        Some(memory) => log::info!(
            "metrics on http://{addr}/metrics (memory cgroups {:?} in {})",
            memory.version,
            memory.root.display()
        ),
        None => log::warn!(
            "metrics on http://{addr}/metrics, without launcher memory: no memory cgroup \
             hierarchy in {HOST_CGROUP} or /sys/fs/cgroup"
        ),
    }
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let (client, node, paths) = (client.clone(), node.clone(), paths.clone());
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let n = stream.read(&mut request).await.unwrap_or(0);
            let response = if is_get_metrics(&request[..n]) {
                let mut body = encode(&node, &collect(&client, &node, &paths).await);
                body.push_str(&api::client_metrics::encode());
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; \
                     charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
            };
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

fn is_get_metrics(request: &[u8]) -> bool {
    let line = request.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    matches!(
        (parts.next(), parts.next()),
        (Some("GET"), Some(path)) if path == "/metrics" || path.starts_with("/metrics?")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cgroup::Version;

    const SMAPS: &str = "\
55d0c0000000-55d0c0200000 r-xp 00000000 08:01 1234 /usr/bin/qemu-system-x86_64
Size:               2048 kB
Rss:                1500 kB
7f0000000000-7f0008000000 rw-p 00000000 00:00 0 
Size:             131072 kB
Rss:               40000 kB
7f1000000000-7f1040000000 rwxp 00000000 00:00 0 
Size:            1048576 kB
Rss:               20000 kB
7f2000000000-7f2000800000 rw-p 00000000 00:00 0 
Size:               8192 kB
Rss:                 100 kB
7f3000000000-7f3008000000 rw-s 00000000 00:05 99 /dev/shm/other
Size:             131072 kB
Rss:              131072 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Rss:                  32 kB
";

    #[test]
    fn the_guest_mapping_is_the_anonymous_one_of_guest_size() {
        assert_eq!(guest_resident(SMAPS, 128 << 20), 40000 * 1024);
        // No mapping of that size: nothing is counted as guest memory.
        assert_eq!(guest_resident(SMAPS, 512 << 20), 0);
        assert_eq!(guest_resident("", 128 << 20), 0);
    }

    /// A host's cgroup tree of `version` holding one launcher Pod `uid` with 10 MiB used, 1 MiB
    /// of it inactive page cache, and one process with [`SMAPS`]; the tree and its `HostPaths`.
    fn host_with_one_launcher(version: Version, uid: &str) -> (tempfile::TempDir, HostPaths) {
        let host = tempfile::tempdir().unwrap();
        let mount = host.path().join("sys/fs/cgroup");
        let (hierarchy, usage, inactive) = match version {
            Version::V1 => {
                std::fs::create_dir_all(mount.join("cpu")).unwrap();
                let memory = mount.join("memory");
                (memory, "memory.usage_in_bytes", "total_inactive_file")
            }
            Version::V2 => (mount.clone(), "memory.current", "inactive_file"),
        };
        let pod = hierarchy
            .join("kubepods/burstable")
            .join(format!("pod{uid}"));
        std::fs::create_dir_all(pod.join("container1")).unwrap();
        std::fs::create_dir_all(hierarchy.join("kubepods/besteffort/podother")).unwrap();
        if version == Version::V2 {
            std::fs::write(mount.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        }
        std::fs::write(pod.join(usage), "10485760\n").unwrap();
        std::fs::write(
            pod.join("memory.stat"),
            format!("anon 1\n{inactive} 1048576\n"),
        )
        .unwrap();
        std::fs::write(pod.join("cgroup.procs"), "").unwrap();
        std::fs::write(pod.join("container1/cgroup.procs"), "4242\n").unwrap();
        let proc = host.path().join("proc");
        std::fs::create_dir_all(proc.join("4242")).unwrap();
        std::fs::write(proc.join("4242/smaps"), SMAPS).unwrap();
        let paths = HostPaths {
            memory: MemoryHierarchy::of(&mount),
            proc,
        };
        assert_eq!(paths.memory.as_ref().map(|m| m.version), Some(version));
        (host, paths)
    }

    #[test]
    fn a_launcher_is_measured_on_cgroup_v1_and_v2_alike() {
        let uid = "0c2b9f6e-1111-2222-3333-444455556666";
        for version in [Version::V1, Version::V2] {
            let (_host, paths) = host_with_one_launcher(version, uid);
            let memory = launcher_memory(&paths, uid, 128 << 20).unwrap();
            assert_eq!(
                memory,
                LauncherMemory {
                    usage: 10 << 20,
                    working_set: 9 << 20,
                    guest_resident: 40000 * 1024,
                },
                "{version:?}"
            );
            assert_eq!(memory.overhead(), (9 << 20) - 40000 * 1024);
            assert_eq!(launcher_memory(&paths, "missing", 128 << 20), None);
        }
    }

    #[test]
    fn without_a_memory_hierarchy_nothing_is_measured() {
        let paths = HostPaths {
            memory: None,
            proc: PathBuf::from("/proc"),
        };
        assert_eq!(launcher_memory(&paths, "any", 128 << 20), None);
    }

    #[test]
    fn guest_memory_comes_from_the_spec() {
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v"},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}},
        }))
        .unwrap();
        assert_eq!(guest_memory_bytes(&vmi), Some(128 << 20));
    }

    #[test]
    fn the_gauges_are_encoded_per_vmi() {
        let text = encode(
            "node1",
            &[VmiMemory {
                namespace: "ns".into(),
                name: "a\"b".into(),
                memory: LauncherMemory {
                    usage: 50,
                    working_set: 40,
                    guest_resident: 30,
                },
            }],
        );
        assert!(text.contains("# TYPE kubevirt_vmi_launcher_memory_overhead_bytes gauge\n"));
        assert!(text.contains(
            "kubevirt_vmi_launcher_memory_overhead_bytes{namespace=\"ns\",name=\"a\\\"b\",node=\"node1\"} 10\n"
        ));
        assert!(text.contains(
            "ferrovirt_vmi_launcher_memory_working_set_bytes{namespace=\"ns\",name=\"a\\\"b\",node=\"node1\"} 40\n"
        ));
        assert!(text.contains(
            "ferrovirt_vmi_guest_memory_resident_bytes{namespace=\"ns\",name=\"a\\\"b\",node=\"node1\"} 30\n"
        ));
    }

    #[test]
    fn only_get_metrics_is_served() {
        assert!(is_get_metrics(b"GET /metrics HTTP/1.1\r\n\r\n"));
        assert!(!is_get_metrics(b"GET /healthz HTTP/1.1\r\n\r\n"));
        assert!(!is_get_metrics(b"PUT /metrics HTTP/1.1\r\n\r\n"));
        assert!(!is_get_metrics(b""));
    }
}
