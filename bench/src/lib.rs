//! Shared pieces of the benchmarks: order statistics, the kube-apiserver's request counters, and
//! the CPU and memory of processes sampled from `/proc`.
#![forbid(unsafe_code)]

pub mod pod_floor;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The `p`-th percentile (0..=100) of `values` by the nearest-rank method; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median (the lower middle value for an even count, as nearest-rank P50).
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// `apiserver_request_total` summed over everything but verb, group, resource and subresource.
pub type RequestCounts = BTreeMap<RequestKey, f64>;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestKey {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
}

impl std::fmt::Display for RequestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {}/{}", self.verb, group, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        Ok(())
    }
}

/// Parses the `apiserver_request_total` samples of a Prometheus text page.
pub fn parse_request_counts(metrics: &str) -> RequestCounts {
    let mut counts = RequestCounts::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(labels);
        let get = |name: &str| labels.get(name).cloned().unwrap_or_default();
        let key = RequestKey {
            verb: get("verb"),
            group: get("group"),
            resource: get("resource"),
            subresource: get("subresource"),
        };
        *counts.entry(key).or_default() += value;
    }
    counts
}

/// `a="x",b="y"` -> {a: x, b: y} (values unescaped).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.chars().peekable();
    loop {
        let name: String = chars
            .by_ref()
            .skip_while(|c| *c == ',' || c.is_whitespace())
            .take_while(|c| *c != '=')
            .collect();
        if name.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        labels.insert(name, value);
    }
    labels
}

/// `after - before`, only the keys that changed.
pub fn request_delta(before: &RequestCounts, after: &RequestCounts) -> RequestCounts {
    after
        .iter()
        .filter_map(|(key, value)| {
            let delta = value - before.get(key).copied().unwrap_or(0.0);
            (delta > 0.0).then(|| (key.clone(), delta))
        })
        .collect()
}

/// KubeVirt's density thresholds (`tests/performance/density.go`): PATCH and PUT (the
/// apiserver's UPDATE) of VMIs, any subresource, per Pod created, and creation -> Running P50
/// and P95 in seconds.
pub const KUBEVIRT_PATCH_VMI_PER_POD: f64 = 2.0;
pub const KUBEVIRT_UPDATE_VMI_PER_POD: f64 = 10.0;
pub const KUBEVIRT_RUNNING_P50_S: f64 = 45.0;
pub const KUBEVIRT_RUNNING_P95_S: f64 = 60.0;

/// (PATCH VMI, PUT VMI) per Pod created, as KubeVirt's density audit counts them: `None` when no
/// Pod was created.
pub fn vmi_writes_per_pod_created(delta: &RequestCounts) -> Option<(f64, f64)> {
    let sum = |f: &dyn Fn(&RequestKey) -> bool| -> f64 {
        delta.iter().filter(|(k, _)| f(k)).map(|(_, c)| c).sum()
    };
    let vmi = |verb: &str, k: &RequestKey| {
        k.verb == verb && k.group == "kubevirt.io" && k.resource == "virtualmachineinstances"
    };
    let pods = sum(&|k| {
        k.verb == "POST" && k.group.is_empty() && k.resource == "pods" && k.subresource.is_empty()
    });
    (pods > 0.0).then(|| {
        (
            sum(&|k| vmi("PATCH", k)) / pods,
            sum(&|k| vmi("PUT", k)) / pods,
        )
    })
}

/// Who writes a resource in a VMI's start, on this cluster: Ferrovirt's components or
/// Kubernetes' own (the kubelet writes Pod status, the scheduler binds Pods).
pub fn writer_of(key: &RequestKey) -> &'static str {
    match (
        key.group.as_str(),
        key.resource.as_str(),
        key.subresource.as_str(),
    ) {
        ("kubevirt.io", "virtualmachineinstances", _) => {
            "ferrovirt (virt-controller, virt-handler)"
        }
        ("", "pods", "status") => "kubelet",
        ("", "pods", "binding") => "kube-scheduler",
        ("", "pods", "") => "ferrovirt (virt-controller)",
        ("", "events", _) | ("events.k8s.io", "events", _) => "ferrovirt and kubelet (events)",
        _ => "other",
    }
}

/// Whether a verb writes.
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "POST" | "PUT" | "PATCH" | "DELETE" | "APPLY" | "UPDATE" | "CREATE"
    )
}

