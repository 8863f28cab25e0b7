use serde_json::json;

use super::restore::{apply_patches, restored_by, restored_vm};
use super::validation::{
    validate_restore, validate_snapshot, validate_spec_unchanged, validate_vm_update,
};
use super::*;
use crate::vm::VirtualMachine;

fn vm(extra: Value) -> VirtualMachine {
    let mut value = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm", "namespace": "ns", "uid": "vm-uid",
                     "labels": {"app": "a"}, "annotations": {"note": "n"}},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]},
                       "memory": {"guest": "64Mi"}},
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [
                {"name": "disk0", "containerDisk": {"image": "img"}},
                {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config"}},
            ]}}},
    });
    if let (Some(base), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
        base.extend(extra.clone());
    }
    serde_json::from_value(value).unwrap()
}

fn snapshot(spec: Value) -> VirtualMachineSnapshot {
    serde_json::from_value(json!({
        "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineSnapshot",
        "metadata": {"name": "snap", "namespace": "ns", "uid": "snap-uid"},
        "spec": spec,
    }))
    .unwrap()
}

fn restore(spec: Value) -> VirtualMachineRestore {
    serde_json::from_value(json!({
        "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineRestore",
        "metadata": {"name": "rest", "namespace": "ns", "uid": "rest-uid"},
        "spec": spec,
    }))
    .unwrap()
}

fn fields(errors: &[crate::FieldError]) -> Vec<(&str, &str)> {
    errors
        .iter()
        .map(|e| (e.field.as_str(), e.message.as_str()))
        .collect()
}

/// (CRD name, kind, versions with the storage one starred, short names), from KubeVirt's
/// `components/crds.go`.
#[test]
fn the_crds_have_kubevirts_names_versions_and_columns() {
    let want = [
        (
            "virtualmachinesnapshots.snapshot.kubevirt.io",
            "VirtualMachineSnapshot",
            ["vmsnapshot", "vmsnapshots"],
            6,
        ),
        (
            "virtualmachinesnapshotcontents.snapshot.kubevirt.io",
            "VirtualMachineSnapshotContent",
            ["vmsnapshotcontent", "vmsnapshotcontents"],
            3,
        ),
        (
            "virtualmachinerestores.snapshot.kubevirt.io",
            "VirtualMachineRestore",
            ["vmrestore", "vmrestores"],
            4,
        ),
    ];
    let crds: Vec<Value> = crds()
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    assert_eq!(crds.len(), want.len());
    for (crd, (name, kind, short, columns)) in crds.iter().zip(want) {
        assert_eq!(crd["metadata"]["name"], name);
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(short));
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let versions: Vec<(&str, bool)> = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["name"].as_str().unwrap(), v["storage"] == true))
            .collect();
        assert_eq!(versions, [("v1alpha1", false), ("v1beta1", true)], "{name}");
        for version in crd["spec"]["versions"].as_array().unwrap() {
            assert_eq!(version["subresources"], json!({"status": {}}));
            assert_eq!(
                version["additionalPrinterColumns"]
                    .as_array()
                    .unwrap()
                    .len(),
                columns
            );
            let schema = &version["schema"]["openAPIV3Schema"];
            assert_eq!(schema["required"], json!(["spec"]));
            assert!(!schema["description"]
                .as_str()
                .unwrap()
                .contains("not supported"));
        }
    }
    assert_eq!(
        Kind::of_plural("virtualmachinerestores"),
        Some(Kind::Restore)
    );
    assert_eq!(Kind::of_plural("virtualmachineclones"), None);
}

#[test]
fn the_gate_is_on_unless_disabled() {
    let kv = |developer: Value| -> crate::KubeVirt {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": {"developerConfiguration": developer}},
        }))
        .unwrap()
    };
    assert!(gate_enabled(None));
    assert!(gate_enabled(Some(&kv(json!({})))));
    assert!(!gate_enabled(Some(&kv(
        json!({"disabledFeatureGates": ["Snapshot"]})
    ))));
    assert!(gate_enabled(Some(&kv(
        json!({"featureGates": ["Snapshot"], "disabledFeatureGates": ["Snapshot"]})
    ))));
}

