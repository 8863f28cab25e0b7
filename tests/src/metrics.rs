//! The components' Prometheus metrics, scraped through the API server's Pod proxy as Prometheus
//! would reach them on the Pod network, and a node's memory cgroup files read by a Pod of the
//! test's own, to hold virt-handler's figures against.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::wait_for;

/// The port every component serves `/metrics` on (plain HTTP).
pub const METRICS_PORT: u16 = 8080;

/// The value of the sample whose line starts with `prefix` (name and labels).
pub fn sample(page: &str, prefix: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// `GET /metrics` of Pod `pod` in the `kubevirt` namespace.
pub async fn scrape(client: &Client, pod: &str) -> Result<String, String> {
    let path = format!("/api/v1/namespaces/kubevirt/pods/{pod}:{METRICS_PORT}/proxy/metrics");
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client
        .request_text(request)
        .await
        .map_err(|e| e.to_string())
}

/// The Running Pod of `component` (on `node` when given).
pub async fn component_pod(client: &Client, component: &str, node: Option<&str>) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kubevirt");
    let mut params = ListParams::default().labels(&format!("kubevirt.io={component}"));
    if let Some(node) = node {
        params = params.fields(&format!("spec.nodeName={node}"));
    }
    let list = pods.list(&params).await.expect("list component pods");
    list.items
        .iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .map(|p| p.name_any())
        .unwrap_or_else(|| panic!("no Running {component} Pod (node {node:?})"))
}

/// What a node's cgroup files say of one Pod's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCgroupMemory {
    /// 1 or 2, from the node's `/sys/fs/cgroup`.
    pub version: u8,
    /// The Pod's cgroup, relative to the hierarchy's root.
    pub path: String,
    /// `memory.current` (v2) or `memory.usage_in_bytes` (v1).
    pub usage: u64,
    /// `inactive_file` (v2) or `total_inactive_file` (v1) of `memory.stat`.
    pub inactive_file: u64,
}

impl PodCgroupMemory {
    pub fn working_set(&self) -> u64 {
        self.usage.saturating_sub(self.inactive_file)
    }

    /// Parses the helper Pod's output: `version=`, `path=`, `usage=` and `inactive_file=`
    /// lines.
    pub fn parse(output: &str) -> Result<PodCgroupMemory, String> {
        let field = |key: &str| {
            output
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("no {key}= line in the cgroup reader's output:\n{output}"))
        };
        let number = |key: &str| {
            field(key)?
                .parse::<u64>()
                .map_err(|e| format!("{key}: {e} in:\n{output}"))
        };
        Ok(PodCgroupMemory {
            version: number("version")? as u8,
            path: field("path")?.to_string(),
            usage: number("usage")?,
            inactive_file: number("inactive_file")?,
        })
    }
}

/// The script of the cgroup reader: the node's cgroup tree is at /host.
fn cgroup_reader_script(pod_uid: &str) -> String {
    let dir_names = format!(
        "'pod{pod_uid}' -o -name '*pod{}.slice'",
        pod_uid.replace('-', "_")
    );
    format!(
        r#"set -e
if [ -f /host/cgroup.controllers ]; then
  echo version=2; root=/host; usage=memory.current; inactive=inactive_file
elif [ -d /host/memory ]; then
  echo version=1; root=/host/memory; usage=memory.usage_in_bytes; inactive=total_inactive_file
else
  echo "no memory cgroup hierarchy in the node's /sys/fs/cgroup" >&2; exit 1
fi
dir=$(find "$root" -maxdepth 7 -type d \( -name {dir_names} \) | head -n 1)
[ -n "$dir" ] || {{ echo "no cgroup of Pod {pod_uid} under $root" >&2; exit 1; }}
echo "path=${{dir#"$root"}}"
echo "usage=$(cat "$dir/$usage")"
echo "inactive_file=$(awk -v k="$inactive" '$1 == k {{ print $2 }}' "$dir/memory.stat")"
"#
    )
}

