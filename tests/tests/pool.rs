//! A VirtualMachinePool (`pool.kubevirt.io/v1beta1`) on the local cluster, as KubeVirt's pool
//! tests use one: three VMs named `<pool>-0..2`, each with the pool as controller and the
//! pool's finalizer, whose guestless VMIs reach Running and are counted in the pool's status;
//! `kubectl scale` scales in by the selection policy (highest index first) and out again at the
//! lowest free index; a deleted VM comes back under its name with a new UID; a change of the
//! VMI template restarts the VMIs with it; an invalid pool is refused by KubeVirt's webhook
//! name; deleting the pool deletes its VMs.

use std::collections::BTreeSet;
use std::time::Duration;

use api::pool::{FINALIZER, REVISION_LABEL};
use api::{VirtualMachine, VirtualMachineInstance, VirtualMachinePool};
use ferrovirt_tests::{client, kubectl, wait_for, TestNamespace};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const NAME: &str = "pool-guestless";
const TIMEOUT: Duration = Duration::from_secs(240);

fn pool(replicas: i32, selector_app: &str) -> VirtualMachinePool {
    serde_json::from_value(json!({
        "apiVersion": "pool.kubevirt.io/v1beta1",
        "kind": "VirtualMachinePool",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": selector_app}},
            "scaleInStrategy": {"proactive": {"selectionPolicy": {"sortPolicy": "DescendingOrder"}}},
            "virtualMachineTemplate": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "runStrategy": "Always",
                    "template": {
                        "metadata": {"labels": {"app": NAME}},
                        "spec": {
                            "domain": {"devices": {}, "memory": {"guest": "16Mi"}, "resources": {}},
                            "terminationGracePeriodSeconds": 0
                        }
                    }
                }
            }
        }
    }))
    .expect("a pool")
}

/// The pool's VMs that are not being deleted, by name.
async fn live_vms(vms: &Api<VirtualMachine>) -> BTreeSet<String> {
    vms.list(&ListParams::default().labels(&format!("app={NAME}")))
        .await
        .expect("VMs listed")
        .items
        .into_iter()
        .filter(|v| v.metadata.deletion_timestamp.is_none())
        .map(|v| v.name_any())
        .collect()
}

fn names(indexes: &[u32]) -> BTreeSet<String> {
    indexes.iter().map(|i| format!("{NAME}-{i}")).collect()
}

/// Waits until the status says `replicas` ready and the live VMs are exactly `want`.
async fn wait_vms(
    pools: &Api<VirtualMachinePool>,
    vms: &Api<VirtualMachine>,
    want: &BTreeSet<String>,
) {
    let n = want.len() as i32;
    wait_for(
        &format!("{NAME} to have VMs {want:?}, all ready"),
        TIMEOUT,
        || async {
            let status = pools.get(NAME).await.ok()?.status?;
            let live = live_vms(vms).await;
            (status.replicas == Some(n) && status.ready_replicas == Some(n) && live == *want)
                .then_some(())
        },
    )
    .await
}

