//! KubeVirt's density test on the local cluster: N minimal VMIs created 100 ms apart, wait until
//! all are Running, then print
//! - creation -> Running P50/P95/max from `status.phaseTransitionTimestamps` (what KubeVirt's
//!   performance suite reports; one-second resolution), the same as this client saw it
//!   (create call returned -> Running seen by a watch, millisecond resolution), and a per-phase
//!   breakdown from the VMI's timestamps and its launcher Pod's conditions;
//! - the API requests per VMI, from kube-apiserver's `apiserver_request_total` before and after;
//! - the average CPU and memory of virt-api, virt-controller and virt-handler during the run,
//!   from `/proc` (the cluster's processes run on this host);
//! - KubeVirt's density thresholds and where the run stands against them;
//! - the Pod floor ([`ferrovirt_bench::pod_floor`]): once the VMIs are deleted, as many copies of
//!   one of their launcher Pods, owned by no VMI, created as the VMIs were, then as many with
//!   its `compute` container alone: Pod created -> `compute` started with no guest on the
//!   machine, against the same phase and creation -> Running of the VMIs;
//!
//! then deletes everything. It prints figures and asserts nothing about time.
//!
//! The VMI is KubeVirt's density VMI (`createVMISpecWithResources` in its `density.go`): the
//! CirrOS containerDisk, the pod network with masquerade, memory and CPU requests equal to
//! their limits, 90Mi and 100m. (With 64Mi, the CirrOS stand-in's Debian kernel cannot
//! decompress itself and the guest resets in a loop, about 100 times a second.)
//!
//! Usage: density [--count N] [--interval-ms MS] [--memory Q] [--cpu Q] [--timeout-s S]
//! [--node NAME]. With `--node`, every VMI goes to that node and tolerates the taint of the
//! KVM worker nodes (`tests/cluster/cluster.sh add-node --kvm`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use api::vmi::software_emulation;
use api::{VirtualMachineInstance, VmiPhase};
use ferrovirt_bench::pod_floor::{self, compute_started_after, Shape};
use ferrovirt_bench::{
    is_write, median, parse_request_counts, percentile, pids_named, request_delta,
    vmi_writes_per_pod_created, writer_of, ProcessSampler, RequestCounts,
    KUBEVIRT_PATCH_VMI_PER_POD, KUBEVIRT_RUNNING_P50_S, KUBEVIRT_RUNNING_P95_S,
    KUBEVIRT_UPDATE_VMI_PER_POD,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

const COMPONENTS: [&str; 3] = ["virt-api", "virt-controller", "virt-handler"];

struct Options {
    count: usize,
    interval: Duration,
    memory: String,
    cpu: String,
    timeout: Duration,
    /// Only this node, tolerating the KVM nodes' taint.
    node: Option<String>,
}

fn options() -> anyhow::Result<Options> {
    let mut o = Options {
        count: 100,
        interval: Duration::from_millis(100),
        memory: "90Mi".into(),
        cpu: "100m".into(),
        timeout: Duration::from_secs(300),
        node: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--count" => o.count = value.parse().context("--count")?,
            "--interval-ms" => o.interval = Duration::from_millis(value.parse()?),
            "--memory" => o.memory = value,
            "--cpu" => o.cpu = value,
            "--timeout-s" => o.timeout = Duration::from_secs(value.parse()?),
            "--node" => o.node = Some(value),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(o)
}

/// KubeVirt's density VMI: 1 vCPU, CirrOS as containerDisk, the default pod network, `memory`
/// and `cpu` as requests and limits alike; on `node` when given.
fn minimal_vmi(name: &str, o: &Options) -> anyhow::Result<VirtualMachineInstance> {
    let resources = serde_json::json!({"memory": o.memory, "cpu": o.cpu});
    let mut vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "labels": {"bench": "density"}},
        "spec": {
            "domain": {
                "devices": {
                    "disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}],
                    "interfaces": [{"name": "default", "masquerade": {}}],
                },
                "resources": {"requests": resources, "limits": resources},
            },
            "networks": [{"name": "default", "pod": {}}],
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "containerdisk", "containerDisk":
                {"image": "registry:5000/kubevirt/cirros-container-disk-demo:devel"}}],
        },
    });
    if let Some(node) = &o.node {
        vmi["spec"]["nodeSelector"] = serde_json::json!({"kubernetes.io/hostname": node});
        vmi["spec"]["tolerations"] = serde_json::json!([
            {"key": "ferrovirt.io/nested-kvm", "operator": "Exists", "effect": "NoSchedule"}
        ]);
    }
    Ok(serde_json::from_value(vmi)?)
}

