use api::snapshot::{VirtualMachineRestoreStatus, VirtualMachineSnapshot};
use api::VirtualMachine;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

fn snapshot(extra: serde_json::Value) -> VirtualMachineSnapshot {
    let mut value = json!({
        "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineSnapshot",
        "metadata": {"name": "snap", "namespace": "ns", "uid": "snap-uid",
                     "creationTimestamp": "1970-01-01T00:00:00Z"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"}},
    });
    if let (Some(base), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if k == "spec" || k == "metadata" {
                base[k]
                    .as_object_mut()
                    .unwrap()
                    .extend(v.as_object().unwrap().clone());
            } else {
                base.insert(k.clone(), v.clone());
            }
        }
    }
    serde_json::from_value(value).unwrap()
}

fn vm() -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm", "namespace": "ns", "uid": "vm-uid", "resourceVersion": "5",
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"devices": {}, "memory": {"guest": "64Mi"}},
            "volumes": [{"name": "disk0", "persistentVolumeClaim": {"claimName": "pvc"}}]}}},
    }))
    .unwrap()
}

fn source(locked: bool, online: bool) -> Source {
    Source {
        uid: "vm-uid".into(),
        locked,
        online,
        paused: false,
        guest_agent: false,
        held_by: None,
    }
}

fn condition(status: &VirtualMachineSnapshotStatus, type_: &str) -> (String, String) {
    let c = api::condition::find(&status.conditions, type_).unwrap();
    (c.status.clone(), c.reason.clone().unwrap_or_default())
}

#[test]
fn a_new_snapshot_of_a_running_vm_waits_for_the_lock_with_its_indications() {
    let status = snapshot_status(
        &snapshot(json!({})),
        Some(&source(false, true)),
        None,
        at(10),
    );
    assert_eq!(status.phase.as_deref(), Some("InProgress"));
    assert_eq!(status.source_uid.as_deref(), Some("vm-uid"));
    assert_eq!(status.ready_to_use, Some(false));
    assert_eq!(
        condition(&status, "Progressing"),
        ("False".into(), "Source not locked".into())
    );
    assert_eq!(
        condition(&status, "Ready"),
        ("False".into(), "Not ready".into())
    );
    assert_eq!(status.indications, ["NoGuestAgent", "Online"]);
    assert_eq!(status.source_indications.len(), 2);
    let held = Source {
        held_by: Some("other".into()),
        ..source(false, false)
    };
    let status = snapshot_status(&snapshot(json!({})), Some(&held), None, at(10));
    assert_eq!(
        condition(&status, "Progressing").1,
        "Source not locked snapshot \"other\" in progress"
    );
    assert!(status.indications.is_empty());
    let status = snapshot_status(&snapshot(json!({})), None, None, at(10));
    assert_eq!(condition(&status, "Progressing").1, "Source does not exist");
}

#[test]
fn a_ready_content_makes_the_snapshot_succeed_with_its_claim_included() {
    let snap = snapshot(json!({}));
    let mut content = content_for(&snap, &vm(), Vec::new());
    assert_eq!(
        content.metadata.name.as_deref(),
        Some("vmsnapshot-content-snap-uid")
    );
    assert_eq!(
        content.metadata.finalizers.as_ref().unwrap(),
        &[api::snapshot::CONTENT_FINALIZER]
    );
    let stored = content.spec.source.virtual_machine.as_ref().unwrap();
    assert_eq!(stored.spec, vm().spec);
    assert_eq!(stored.metadata.uid.as_deref(), Some("vm-uid"));
    assert_eq!(stored.metadata.managed_fields, None);
    assert_eq!(
        content.spec.virtual_machine_snapshot_name.as_deref(),
        Some("snap")
    );
    content.status = Some(content_status(&content, at(20)));
    assert_eq!(
        content.status.as_ref().unwrap().creation_time,
        Some(Time(at(20)))
    );
    let again = content_status(&content, at(30));
    assert_eq!(
        again.creation_time,
        Some(Time(at(20))),
        "the creation time is kept"
    );

    let status = snapshot_status(&snap, Some(&source(true, false)), Some(&content), at(21));
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(status.ready_to_use, Some(true));
    assert_eq!(
        status.virtual_machine_snapshot_content_name.as_deref(),
        Some("vmsnapshot-content-snap-uid")
    );
    assert_eq!(
        condition(&status, "Progressing"),
        ("False".into(), "Operation complete".into())
    );
    assert_eq!(condition(&status, "Ready"), ("True".into(), "Ready".into()));
    let lists = status.snapshot_volumes.as_ref().unwrap();
    assert_eq!(lists.included_volumes, ["disk0"]);
    assert!(lists.excluded_volumes.is_empty());
    assert!(status.indications.is_empty());
    let done = snapshot(json!({"status": status}));
    assert!(!progressing(&done));
    assert!(can_unlock(&done, Some(&content), at(22)));
}

#[test]
fn the_deadline_fails_a_snapshot_that_is_not_done() {
    let snap = snapshot(json!({"spec": {"failureDeadline": "1m"}}));
    assert!(!deadline_exceeded(&snap, at(60)));
    assert!(deadline_exceeded(&snap, at(61)));
    assert!(terminating(&snap, at(61)));
    let status = snapshot_status(&snap, Some(&source(true, false)), None, at(61));
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(
        condition(&status, "Failure"),
        ("True".into(), "snapshot deadline exceeded".into())
    );
    assert_eq!(condition(&status, "Progressing").1, "Operation failed");
    let none = snapshot(json!({"spec": {"failureDeadline": "0s"}}));
    assert!(!deadline_exceeded(&none, at(1_000_000)));
}

