//! The components' Prometheus metrics on the local cluster, after a VMI ran: virt-controller's
//! `kubevirt_vmi_phase_transition_time_from_creation_seconds` histogram counts the VMI's Running
//! transition, and virt-handler's `kubevirt_vmi_launcher_memory_overhead_bytes` reports its
//! launcher Pod. Both are scraped through the API server's Pod proxy, as Prometheus would reach
//! them on the Pod network.

use std::time::Duration;

use api::{VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::{client, tiny_vmi_spec, wait_for, wait_running, TestNamespace};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

const METRICS_PORT: u16 = 8080;

/// The value of the sample whose line starts with `prefix` (name and labels).
fn sample(page: &str, prefix: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn scrape(client: &Client, pod: &str) -> Result<String, String> {
    let path = format!("/api/v1/namespaces/kubevirt/pods/{pod}:{METRICS_PORT}/proxy/metrics");
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client
        .request_text(request)
        .await
        .map_err(|e| e.to_string())
}

/// The Running pod of `component` (on `node` when given).
async fn component_pod(client: &Client, component: &str, node: Option<&str>) -> String {
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

    let handler = component_pod(&client, "virt-handler", Some(&node)).await;
    let labels = format!(
        "{{namespace=\"{}\",name=\"vmi-metrics\",node=\"{node}\"}}",
        namespace.name
    );
    let (overhead, guest) = wait_for(
        "virt-handler's launcher memory overhead of the VMI",
        Duration::from_secs(60),
        || async {
            let page = scrape(&client, &handler).await.ok()?;
            let overhead = sample(
                &page,
                &format!("kubevirt_vmi_launcher_memory_overhead_bytes{labels}"),
            )?;
            let guest = sample(
                &page,
                &format!("ferrovirt_vmi_guest_memory_resident_bytes{labels}"),
            )?;
            (guest > 0.0).then_some((overhead, guest))
        },
    )
    .await;
    // The launcher Pod holds at least the launcher and QEMU besides the guest's RAM; the guest
    // has not touched more than its 128 MiB.
    assert!(overhead > 0.0, "overhead {overhead}");
    assert!(guest <= (128u64 << 20) as f64, "guest resident {guest}");
}