/// Reads the memory cgroup files of Pod `pod_uid` on `node` with a busybox Pod of the test's
/// own, `name` (in `namespace`, the node's cgroup tree mounted read-only, `tolerations` to get
/// there).
pub async fn pod_cgroup_memory(
    client: &Client,
    (namespace, name): (&str, &str),
    node: &str,
    pod_uid: &str,
    tolerations: serde_json::Value,
) -> Result<PodCgroupMemory, String> {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": tolerations,
            "containers": [{
                "name": "read",
                "image": crate::BUSYBOX_IMAGE,
                "command": ["sh", "-c", cgroup_reader_script(pod_uid)],
                "volumeMounts": [{"name": "cgroup", "mountPath": "/host", "readOnly": true}],
            }],
            "volumes": [{"name": "cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}}],
        }
    }))
    .map_err(|e| e.to_string())?;
    let logs = crate::run_pod(client, namespace, pod).await?;
    PodCgroupMemory::parse(&logs)
}

/// virt-handler's figures for one VMI, held against its launcher Pod's cgroup files.
#[derive(Clone, Debug)]
pub struct LauncherMemoryCheck {
    pub overhead: f64,
    pub guest_resident: f64,
    /// virt-handler's working set, scraped just before and just after the files were read.
    pub handler_working_set: [f64; 2],
    pub files: PodCgroupMemory,
    /// Which round of reads this was.
    pub rounds: usize,
}

impl LauncherMemoryCheck {
    /// How far virt-handler's working set is from the files', as a fraction of the files'
    /// (the closer of the two scrapes: the Pod's memory moves between the reads).
    pub fn deviation(&self) -> f64 {
        let files = self.files.working_set() as f64;
        self.handler_working_set
            .iter()
            .map(|h| (h - files).abs() / files.max(1.0))
            .fold(f64::INFINITY, f64::min)
    }
}

const MIB: f64 = (1u64 << 20) as f64;

impl LauncherMemoryCheck {
    /// One line for a test's output: the figures in MiB and the deviation.
    pub fn summary(&self) -> String {
        format!(
            "overhead {:.1} MiB, guest resident {:.1} MiB, working set {:.1}/{:.1} MiB \
             (virt-handler, before/after) against {:.1} MiB in cgroup v{} {} (usage {} - \
             inactive file {}): {:.1}% off, round {}",
            self.overhead / MIB,
            self.guest_resident / MIB,
            self.handler_working_set[0] / MIB,
            self.handler_working_set[1] / MIB,
            self.files.working_set() as f64 / MIB,
            self.files.version,
            self.files.path,
            self.files.usage,
            self.files.inactive_file,
            self.deviation() * 100.0,
            self.rounds
        )
    }

    /// Asserts that the node's cgroups are `version` (`why` says why it must be), that
    /// virt-handler's working set is within `tolerance` of the files', and that the launcher
    /// costs something beyond the guest.
    pub fn assert_holds(&self, version: u8, why: &str, tolerance: f64) {
        assert_eq!(self.files.version, version, "{why}");
        assert!(
            self.deviation() <= tolerance,
            "virt-handler's working set is more than {:.0}% off the cgroup files: {self:?}",
            tolerance * 100.0
        );
        assert!(self.overhead > 0.0, "{self:?}");
    }
}

/// One scrape of virt-handler's three launcher gauges for `labels`: (overhead, working set,
/// guest resident), once the guest's RAM shows.
async fn launcher_gauges(client: &Client, handler: &str, labels: &str) -> (f64, f64, f64) {
    wait_for(
        "virt-handler's launcher memory gauges of the VMI",
        Duration::from_secs(120),
        || async {
            let page = scrape(client, handler).await.ok()?;
            let overhead = sample(
                &page,
                &format!("kubevirt_vmi_launcher_memory_overhead_bytes{labels}"),
            )?;
            let working_set = sample(
                &page,
                &format!("ferrovirt_vmi_launcher_memory_working_set_bytes{labels}"),
            )?;
            let guest = sample(
                &page,
                &format!("ferrovirt_vmi_guest_memory_resident_bytes{labels}"),
            )?;
            (guest > 0.0).then_some((overhead, working_set, guest))
        },
    )
    .await
}

/// How many times [`check_launcher_memory`] reads while the Pod's memory is still moving.
const ROUNDS: usize = 8;