/// The PIDs whose `comm` is `name`, under `proc`.
pub fn pids_named(proc: &Path, name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(proc.join(pid.to_string()).join("comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// CPU time (utime + stime, in clock ticks) from a `/proc/PID/stat` line.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the command: state is field 3, utime field 14, stime field 15 (1-based).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// `VmRSS` in bytes from a `/proc/PID/status` text.
pub fn rss_bytes(status: &str) -> Option<u64> {
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = kib.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// CPU and memory of a set of processes, sampled while a benchmark runs.
#[derive(Debug)]
pub struct ProcessSampler {
    pids: Vec<u32>,
    start: Instant,
    start_ticks: u64,
    rss_samples: Vec<u64>,
}

/// Clock ticks per second of `/proc/PID/stat` (`getconf CLK_TCK`; 100 on Linux x86-64).
pub const CLK_TCK: f64 = 100.0;

impl ProcessSampler {
    pub fn start(pids: Vec<u32>) -> ProcessSampler {
        let start_ticks = Self::ticks(&pids);
        let mut sampler = ProcessSampler {
            pids,
            start: Instant::now(),
            start_ticks,
            rss_samples: Vec::new(),
        };
        sampler.sample();
        sampler
    }

    fn ticks(pids: &[u32]) -> u64 {
        pids.iter()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
            .filter_map(|stat| cpu_ticks(&stat))
            .sum()
    }

    /// Records the processes' summed RSS now.
    pub fn sample(&mut self) {
        let rss = self
            .pids
            .iter()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .filter_map(|status| rss_bytes(&status))
            .sum();
        self.rss_samples.push(rss);
    }

    /// (average CPU in cores, average RSS in bytes, wall time) since the start.
    pub fn finish(mut self) -> (f64, f64, Duration) {
        self.sample();
        let wall = self.start.elapsed();
        let cpu = (Self::ticks(&self.pids).saturating_sub(self.start_ticks)) as f64 / CLK_TCK;
        let rss = self.rss_samples.iter().sum::<u64>() as f64 / self.rss_samples.len() as f64;
        (cpu / wall.as_secs_f64().max(1e-9), rss, wall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 95.0), Some(95.0));
        assert_eq!(percentile(&values, 100.0), Some(100.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn request_counters_are_summed_by_verb_and_resource() {
        let page = r#"# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubevirt.io",resource="virtualmachineinstances",scope="resource",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kubevirt.io",resource="virtualmachineinstances",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_duration_seconds_bucket{verb="GET",le="1"} 5
"#;
        let counts = parse_request_counts(page);
        let status = RequestKey {
            verb: "PATCH".into(),
            group: "kubevirt.io".into(),
            resource: "virtualmachineinstances".into(),
            subresource: "status".into(),
        };
        assert_eq!(counts[&status], 9.0);
        assert_eq!(counts.len(), 2);
        assert_eq!(
            status.to_string(),
            "PATCH kubevirt.io/virtualmachineinstances/status"
        );

        let mut later = counts.clone();
        *later.get_mut(&status).unwrap() += 4.0;
        let delta = request_delta(&counts, &later);
        assert_eq!(delta.len(), 1);
        assert_eq!(delta[&status], 4.0);
        assert!(writer_of(&status).starts_with("ferrovirt"));
    }

    #[test]
    fn vmi_writes_are_counted_per_pod_created() {
        let key = |verb: &str, group: &str, resource: &str, subresource: &str| RequestKey {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
        };
        let mut delta = RequestCounts::new();
        assert_eq!(vmi_writes_per_pod_created(&delta), None);
        delta.insert(key("POST", "", "pods", ""), 10.0);
        delta.insert(key("POST", "", "pods", "binding"), 10.0);
        delta.insert(
            key("PATCH", "kubevirt.io", "virtualmachineinstances", ""),
            15.0,
        );
        delta.insert(
            key("PATCH", "kubevirt.io", "virtualmachineinstances", "status"),
            3.0,
        );
        delta.insert(
            key("PUT", "kubevirt.io", "virtualmachineinstances", "status"),
            42.0,
        );
        delta.insert(key("PUT", "kubevirt.io", "virtualmachines", "status"), 99.0);
        delta.insert(key("PATCH", "", "pods", ""), 99.0);
        assert_eq!(vmi_writes_per_pod_created(&delta), Some((1.8, 4.2)));
    }

    #[test]
    fn label_values_are_unescaped() {
        let labels = parse_labels(r#"a="x\"y",b="line\nnext",c="""#);
        assert_eq!(labels["a"], "x\"y");
        assert_eq!(labels["b"], "line\nnext");
        assert_eq!(labels["c"], "");
    }

    #[test]
    fn proc_fields() {
        let stat = "42 (virt handler) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 \
                    1000 100000 500 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(cpu_ticks("garbage"), None);
        assert_eq!(rss_bytes("Name:\tx\nVmRSS:\t    2048 kB\n"), Some(2 << 20));
        assert_eq!(rss_bytes("Name:\tx\n"), None);
    }

    #[test]
    fn own_process_is_found_and_sampled() {
        let me = std::process::id();
        let comm = std::fs::read_to_string(format!("/proc/{me}/comm")).unwrap();
        assert!(pids_named(Path::new("/proc"), comm.trim()).contains(&me));
        let sampler = ProcessSampler::start(vec![me]);
        let (_cpu, rss, _wall) = sampler.finish();
        assert!(rss > 0.0);
    }
}