async fn request_counts(client: &Client) -> anyhow::Result<RequestCounts> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .context("GET /metrics of kube-apiserver")?;
    Ok(parse_request_counts(&text))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Seconds from `from` to the VMI's transition into `phase`.
fn since(vmi: &VirtualMachineInstance, phase: VmiPhase, from: i64) -> Option<f64> {
    let at = vmi
        .status
        .as_ref()?
        .phase_transition_timestamps
        .iter()
        .find(|t| t.phase == phase)?
        .phase_transition_timestamp
        .0
        .as_second();
    Some((at - from) as f64)
}

fn created(vmi: &VirtualMachineInstance) -> Option<i64> {
    Some(vmi.metadata.creation_timestamp.as_ref()?.0.as_second())
}

fn stats_line(label: &str, values: &[f64], unit: &str, decimals: usize) -> String {
    match (
        percentile(values, 50.0),
        percentile(values, 95.0),
        percentile(values, 100.0),
    ) {
        (Some(p50), Some(p95), Some(max)) => format!(
            "  {label:44} P50 {p50:>7.decimals$} {unit}  P95 {p95:>7.decimals$} {unit}  max {max:>7.decimals$} {unit}  (n={})",
            values.len()
        ),
        _ => format!("  {label:44} no data"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = options()?;
    let client = Client::try_default()
        .await
        .context("no Kubernetes client (KUBECONFIG)")?;
    let namespace = format!("bench-density-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))?,
        )
        .await
        .context("creating the namespace")?;
    let result = run(&client, &namespace, &o).await;
    println!("cleaning up: deleting namespace {namespace}");
    let _ = namespaces
        .delete(&namespace, &DeleteParams::default())
        .await;
    let deadline = Instant::now() + Duration::from_secs(300);
    while namespaces
        .get_opt(&namespace)
        .await
        .ok()
        .flatten()
        .is_some()
    {
        if Instant::now() > deadline {
            println!("namespace {namespace} still terminating after 300 s");
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    result
}

async fn run(client: &Client, namespace: &str, o: &Options) -> anyhow::Result<()> {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);

    // The watch notes when each VMI is first seen Running (or Failed).
    let seen: Arc<Mutex<HashMap<String, (VmiPhase, Instant)>>> = Default::default();
    let watch = {
        let seen = seen.clone();
        let stream = watcher::watcher(vmis.clone(), watcher::Config::default());
        tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Some(event) = stream.next().await {
                let vmi = match event {
                    Ok(watcher::Event::Apply(vmi) | watcher::Event::InitApply(vmi)) => vmi,
                    _ => continue,
                };
                let phase = vmi.status.as_ref().and_then(|s| s.phase);
                if let Some(phase @ (VmiPhase::Running | VmiPhase::Failed)) = phase {
                    if let Ok(mut seen) = seen.lock() {
                        seen.entry(vmi.name_any())
                            .or_insert((phase, Instant::now()));
                    }
                }
            }
        })
    };

    let pids: BTreeMap<&str, Vec<u32>> = COMPONENTS
        .iter()
        .map(|name| (*name, pids_named(Path::new("/proc"), name)))
        .collect();
    for (name, list) in &pids {
        if list.is_empty() {
            bail!("no {name} process on this host: is Ferrovirt installed (hack/up.sh)?");
        }
    }
    let mut samplers: Vec<(&str, ProcessSampler)> = pids
        .iter()
        .map(|(name, list)| (*name, ProcessSampler::start(list.clone())))
        .collect();

    let load_before = loadavg();
    let before = request_counts(client).await?;
    let start = Instant::now();
    // Each create is its own task, so that a slow admission webhook does not stretch the
    // 100 ms spacing.
    let mut creates = Vec::new();
    let mut ticker = tokio::time::interval(o.interval);
    for i in 0..o.count {
        ticker.tick().await;
        let name = format!("density-{i:03}");
        let vmi = minimal_vmi(&name, o)?;
        let vmis = vmis.clone();
        creates.push(tokio::spawn(async move {
            let sent = Instant::now();
            let result = vmis.create(&PostParams::default(), &vmi).await;
            (name, sent, Instant::now(), result)
        }));
    }
    let mut created_at: HashMap<String, Instant> = HashMap::new();
    let mut create_latency = Vec::new();
    for create in creates {
        let (name, sent, done, result) = create.await?;
        result.with_context(|| format!("creating VMI {name}"))?;
        create_latency.push(done.duration_since(sent).as_secs_f64());
        created_at.insert(name, sent);
    }
    let created_in = start.elapsed();

    let deadline = start + o.timeout;
    loop {
        let done = seen.lock().map(|s| s.len()).unwrap_or(0);
        if done >= o.count || Instant::now() > deadline {
            break;
        }
        for (_, sampler) in &mut samplers {
            sampler.sample();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all_in = start.elapsed();
    let after = request_counts(client).await?;
    let load_after = loadavg();
    let usage: Vec<(&str, (f64, f64, Duration))> = samplers
        .into_iter()
        .map(|(name, sampler)| (name, sampler.finish()))
        .collect();
    watch.abort();

    let list = vmis.list(&ListParams::default()).await?.items;
    let pod_list = pods.list(&ListParams::default()).await?.items;
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let running = seen
        .values()
        .filter(|(p, _)| *p == VmiPhase::Running)
        .count();
    let failed = seen.len() - running;

    println!(
        "density: {} VMIs ({} memory, {} CPU, 1 vCPU, containerDisk, pod network; on {}) \
         created {} ms apart in {:.1} s",
        o.count,
        o.memory,
        o.cpu,
        o.node.as_deref().unwrap_or("any node"),
        o.interval.as_millis(),
        created_in.as_secs_f64()
    );
    let backends = list.iter().fold([0; 3], |mut n, vmi| {
        match software_emulation(vmi.status.as_ref()) {
            Some(false) => n[0] += 1,
            Some(true) => n[1] += 1,
            None => n[2] += 1,
        }
        n
    });
    println!(
        "  backends: {} on the KVM VMM, {} on QEMU TCG, {} not reported",
        backends[0], backends[1], backends[2]
    );
    println!(
        "  {running} Running, {failed} Failed, {} not there after {:.0} s; all seen after {:.1} s",
        o.count - seen.len(),
        o.timeout.as_secs_f64(),
        all_in.as_secs_f64()
    );
    println!("  load average before {load_before}, after {load_after}");
    println!(
        "  launcher Pods in the namespace: {} for {} VMIs",
        pod_list.len(),
        list.len()
    );

    // From the VMIs' own timestamps, as KubeVirt's suite measures.
    let mut segments: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for vmi in &list {
        let Some(c) = created(vmi) else { continue };
        let phases = [
            VmiPhase::Pending,
            VmiPhase::Scheduling,
            VmiPhase::Scheduled,
            VmiPhase::Running,
        ];
        let times: Vec<Option<f64>> = phases.iter().map(|p| since(vmi, *p, c)).collect();
        if let Some(t) = times[3] {
            segments.entry("0 creation -> Running").or_default().push(t);
        }
        let names = [
            "1 creation -> Pending",
            "2 Pending -> Scheduling (Pod created)",
            "3 Scheduling -> Scheduled (Pod running)",
            "4 Scheduled -> Running (handler, launcher)",
        ];
        let mut previous = Some(0.0);
        for (name, t) in names.iter().zip(&times) {
            if let (Some(p), Some(t)) = (previous, t) {
                segments.entry(name).or_default().push(t - p);
            }
            previous = *t;
        }
    }
    // The launcher Pods' side of Scheduling -> Scheduled.
    for pod in &pod_list {
        let Some(c) = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
        else {
            continue;
        };
        let status = pod.status.clone().unwrap_or_default();
        let condition = |type_: &str| {
            status
                .conditions
                .iter()
                .flatten()
                .find(|x| x.type_ == type_ && x.status == "True")
                .and_then(|x| x.last_transition_time.as_ref())
                .map(|t| (t.0.as_second() - c) as f64)
        };
        let compute_started = status
            .container_statuses
            .iter()
            .flatten()
            .find(|s| s.name == "compute")
            .and_then(|s| s.state.as_ref()?.running.as_ref()?.started_at.as_ref())
            .map(|t| (t.0.as_second() - c) as f64);
        for (name, value) in [
            ("5 Pod created -> PodScheduled", condition("PodScheduled")),
            (
                "6 Pod created -> Initialized (init containers)",
                condition("Initialized"),
            ),
            (
                "7 Pod created -> compute container started",
                compute_started,
            ),
            ("8 Pod created -> Ready", condition("Ready")),
        ] {
            if let Some(value) = value {
                segments.entry(name).or_default().push(value);
            }
        }
    }
    println!("creation -> Running from status.phaseTransitionTimestamps (1 s resolution):");
    for (name, values) in &segments {
        println!("{}", stats_line(&name[2..], values, "s", 0));
    }
    let observed: Vec<f64> = seen
        .iter()
        .filter(|(_, (p, _))| *p == VmiPhase::Running)
        .filter_map(|(name, (_, at))| Some(at.duration_since(*created_at.get(name)?).as_secs_f64()))
        .collect();
    println!("creation -> Running as this client saw it (create sent -> watch event):");
    println!("{}", stats_line("create -> Running", &observed, "s", 2));
    println!(
        "{}",
        stats_line(
            "create call (API server + webhooks)",
            &create_latency,
            "s",
            2
        )
    );
    if let Some(p50) = median(&observed) {
        println!(
            "  goal P50 <= 3 s with TCG: {}",
            if p50 <= 3.0 { "met" } else { "missed" }
        );
    }

    let n = o.count as f64;
    let delta = request_delta(&before, &after);
    println!(
        "API requests per VMI (kube-apiserver apiserver_request_total, after - before, / {}):",
        o.count
    );
    let mut ferrovirt_writes = 0.0;
    let mut other_writes = 0.0;
    for (key, count) in &delta {
        if !is_write(&key.verb) {
            continue;
        }
        let writer = writer_of(key);
        let mut count = *count;
        if key.group == "kubevirt.io"
            && key.resource == "virtualmachineinstances"
            && key.subresource.is_empty()
            && key.verb == "POST"
        {
            count -= n; // the bench's own creates
            if count <= 0.0 {
                continue;
            }
        }
        if writer.starts_with("ferrovirt (") {
            ferrovirt_writes += count;
        }
        if writer == "other" {
            other_writes += count;
            continue;
        }
        println!("  {:58} {:>6.2}   {writer}", key.to_string(), count / n);
    }
    let reads: f64 = delta
        .iter()
        .filter(|(k, _)| !is_write(&k.verb))
        .map(|(_, c)| c)
        .sum();
    println!(
        "  writes by Ferrovirt's components per VMI: {:.2}; other writes (leases, nodes, other \
         namespaces...) per VMI: {:.2}; reads (GET/LIST/WATCH, everyone) per VMI: {:.2}",
        ferrovirt_writes / n,
        other_writes / n,
        reads / n
    );

    let verdict = |ok: bool| if ok { "within" } else { "over" };
    println!("KubeVirt's density thresholds (its tests/performance/density.go):");
    let from_status = segments.get("0 creation -> Running").map(Vec::as_slice);
    for (label, p, threshold) in [
        ("creation -> Running P50", 50.0, KUBEVIRT_RUNNING_P50_S),
        ("creation -> Running P95", 95.0, KUBEVIRT_RUNNING_P95_S),
    ] {
        if let Some(value) = from_status.and_then(|v| percentile(v, p)) {
            println!(
                "  {label:44} {value:>6.0} s    {} {threshold} s",
                verdict(value <= threshold)
            );
        }
    }
    match vmi_writes_per_pod_created(&delta) {
        Some((patch, update)) => {
            for (label, value, threshold) in [
                (
                    "PATCH VMI per Pod created",
                    patch,
                    KUBEVIRT_PATCH_VMI_PER_POD,
                ),
                (
                    "UPDATE VMI per Pod created",
                    update,
                    KUBEVIRT_UPDATE_VMI_PER_POD,
                ),
            ] {
                println!(
                    "  {label:44} {value:>6.2}      {} {threshold}",
                    verdict(value <= threshold)
                );
            }
        }
        None => println!("  no Pod was created: no writes per Pod"),
    }

    println!("Ferrovirt's components during the run (from /proc; all instances summed):");
    for (name, (cpu, rss, wall)) in &usage {
        println!(
            "  {name:16} {} process(es): average CPU {:5.1}% of a core, average RSS {:6.1} MiB over {:.0} s",
            pids[name].len(),
            cpu * 100.0,
            rss / (1 << 20) as f64,
            wall.as_secs_f64()
        );
    }
    let template = pod_list.iter().find(|p| compute_started_after(p).is_some());
    if let (true, Some(template)) = (seen.len() == o.count, template) {
        pod_floor(&vmis, &pods, template, o, &segments).await?;
    }
    if seen.len() < o.count {
        bail!(
            "{} of {} VMIs did not reach Running or Failed within {:.0} s",
            o.count - seen.len(),
            o.count,
            o.timeout.as_secs_f64()
        );
    }
    Ok(())
}

/// Deletes the VMIs, waits until their launcher Pods are gone, and measures the Pod floor with
/// copies of `template`, printed beside the VMIs' figures in `segments`.
async fn pod_floor(
    vmis: &Api<VirtualMachineInstance>,
    pods: &Api<Pod>,
    template: &Pod,
    o: &Options,
    segments: &BTreeMap<&str, Vec<f64>>,
) -> anyhow::Result<()> {
    vmis.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .context("deleting the VMIs")?;
    pod_floor::wait_gone(pods, &ListParams::default(), Duration::from_secs(300))
        .await
        .context("the launcher Pods after their VMIs were deleted")?;
    for (shape, what) in [
        (Shape::Whole, "its containers all"),
        (Shape::ComputeOnly, "compute alone"),
    ] {
        println!(
            "Pod floor, {what}: {} copies of launcher Pod {} (no VMI, no guest; their launchers \
             wait for a virt-handler that never calls), created {} ms apart; load average \
             before {}",
            o.count,
            template.name_any(),
            o.interval.as_millis(),
            loadavg()
        );
        let floor =
            pod_floor::measure(pods, template, shape, o.count, o.interval, o.timeout).await?;
        println!(
            "{}",
            stats_line(
                "Pod created -> compute container started",
                &floor.from_status,
                "s",
                0
            )
        );
        println!(
            "{}",
            stats_line(
                "create -> compute running (client)",
                &floor.observed,
                "s",
                2
            )
        );
        for (label, key) in [
            (
                "VMIs' Pod created -> compute started",
                "7 Pod created -> compute container started",
            ),
            ("VMIs' creation -> Running", "0 creation -> Running"),
        ] {
            let vmi_p50 = segments.get(key).and_then(|v| median(v));
            if let (Some(vmi), Some(floor)) = (vmi_p50, median(&floor.from_status)) {
                println!(
                    "  {label:44} P50 {vmi:>4.0} s = {:.1} x the floor's {floor:.0} s",
                    vmi / floor.max(1.0)
                );
            }
        }
        if floor.missing > 0 {
            bail!(
                "{} of {} copies of the launcher Pod did not run compute within {:.0} s",
                floor.missing,
                o.count,
                o.timeout.as_secs_f64()
            );
        }
    }
    Ok(())
}
