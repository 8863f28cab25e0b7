//! VM snapshots and restores (`snapshot.kubevirt.io/v1beta1`) on the local cluster, as KubeVirt's
//! snapshot and restore tests use them: a running VM is snapshotted (locked, stored in a
//! content with KubeVirt's indications and volume lists, unlocked); a restore into it waits
//! while it runs and, once it is stopped, puts the stored spec back; a restore into a new name
//! creates that VM with the restore's patches (a MAC address in KubeVirt's dashed form), and
//! the new VM runs; a restore into another VM that exists fails with KubeVirt's reason;
//! deleting the snapshot deletes its content. Bad snapshots and restores are refused with their
//! paths, and none is admitted while the KubeVirt CR disables the `Snapshot` gate. Clones
//! (`clone.kubevirt.io/v1beta1`) copy a VM with their label filters and new MAC addresses, wait
//! for a snapshot source that does not exist yet; a clone goes when its target VM is deleted.
//! Volume data (a claim's disk written, snapshotted, restored and cloned) is in
//! `snapshot_data.rs`.

use std::time::Duration;

use api::clone::VirtualMachineClone;
use api::snapshot::{
    VirtualMachineRestore, VirtualMachineSnapshot, VirtualMachineSnapshotContent,
    LAST_RESTORE_ANNOTATION, SOURCE_FINALIZER,
};
use api::{VirtualMachine, VirtualMachineInstance};
use ferrovirt_tests::{
    client, patch_kubevirt_cr, set_run_strategy, tiny_vm, wait_for, wait_running, ClusterChange,
    ClusterLock, TestNamespace,
};
use k8s_openapi::api::core::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(180);

fn snapshot(name: &str, vm: &str) -> VirtualMachineSnapshot {
    serde_json::from_value(json!({
        "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineSnapshot",
        "metadata": {"name": name},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm}},
    }))
    .expect("a snapshot")
}

fn restore(name: &str, target: &str, snapshot: &str, patches: &[&str]) -> VirtualMachineRestore {
    serde_json::from_value(json!({
        "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineRestore",
        "metadata": {"name": name},
        "spec": {"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": target},
                 "virtualMachineSnapshotName": snapshot, "patches": patches},
    }))
    .expect("a restore")
}

fn reasons(restore: &VirtualMachineRestore) -> Vec<(String, String, String)> {
    restore
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
            )
        })
        .collect()
}

async fn wait_complete(restores: &Api<VirtualMachineRestore>, name: &str) -> VirtualMachineRestore {
    wait_for(&format!("restore {name} complete"), TIMEOUT, || async {
        let r = restores.get(name).await.ok()?;
        (r.status.as_ref()?.complete == Some(true)).then_some(r)
    })
    .await
}

fn guest_memory(vm: &VirtualMachine) -> Value {
    serde_json::to_value(vm).expect("a VM is JSON")["spec"]["template"]["spec"]["domain"]["memory"]
        ["guest"]
        .clone()
}

