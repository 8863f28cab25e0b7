//! The components' Prometheus metrics on the local cluster, after a VMI ran: virt-controller's
//! `kubevirt_vmi_phase_transition_time_from_creation_seconds` histogram counts the VMI's Running
//! transition, and virt-handler's `kubevirt_vmi_launcher_memory_overhead_bytes` reports its
//! launcher Pod. Both are scraped through the API server's Pod proxy, as Prometheus would reach
//! them on the Pod network. The handler's working set is held against the launcher Pod's cgroup
//! files, read on the node (cgroup v1 here; `kvm_node.rs` does it on a cgroup v2 node).

use std::time::Duration;

use api::{VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::metrics::{check_launcher_memory, component_pod, sample, scrape};
use ferrovirt_tests::{client, tiny_vmi_spec, wait_for, wait_running, TestNamespace};
use kube::api::PostParams;
use kube::Api;

#[tokio::test]
async fn scraping_returns_the_vmi_metrics_after_a_vmi_ran() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-metrics").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi-metrics"},
        "spec": tiny_vmi_spec("#!/bin/sh\necho metrics\n"),
    }))
    .expect("a VMI");
    vmis.create(&PostParams::default(), &vmi)
        .await
        .expect("VMI created");
    let running = wait_running(&vmis, "vmi-metrics", Duration::from_secs(240)).await;
    let node = running
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a Running VMI has a node");
    let phases: Vec<VmiPhase> = running
        .status
        .as_ref()
        .map(|s| {
            s.phase_transition_timestamps
                .iter()
                .map(|t| t.phase)
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        phases,
        [
            VmiPhase::Pending,
            VmiPhase::Scheduling,
            VmiPhase::Scheduled,
            VmiPhase::Running
        ],
        "status.phaseTransitionTimestamps records every phase"
    );

    let controller = component_pod(&client, "virt-controller", None).await;
    let histogram = wait_for(
        "virt-controller's histogram to count a Running transition",
        Duration::from_secs(60),
        || async {
            let page = scrape(&client, &controller).await.ok()?;
            let count = sample(
                &page,
                "kubevirt_vmi_phase_transition_time_from_creation_seconds_count{phase=\"Running\"}",
            )?;
            (count >= 1.0).then_some(page)
        },
    )
    .await;
    assert!(histogram
        .contains("# TYPE kubevirt_vmi_phase_transition_time_from_creation_seconds histogram"));
    assert!(histogram.contains(
        "kubevirt_vmi_phase_transition_time_from_creation_seconds_bucket{phase=\"Running\",le=\"+Inf\"}"
    ));

    // The launcher Pod's cgroup files, read on the node by a Pod of the test's own (the netns
    // nodes share this host's cgroup v1 tree), hold virt-handler's working set to account.
    let pod_uid = running
        .status
        .as_ref()
        .and_then(|s| s.active_pods.as_ref())
        .and_then(|pods| pods.keys().next().cloned())
        .expect("a Running VMI names its launcher Pod in status.activePods");
    let check = check_launcher_memory(
        &client,
        &namespace.name,
        &node,
        "vmi-metrics",
        &pod_uid,
        serde_json::json!([]),
        0.10,
    )
    .await;
    println!("launcher memory on {node}: {}", check.summary());
    check.assert_holds(1, "the netns nodes are on this host's cgroup v1", 0.10);
    // The launcher Pod holds at least the launcher and QEMU besides the guest's RAM; the guest
    // has not touched more than its 128 MiB.
    assert!(check.guest_resident <= (128u64 << 20) as f64, "{check:?}");
}
