//! The KubeVirt CR's `developerConfiguration.memoryOvercommit` on the local cluster: a new VMI
//! that gives 128Mi of guest memory and requests none is stored requesting 128Mi at KubeVirt's
//! default of 100, and half of it with 200 (virt-api's mutating webhook, as KubeVirt's); its
//! launcher Pod then requests less memory than the same VMI's without overcommit, and the VMI
//! runs with its 128Mi.

use std::time::Duration;

use api::VirtualMachineInstance;
use ferrovirt_tests::cluster_lock::ClusterChange;
use ferrovirt_tests::{
    client, patch_kubevirt_cr, tiny_vmi_spec, wait_for, wait_running, TestNamespace,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::Api;

const GUEST: &str = "128Mi";

fn vmi(name: &str) -> VirtualMachineInstance {
    let mut spec = tiny_vmi_spec("#!/bin/sh\necho hi\n");
    spec["domain"]["memory"] = serde_json::json!({"guest": GUEST});
    spec["domain"]
        .as_object_mut()
        .expect("a domain")
        .remove("resources");
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("a VMI")
}

fn memory_request(vmi: &VirtualMachineInstance) -> Option<String> {
    let requests = vmi.spec.domain.resources.as_ref()?.requests.as_ref()?;
    Some(requests.get("memory")?.0.clone())
}

/// The memory the launcher Pod of the VMI with `uid` requests, summed over its containers.
async fn pod_memory_request(pods: &Api<Pod>, uid: &str) -> u64 {
    let params = ListParams::default().labels(&format!("kubevirt.io/created-by={uid}"));
    let pod = pods.list(&params).await.expect("pods listed").items;
    let pod = pod.first().expect("the launcher Pod");
    let spec = pod.spec.as_ref().expect("a Pod spec");
    spec.containers
        .iter()
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("memory"))
        .map(|q| api::quantity::to_u64(q).expect("a quantity"))
        .sum()
}

#[tokio::test]
async fn memory_overcommit_halves_the_request_of_a_new_vmi() {
    let _alone = ClusterChange::begin().await;
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-overcommit").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);

    let plain = vmis
        .create(&PostParams::default(), &vmi("plain"))
        .await
        .expect("VMI created");
    assert_eq!(
        memory_request(&plain).as_deref(),
        Some(GUEST),
        "at 100 the VMI requests its guest memory"
    );
    let plain = wait_running(&vmis, "plain", Duration::from_secs(300)).await;
    let plain_pod = pod_memory_request(&pods, plain.metadata.uid.as_deref().unwrap()).await;

    let out = patch_kubevirt_cr(&serde_json::json!({
        "spec": {"configuration": {"developerConfiguration": {"memoryOvercommit": 200}}}
    }));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // virt-api follows the CR by a watch: ask with dry runs until it applies the new setting.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let half = (64 * 1024 * 1024).to_string();
    wait_for(
        "virt-api applying memoryOvercommit 200",
        Duration::from_secs(60),
        || async {
            let created = vmis.create(&dry_run, &vmi("overcommitted")).await.ok()?;
            (memory_request(&created) == Some(half.clone())).then_some(())
        },
    )
    .await;
    let created = vmis
        .create(&PostParams::default(), &vmi("overcommitted"))
        .await
        .expect("VMI created");
    assert_eq!(memory_request(&created), Some(half));
    let running = wait_running(&vmis, "overcommitted", Duration::from_secs(300)).await;
    let guest = running
        .spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.guest.clone());
    assert_eq!(
        guest.map(|q| q.0),
        Some(GUEST.to_string()),
        "the guest keeps its memory"
    );
    let pod = pod_memory_request(&pods, running.metadata.uid.as_deref().unwrap()).await;
    assert_eq!(
        plain_pod - pod,
        64 * 1024 * 1024,
        "the launcher Pod requests 64Mi less ({plain_pod} without overcommit, {pod} with)"
    );
}