#[test]
fn snapshot_rules_are_kubevirts() {
    let good = snapshot(
        json!({"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"}}),
    );
    assert!(validate_snapshot(&good).is_empty());
    let cases = [
        (
            json!({"source": {"kind": "VirtualMachine", "name": "vm"}}),
            ("spec.source.apiGroup", "missing apiGroup"),
        ),
        (
            json!({"source": {"apiGroup": "apps", "kind": "VirtualMachine", "name": "vm"}}),
            ("spec.source.apiGroup", "invalid apiGroup"),
        ),
        (
            json!({"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachineInstance", "name": "vm"}}),
            ("spec.source.kind", "invalid kind"),
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(fields(&validate_snapshot(&snapshot(spec))), [want]);
    }
    let bad = snapshot(json!({
        "source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"},
        "deletionPolicy": "Keep", "failureDeadline": "soon", "online": true,
    }));
    let errors = validate_snapshot(&bad);
    let paths: Vec<&str> = fields(&errors).iter().map(|(f, _)| *f).collect();
    assert_eq!(
        paths,
        ["spec.deletionPolicy", "spec.failureDeadline", "spec.online"]
    );
    let mut changed = good.clone();
    changed.spec.source.name = "other".into();
    assert_eq!(
        fields(&validate_spec_unchanged(&good.spec, &changed.spec)),
        [("spec", "spec in immutable after creation")]
    );
    assert!(validate_spec_unchanged(&good.spec, &good.spec).is_empty());
}