/// Scrapes virt-handler on `node` for VMI `namespace/vmi` (launcher Pod `pod_uid`), reads the
/// Pod's cgroup files there with a Pod of the test's own, and scrapes again. While a guest
/// boots its memory grows between the reads: the round is repeated (up to [`ROUNDS`] times,
/// 5 s apart) until the files are within `tolerance` of a scrape; the last round is returned.
pub async fn check_launcher_memory(
    client: &Client,
    namespace: &str,
    node: &str,
    vmi: &str,
    pod_uid: &str,
    tolerations: serde_json::Value,
    tolerance: f64,
) -> LauncherMemoryCheck {
    let handler = component_pod(client, "virt-handler", Some(node)).await;
    let labels = format!("{{namespace=\"{namespace}\",name=\"{vmi}\",node=\"{node}\"}}");
    let mut round = 0;
    loop {
        round += 1;
        let (overhead, before, guest_resident) = launcher_gauges(client, &handler, &labels).await;
        let reader = format!("cgroup-reader-{round}");
        let files = pod_cgroup_memory(
            client,
            (namespace, &reader),
            node,
            pod_uid,
            tolerations.clone(),
        )
        .await
        .unwrap_or_else(|e| panic!("reading the cgroup files of Pod {pod_uid} on {node}: {e}"));
        let (_, after, _) = launcher_gauges(client, &handler, &labels).await;
        let check = LauncherMemoryCheck {
            overhead,
            guest_resident,
            handler_working_set: [before, after],
            files,
            rounds: round,
        };
        if check.deviation() <= tolerance || round >= ROUNDS {
            return check;
        }
        println!("launcher memory still moving (round {round}): {check:?}");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_found_by_name_and_labels() {
        let page = "# TYPE a gauge\na{x=\"1\"} 12\na{x=\"2\"} -3.5\n";
        assert_eq!(sample(page, "a{x=\"1\"}"), Some(12.0));
        assert_eq!(sample(page, "a{x=\"2\"}"), Some(-3.5));
        assert_eq!(sample(page, "b"), None);
    }

    #[test]
    fn the_deviation_is_the_closer_scrapes() {
        let check = LauncherMemoryCheck {
            overhead: 0.0,
            guest_resident: 0.0,
            handler_working_set: [1200.0, 950.0],
            files: PodCgroupMemory {
                version: 2,
                path: "/p".into(),
                usage: 1100,
                inactive_file: 100,
            },
            rounds: 1,
        };
        assert!(
            (check.deviation() - 0.05).abs() < 1e-9,
            "{}",
            check.deviation()
        );
    }

    #[test]
    fn the_cgroup_readers_output_is_parsed_or_refused() {
        let read = PodCgroupMemory::parse(
            "version=2\npath=/kubepods/burstable/podx\nusage=1000\ninactive_file=200\n",
        )
        .unwrap();
        assert_eq!(read.version, 2);
        assert_eq!(read.path, "/kubepods/burstable/podx");
        assert_eq!(read.working_set(), 800);
        let missing = PodCgroupMemory::parse("version=2\npath=/p\nusage=1000\ninactive_file=\n");
        assert!(missing.unwrap_err().contains("no inactive_file= line"));
        assert!(PodCgroupMemory::parse("version=2\npath=/p\nusage=x\ninactive_file=1\n").is_err());
    }

    #[test]
    fn the_reader_finds_a_pod_in_a_v2_tree() {
        let host = tempfile::tempdir().unwrap();
        let uid = "0c2b9f6e-1111-2222-3333-444455556666";
        let pod = host.path().join(format!("kubepods/burstable/pod{uid}"));
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::write(host.path().join("cgroup.controllers"), "memory\n").unwrap();
        std::fs::write(pod.join("memory.current"), "5000\n").unwrap();
        std::fs::write(pod.join("memory.stat"), "anon 1\ninactive_file 1500\n").unwrap();
        let script = cgroup_reader_script(uid).replace("/host", &host.path().to_string_lossy());
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let read = PodCgroupMemory::parse(&text).unwrap();
        assert_eq!(read.version, 2);
        assert_eq!(read.path, format!("/kubepods/burstable/pod{uid}"));
        assert_eq!((read.usage, read.inactive_file), (5000, 1500));
    }
}
