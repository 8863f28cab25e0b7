//! KubeVirt's getting-started flow on a KVM worker node: the VM runs on Ferrovirt's own VMM.
//!
//! This machine's `/dev/kvm` is PVM, so the netns nodes run every VM on QEMU TCG. A KVM node
//! (`tests/cluster/cluster.sh add-node --kvm`, tests/cluster/lib/kvm-node.sh) is an L1 VM under
//! QEMU TCG `-cpu max` with real, nested KVM; its virt-handler labels it
//! `ferrovirt.io/kvm=hardware`, and launcher Pods prefer such nodes. The test adds the node
//! when the cluster has none (and removes it again at the end), then, with `examples/vm-cirros.yaml`
//! tolerating the node's `ferrovirt.io/nested-kvm` taint and nothing else changed: `virtctl
//! start`, the VMI Running on the KVM node by the launcher Pod's preference alone, its
//! `SoftwareEmulation` condition False with reason `Kvm`, `virtctl console` (login, a command),
//! virt-handler's launcher memory on this cgroup v2 node within 10% of the launcher Pod's
//! cgroup files, `virtctl pause` / `unpause` (the shell answers again), `virtctl stop`.
//!
//! Everything on the node runs under software emulation, with the guest one level further
//! down: the times printed are only for comparing runs of this test with each other.

use std::time::{Duration, Instant};

use api::VirtualMachineInstance;
use ferrovirt_tests::console::ConsoleSession;
use ferrovirt_tests::kvm_node::{start_getting_started_vm, tolerations, KvmNode};
use ferrovirt_tests::metrics::check_launcher_memory;
use ferrovirt_tests::{client, virtctl, virtctl_binary, vmi_condition, wait_for, TestNamespace};
use kube::Api;

const NODE: &str = "ferrovirt-kvm1";
const VM: &str = "on-kvm";
/// Starting the VMI there: image pulls and the launcher under TCG, the guest on nested KVM.
const START: Duration = Duration::from_secs(600);
const USER: &str = "cirros";
const PASSWORD: &str = "gocubsgo";

async fn paused(vmis: &Api<VirtualMachineInstance>, paused: bool) {
    wait_for(
        &format!("VMI {VM} with Paused condition {paused}"),
        Duration::from_secs(120),
        || async {
            let vmi = vmis.get_opt(VM).await.ok()??;
            let is = vmi_condition(&vmi, "Paused").is_some_and(|c| c.status == "True");
            (is == paused).then_some(())
        },
    )
    .await
}

fn console_session(namespace: &str, first: bool) -> Result<String, String> {
    let mut console = ConsoleSession::open(namespace, VM)?;
    if first {
        console.login(USER, PASSWORD, START)?;
        console.run("echo on-kvm-$((6*7)) $(id -un)", "on-kvm-42 cirros")?;
    } else {
        console.prompt("$ ", Duration::from_secs(120))?;
        console.run("echo unpaused-$((5+5))", "unpaused-10")?;
    }
    console.escape()
}

async fn console(namespace: &str, first: bool) -> String {
    let namespace = namespace.to_string();
    tokio::task::spawn_blocking(move || console_session(&namespace, first))
        .await
        .expect("the console session thread")
        .unwrap_or_else(|e| panic!("virtctl console: {e}"))
}

#[tokio::test]
async fn getting_started_on_a_kvm_node_runs_the_vm_on_ferrovirts_vmm() {
    let client = client().await;
    virtctl_binary();
    let node = KvmNode::ensure(&client, NODE).await;
    let labels = node.labels(&client).await;
    assert_eq!(
        labels.get(contract::labels::KVM).map(String::as_str),
        Some(contract::labels::KVM_HARDWARE),
        "virt-handler on {NODE} probed its /dev/kvm: {labels:?}"
    );

    let namespace = TestNamespace::create(&client, "e2e-kvm-node").await;
    let ns = namespace.name.as_str();
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    let vmi = start_getting_started_vm(&client, ns, VM, START).await;
    println!(
        "VMI {VM} Running {:.1}s after virtctl start",
        started.elapsed().as_secs_f64()
    );
    let status = vmi.status.as_ref().expect("a status");
    assert_eq!(
        status.node_name.as_deref(),
        Some(NODE),
        "the launcher Pod's preference for ferrovirt.io/kvm=hardware put the VMI on the KVM node"
    );
    let emulation =
        vmi_condition(&vmi, "SoftwareEmulation").expect("a SoftwareEmulation condition");
    println!(
        "SoftwareEmulation: {} reason {:?}: {:?}",
        emulation.status, emulation.reason, emulation.message
    );
    assert_eq!(emulation.status, "False", "{emulation:?}");
    assert_eq!(emulation.reason.as_deref(), Some("Kvm"), "{emulation:?}");
    if let Some(boot) = vmi_condition(&vmi, "BootSource") {
        println!("BootSource: {:?}: {:?}", boot.reason, boot.message);
    }

    let transcript = console(ns, true).await;
    println!(
        "console, {:.1}s after virtctl start:\n{}",
        started.elapsed().as_secs_f64(),
        transcript
    );

    // The node runs cgroup v2 only: virt-handler's launcher memory there, held against the
    // launcher Pod's cgroup files read on the node.
    let pod_uid = status
        .active_pods
        .as_ref()
        .and_then(|pods| pods.keys().next().cloned())
        .expect("a Running VMI names its launcher Pod in status.activePods");
    let check = check_launcher_memory(&client, ns, NODE, VM, &pod_uid, tolerations(), 0.10).await;
    println!("launcher memory on {NODE}: {}", check.summary());
    check.assert_holds(2, "the KVM node's kubelet runs on cgroup v2", 0.10);

    let out = virtctl(ns, &["pause", "vmi", VM]);
    assert_eq!(out.code, Some(0), "virtctl pause: {out:?}");
    paused(&vmis, true).await;
    let out = virtctl(ns, &["unpause", "vmi", VM]);
    assert_eq!(out.code, Some(0), "virtctl unpause: {out:?}");
    paused(&vmis, false).await;
    console(ns, false).await;

    let out = virtctl(ns, &["stop", VM]);
    assert_eq!(out.code, Some(0), "virtctl stop: {out:?}");
    wait_for(&format!("VMI {VM} to be gone"), START, || async {
        vmis.get_opt(VM).await.ok()?.is_none().then_some(())
    })
    .await;
}