#[test]
fn restore_rules_are_kubevirts() {
    let target = json!({"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"});
    let good = restore(
        json!({"target": target, "virtualMachineSnapshotName": "snap",
        "patches": [r#"{"op": "replace", "path": "/spec/template/spec/domain/devices/interfaces/0/macAddress", "value": "DE-AD-00-00-BE-AF"}"#,
                    r#"{"op": "add", "path": "/metadata/labels/copy", "value": "yes"}"#]}),
    );
    assert!(validate_restore(&good, &[]).is_empty());
    assert_eq!(
        fields(&validate_restore(&good, &["first".to_string()])),
        [("spec.target", "VirtualMachineRestore \"first\" in progress")]
    );
    let bad = restore(json!({
        "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachineInstance", "name": "vm"},
        "virtualMachineSnapshotName": "snap",
        "patches": [r#"{"op": "replace", "path": "/metadata/name", "value": "x"}"#, "not json"],
        "targetReadinessPolicy": "Never",
        "volumeRestorePolicy": "Everywhere",
        "volumeOwnershipPolicy": "Nobody",
        "volumeRestoreOverrides": [{"volumeName": ""}],
    }));
    let errors = validate_restore(&bad, &[]);
    let paths: Vec<&str> = fields(&errors).iter().map(|(f, _)| *f).collect();
    assert_eq!(
        paths,
        [
            "spec.target.kind",
            "spec.patches",
            "spec.patches",
            "spec.volumeRestoreOverrides[0].volumeName",
            "spec.volumeRestoreOverrides[0]",
            "spec.targetReadinessPolicy",
            "spec.volumeRestorePolicy",
            "spec.volumeOwnershipPolicy",
        ]
    );
    assert!(errors[1]
        .message
        .starts_with("patching is valid only for elements under /spec/ only"));
    assert_eq!(
        errors[6].message,
        "volume restore policy \"Everywhere\" doesn't exist"
    );
}

#[test]
fn a_vm_being_snapshotted_keeps_its_volumes_and_one_being_restored_its_run_strategy() {
    let mut old = vm(json!({}));
    old.status = Some(crate::vm::VirtualMachineStatus {
        snapshot_in_progress: Some("snap".into()),
        restore_in_progress: Some("rest".into()),
        ..Default::default()
    });
    let mut new = old.clone();
    new.spec.template.spec.as_mut().unwrap().volumes.pop();
    new.spec.run_strategy = Some("Halted".into());
    assert_eq!(
        fields(&validate_vm_update(&old, &new)),
        [
            (
                "spec",
                "Cannot update VM runStrategy until restore \"rest\" completes"
            ),
            (
                "spec",
                "Cannot update vm disks or volumes until snapshot \"snap\" completes"
            ),
        ]
    );
    let mut labels_only = old.clone();
    labels_only.spec.template.metadata = Some(Default::default());
    assert!(validate_vm_update(&old, &labels_only).is_empty());
}

#[test]
fn claims_are_included_other_volumes_excluded_and_a_data_volume_makes_it_partial() {
    let plain = vm(json!({}));
    let (lists, partial) = snapshot_volumes(&plain.spec);
    assert!(lists.included_volumes.is_empty());
    assert_eq!(lists.excluded_volumes, ["disk0", "cloudinitdisk"]);
    assert!(!partial);
    let statuses = volume_snapshot_statuses(&plain.spec);
    assert_eq!(statuses.len(), 2);
    assert_eq!(
        statuses[0].reason.as_deref(),
        Some("Snapshot is not supported for this volumeSource type [disk0]")
    );
    let mut with_claim = plain.clone();
    with_claim.spec.template.spec.as_mut().unwrap().volumes[0] = serde_json::from_value(
        json!({"name": "disk0", "persistentVolumeClaim": {"claimName": "pvc"}}),
    )
    .unwrap();
    let (lists, partial) = snapshot_volumes(&with_claim.spec);
    assert_eq!(lists.included_volumes, ["disk0"]);
    assert_eq!(lists.excluded_volumes, ["cloudinitdisk"]);
    assert!(!partial);
    let statuses = volume_snapshot_statuses(&with_claim.spec);
    assert!(statuses[0].enabled);
    assert_eq!(statuses[0].reason, None);
    assert!(!statuses[1].enabled);
    let mut with_data_volume = plain.clone();
    with_data_volume
        .spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .volumes[0] =
        serde_json::from_value(json!({"name": "disk0", "dataVolume": {"name": "dv"}})).unwrap();
    let (lists, partial) = snapshot_volumes(&with_data_volume.spec);
    assert!(lists.included_volumes.is_empty());
    assert!(partial);
    let statuses = volume_snapshot_statuses(&with_data_volume.spec);
    assert!(!statuses[0].enabled);
    assert!(statuses[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("not DataVolumes"));
}

#[test]
fn backups_are_named_as_kubevirt_names_volume_snapshots_and_live_in_the_claim() {
    let name = volume_snapshot_name("0c2a", "data");
    assert_eq!(name, "vmsnapshot-0c2a-volume-data");
    assert_eq!(
        backup_dir(&name),
        ".ferrovirt-snapshots/vmsnapshot-0c2a-volume-data"
    );
    assert_eq!(
        backup_path(&name),
        ".ferrovirt-snapshots/vmsnapshot-0c2a-volume-data/disk.img"
    );
    assert_eq!(restored_claim_name("77", "data"), "restore-77-data");
    let backup: VolumeBackup = serde_json::from_value(json!({
        "volumeName": "data",
        "persistentVolumeClaim": {"metadata": {"name": "claim"},
                                  "spec": {"accessModes": ["ReadWriteOnce"]}},
        "volumeSnapshotName": name,
    }))
    .unwrap();
    assert_eq!(
        backup.persistent_volume_claim.metadata.name.as_deref(),
        Some("claim")
    );
    let again = serde_json::to_value(&backup).unwrap();
    assert_eq!(
        again["persistentVolumeClaim"]["spec"]["accessModes"][0],
        "ReadWriteOnce"
    );
}

#[test]
fn indications_are_sorted_as_kubevirt_lists_them() {
    assert_eq!(online_indications(false, false), ["NoGuestAgent", "Online"]);
    assert_eq!(online_indications(false, true), ["GuestAgent", "Online"]);
    assert_eq!(online_indications(true, true), ["Online", "Paused"]);
    let sourced = source_indications(&online_indications(false, false));
    assert!(sourced[0]
        .message
        .starts_with("Guest agent was not available"));
}

#[test]
fn content_name_and_deadline() {
    let mut snap = snapshot(
        json!({"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"}}),
    );
    assert_eq!(content_name(&snap), "vmsnapshot-content-snap-uid");
    assert_eq!(deadline(&snap), DEFAULT_DEADLINE);
    snap.spec.failure_deadline = Some("1m30s".into());
    assert_eq!(deadline(&snap), std::time::Duration::from_secs(90));
    snap.status = Some(VirtualMachineSnapshotStatus {
        virtual_machine_snapshot_content_name: Some("kept".into()),
        ..Default::default()
    });
    assert_eq!(content_name(&snap), "kept");
}

fn taken(vm: &VirtualMachine) -> SnapshotVirtualMachine {
    SnapshotVirtualMachine {
        metadata: vm.metadata.clone(),
        spec: vm.spec.clone(),
        status: Default::default(),
    }
}

#[test]
fn restoring_into_the_source_keeps_its_run_strategy_and_metadata() {
    let before = vm(json!({"runStrategy": "Halted"}));
    let mut now = before.clone();
    now.spec.template.spec.as_mut().unwrap().volumes.pop();
    now.spec.run_strategy = Some("Manual".into());
    now.metadata.resource_version = Some("7".into());
    let r = restore(
        json!({"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"},
                           "virtualMachineSnapshotName": "snap"}),
    );
    let restored = restored_vm(&taken(&before), Some(&now), &r, &[]).unwrap();
    assert_eq!(restored.spec.run_strategy.as_deref(), Some("Manual"));
    assert_eq!(restored.spec.template, before.spec.template);
    assert_eq!(restored.metadata.resource_version.as_deref(), Some("7"));
    assert!(restored_by(&restored, &r));
    assert!(!restored_by(&now, &r));
    assert_eq!(
        restored.metadata.annotations.as_ref().unwrap()[LAST_RESTORE_ANNOTATION],
        "rest-rest-uid"
    );
}

#[test]
fn backed_up_claims_move_to_new_claims_in_a_new_target_only() {
    let mut source = vm(json!({}));
    let volumes = &mut source.spec.template.spec.as_mut().unwrap().volumes;
    volumes[0] = serde_json::from_value(
        json!({"name": "disk0", "persistentVolumeClaim": {"claimName": "pvc"}}),
    )
    .unwrap();
    volumes.push(
        serde_json::from_value(
            json!({"name": "other", "persistentVolumeClaim": {"claimName": "kept"}}),
        )
        .unwrap(),
    );
    let claims = |vm: &VirtualMachine| -> Vec<String> {
        vm.spec
            .template
            .spec
            .as_ref()
            .unwrap()
            .volumes
            .iter()
            .filter_map(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .map(|c| c.claim_name.clone())
            })
            .collect()
    };
    let mut r = restore(
        json!({"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"},
        "virtualMachineSnapshotName": "snap"}),
    );
    r.metadata.uid = Some("r-uid".into());
    let backed_up = ["disk0".to_string()];
    let new = restored_vm(&taken(&source), None, &r, &backed_up).unwrap();
    assert_eq!(claims(&new), ["restore-r-uid-disk0", "kept"]);
    let same = restored_vm(&taken(&source), Some(&source), &r, &backed_up).unwrap();
    assert_eq!(claims(&same), ["pvc", "kept"]);
}

