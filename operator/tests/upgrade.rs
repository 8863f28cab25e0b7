//! Upgrade between two builds of the images, with a VM running through it (run alone by
//! hack/test.sh, after the other tests: it rolls every component).
//!
//! The second build is `hack/images.sh` with `FERROVIRT_BUILD_MARKER` set: the same binaries
//! with a marker file added to every image (and to the tag's hash), so the images differ in
//! content and tag, not only in name. The operator Deployment's image is then changed to the
//! new tag (`kubectl set image`, as an upgrade changes it); every component must roll to the
//! new tag while the VMI keeps running: same UID, Running at every look, the same launcher Pod
//! and the same launcher process (the VM was never restarted). Then back to the first build,
//! the same way, so the cluster ends as hack/up.sh left it; when an assertion fails, the
//! operator is set back to the first build all the same. The cluster lock is held throughout
//! (`ClusterChange`).

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use api::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use common::*;
use ferrovirt_tests::{client, launcher_pids, tiny_vm, wait_for, ClusterChange, TestNamespace};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

/// Builds the images again with a marker; returns the new tag.
fn build_marked_images(marker: &str) -> String {
    let out = Command::new(repo().join("hack/images.sh"))
        .env("FERROVIRT_BUILD_MARKER", marker)
        .output()
        .unwrap_or_else(|e| panic!("running hack/images.sh: {e}"));
    assert!(
        out.status.success(),
        "hack/images.sh with a marker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .last()
        .map(str::trim)
        .filter(|t| t.starts_with("devel-"))
        .unwrap_or_else(|| panic!("hack/images.sh printed no tag: {stdout}"))
        .to_string()
}

/// Sets the operator Deployment back to `tag` when dropped during a panic (a failed assertion
/// mid-upgrade); the operator then rolls every component back.
struct OperatorTag(String);

impl Drop for OperatorTag {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = kubectl(&[
                "-n",
                NS,
                "set",
                "image",
                "deployment/virt-operator",
                &format!(
                    "virt-operator=registry:5000/ferrovirt/virt-operator:{}",
                    self.0
                ),
            ]);
        }
    }
}

/// The images the components' running pods run.
async fn running_images(client: &Client) -> BTreeSet<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut images = BTreeSet::new();
    for component in ["virt-api", "virt-controller", "virt-handler"] {
        let list = pods
            .list(&ListParams::default().labels(&format!("kubevirt.io={component}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for pod in list {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            for c in pod.spec.map(|s| s.containers).unwrap_or_default() {
                images.insert(c.image.unwrap_or_default());
            }
        }
    }
    images
}

/// Rolls the operator to `tag`, checking the VMI at every look until every component runs
/// `tag`.
async fn roll_to(
    client: &Client,
    tag: &str,
    vmis: &Api<VirtualMachineInstance>,
    vmi_uid: &str,
) -> Duration {
    let started = Instant::now();
    kubectl_ok(&[
        "-n",
        NS,
        "set",
        "image",
        "deployment/virt-operator",
        &format!("virt-operator=registry:5000/ferrovirt/virt-operator:{tag}"),
    ]);
    let want: BTreeSet<String> = ["virt-api", "virt-controller", "virt-handler"]
        .iter()
        .map(|c| format!("registry:5000/ferrovirt/{c}:{tag}"))
        .collect();
    wait_for(&format!("every component at {tag}"), DEPLOY, || async {
        let vmi = vmis
            .get("op-upgrade")
            .await
            .expect("the VMI exists through the upgrade");
        assert_eq!(
            vmi.metadata.uid.as_deref(),
            Some(vmi_uid),
            "the VMI was replaced"
        );
        assert_eq!(
            vmi.status.and_then(|s| s.phase),
            Some(VmiPhase::Running),
            "the VMI left Running during the upgrade"
        );
        (running_images(client).await == want).then_some(())
    })
    .await;
    wait_deployed(client, tag).await;
    let elapsed = started.elapsed();
    for (name, image) in component_images(client).await {
        assert_eq!(
            image,
            Some(format!("registry:5000/ferrovirt/{name}:{tag}")),
            "{name}"
        );
    }
    // New VMIs get the new launcher.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), NS);
    let controller = deployments
        .get("virt-controller")
        .await
        .expect("virt-controller");
    let env = controller
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers[0].env.clone().unwrap_or_default())
        .unwrap_or_default();
    let launcher = env
        .iter()
        .find(|e| e.name == "LAUNCHER_IMAGE")
        .and_then(|e| e.value.clone());
    assert_eq!(
        launcher,
        Some(format!("registry:5000/ferrovirt/virt-launcher:{tag}"))
    );
    elapsed
}

#[tokio::test]
async fn components_roll_to_a_new_build_while_a_vm_keeps_running() {
    let _change = ClusterChange::begin().await;
    let client = client().await;
    let first = ensure_installed(&client).await;
    let _first_back = OperatorTag(first.clone());
    let second = build_marked_images(&format!("upgrade test from {first}"));
    assert_ne!(second, first, "the marked build must have its own tag");

    let ns = TestNamespace::create(&client, "operator-upgrade").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    vms.create(
        &PostParams::default(),
        &tiny_vm("op-upgrade", "Always", "#!/bin/sh\necho upgrade\n"),
    )
    .await
    .expect("creating VM op-upgrade");
    let vmi = wait_for("VMI op-upgrade Running", START, || async {
        let vmi = vmis.get_opt("op-upgrade").await.ok()??;
        (vmi.status.as_ref()?.phase? == VmiPhase::Running).then_some(vmi)
    })
    .await;
    let uid = vmi.metadata.uid.clone().expect("a UID");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let launcher_pod = || async {
        pods.list(&ListParams::default().labels(&format!("{}={uid}", contract::labels::CREATED_BY)))
            .await
            .expect("listing launcher pods")
            .items
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect::<Vec<_>>()
    };
    let pod_before = launcher_pod().await;
    assert_eq!(pod_before.len(), 1, "one launcher Pod for the VMI");
    let pids_before = launcher_pids(&uid);
    assert!(
        !pids_before.is_empty(),
        "no virt-launcher process for {uid}"
    );

    let up = roll_to(&client, &second, &vmis, &uid).await;
    eprintln!("upgrade {first} -> {second}: every component rolled in {up:?}");
    assert_eq!(
        launcher_pod().await,
        pod_before,
        "the launcher Pod was replaced"
    );
    assert_eq!(
        launcher_pids(&uid),
        pids_before,
        "the launcher process was restarted"
    );

    let back = roll_to(&client, &first, &vmis, &uid).await;
    eprintln!("back {second} -> {first}: every component rolled in {back:?}");
    assert_eq!(
        launcher_pod().await,
        pod_before,
        "the launcher Pod was replaced"
    );
    assert_eq!(
        launcher_pids(&uid),
        pids_before,
        "the launcher process was restarted"
    );
    drop(ns);
}
