//! Faults for the chaos test (`tests/tests/chaos.rs`): SIGKILL to a component's processes, found
//! by name on the host (the Pods share its pid namespace), with the wait until the kubelet has
//! restarted their containers; SIGKILL to a control-plane daemon of `cluster.sh` and its restart
//! with `cluster.sh up`; the VMI uids of the launcher processes on the host.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::sigkill;

/// Where `cluster.sh` keeps its daemons' pid files.
pub const CLUSTER_RUN: &str = "/var/lib/ferrovirt-cluster/run";

/// The pids of the processes whose name is `comm` (the Pods share the host's pid namespace),
/// only those whose `NODE_NAME` (the downward API's, which the components get) is `node` when
/// given.
pub fn component_pids(comm: &str, node: Option<&str>) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("reading /proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let dir = entry.path();
        let named = std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim_end() == comm);
        if !named || !alive(pid) {
            continue;
        }
        if let Some(node) = node {
            let wanted = format!("NODE_NAME={node}");
            let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
            if !environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes()) {
                continue;
            }
        }
        pids.push(pid);
    }
    pids
}

/// Whether `pid` runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(") ")?;
            Some(!rest.starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

/// The restart count of each Pod of component `app` (label `kubevirt.io`), on `node` when given.
pub async fn restart_counts(
    client: &Client,
    app: &str,
    node: Option<&str>,
) -> BTreeMap<String, i32> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kubevirt");
    let list = pods
        .list(&ListParams::default().labels(&format!("kubevirt.io={app}")))
        .await
        .expect("the component's Pods");
    list.items
        .into_iter()
        .filter(|p| node.is_none() || p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == node)
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| c.restart_count).sum())
                .unwrap_or(0);
            (p.name_any(), restarts)
        })
        .collect()
}

/// Ferrovirt's components, by the name of their process and their Pods' `kubevirt.io` label.
pub const COMPONENTS: &[&str] = &[
    "virt-controller",
    "virt-handler",
    "virt-api",
    "virt-operator",
];

/// The restart count of every component Pod.
pub async fn all_restart_counts(client: &Client) -> BTreeMap<String, i32> {
    let mut all = BTreeMap::new();
    for app in COMPONENTS {
        all.extend(restart_counts(client, app, None).await);
    }
    all
}

/// The component Pods that restarted between `before` and now, with how often.
pub async fn restarted_since(client: &Client, before: &BTreeMap<String, i32>) -> String {
    let now = all_restart_counts(client).await;
    let restarted: Vec<String> = now
        .iter()
        .filter_map(|(pod, n)| {
            let more = n - before.get(pod).copied().unwrap_or(0);
            (more > 0).then(|| format!("{pod} +{more}"))
        })
        .collect();
    if restarted.is_empty() {
        "no component restarted".into()
    } else {
        format!("component restarts meanwhile: {}", restarted.join(", "))
    }
}

/// Waits until every Pod of `before` has restarted its container and is Ready again.
pub async fn wait_restarted(client: &Client, before: &BTreeMap<String, i32>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kubevirt");
    for (name, restarts) in before {
        let back = tokio::time::timeout(Duration::from_secs(180), async {
            loop {
                if let Ok(pod) = pods.get(name).await {
                    if restarted_and_ready(&pod, *restarts) {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        if back.is_err() {
            panic!(
                "{name} was not restarted and Ready within 180 s: {}",
                why_not_back(client, &pods, name).await
            );
        }
    }
}

/// Whether `pod`'s containers restarted more than `restarts` times in all and it is Ready.
fn restarted_and_ready(pod: &Pod, restarts: i32) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    let now: i32 = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| c.restart_count)
        .sum();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    now > restarts && ready
}

/// What the API says about Pod `name` and its node: its phase, reason and message, each
/// container's state, and the node's conditions that are True (pressure, not Ready aside).
async fn why_not_back(client: &Client, pods: &Api<Pod>, name: &str) -> String {
    let pod = match pods.get(name).await {
        Ok(pod) => pod,
        Err(e) => return format!("the Pod is gone ({e})"),
    };
    let status = pod.status.unwrap_or_default();
    let containers: Vec<String> = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| {
            format!(
                "{} restarts {} state {:?}",
                c.name, c.restart_count, c.state
            )
        })
        .collect();
    let node = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
    let conditions = match Api::<Node>::all(client.clone()).get(&node).await {
        Ok(n) => n
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| (c.type_ == "Ready") != (c.status == "True"))
            .map(|c| {
                format!(
                    "{}={} ({})",
                    c.type_,
                    c.status,
                    c.message.unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("unknown ({e})"),
    };
    format!(
        "phase {:?}, reason {:?}, message {:?}; containers: {}; node {node}: {}",
        status.phase,
        status.reason,
        status.message,
        containers.join("; "),
        if conditions.is_empty() {
            "no pressure, Ready".into()
        } else {
            conditions
        }
    )
}

/// Kills every process of component `comm` (on `node` when given) and waits until the kubelet
/// has restarted its Pods' containers. Returns how many processes died and how long the
/// component took to come back.
pub async fn kill_component(client: &Client, comm: &str, node: Option<&str>) -> (usize, Duration) {
    let before = restart_counts(client, comm, node).await;
    assert!(!before.is_empty(), "no {comm} Pod (on {node:?})");
    let pids = component_pids(comm, node);
    assert!(!pids.is_empty(), "no {comm} process (on {node:?})");
    let started = Instant::now();
    sigkill(&pids);
    wait_restarted(client, &before).await;
    (pids.len(), started.elapsed())
}

/// The pid of control-plane daemon `daemon` (`cluster.sh`'s pid file).
pub fn daemon_pid(daemon: &str) -> u32 {
    let path = Path::new(CLUSTER_RUN).join(format!("{daemon}.pid"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{daemon} is not running ({}: {e})", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Kills control-plane daemon `daemon`, leaves it dead for `down`, and starts it again with
/// `cluster.sh up`. Returns how long `up` took.
pub fn kill_daemon(daemon: &str, down: Duration) -> Duration {
    let pid = daemon_pid(daemon);
    assert!(alive(pid), "{daemon} (pid {pid}) is not running");
    sigkill(&[pid]);
    let dead_by = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < dead_by, "{daemon} outlived SIGKILL");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(down);
    let started = Instant::now();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/cluster/cluster.sh");
    let out = std::process::Command::new("bash")
        .args([script, "up"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {script} up: {e}"));
    assert!(
        out.status.success(),
        "cluster.sh up did not bring {daemon} back: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        alive(daemon_pid(daemon)),
        "{daemon} is not running after up"
    );
    started.elapsed()
}

/// The VMI uids of the virt-launcher processes on this host.
pub fn launcher_uids() -> BTreeSet<String> {
    let mut uids = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").expect("reading /proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let launcher = args.first().is_some_and(|a| a.ends_with(b"virt-launcher"));
        if !launcher {
            continue;
        }
        if let Some(at) = args.iter().position(|a| *a == b"--uid") {
            if let Some(uid) = args.get(at + 1) {
                uids.insert(String::from_utf8_lossy(uid).into_owned());
            }
        }
    }
    uids
}