#[tokio::test]
async fn a_running_vm_is_snapshotted_and_restored_in_place_and_into_a_new_vm() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "snapshot").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    let snapshots: Api<VirtualMachineSnapshot> = Api::namespaced(client.clone(), &ns.name);
    let contents: Api<VirtualMachineSnapshotContent> = Api::namespaced(client.clone(), &ns.name);
    let restores: Api<VirtualMachineRestore> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();

    let vm = vms
        .create(&pp, &tiny_vm("source", "Always", "#cloud-config\n"))
        .await
        .expect("VM created");
    wait_running(&vmis, "source", TIMEOUT).await;
    let statuses = wait_for("the VM's volume snapshot statuses", TIMEOUT, || async {
        let vm = vms.get("source").await.ok()?;
        let statuses = vm.status?.volume_snapshot_statuses;
        (!statuses.is_empty()).then_some(statuses)
    })
    .await;
    let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["containerdisk", "cloudinitdisk"]);
    assert!(statuses.iter().all(|s| !s.enabled && s.reason.is_some()));

    // The snapshot: locked, stored, unlocked.
    snapshots
        .create(&pp, &snapshot("snap", "source"))
        .await
        .expect("snapshot admitted");
    let taken = wait_for(
        "the snapshot ready and the VM unlocked",
        TIMEOUT,
        || async {
            let s = snapshots.get("snap").await.ok()?;
            let vm = vms.get("source").await.ok()?;
            let unlocked = vm.status.as_ref()?.snapshot_in_progress.is_none()
                && !vm.finalizers().iter().any(|f| f == SOURCE_FINALIZER);
            (s.status.as_ref()?.ready_to_use == Some(true) && unlocked).then_some(s)
        },
    )
    .await;
    let status = taken.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(status.source_uid, vm.metadata.uid);
    assert_eq!(status.indications, ["NoGuestAgent", "Online"]);
    assert!(status.creation_time.is_some());
    assert_eq!(
        status.snapshot_volumes.as_ref().unwrap().excluded_volumes,
        ["containerdisk", "cloudinitdisk"]
    );
    assert!(taken
        .finalizers()
        .iter()
        .any(|f| f == api::snapshot::SNAPSHOT_FINALIZER));
    let content_name = status
        .virtual_machine_snapshot_content_name
        .clone()
        .unwrap();
    assert_eq!(
        content_name,
        format!("vmsnapshot-content-{}", taken.uid().unwrap())
    );
    let content = contents.get(&content_name).await.expect("the content");
    let stored = content.spec.source.virtual_machine.clone().unwrap();
    let now = vms.get("source").await.unwrap();
    assert_eq!(stored.spec, now.spec, "the content holds the VM's spec");
    assert_eq!(stored.metadata.uid, vm.metadata.uid);
    assert_eq!(
        content.spec.virtual_machine_snapshot_name.as_deref(),
        Some("snap")
    );
    assert!(content.spec.volume_backups.is_empty());

    // Changed, then restored while it runs: the restore waits and says why.
    vms.patch(
        "source",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"template": {"spec": {"domain": {"memory": {"guest": "160Mi"}}}}}}),
        ),
    )
    .await
    .expect("memory changed");
    restores
        .create(&pp, &restore("back", "source", "snap", &[]))
        .await
        .expect("restore admitted");
    let waiting = wait_for(
        "the restore waiting for the VM to stop",
        TIMEOUT,
        || async {
            let r = restores.get("back").await.ok()?;
            reasons(&r)
                .iter()
                .any(|(_, _, reason)| reason.starts_with("Waiting for target VM to be powered off"))
                .then_some(r)
        },
    )
    .await;
    assert_eq!(waiting.owner_references()[0].uid, vm.uid().unwrap());
    let second = restores
        .create(&pp, &restore("again", "source", "snap", &[]))
        .await
        .expect_err("a second restore of the same VM is refused");
    assert!(
        second
            .to_string()
            .contains("VirtualMachineRestore \"back\" in progress"),
        "{second}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let not_ready = events
        .list(&ListParams::default().fields("involvedObject.name=back"))
        .await
        .unwrap();
    assert!(
        not_ready
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RestoreTargetNotReady")),
        "{:?}",
        not_ready.items
    );
    set_run_strategy(&vms, "source", "Halted").await;
    let done = wait_complete(&restores, "back").await;
    assert_eq!(
        reasons(&done),
        [
            (
                "Progressing".into(),
                "False".into(),
                "Operation complete".into()
            ),
            ("Ready".into(), "True".into(), "Operation complete".into()),
        ]
    );
    assert!(done.status.as_ref().unwrap().restore_time.is_some());
    let restored = vms.get("source").await.unwrap();
    assert_eq!(
        guest_memory(&restored),
        json!("128Mi"),
        "the stored spec is back"
    );
    assert_eq!(
        restored.spec.run_strategy.as_deref(),
        Some("Halted"),
        "its run strategy kept"
    );
    assert_eq!(
        restored.annotations()[LAST_RESTORE_ANNOTATION],
        format!("back-{}", done.uid().unwrap())
    );
    assert_eq!(restored.status.as_ref().unwrap().restore_in_progress, None);

    // Into a new VM, with a MAC address patch in KubeVirt's dashed form: it is created stopped,
    // owns the restore, and runs.
    let mac = r#"{"op": "replace", "path": "/spec/template/spec/domain/devices/interfaces/0/macAddress", "value": "DE-AD-00-00-BE-AF"}"#;
    restores
        .create(&pp, &restore("copy", "copy-vm", "snap", &[mac]))
        .await
        .expect("restore into a new VM admitted");
    let done = wait_complete(&restores, "copy").await;
    let copy = vms.get("copy-vm").await.expect("the new VM");
    assert_eq!(done.owner_references()[0].uid, copy.uid().unwrap());
    assert_eq!(copy.spec.run_strategy.as_deref(), Some("Halted"));
    let interfaces = serde_json::to_value(&copy).unwrap()["spec"]["template"]["spec"]["domain"]
        ["devices"]["interfaces"]
        .clone();
    assert_eq!(
        interfaces[0]["macAddress"], "DE-AD-00-00-BE-AF",
        "{interfaces}"
    );
    assert_eq!(guest_memory(&copy), json!("128Mi"));
    set_run_strategy(&vms, "copy-vm", "Always").await;
    wait_running(&vmis, "copy-vm", TIMEOUT).await;

    // Into another VM that exists: KubeVirt's reason, and it stays so.
    vms.create(&pp, &tiny_vm("other", "Halted", "#cloud-config\n"))
        .await
        .expect("other VM");
    restores
        .create(&pp, &restore("wrong", "other", "snap", &[]))
        .await
        .expect("admitted: the controller judges it");
    let refused = wait_for("the restore into another VM refused", TIMEOUT, || async {
        let r = restores.get("wrong").await.ok()?;
        let all = reasons(&r);
        (all.len() == 2
            && all.iter().all(|(_, status, reason)| {
                status == "False" && reason == api::snapshot::restore::TARGET_EXISTS
            }))
        .then_some(r)
    })
    .await;
    assert_ne!(refused.status.unwrap().complete, Some(true));

    // Deleting the snapshot deletes its content.
    snapshots
        .delete("snap", &DeleteParams::default())
        .await
        .expect("snapshot deleted");
    wait_for("the snapshot and its content gone", TIMEOUT, || async {
        let gone = snapshots.get_opt("snap").await.ok()?.is_none()
            && contents.get_opt(&content_name).await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
}

#[tokio::test]
async fn bad_snapshots_and_restores_are_refused_with_their_paths_and_the_gate_is_honoured() {
    let change = ClusterChange::begin().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "snapshot-bad").await;
    let snapshots: Api<VirtualMachineSnapshot> = Api::namespaced(client.clone(), &ns.name);
    let restores: Api<VirtualMachineRestore> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();

    let mut wrong_kind = snapshot("s1", "vm");
    wrong_kind.spec.source.kind = "VirtualMachineInstance".into();
    let error = snapshots
        .create(&pp, &wrong_kind)
        .await
        .expect_err("refused");
    assert!(
        error.to_string().contains("spec.source.kind: invalid kind"),
        "{error}"
    );
    let renaming = restore(
        "r1",
        "vm",
        "snap",
        &[r#"{"op": "replace", "path": "/metadata/name", "value": "x"}"#],
    );
    let error = restores.create(&pp, &renaming).await.expect_err("refused");
    assert!(
        error
            .to_string()
            .contains("spec.patches: patching is valid only for elements under /spec/ only"),
        "{error}"
    );

    let out = patch_kubevirt_cr(
        &json!({"spec": {"configuration": {"developerConfiguration": {
        "disabledFeatureGates": ["Snapshot"]}}}}),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let error = snapshots
        .create(&pp, &snapshot("s2", "vm"))
        .await
        .expect_err("gate off");
    assert!(
        error
            .to_string()
            .contains("snapshot feature gate not enabled"),
        "{error}"
    );
    let error = restores
        .create(&pp, &restore("r2", "vm", "snap", &[]))
        .await
        .expect_err("gate off");
    assert!(
        error
            .to_string()
            .contains("Snapshot/Restore feature gate not enabled"),
        "{error}"
    );
    change.restore_kubevirt_spec();
    snapshots
        .create(&pp, &snapshot("s3", "vm"))
        .await
        .expect("admitted with the gate back on");
}

fn clone_of(name: &str, source_kind: &str, source: &str, extra: Value) -> VirtualMachineClone {
    let group = if source_kind == "VirtualMachine" {
        "kubevirt.io"
    } else {
        "snapshot.kubevirt.io"
    };
    let mut value = json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": {"name": name},
        "spec": {"source": {"apiGroup": group, "kind": source_kind, "name": source}},
    });
    if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(value).expect("a clone")
}

async fn wait_clone(clones: &Api<VirtualMachineClone>, name: &str) -> VirtualMachineClone {
    wait_for(&format!("clone {name} succeeded"), TIMEOUT, || async {
        let c = clones.get(name).await.ok()?;
        let status = c.status.as_ref()?;
        let done = status.phase.as_deref() == Some("Succeeded") && status.restore_name.is_none();
        done.then_some(c)
    })
    .await
}

fn ready_reason(clone: &VirtualMachineClone) -> String {
    clone
        .status
        .as_ref()
        .and_then(|s| api::condition::find(&s.conditions, "Ready"))
        .and_then(|c| c.reason.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_vm_is_cloned_with_its_filters_and_new_mac_and_from_a_snapshot_made_later() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "clone").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    let snapshots: Api<VirtualMachineSnapshot> = Api::namespaced(client.clone(), &ns.name);
    let restores: Api<VirtualMachineRestore> = Api::namespaced(client.clone(), &ns.name);
    let clones: Api<VirtualMachineClone> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();

    let mut source = tiny_vm("source", "Halted", "#cloud-config\n");
    source.metadata.labels = Some(
        [("team", "a"), ("secret", "s")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    source.metadata.annotations = Some([("note".to_string(), "n".to_string())].into());
    let source = vms.create(&pp, &source).await.expect("source VM");

    // From the VM: labels filtered, a new MAC, the temporary snapshot and restore gone.
    clones
        .create(
            &pp,
            &clone_of(
                "copy",
                "VirtualMachine",
                "source",
                json!({"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy-vm"},
                       "labelFilters": ["*", "!secret"],
                       "newMacAddresses": {"default": "02-00-00-00-00-0a"}}),
            ),
        )
        .await
        .expect("clone admitted");
    let done = wait_clone(&clones, "copy").await;
    let status = done.status.clone().unwrap();
    assert_eq!(status.target_name.as_deref(), Some("copy-vm"));
    assert_eq!((status.snapshot_name, status.restore_name), (None, None));
    assert!(ready_reason(&done) == "Ready");
    let copy = vms.get("copy-vm").await.expect("the target VM");
    let labels = copy.labels();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert!(!labels.contains_key("secret"), "{labels:?}");
    assert_eq!(copy.annotations()["note"], "n");
    let value = serde_json::to_value(&copy).expect("JSON");
    let interface = &value["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0];
    assert_eq!(interface["macAddress"], "02-00-00-00-00-0a", "{interface}");
    let mut without_mac = copy.spec.clone();
    without_mac
        .template
        .spec
        .as_mut()
        .unwrap()
        .domain
        .devices
        .interfaces[0]
        .mac_address = None;
    assert_eq!(
        without_mac, source.spec,
        "the rest of the spec is the source's"
    );
    let uid = done.uid().unwrap();
    wait_for(
        "the temporary snapshot and restore gone",
        TIMEOUT,
        || async {
            let gone = snapshots
                .get_opt(&format!("tmp-snapshot-{uid}"))
                .await
                .ok()?
                .is_none()
                && restores
                    .get_opt(&format!("tmp-restore-{uid}"))
                    .await
                    .ok()?
                    .is_none();
            gone.then_some(())
        },
    )
    .await;
    set_run_strategy(&vms, "copy-vm", "Always").await;
    wait_running(&vmis, "copy-vm", TIMEOUT).await;
    vms.delete("copy-vm", &DeleteParams::default())
        .await
        .expect("target deleted");
    wait_for("the clone deleted with its target", TIMEOUT, || async {
        clones.get_opt("copy").await.ok()?.is_none().then_some(())
    })
    .await;

    // From a snapshot that does not exist yet: pending with KubeVirt's reason, then done, and
    // the snapshot stays.
    clones
        .create(
            &pp,
            &clone_of("later", "VirtualMachineSnapshot", "snap-later", json!({})),
        )
        .await
        .expect("clone admitted");
    wait_for("the clone waiting for its source", TIMEOUT, || async {
        let c = clones.get("later").await.ok()?;
        (ready_reason(&c)
            == format!(
                "Source doesnt exist: VirtualMachineSnapshot {}/snap-later",
                ns.name
            ))
        .then_some(())
    })
    .await;
    snapshots
        .create(&pp, &snapshot("snap-later", "source"))
        .await
        .expect("snapshot");
    let done = wait_clone(&clones, "later").await;
    let target = done.status.unwrap().target_name.unwrap();
    assert!(target.starts_with("source-clone-"), "{target}");
    assert!(vms.get_opt(&target).await.unwrap().is_some());
    assert!(snapshots.get_opt("snap-later").await.unwrap().is_some());
}
