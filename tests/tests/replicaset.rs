//! A VirtualMachineInstanceReplicaSet on the local cluster, as KubeVirt's replica set tests use
//! one: guestless VMIs from its template reach Running and Ready and are counted in its status
//! (`replicas`, `readyReplicas`, `labelSelector`); `kubectl scale` and a patch of
//! `spec.replicas` scale it up and down; a deleted VMI is replaced; `paused` stops the scaling
//! with the `ReplicaPaused` condition until it is lifted; its events are KubeVirt's.

use std::collections::BTreeSet;
use std::time::Duration;

use api::{VirtualMachineInstance, VirtualMachineInstanceReplicaSet};
use ferrovirt_tests::{client, kubectl, wait_for, TestNamespace};
use k8s_openapi::api::core::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

const NAME: &str = "rs-guestless";
const TIMEOUT: Duration = Duration::from_secs(240);

fn replica_set(replicas: i32) -> VirtualMachineInstanceReplicaSet {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceReplicaSet",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "domain": {"devices": {}, "memory": {"guest": "16Mi"}, "resources": {}},
                    "terminationGracePeriodSeconds": 0
                }
            }
        }
    }))
    .expect("a replica set")
}

/// The names of the replica set's VMIs that are not being deleted.
async fn live_vmis(vmis: &Api<VirtualMachineInstance>) -> BTreeSet<String> {
    vmis.list(&ListParams::default().labels(&format!("app={NAME}")))
        .await
        .expect("VMIs listed")
        .items
        .into_iter()
        .filter(|v| v.metadata.deletion_timestamp.is_none())
        .map(|v| v.name_any())
        .collect()
}

/// Waits until the status says `replicas` and `ready` and that many VMIs are live.
async fn wait_counts(
    sets: &Api<VirtualMachineInstanceReplicaSet>,
    vmis: &Api<VirtualMachineInstance>,
    replicas: i32,
    ready: i32,
) -> BTreeSet<String> {
    wait_for(
        &format!("{NAME} to have {replicas} replicas, {ready} ready"),
        TIMEOUT,
        || async {
            let status = sets.get(NAME).await.ok()?.status?;
            let live = live_vmis(vmis).await;
            (status.replicas == Some(replicas)
                && status.ready_replicas == Some(ready)
                && live.len() == replicas as usize)
                .then_some(live)
        },
    )
    .await
}

async fn patch_spec(sets: &Api<VirtualMachineInstanceReplicaSet>, spec: serde_json::Value) {
    sets.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({ "spec": spec })),
    )
    .await
    .expect("replica set patched");
}

#[tokio::test]
async fn a_replica_set_scales_replaces_pauses_and_reports_its_replicas() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-vmirs").await;
    let ns = namespace.name.as_str();
    let sets: Api<VirtualMachineInstanceReplicaSet> = Api::namespaced(client.clone(), ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let created = sets
        .create(&PostParams::default(), &replica_set(2))
        .await
        .expect("replica set created");
    let uid = created.uid().expect("the replica set has a UID");

    // 1. Two VMIs from the template, named after the replica set, controlled by it.
    let two = wait_counts(&sets, &vmis, 2, 2).await;
    for name in &two {
        assert!(
            name.starts_with(NAME),
            "VMI {name} is not named after {NAME}"
        );
        let vmi = vmis.get(name).await.expect("VMI read");
        let owner = &vmi.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("VirtualMachineInstanceReplicaSet", uid.as_str(), Some(true))
        );
    }
    let status = sets.get(NAME).await.expect("read").status.expect("status");
    assert_eq!(status.label_selector.as_deref(), Some("app=rs-guestless"));

    // 2. Up by `kubectl scale`, through the scale subresource.
    let scaled = kubectl(ns, &["scale", "vmirs", NAME, "--replicas=3"]);
    assert_eq!(scaled.code, Some(0), "kubectl scale: {scaled:?}");
    let three = wait_counts(&sets, &vmis, 3, 3).await;
    assert!(
        three.is_superset(&two),
        "scaling up replaced VMIs: {two:?} -> {three:?}"
    );

    // 3. A deleted VMI is replaced by a new one.
    let victim = three.iter().next().expect("a VMI").clone();
    vmis.delete(&victim, &DeleteParams::default())
        .await
        .expect("VMI deleted");
    let replaced = wait_for("the deleted VMI to be replaced", TIMEOUT, || async {
        let live = live_vmis(&vmis).await;
        (live.len() == 3 && !live.contains(&victim)).then_some(live)
    })
    .await;
    assert_eq!(replaced.intersection(&three).count(), 2);

    // 4. Down by a patch of spec.replicas.
    patch_spec(&sets, serde_json::json!({"replicas": 1})).await;
    wait_counts(&sets, &vmis, 1, 1).await;

    // 5. Paused: scaling up does nothing, and the condition says why; resumed, it scales.
    patch_spec(&sets, serde_json::json!({"paused": true, "replicas": 2})).await;
    wait_for("the ReplicaPaused condition", TIMEOUT, || async {
        let status = sets.get(NAME).await.ok()?.status?;
        api::condition::find(&status.conditions, "ReplicaPaused")
            .filter(|c| c.is_true())
            .map(|_| ())
    })
    .await;
    // An observation window, not a wait for a condition: the replica set must stay at one.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        live_vmis(&vmis).await.len(),
        1,
        "a paused replica set scaled"
    );
    patch_spec(&sets, serde_json::json!({"paused": false})).await;
    let resumed = wait_counts(&sets, &vmis, 2, 2).await;
    let status = sets.get(NAME).await.expect("read").status.expect("status");
    assert!(
        api::condition::find(&status.conditions, "ReplicaPaused").is_none(),
        "ReplicaPaused stayed after resuming: {:?}",
        status.conditions
    );
    assert_eq!(resumed.len(), 2);

    // 6. KubeVirt's events on the replica set.
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let reasons: BTreeSet<String> = events
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .expect("events listed")
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in [
        "SuccessfulCreate",
        "SuccessfulDelete",
        "SuccessfulPaused",
        "SuccessfulResumed",
    ] {
        assert!(reasons.contains(reason), "no {reason} event: {reasons:?}");
    }
}
