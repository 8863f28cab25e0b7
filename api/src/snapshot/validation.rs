//! The validating webhooks of snapshots and restores: KubeVirt's rules (`vmsnapshot-admitter`,
//! `vmrestore-admitter`), with the values Ferrovirt checks beside them refused by path.

use super::restore::TARGET_READINESS_POLICIES;
use super::{ObjectReference, VirtualMachineRestore, VirtualMachineSnapshot};
use crate::field_error::{FieldError, Path};
use crate::other::reject_other;
use crate::vm::VirtualMachine;

const DELETION_POLICIES: [&str; 2] = ["Delete", "Retain"];
const VOLUME_RESTORE_POLICIES: [&str; 3] = ["RandomizeNames", "InPlace", "PrefixTargetName"];
const VOLUME_OWNERSHIP_POLICIES: [&str; 2] = ["Vm", "None"];

/// KubeVirt's message when the gate is off, for a snapshot and for a restore.
pub const SNAPSHOT_GATE_OFF: &str = "snapshot feature gate not enabled";
pub const RESTORE_GATE_OFF: &str = "Snapshot/Restore feature gate not enabled";

/// A VM reference must name a `kubevirt.io` `VirtualMachine`.
fn check_reference(reference: &ObjectReference, at: &Path, errors: &mut Vec<FieldError>) {
    match reference.api_group.as_deref() {
        None => errors.push(FieldError::required(
            at.child("apiGroup"),
            "missing apiGroup",
        )),
        Some("kubevirt.io") => {
            if reference.kind != "VirtualMachine" {
                errors.push(FieldError::invalid(at.child("kind"), "invalid kind"));
            }
        }
        Some(_) => errors.push(FieldError::invalid(
            at.child("apiGroup"),
            "invalid apiGroup",
        )),
    }
    if reference.name.is_empty() {
        errors.push(FieldError::required(at.child("name"), "a name is required"));
    }
}

fn check_one_of(value: Option<&String>, allowed: &[&str], at: Path, errors: &mut Vec<FieldError>) {
    if let Some(value) = value {
        if !allowed.contains(&value.as_str()) {
            errors.push(FieldError::invalid(
                at,
                format!("{value:?} must be one of {allowed:?}"),
            ));
        }
    }
}

/// A new snapshot.
pub fn validate_snapshot(snapshot: &VirtualMachineSnapshot) -> Vec<FieldError> {
    let spec = Path::root("spec");
    let mut errors = Vec::new();
    check_reference(&snapshot.spec.source, &spec.child("source"), &mut errors);
    check_one_of(
        snapshot.spec.deletion_policy.as_ref(),
        &DELETION_POLICIES,
        spec.child("deletionPolicy"),
        &mut errors,
    );
    if let Some(deadline) = &snapshot.spec.failure_deadline {
        if let Err(e) = crate::duration::parse(deadline) {
            errors.push(FieldError::invalid(spec.child("failureDeadline"), e));
        }
    }
    reject_other(
        &snapshot.spec.other,
        "v1beta1.VirtualMachineSnapshotSpec",
        &spec,
        &mut errors,
    );
    errors
}

/// A changed snapshot or restore: the spec stays as created.
pub fn validate_spec_unchanged<T: PartialEq>(old: &T, new: &T) -> Vec<FieldError> {
    if old == new {
        return Vec::new();
    }
    vec![FieldError::invalid(
        Path::root("spec"),
        "spec in immutable after creation",
    )]
}

