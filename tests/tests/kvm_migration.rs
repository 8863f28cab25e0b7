//! Live migration between two KVM worker nodes: the VM runs on Ferrovirt's own VMM on one and
//! goes on running on the other, on the same VMM.
//!
//! The test adds the KVM nodes `ferrovirt-kvm1` and `ferrovirt-kvm2` when the cluster lacks
//! them (each an L1 VM under QEMU TCG `-cpu max` with nested KVM, 2 vCPUs and 4 GiB; removed
//! again at the end), starts `examples/vm-cirros.yaml` tolerating their taint, logs in on its
//! console and leaves a random token in the login shell's environment, then `virtctl migrate`
//! (with a MigrationPolicy that allows the slow nested stream more time and limits its bandwidth).
//! The source launcher must have held the stream to the policy's `bandwidthPerMigration`: its
//! log gives the bytes sent and the time taken.
//! The migration must succeed with the VMI on the other KVM node, `SoftwareEmulation` still
//! False (reason `Kvm`): the target launcher Pod must be on a node labelled
//! `ferrovirt.io/kvm=hardware`, and its launcher runs the source's backend. On the console
//! afterwards, the same shell still holds the token (the guest did not boot again) and the
//! guest's uptime went on.
//!
//! Everything on the nodes runs under software emulation, with the guest one level further
//! down: the times and the host's load printed are only for comparing runs of this test.

use std::time::{Duration, Instant};