#[test]
fn a_deleted_snapshot_takes_its_content_unless_retained() {
    let snap = snapshot(json!({"metadata": {"deletionTimestamp": "1970-01-01T00:00:05Z"}}));
    let mut content = content_for(&snap, &vm(), Vec::new());
    assert!(
        delete_content(&snap, &content),
        "an unready content always goes"
    );
    content.status = Some(content_status(&content, at(1)));
    assert!(delete_content(&snap, &content));
    let retained = snapshot(json!({"spec": {"deletionPolicy": "Retain"},
                                   "metadata": {"deletionTimestamp": "1970-01-01T00:00:05Z"}}));
    assert!(!delete_content(&retained, &content));
    assert!(can_unlock(&retained, Some(&content), at(6)));
    assert!(
        !can_unlock(&snap, Some(&content), at(6)),
        "not before the content is gone"
    );
    assert!(can_unlock(&snap, None, at(6)));
    let status = snapshot_status(&snap, Some(&source(true, false)), None, at(6));
    assert_eq!(status.phase.as_deref(), Some("Deleting"));
    assert_eq!(
        condition(&status, "Progressing").1,
        "VM snapshot is deleting"
    );
}

#[test]
fn restore_conditions_come_in_kubevirts_order_and_a_failure_ends_it() {
    let initial = VirtualMachineRestoreStatus {
        complete: Some(false),
        ..Default::default()
    };
    let status = restore_status(
        &initial,
        true,
        false,
        "Initializing VirtualMachineRestore",
        at(1),
    );
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Progressing", "Ready"]);
    assert!(restore_progressing(&status));
    let mut failed = restore_status(&status, false, false, "boom", at(2));
    assert!(restore_progressing(&failed), "an error is retried");
    api::snapshot::set_condition(
        &mut failed.conditions,
        "Failure",
        true,
        "boom",
        &Time(at(2)),
    );
    assert!(!restore_progressing(&failed));
    let done = VirtualMachineRestoreStatus {
        complete: Some(true),
        ..status
    };
    assert!(!restore_progressing(&done));
}

#[test]
fn each_claim_is_backed_up_from_the_claim_as_it_is_and_a_missing_one_is_named() {
    let snap = snapshot(json!({}));
    let missing = volume_backups(&snap, &vm(), &[]).unwrap_err();
    assert_eq!(
        missing,
        "PersistentVolumeClaim \"pvc\" of volume \"disk0\" does not exist"
    );
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "pvc", "namespace": "ns", "uid": "claim-uid",
                     "labels": {"app": "a"}, "resourceVersion": "9"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv1",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    let other: PersistentVolumeClaim =
        serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    let backups = volume_backups(&snap, &vm(), &[other, claim]).unwrap();
    assert_eq!(backups.len(), 1);
    let backup = &backups[0];
    assert_eq!(backup.volume_name, "disk0");
    assert_eq!(
        backup.volume_snapshot_name.as_deref(),
        Some("vmsnapshot-snap-uid-volume-disk0")
    );
    let kept = &backup.persistent_volume_claim;
    assert_eq!(kept.metadata.name.as_deref(), Some("pvc"));
    assert_eq!(kept.metadata.uid, None, "only what a new claim could reuse");
    assert_eq!(kept.metadata.labels.as_ref().unwrap()["app"], "a");
    assert_eq!(kept.spec.volume_name.as_deref(), Some("pv1"));
    assert_eq!(
        backup_location(backup),
        ("vmsnapshot-snap-uid-volume-disk0".into(), "pvc".into())
    );

    let content = content_for(&snap, &vm(), backups);
    let ready = content_status(&content, at(5));
    assert_eq!(ready.ready_to_use, Some(true));
    assert_eq!(
        ready.volume_snapshot_status,
        [
            json!({"volumeSnapshotName": "vmsnapshot-snap-uid-volume-disk0",
                "creationTime": Time(at(5)), "readyToUse": true})
        ]
    );
    let failed = content_error(&content, "cp: No space left on device", at(6));
    assert_eq!(failed.ready_to_use, Some(false));
    assert_eq!(failed.creation_time, None);
    let mut errored = content.clone();
    errored.status = Some(failed);
    let status = snapshot_status(&snap, Some(&source(true, true)), Some(&errored), at(7));
    assert_eq!(status.phase.as_deref(), Some("InProgress"));
    assert_eq!(
        status.error.clone().and_then(|e| e.message).as_deref(),
        Some("cp: No space left on device")
    );
    assert_eq!(
        condition(&status, "Progressing"),
        ("False".into(), "In error state".into())
    );
}

#[test]
fn an_online_snapshot_stores_the_spec_the_vmi_was_started_from() {
    let mut started = vm();
    started.spec.run_strategy = Some("Manual".into());
    let revision: ControllerRevision = serde_json::from_value(json!({
        "metadata": {"name": "revision-start-vm-vm-uid-3"},
        "data": {"spec": started.spec},
        "revision": 3,
    }))
    .unwrap();
    assert_eq!(started_spec(&revision), Some(started.spec));
    let empty: ControllerRevision =
        serde_json::from_value(json!({"metadata": {"name": "r"}, "revision": 1})).unwrap();
    assert_eq!(started_spec(&empty), None);
    let other: ControllerRevision = serde_json::from_value(
        json!({"metadata": {"name": "r"}, "data": {"template": {}}, "revision": 1}),
    )
    .unwrap();
    assert_eq!(started_spec(&other), None);
}
