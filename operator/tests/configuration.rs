//! `spec.configuration` of the KubeVirt CR reaches the components without a restart, as in
//! KubeVirt (they watch the CR): with `developerConfiguration.useEmulation: true` the next
//! VMI's launcher Pod asks for no `/dev/kvm` and the VMI runs (QEMU TCG); with it off again the
//! next one asks for `/dev/kvm`. virt-controller's Pod is the same throughout. Settings
//! Ferrovirt cannot honour (post-copy, a bandwidth that is no quantity, a certificate renewed
//! before it is issued) are refused by virt-api's webhook with their field paths, and the CR
//! stays as it was. Each test holds the cluster lock (`ferrovirt_tests::ClusterChange`) from
//! before it reads the CR until it has put the CR's spec back, even when an assertion fails.

mod common;

use std::time::Duration;

use api::{VirtualMachineInstance, VmiPhase};
use common::*;
use ferrovirt_tests::{client, tiny_vmi_spec, wait_for, ClusterChange, TestNamespace};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

const KVM: &str = contract::resources::KVM;

async fn set_emulation(client: &Client, on: Option<bool>) {
    kubevirts(client)
        .patch(
            "kubevirt",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"configuration": {
                "developerConfiguration": {"useEmulation": on}}}})),
        )
        .await
        .expect("patching the KubeVirt CR");
}

async fn controller_pods(client: &Client) -> Vec<String> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels("kubevirt.io=virt-controller"))
        .await
        .expect("listing virt-controller pods")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect()
}

/// Creates VMI `name` and returns whether its launcher Pod asks for /dev/kvm, and whether
/// the VMI reached Running.
async fn start_vmi(client: &Client, ns: &str, name: &str) -> (bool, bool) {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": tiny_vmi_spec("#!/bin/sh\necho configuration\n"),
    }))
    .expect("a VMI");
    let created = vmis
        .create(&PostParams::default(), &vmi)
        .await
        .expect("creating the VMI");
    let uid = created.metadata.uid.expect("a UID");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = wait_for(
        &format!("the launcher Pod of {name}"),
        Duration::from_secs(60),
        || async {
            pods.list(
                &ListParams::default().labels(&format!("{}={uid}", contract::labels::CREATED_BY)),
            )
            .await
            .ok()?
            .items
            .into_iter()
            .next()
        },
    )
    .await;
    let asks_kvm = pod.spec.is_some_and(|s| {
        s.containers.iter().any(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .is_some_and(|r| r.contains_key(KVM))
        })
    });
    let deadline = std::time::Instant::now() + START;
    let mut running = false;
    while std::time::Instant::now() < deadline {
        let phase = vmis
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|v| v.status?.phase);
        if phase == Some(VmiPhase::Running) {
            running = true;
            break;
        }
        if phase == Some(VmiPhase::Failed) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    (asks_kvm, running)
}

#[tokio::test]
async fn use_emulation_reaches_the_components_without_a_restart() {
    let change = ClusterChange::begin().await;
    let client = client().await;
    let tag = ensure_installed(&client).await;
    let controllers = controller_pods(&client).await;
    let ns = TestNamespace::create(&client, "operator-config").await;

    set_emulation(&client, Some(true)).await;
    // The components follow the CR through their watch; give it a moment to arrive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let emulated = start_vmi(&client, &ns.name, "emulated").await;
    change.restore_kubevirt_spec();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (native_asks_kvm, _) = start_vmi(&client, &ns.name, "native").await;

    assert!(
        !emulated.0,
        "with useEmulation the launcher Pod still asks for {KVM}"
    );
    assert!(emulated.1, "the VMI did not run under emulation");
    assert!(
        native_asks_kvm,
        "without useEmulation the launcher Pod asks for no {KVM}"
    );
    assert_eq!(
        controller_pods(&client).await,
        controllers,
        "virt-controller restarted"
    );
    // The CR change is configuration only: the install stays Deployed at its version.
    wait_deployed(&client, &tag).await;
    drop(ns);
}

#[tokio::test]
async fn settings_ferrovirt_cannot_honour_are_refused_with_their_paths() {
    let _change = ClusterChange::begin().await;
    let client = client().await;
    ensure_installed(&client).await;
    let refused = |patch: serde_json::Value| {
        let client = client.clone();
        async move {
            let answer = kubevirts(&client)
                .patch("kubevirt", &PatchParams::default(), &Patch::Merge(patch))
                .await;
            match answer {
                Err(kube::Error::Api(e)) => e.message,
                other => panic!("the CR change was not refused: {other:?}"),
            }
        }
    };
    let why = refused(
        serde_json::json!({"spec": {"configuration": {"migrations": {
        "allowPostCopy": true, "bandwidthPerMigration": "fast"}}}}),
    )
    .await;
    for path in [
        "spec.configuration.migrations.allowPostCopy",
        "spec.configuration.migrations.bandwidthPerMigration",
    ] {
        assert!(why.contains(path), "{path} missing from: {why}");
    }
    let why = refused(serde_json::json!({"spec": {"certificateRotateStrategy": {
        "selfSigned": {"server": {"duration": "1h", "renewBefore": "2h"}}}}}))
    .await;
    assert!(
        why.contains("spec.certificateRotateStrategy.selfSigned.server.renewBefore"),
        "{why}"
    );
    let spec = kubevirts(&client)
        .get("kubevirt")
        .await
        .expect("the KubeVirt CR")
        .spec;
    // Nothing of the refused change landed. (An empty `certificateRotateStrategy: {}` may be
    // there: a Go client's update of the CR, e.g. by KubeVirt's own test suite, writes one.)
    assert!(
        spec.certificate_rotate_strategy
            .as_ref()
            .is_none_or(|s| s.self_signed.is_none()),
        "{spec:?}"
    );
    let migrations = spec.configuration.and_then(|c| c.migrations);
    assert!(migrations.is_none(), "{migrations:?}");
}