use api::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use api::{VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::console::ConsoleSession;
use ferrovirt_tests::kvm_node::{start_getting_started_vm, KvmNode};
use ferrovirt_tests::migration::namespace_policy;
use ferrovirt_tests::{
    client, migration_of, migration_phase, virtctl, virtctl_binary, vmi_condition, wait_for,
    ClusterLock, TestNamespace,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use kube::{Api, ResourceExt};

const NODES: [&str; 2] = ["ferrovirt-kvm1", "ferrovirt-kvm2"];
const VM: &str = "kvm-migrate";
const POLICY: &str = "e2e-kvm-migrate";
/// Starting the VMI: image pulls and the launcher under TCG, the guest on nested KVM.
const START: Duration = Duration::from_secs(600);
/// The migration: the target Pod's image pulls and launcher under TCG, then the stream.
const MIGRATE: Duration = Duration::from_secs(600);
/// The policy's `bandwidthPerMigration`, bytes per second.
const BANDWIDTH: u64 = 2 << 20;
const USER: &str = "cirros";
const PASSWORD: &str = "gocubsgo";

/// This host's load average and available memory, as `/proc` gives them.
fn host_load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available = meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .unwrap_or("MemAvailable: ?");
    format!(
        "load average {}; {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        available.split_whitespace().collect::<Vec<_>>().join(" ")
    )
}

/// Asserts that `vmi` runs on the KVM VMM.
fn on_the_kvm_vmm(vmi: &VirtualMachineInstance) {
    let emulation = vmi_condition(vmi, "SoftwareEmulation").expect("a SoftwareEmulation condition");
    assert_eq!(emulation.status, "False", "{emulation:?}");
    assert_eq!(emulation.reason.as_deref(), Some("Kvm"), "{emulation:?}");
}

/// A console session: the first logs in and keeps `token` in the shell's environment, the
/// second finds it there and prints the guest's uptime.
fn console_session(namespace: &str, token: &str, first: bool) -> Result<String, String> {
    let mut console = ConsoleSession::open(namespace, VM)?;
    if first {
        console.login(USER, PASSWORD, START)?;
        console.run(
            &format!("export FV_TOKEN={token}; echo before-$((6*7))-$FV_TOKEN"),
            &format!("before-42-{token}"),
        )?;
    } else {
        console.prompt("$ ", Duration::from_secs(120))?;
        console.run(
            "echo after-$((5+5))-$FV_TOKEN",
            &format!("after-10-{token}"),
        )?;
    }
    // The typed line cannot match the output: `$((1+1))` is 2 only in the output.
    console.run("echo up-$(cut -d' ' -f1 /proc/uptime)-$((1+1))s", "-2s")?;
    console.escape()
}

async fn console(namespace: &str, token: &str, first: bool) -> String {
    let (namespace, token) = (namespace.to_string(), token.to_string());
    tokio::task::spawn_blocking(move || console_session(&namespace, &token, first))
        .await
        .expect("the console session thread")
        .unwrap_or_else(|e| panic!("virtctl console: {e}"))
}

/// The guest's uptime in the last `up-<seconds>-2s` line of a console transcript.
fn uptime(transcript: &str) -> f64 {
    transcript
        .lines()
        .rev()
        .find_map(|l| {
            l.trim()
                .strip_prefix("up-")?
                .strip_suffix("-2s")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no uptime line in:\n{transcript}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_on_the_kvm_vmm_live_migrates_to_another_kvm_node() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    virtctl_binary();
    println!("host before the KVM nodes: {}", host_load());
    let mut nodes = Vec::new();
    for name in NODES {
        let node = KvmNode::ensure(&client, name).await;
        let labels = node.labels(&client).await;
        assert_eq!(
            labels.get(contract::labels::KVM).map(String::as_str),
            Some(contract::labels::KVM_HARDWARE),
            "virt-handler on {name} probed its /dev/kvm: {labels:?}"
        );
        nodes.push(node);
    }
    println!("host with both KVM nodes: {}", host_load());

    let namespace = TestNamespace::create(&client, "e2e-kvm-migrate").await;
    let ns = namespace.name.as_str();
    // The stream crosses two L1s under TCG, each with its virt-handler's TLS: a few MB/s here,
    // where KubeVirt's default of 150 s per GiB (memory and copied disks: 28 s for this VM) is
    // too short. The policy says how long a migration may take, as a user with a slow
    // migration network would. Its bandwidth limit is below what the stream reaches here
    // unlimited (about 6 MB/s), so that the limit is what sets the pace.
    let _policy = namespace_policy(
        &client,
        ns,
        POLICY,
        serde_json::json!({
            "completionTimeoutPerGiB": 1500,
            "bandwidthPerMigration": format!("{}Mi", BANDWIDTH >> 20),
        }),
    )
    .await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vmi = start_getting_started_vm(&client, ns, VM, START).await;
    let source = vmi
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("nodeName");
    assert!(
        NODES.contains(&source.as_str()),
        "the launcher Pod's preference put the VMI on a KVM node, not {source}"
    );
    on_the_kvm_vmm(&vmi);
    let migratable = vmi_condition(&vmi, "LiveMigratable").expect("a LiveMigratable condition");
    assert_eq!(migratable.status, "True", "{migratable:?}");

    let token = format!("{:016x}", rand_token());
    let before = console(ns, &token, true).await;
    println!("console on {source}:\n{before}");
    println!("host with the VM running: {}", host_load());

    let started = Instant::now();
    let out = virtctl(ns, &["migrate", VM]);
    assert_eq!(out.code, Some(0), "virtctl migrate: {out:?}");
    let migration = migration_of(&client, ns, VM).await;
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    let done = wait_for("the migration to end", MIGRATE, || async {
        let m = migrations.get(&migration.name_any()).await.ok()?;
        migration_phase(&m)
            .is_some_and(MigrationPhase::is_final)
            .then_some(m)
    })
    .await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(MigrationPhase::Succeeded),
        "migration: {status:?}"
    );
    println!(
        "migration Succeeded {:.1}s after virtctl migrate; host: {}",
        started.elapsed().as_secs_f64(),
        host_load()
    );

    let target = NODES
        .iter()
        .find(|n| **n != source)
        .expect("the other node");
    let moved = wait_for(
        "the VMI Running on the other KVM node",
        Duration::from_secs(120),
        || async {
            let v = vmis.get(VM).await.ok()?;
            let s = v.status.as_ref()?;
            (s.node_name.as_deref() == Some(*target) && s.phase == Some(VmiPhase::Running))
                .then_some(v)
        },
    )
    .await;
    on_the_kvm_vmm(&moved);
    let state = moved
        .status
        .as_ref()
        .and_then(|s| s.migration_state.clone())
        .expect("migrationState");
    assert_eq!(state.source_node.as_deref(), Some(source.as_str()));
    assert_eq!(state.target_node.as_deref(), Some(*target));
    assert_eq!(state.completed, Some(true), "{state:?}");
    assert_eq!(state.migration_policy_name.as_deref(), Some(POLICY));
    if let (Some(start), Some(end)) = (&state.start_timestamp, &state.end_timestamp) {
        println!("migrationState: {} -> {}", start.0, end.0);
    }
    // The target launcher Pod could only go to a node whose KVM runs the KVM VMM.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let target_pod = pods
        .get(state.target_pod.as_deref().expect("targetPod"))
        .await
        .expect("the target Pod");
    let required = target_pod
        .spec
        .and_then(|s| s.affinity)
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .expect("the target Pod's required node affinity");
    for term in &required.node_selector_terms {
        assert!(
            term.match_expressions
                .iter()
                .flatten()
                .any(|e| e.key == contract::labels::KVM
                    && e.values.as_deref() == Some(&[contract::labels::KVM_HARDWARE.to_string()])),
            "{required:?}"
        );
    }

    // The source launcher held the stream to the policy's limit.
    let source_pod = state.source_pod.as_deref().expect("sourcePod");
    let log = pods
        .logs(
            source_pod,
            &LogParams {
                container: Some("compute".into()),
                ..LogParams::default()
            },
        )
        .await
        .expect("the source launcher's log");
    assert!(
        log.contains(&format!(
            "outgoing migration limited to {BANDWIDTH} bytes/s"
        )),
        "the source launcher did not apply the policy's bandwidth:\n{log}"
    );
    let (bytes, seconds) = sent(&log);
    let rate = bytes as f64 / seconds;
    println!(
        "source launcher: {bytes} bytes in {seconds:.3} s = {:.2} MiB/s (limit {} MiB/s)",
        rate / (1 << 20) as f64,
        BANDWIDTH >> 20
    );
    // The bucket lets one tenth of a second's worth go at once: the rate may pass the limit by
    // that much over the whole stream, no more.
    assert!(
        bytes as f64 <= BANDWIDTH as f64 * (seconds + 0.1),
        "{bytes} bytes in {seconds} s is over {BANDWIDTH} bytes/s"
    );

    let after = console(ns, &token, false).await;
    println!("console on {target}:\n{after}");
    assert!(
        uptime(&after) > uptime(&before),
        "the guest's uptime went back: the guest booted again"
    );

    let out = virtctl(ns, &["stop", VM]);
    assert_eq!(out.code, Some(0), "virtctl stop: {out:?}");
    wait_for(&format!("VMI {VM} to be gone"), START, || async {
        vmis.get_opt(VM).await.ok()?.is_none().then_some(())
    })
    .await;
    drop(nodes);
}

/// The bytes and seconds of the launcher's `outgoing migration: <bytes> bytes in <s> s` line.
fn sent(log: &str) -> (u64, f64) {
    log.lines()
        .find_map(|l| {
            let rest = l.split_once("outgoing migration: ")?.1;
            let (bytes, rest) = rest.split_once(" bytes in ")?;
            let (seconds, _) = rest.split_once(" s")?;
            Some((bytes.parse().ok()?, seconds.parse().ok()?))
        })
        .unwrap_or_else(|| panic!("no `outgoing migration: ... bytes in ... s` line in:\n{log}"))
}

/// A token no earlier boot of the guest can have printed.
fn rand_token() -> u64 {
    let mut bytes = [0u8; 8];
    let mut urandom = std::fs::File::open("/dev/urandom").expect("/dev/urandom");
    std::io::Read::read_exact(&mut urandom, &mut bytes).expect("read /dev/urandom");
    u64::from_le_bytes(bytes)
}
