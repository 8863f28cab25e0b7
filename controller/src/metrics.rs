//! virt-controller's Prometheus metrics, with KubeVirt's names, served as text (exposition format
//! 0.0.4) on `GET /metrics`, plain HTTP on [`METRICS_PORT`].
//!
//! `kubevirt_vmi_phase_transition_time_from_creation_seconds{phase}` is a histogram with
//! KubeVirt's buckets of how long after its creation a VMI reached each phase. As in KubeVirt it
//! is fed from a watch of all VMIs:
//! 1. the initial listing only records which phase transitions already exist (a restarted
//!    controller does not count a VMI twice);
//! 2. afterwards, every entry of `status.phaseTransitionTimestamps` not seen before for that VMI
//!    is observed once as `phaseTransitionTimestamp - metadata.creationTimestamp` (floored at 0,
//!    as KubeVirt does for clock skew);
//! 3. a deleted VMI is forgotten.
//!
//! Both timestamps have one-second resolution (Kubernetes' `metav1.Time`), so are the figures.
//! `kubevirt_vmi_phase_transition_time_from_deletion_seconds{phase}` is its twin for a deleted
//! VMI's end: a new transition to `Succeeded` or `Failed` at or after the VMI's
//! `deletionTimestamp` is observed as the time since that deletion.
//!
//! `kubevirt_vmi_phase_count{node,phase,os,workload,flavor,instance_type,preference}` is a gauge
//! of the VMIs the same watch knows, by their current phase (lower case, as KubeVirt writes it),
//! node, the `vm.kubevirt.io/{os,workload,flavor}` annotations and the instance type and
//! preference annotations (`<none>` where absent, as in KubeVirt).
//!
//! The body also carries `kubevirt_rest_client_requests_total`, this process's API
//! requests ([`api::client_metrics`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use api::prometheus_text::encode_labels;
use api::{VirtualMachineInstance, VmiPhase};
use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Where `/metrics` is served (plain HTTP).
pub const METRICS_PORT: u16 = 8080;

pub const PHASE_TRANSITION_FROM_CREATION: &str =
    "kubevirt_vmi_phase_transition_time_from_creation_seconds";
pub const PHASE_TRANSITION_FROM_DELETION: &str =
    "kubevirt_vmi_phase_transition_time_from_deletion_seconds";
pub const PHASE_COUNT: &str = "kubevirt_vmi_phase_count";

/// KubeVirt's buckets for phase transition times, in seconds.
pub const PHASE_TRANSITION_BUCKETS: [f64; 18] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0,
    1200.0, 1800.0, 3600.0,
];