/// A new restore. `in_progress`: the restores of the namespace that have the same target and
/// are not complete.
pub fn validate_restore(
    restore: &VirtualMachineRestore,
    in_progress: &[String],
) -> Vec<FieldError> {
    let spec = Path::root("spec");
    let mut errors = Vec::new();
    check_reference(&restore.spec.target, &spec.child("target"), &mut errors);
    if restore.spec.virtual_machine_snapshot_name.is_empty() {
        errors.push(FieldError::required(
            spec.child("virtualMachineSnapshotName"),
            "the snapshot to restore is required",
        ));
    }
    for patch in &restore.spec.patches {
        check_patch(patch, &spec.child("patches"), &mut errors);
    }
    for (i, item) in restore.spec.volume_restore_overrides.iter().enumerate() {
        let at = spec.child("volumeRestoreOverrides").index(i);
        if item["volumeName"].as_str().unwrap_or_default().is_empty() {
            errors.push(FieldError::required(
                at.child("volumeName"),
                "must provide a volume name",
            ));
        }
        let overrides = ["restoreName", "labels", "annotations"]
            .iter()
            .any(|f| !item[f].is_null() && item[f] != "");
        if !overrides {
            errors.push(FieldError::required(
                at,
                "must provide at least one overriden field",
            ));
        }
    }
    check_one_of(
        restore.spec.target_readiness_policy.as_ref(),
        &TARGET_READINESS_POLICIES,
        spec.child("targetReadinessPolicy"),
        &mut errors,
    );
    if let Some(policy) = &restore.spec.volume_restore_policy {
        if !VOLUME_RESTORE_POLICIES.contains(&policy.as_str()) {
            errors.push(FieldError::invalid(
                spec.child("volumeRestorePolicy"),
                format!("volume restore policy \"{policy}\" doesn't exist"),
            ));
        }
    }
    if let Some(policy) = &restore.spec.volume_ownership_policy {
        if !VOLUME_OWNERSHIP_POLICIES.contains(&policy.as_str()) {
            errors.push(FieldError::invalid(
                spec.child("volumeOwnershipPolicy"),
                format!("volume ownership policy \"{policy}\" doesn't exist"),
            ));
        }
    }
    reject_other(
        &restore.spec.other,
        "v1beta1.VirtualMachineRestoreSpec",
        &spec,
        &mut errors,
    );
    for name in in_progress {
        errors.push(FieldError::invalid(
            spec.child("target"),
            format!("VirtualMachineRestore {name:?} in progress"),
        ));
    }
    errors
}

/// One patch: a JSON object whose `path` is under `/spec/`, `/metadata/labels/` or
/// `/metadata/annotations/` (KubeVirt's rule).
fn check_patch(patch: &str, at: &Path, errors: &mut Vec<FieldError>) {
    let value: serde_json::Value = match serde_json::from_str(patch) {
        Ok(value) => value,
        Err(e) => {
            errors.push(FieldError::invalid(
                at.clone(),
                format!("patch format is not valid: {patch}: {e}"),
            ));
            return;
        }
    };
    let path = value["path"].as_str().unwrap_or_default();
    let allowed = ["/spec/", "/metadata/labels/", "/metadata/annotations/"];
    if !allowed.iter().any(|prefix| path.starts_with(prefix)) {
        errors.push(FieldError::invalid(
            at.clone(),
            format!("patching is valid only for elements under /spec/ only: {patch}"),
        ));
    }
}

/// A VM update while a snapshot or restore of it is in progress (KubeVirt's VM admitter): a
/// snapshot holds its volumes, a restore its run strategy.
pub fn validate_vm_update(old: &VirtualMachine, new: &VirtualMachine) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let status = new.status.as_ref();
    let volumes = |vm: &VirtualMachine| {
        vm.spec
            .template
            .spec
            .as_ref()
            .map(|s| s.volumes.clone())
            .unwrap_or_default()
    };
    if let Some(restore) = status.and_then(|s| s.restore_in_progress.as_ref()) {
        if old.spec != new.spec
            && old.spec.effective_run_strategy() != new.spec.effective_run_strategy()
        {
            errors.push(FieldError::new(
                Path::root("spec"),
                crate::field_error::FieldErrorKind::NotSupported,
                format!("Cannot update VM runStrategy until restore {restore:?} completes"),
            ));
        }
    }
    if let Some(snapshot) = status.and_then(|s| s.snapshot_in_progress.as_ref()) {
        if volumes(old) != volumes(new) {
            errors.push(FieldError::new(
                Path::root("spec"),
                crate::field_error::FieldErrorKind::NotSupported,
                format!("Cannot update vm disks or volumes until snapshot {snapshot:?} completes"),
            ));
        }
    }
    errors
}