#[test]
fn a_new_target_is_stopped_named_and_patched() {
    let source = vm(json!({}));
    let r = restore(
        json!({"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"},
        "virtualMachineSnapshotName": "snap",
        "patches": [r#"{"op": "replace", "path": "/spec/template/spec/domain/devices/interfaces/0/macAddress", "value": "DE-AD-00-00-BE-AF"}"#]}),
    );
    let restored = restored_vm(&taken(&source), None, &r, &[]).unwrap();
    assert_eq!(restored.metadata.name.as_deref(), Some("copy"));
    assert_eq!(restored.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(restored.metadata.uid, None);
    assert_eq!(restored.metadata.labels, source.metadata.labels);
    assert_eq!(restored.metadata.annotations.as_ref().unwrap()["note"], "n");
    assert_eq!(restored.spec.run_strategy.as_deref(), Some("Halted"));
    let interfaces = &restored
        .spec
        .template
        .spec
        .as_ref()
        .unwrap()
        .domain
        .devices
        .interfaces;
    assert_eq!(
        interfaces[0].mac_address.as_deref(),
        Some("DE-AD-00-00-BE-AF")
    );
    let bad = restore(
        json!({"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"},
        "virtualMachineSnapshotName": "snap",
        "patches": [r#"{"op": "remove", "path": "/spec/nothing"}"#]}),
    );
    let error = restored_vm(&taken(&source), None, &bad, &[]).unwrap_err();
    assert!(
        error.starts_with("error patching VM copy: failed to apply patch"),
        "{error}"
    );
}

#[test]
fn replace_of_a_missing_member_sets_it_and_of_a_missing_parent_fails() {
    let patched = apply_patches(
        json!({"a": {}}),
        &[r#"{"op": "replace", "path": "/a/b", "value": 1}"#.into()],
    )
    .unwrap();
    assert_eq!(patched, json!({"a": {"b": 1}}));
    assert!(apply_patches(
        json!({}),
        &[r#"{"op": "replace", "path": "/a/b", "value": 1}"#.into()]
    )
    .is_err());
}

#[test]
fn conditions_change_their_time_only_when_they_change() {
    let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap());
    let t2 = Time(k8s_openapi::jiff::Timestamp::from_second(2).unwrap());
    let mut conditions = Vec::new();
    set_condition(&mut conditions, PROGRESSING, true, "Initializing", &t1);
    set_condition(&mut conditions, READY, false, "Initializing", &t1);
    set_condition(&mut conditions, PROGRESSING, true, "Initializing", &t2);
    assert_eq!(conditions[0].last_transition_time, Some(t1.clone()));
    set_condition(
        &mut conditions,
        PROGRESSING,
        false,
        "Operation complete",
        &t2,
    );
    let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, [PROGRESSING, READY]);
    assert_eq!(conditions[0].last_transition_time, Some(t2));
    assert!(!condition_true(&conditions, PROGRESSING));
}