#[tokio::test]
async fn a_pool_names_scales_replaces_updates_and_deletes_its_vms() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-vmpool").await;
    let ns = namespace.name.as_str();
    let pools: Api<VirtualMachinePool> = Api::namespaced(client.clone(), ns);
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);

    // 0. A pool whose selector misses its template is refused by KubeVirt's webhook.
    let refused = pools
        .create(&PostParams::default(), &pool(1, "someone-else"))
        .await
        .expect_err("an invalid pool is refused");
    let text = refused.to_string();
    assert!(
        text.contains("virtualmachinepool-validator.kubevirt.io")
            && text.contains("spec.selector")
            && text.contains("selector does not match labels."),
        "{text}"
    );

    // 1. Three VMs <pool>-0..2, controlled by the pool, with its finalizer and revision.
    let created = pools
        .create(&PostParams::default(), &pool(3, NAME))
        .await
        .expect("pool created");
    let uid = created.uid().expect("the pool has a UID");
    wait_vms(&pools, &vms, &names(&[0, 1, 2])).await;
    for name in names(&[0, 1, 2]) {
        let vm = vms.get(&name).await.expect("VM read");
        let owner = &vm.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("VirtualMachinePool", uid.as_str(), Some(true))
        );
        assert!(vm.finalizers().iter().any(|f| f == FINALIZER), "{name}");
        assert_eq!(vm.labels()[REVISION_LABEL], format!("{NAME}-1"));
        let vmi = vmis.get(&name).await.expect("its VMI");
        assert_eq!(vmi.labels()[REVISION_LABEL], format!("{NAME}-1"));
    }
    let pool_now = pools.get(NAME).await.expect("read");
    assert!(pool_now.finalizers().iter().any(|f| f == FINALIZER));
    assert_eq!(
        pool_now.status.and_then(|s| s.label_selector).as_deref(),
        Some("app=pool-guestless")
    );
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
    revisions
        .get(&format!("{NAME}-1"))
        .await
        .expect("the revision of generation 1");

    // 2. In by `kubectl scale` (the scale subresource): highest index first; out again at
    // the lowest free index.
    let scaled = kubectl(ns, &["scale", "vmpool", NAME, "--replicas=1"]);
    assert_eq!(scaled.code, Some(0), "kubectl scale: {scaled:?}");
    wait_vms(&pools, &vms, &names(&[0])).await;
    let scaled = kubectl(ns, &["scale", "vmpool", NAME, "--replicas=2"]);
    assert_eq!(scaled.code, Some(0), "kubectl scale: {scaled:?}");
    wait_vms(&pools, &vms, &names(&[0, 1])).await;

    // 3. A deleted VM comes back under its name, as a new object.
    let victim = format!("{NAME}-1");
    let old_uid = vms.get(&victim).await.expect("read").uid();
    vms.delete(&victim, &DeleteParams::default())
        .await
        .expect("VM deleted");
    wait_for("the deleted VM to be replaced", TIMEOUT, || async {
        let vm = vms.get(&victim).await.ok()?;
        (vm.uid() != old_uid && vm.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    wait_vms(&pools, &vms, &names(&[0, 1])).await;

    // 4. A change of the VMI template: the VMs are rewritten and their VMIs restarted with it.
    let patched = pools
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{
                    "op": "add",
                    "path": "/spec/virtualMachineTemplate/spec/template/metadata/labels/newlabel",
                    "value": "newvalue"
                }]))
                .expect("a JSON patch"),
            ),
        )
        .await
        .expect("pool patched");
    // Each spec change (the scales too) is a new generation, and so a new revision.
    let revision = format!(
        "{NAME}-{}",
        patched.metadata.generation.expect("a generation")
    );
    wait_for("every VMI to carry the new label", TIMEOUT, || async {
        let list = vmis
            .list(&ListParams::default().labels("newlabel=newvalue"))
            .await
            .ok()?;
        let running: BTreeSet<String> = list
            .items
            .iter()
            .filter(|v| {
                v.status.as_ref().and_then(|s| s.phase) == Some(api::VmiPhase::Running)
                    && v.labels().get(REVISION_LABEL) == Some(&revision)
            })
            .map(|v| v.name_any())
            .collect();
        (running == names(&[0, 1])).then_some(())
    })
    .await;
    wait_for(
        "the revision of generation 1 to be pruned",
        TIMEOUT,
        || async {
            revisions
                .get_opt(&format!("{NAME}-1"))
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;

    // 5. KubeVirt's events on the pool.
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let reasons: BTreeSet<String> = events
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .expect("events listed")
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in ["SuccessfulCreate", "SuccessfulDelete", "SuccessfulUpdate"] {
        assert!(reasons.contains(reason), "no {reason} event: {reasons:?}");
    }

    // 6. Deleting the pool deletes its VMs.
    pools
        .delete(NAME, &DeleteParams::default())
        .await
        .expect("pool deleted");
    wait_for("the pool and its VMs to be gone", TIMEOUT, || async {
        let gone = pools.get_opt(NAME).await.ok()?.is_none();
        let left = vms
            .list(&ListParams::default().labels(&format!("app={NAME}")))
            .await
            .ok()?
            .items;
        (gone && left.is_empty()).then_some(())
    })
    .await;
}