/// A Prometheus histogram with fixed upper bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last one is `+Inf`.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Appends the `_bucket`, `_sum` and `_count` lines of this histogram with `labels`.
    fn encode(&self, name: &str, labels: &[(&str, &str)], out: &mut String) {
        let labels = encode_labels(labels);
        let mut cumulative = 0;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count;
            let le = match self.bounds.get(i) {
                Some(bound) => bound.to_string(),
                None => "+Inf".to_string(),
            };
            let sep = if labels.is_empty() { "" } else { "," };
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// The labels of one series of [`PHASE_COUNT`], in KubeVirt's order.
pub type PhaseCountLabels = [(&'static str, String); 7];

/// `vmi`'s series of [`PHASE_COUNT`].
pub fn phase_count_labels(vmi: &VirtualMachineInstance) -> PhaseCountLabels {
    let annotations = vmi.metadata.annotations.as_ref();
    // The first of `keys` the VMI has, or KubeVirt's `<none>`.
    let annotation = |keys: &[&str]| {
        keys.iter()
            .find_map(|key| annotations.and_then(|a| a.get(*key)).cloned())
            .unwrap_or_else(|| "<none>".to_string())
    };
    let status = vmi.status.as_ref();
    [
        (
            "node",
            status.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        ),
        (
            "phase",
            status
                .and_then(|s| s.phase)
                .map(|p| p.as_str().to_lowercase())
                .unwrap_or_default(),
        ),
        ("os", annotation(&["vm.kubevirt.io/os"])),
        ("workload", annotation(&["vm.kubevirt.io/workload"])),
        ("flavor", annotation(&["vm.kubevirt.io/flavor"])),
        (
            "instance_type",
            annotation(&[
                api::instancetype::ANNOTATION_INSTANCETYPE,
                api::instancetype::ANNOTATION_CLUSTER_INSTANCETYPE,
            ]),
        ),
        (
            "preference",
            annotation(&[
                api::instancetype::ANNOTATION_PREFERENCE,
                api::instancetype::ANNOTATION_CLUSTER_PREFERENCE,
            ]),
        ),
    ]
}

/// The phase transitions seen so far and the histogram they fed, and each known VMI's series of
/// the phase count.
#[derive(Debug, Default)]
pub struct PhaseTransitions {
    /// Per VMI uid, the transitions already accounted for.
    seen: HashMap<String, HashSet<(&'static str, i64)>>,
    by_phase: BTreeMap<&'static str, Histogram>,
    /// Times from deletion to the final phases.
    by_phase_from_deletion: BTreeMap<&'static str, Histogram>,
    /// Per VMI uid, its series of [`PHASE_COUNT`] now.
    current: HashMap<String, PhaseCountLabels>,
}

impl PhaseTransitions {
    /// Takes note of `vmi`'s transitions; observes the new ones when `observe` (false for the
    /// initial listing).
    pub fn update(&mut self, vmi: &VirtualMachineInstance, observe: bool) {
        let (Some(uid), Some(created)) = (
            vmi.metadata.uid.clone(),
            vmi.metadata.creation_timestamp.as_ref().map(|t| t.0),
        ) else {
            return;
        };
        self.current.insert(uid.clone(), phase_count_labels(vmi));
        let Some(status) = &vmi.status else { return };
        let deleted = vmi.metadata.deletion_timestamp.as_ref().map(|t| t.0);
        let seen = self.seen.entry(uid).or_default();
        for transition in &status.phase_transition_timestamps {
            let at = transition.phase_transition_timestamp.0;
            if !seen.insert((transition.phase.as_str(), at.as_second())) || !observe {
                continue;
            }
            let since = |from_ms: i64| (at.as_millisecond() - from_ms).max(0) as f64 / 1000.0;
            self.by_phase
                .entry(transition.phase.as_str())
                .or_insert_with(|| Histogram::new(&PHASE_TRANSITION_BUCKETS))
                .observe(since(created.as_millisecond()));
            let ended = matches!(transition.phase, VmiPhase::Succeeded | VmiPhase::Failed);
            if let Some(deleted) = deleted.filter(|deleted| ended && at >= *deleted) {
                self.by_phase_from_deletion
                    .entry(transition.phase.as_str())
                    .or_insert_with(|| Histogram::new(&PHASE_TRANSITION_BUCKETS))
                    .observe(since(deleted.as_millisecond()));
            }
        }
    }

    pub fn forget(&mut self, vmi: &VirtualMachineInstance) {
        if let Some(uid) = &vmi.metadata.uid {
            self.seen.remove(uid);
            self.current.remove(uid);
        }
    }

    pub fn histogram(&self, phase: VmiPhase) -> Option<&Histogram> {
        self.by_phase.get(phase.as_str())
    }

    pub fn histogram_from_deletion(&self, phase: VmiPhase) -> Option<&Histogram> {
        self.by_phase_from_deletion.get(phase.as_str())
    }

    /// The metrics in Prometheus' text format.
    pub fn encode(&self) -> String {
        let name = PHASE_TRANSITION_FROM_CREATION;
        let mut out = format!(
            "# HELP {name} Histogram of VM phase transitions duration from creation time in \
             seconds.\n# TYPE {name} histogram\n"
        );
        for (phase, histogram) in &self.by_phase {
            histogram.encode(name, &[("phase", phase)], &mut out);
        }
        let name = PHASE_TRANSITION_FROM_DELETION;
        let _ = write!(
            out,
            "# HELP {name} Histogram of VM phase transitions duration from deletion time in \
             seconds.\n# TYPE {name} histogram\n"
        );
        for (phase, histogram) in &self.by_phase_from_deletion {
            histogram.encode(name, &[("phase", phase)], &mut out);
        }
        let mut counts: BTreeMap<&PhaseCountLabels, u64> = BTreeMap::new();
        for labels in self.current.values() {
            *counts.entry(labels).or_default() += 1;
        }
        let name = PHASE_COUNT;
        let _ = write!(
            out,
            "# HELP {name} Sum of VMIs per phase and node.\n# TYPE {name} gauge\n"
        );
        for (labels, count) in counts {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let _ = writeln!(out, "{name}{{{}}} {count}", encode_labels(&labels));
        }
        out
    }
}

/// Watches VMIs and feeds `transitions` until the watch ends.
pub async fn watch_phase_transitions(client: Client, transitions: Arc<Mutex<PhaseTransitions>>) {
    let mut events = watcher::watcher(
        Api::<VirtualMachineInstance>::all(client),
        watcher::Config::default(),
    )
    .default_backoff()
    .boxed();
    // Until the first listing is complete, transitions are only recorded as seen.
    let mut listed = false;
    while let Some(event) = events.next().await {
        let Ok(event) = event else { continue };
        let Ok(mut transitions) = transitions.lock() else {
            return;
        };
        match event {
            Event::Init => {}
            Event::InitApply(vmi) => transitions.update(&vmi, listed),
            Event::InitDone => listed = true,
            Event::Apply(vmi) => transitions.update(&vmi, true),
            Event::Delete(vmi) => transitions.forget(&vmi),
        }
    }
}

/// Serves `GET /metrics` on `addr` with what `transitions` holds.
pub async fn serve(addr: SocketAddr, transitions: Arc<Mutex<PhaseTransitions>>) {
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            log::warn!("metrics: cannot listen on {addr}: {e}");
            return;
        }
    };
    log::info!("metrics on http://{addr}/metrics");
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let transitions = transitions.clone();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let n = stream.read(&mut request).await.unwrap_or(0);
            let mut body = transitions.lock().map(|t| t.encode()).unwrap_or_default();
            body.push_str(&api::client_metrics::encode());
            let response = http_response(&request[..n], &body);
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// The HTTP/1.1 response to `request`: the metrics for `GET /metrics`, 404 otherwise.
pub fn http_response(request: &[u8], metrics: &str) -> String {
    let line = request.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (status, content_type, body) = match (parts.next(), parts.next()) {
        (Some("GET"), Some(path)) if path == "/metrics" || path.starts_with("/metrics?") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics,
        ),
        _ => ("404 Not Found", "text/plain", "not found\n"),
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Starts the watch and the server in the background.
pub fn spawn(client: Client) {
    let transitions = Arc::new(Mutex::new(PhaseTransitions::default()));
    tokio::spawn(watch_phase_transitions(client, transitions.clone()));
    tokio::spawn(serve(
        SocketAddr::from(([0, 0, 0, 0], METRICS_PORT)),
        transitions,
    ));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(uid: &str, transitions: &[(&str, &str)]) -> VirtualMachineInstance {
        let transitions: Vec<_> = transitions
            .iter()
            .map(|(phase, at)| json!({"phase": phase, "phaseTransitionTimestamp": at}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default", "uid": uid,
                         "creationTimestamp": "2026-11-29T12:00:00Z"},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": "Running", "phaseTransitionTimestamps": transitions},
        }))
        .unwrap()
    }

    #[test]
    fn observations_land_in_kubevirts_buckets() {
        let mut h = Histogram::new(&PHASE_TRANSITION_BUCKETS);
        for v in [0.0, 0.5, 0.7, 3.0, 4000.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.encode("m", &[("phase", "Running")], &mut out);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "m_bucket{phase=\"Running\",le=\"0.5\"} 2");
        assert_eq!(lines[1], "m_bucket{phase=\"Running\",le=\"1\"} 3");
        assert_eq!(lines[2], "m_bucket{phase=\"Running\",le=\"2\"} 3");
        assert_eq!(lines[3], "m_bucket{phase=\"Running\",le=\"5\"} 4");
        assert_eq!(lines[17], "m_bucket{phase=\"Running\",le=\"3600\"} 4");
        assert_eq!(lines[18], "m_bucket{phase=\"Running\",le=\"+Inf\"} 5");
        assert_eq!(lines[19], "m_sum{phase=\"Running\"} 4004.2");
        assert_eq!(lines[20], "m_count{phase=\"Running\"} 5");
        assert_eq!(lines.len(), 21);
    }

    #[test]
    fn each_transition_is_observed_once_from_creation() {
        let mut t = PhaseTransitions::default();
        let early = vmi("u1", &[("Pending", "2026-11-29T12:00:00Z")]);
        t.update(&early, true);
        let later = vmi(
            "u1",
            &[
                ("Pending", "2026-11-29T12:00:00Z"),
                ("Scheduling", "2026-11-29T12:00:01Z"),
                ("Scheduled", "2026-11-29T12:00:02Z"),
                ("Running", "2026-11-29T12:00:03Z"),
            ],
        );
        t.update(&later, true);
        t.update(&later, true);
        let running = t.histogram(VmiPhase::Running).unwrap();
        assert_eq!(running.count(), 1);
        assert_eq!(running.sum, 3.0);
        assert_eq!(t.histogram(VmiPhase::Pending).unwrap().count(), 1);
        assert_eq!(t.histogram(VmiPhase::Scheduling).unwrap().sum, 1.0);
        let text = t.encode();
        assert!(text.contains(
            "# TYPE kubevirt_vmi_phase_transition_time_from_creation_seconds histogram\n"
        ));
        assert!(text.contains(
            "kubevirt_vmi_phase_transition_time_from_creation_seconds_bucket{phase=\"Running\",le=\"5\"} 1\n"
        ));
        assert!(text.contains(
            "kubevirt_vmi_phase_transition_time_from_creation_seconds_count{phase=\"Scheduled\"} 1\n"
        ));
    }

    fn vmi_on(
        uid: &str,
        phase: &str,
        node: Option<&str>,
        os: Option<&str>,
    ) -> VirtualMachineInstance {
        let annotations = match os {
            Some(os) => {
                json!({"vm.kubevirt.io/os": os, "kubevirt.io/cluster-instancetype-name": "u1.small"})
            }
            None => json!({}),
        };
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": uid, "namespace": "default", "uid": uid,
                         "annotations": annotations,
                         "creationTimestamp": "2026-11-29T12:00:00Z"},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase, "nodeName": node},
        }))
        .unwrap()
    }

    #[test]
    fn the_phase_count_follows_each_vmis_current_phase() {
        let mut t = PhaseTransitions::default();
        t.update(&vmi_on("a", "Pending", None, None), false);
        t.update(&vmi_on("b", "Running", Some("node-1"), None), false);
        t.update(&vmi_on("c", "Scheduled", Some("node-1"), None), true);
        t.update(&vmi_on("c", "Running", Some("node-1"), None), true);
        t.update(
            &vmi_on("d", "Running", Some("node-2"), Some("fedora")),
            true,
        );
        let gone = vmi_on("e", "Running", Some("node-2"), None);
        t.update(&gone, true);
        t.forget(&gone);
        let text = t.encode();
        let none = "os=\"<none>\",workload=\"<none>\",flavor=\"<none>\",\
                    instance_type=\"<none>\",preference=\"<none>\"";
        assert!(
            text.contains("# TYPE kubevirt_vmi_phase_count gauge\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "kubevirt_vmi_phase_count{{node=\"node-1\",phase=\"running\",{none}}} 2\n"
            )),
            "{text}"
        );
        assert!(text.contains(&format!(
            "kubevirt_vmi_phase_count{{node=\"\",phase=\"pending\",{none}}} 1\n"
        )));
        assert!(text.contains(
            "kubevirt_vmi_phase_count{node=\"node-2\",phase=\"running\",os=\"fedora\",\
             workload=\"<none>\",flavor=\"<none>\",instance_type=\"u1.small\",\
             preference=\"<none>\"} 1\n"
        ));
        // Neither the earlier phase of c nor the deleted e is counted.
        assert_eq!(
            text.matches("kubevirt_vmi_phase_count{").count(),
            3,
            "{text}"
        );
        assert!(!text.contains("scheduled\""), "{text}");
    }

    #[test]
    fn a_deleted_vmis_end_is_observed_from_its_deletion() {
        let mut t = PhaseTransitions::default();
        let mut deleted = vmi(
            "u1",
            &[
                ("Running", "2026-11-29T12:00:03Z"),
                ("Succeeded", "2026-11-29T12:00:12Z"),
            ],
        );
        deleted.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-11-29T12:00:10Z")).unwrap());
        t.update(&deleted, true);
        let succeeded = t.histogram_from_deletion(VmiPhase::Succeeded).unwrap();
        assert_eq!((succeeded.count(), succeeded.sum), (1, 2.0));
        // Running came before the deletion; a VMI that failed before it was deleted is no
        // deletion's figure either.
        assert!(t.histogram_from_deletion(VmiPhase::Running).is_none());
        let mut failed_first = vmi("u2", &[("Failed", "2026-11-29T12:00:05Z")]);
        failed_first.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-11-29T12:00:10Z")).unwrap());
        t.update(&failed_first, true);
        assert!(t.histogram_from_deletion(VmiPhase::Failed).is_none());
        assert!(t.encode().contains(
            "kubevirt_vmi_phase_transition_time_from_deletion_seconds_bucket{phase=\"Succeeded\",le=\"2\"} 1\n"
        ));
    }

    #[test]
    fn the_initial_listing_is_not_counted() {
        let mut t = PhaseTransitions::default();
        let running = vmi(
            "u1",
            &[
                ("Pending", "2026-11-29T12:00:00Z"),
                ("Running", "2026-11-29T12:00:03Z"),
            ],
        );
        t.update(&running, false);
        t.update(&running, true);
        assert!(t.histogram(VmiPhase::Running).is_none());
        // A VMI deleted and created again with the same uid cannot happen; forgetting one only
        // frees its memory.
        t.forget(&running);
        assert!(t.seen.is_empty());
    }

    #[test]
    fn clock_skew_is_floored_at_zero() {
        let mut t = PhaseTransitions::default();
        t.update(&vmi("u1", &[("Pending", "2026-11-29T11:59:59Z")]), true);
        let pending = t.histogram(VmiPhase::Pending).unwrap();
        assert_eq!((pending.count(), pending.sum), (1, 0.0));
    }

    #[test]
    fn only_get_metrics_is_served() {
        let ok = http_response(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "m 1\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(ok.contains("Content-Length: 4\r\n"));
        assert!(ok.ends_with("\r\n\r\nm 1\n"));
        let missing = http_response(b"GET / HTTP/1.1\r\n\r\n", "m 1\n");
        assert!(missing.starts_with("HTTP/1.1 404"));
        assert!(!missing.contains("m 1"));
        assert!(
            http_response(b"POST /metrics HTTP/1.1\r\n\r\n", "m 1\n").starts_with("HTTP/1.1 404")
        );
    }
}
