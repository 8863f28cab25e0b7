//! What a restore writes into its target VM.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::{
    restored_claim_name, SnapshotVirtualMachine, VirtualMachineRestore, LAST_RESTORE_ANNOTATION,
};
use crate::vm::VirtualMachine;

/// KubeVirt's reason when the target is another VM that exists already.
pub const TARGET_EXISTS: &str =
    "restore source and restore target are different but restore target already exists";
/// KubeVirt's reasons while the target still runs a VMI, per `targetReadinessPolicy`.
pub const WAIT_GRACE_PERIOD: &str = "Waiting for target VM to be powered off. Please stop the restore target to proceed with restore, or the operation will fail after 5m0s";
pub const WAIT_EVENTUALLY: &str = "Waiting for target VM to be powered off. Please stop the restore target to proceed with restore";
pub const STOP_TARGET: &str = "Automatically stopping restore target for restore operation";
pub const TARGET_NOT_READY_FAILURE: &str =
    "Restore target VMI must be powered off before restore operation";
pub const GRACE_PERIOD_EXCEEDED: &str = "Restore target failed to be ready within 5m0s. Please power off the target VM before attempting restore";
/// KubeVirt's event message while the target runs.
pub const VMI_EXISTS_EVENT: &str =
    "Restore target VMI still exists, please stop the restore target to proceed with restore";

/// The target readiness policies.
pub const TARGET_READINESS_POLICIES: [&str; 4] = [
    "WaitGracePeriod",
    "StopTarget",
    "FailImmediate",
    "WaitEventually",
];

/// The value of [`LAST_RESTORE_ANNOTATION`] a restore writes: `<name>-<uid>`.
pub fn annotation_value(restore: &VirtualMachineRestore) -> String {
    format!(
        "{}-{}",
        restore.metadata.name.as_deref().unwrap_or_default(),
        restore.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// Whether a VM was written by this restore already.
pub fn restored_by(vm: &VirtualMachine, restore: &VirtualMachineRestore) -> bool {
    vm.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LAST_RESTORE_ANNOTATION))
        .is_some_and(|v| *v == annotation_value(restore))
}

/// The target VM as the restore leaves it, from the VM the snapshot holds (KubeVirt's
/// `generateRestoredVMSpec`):
/// - an existing target keeps its metadata and its run strategy (or `running: false` when it
///   used `running`) and takes the snapshot's spec;
/// - a new target gets the restore's name and namespace, the snapshot VM's labels and
///   annotations, the snapshot's spec stopped (`runStrategy: Halted`, or `running: false`), and
///   the restore's `patches` applied, and each volume in `backed_up` (a claim the snapshot
///   holds data of) on its new claim, [`restored_claim_name`] (an existing target keeps its
///   claims: the restore writes the data back into them);
///
/// either way it carries [`LAST_RESTORE_ANNOTATION`].
pub fn restored_vm(
    snapshot_vm: &SnapshotVirtualMachine,
    target: Option<&VirtualMachine>,
    restore: &VirtualMachineRestore,
    backed_up: &[String],
) -> Result<VirtualMachine, String> {
    let mut spec = snapshot_vm.spec.clone();
    if target.is_none() {
        let uid = restore.metadata.uid.as_deref().unwrap_or_default();
        for volume in spec.template.spec.iter_mut().flat_map(|s| &mut s.volumes) {
            if !backed_up.contains(&volume.name) {
                continue;
            }
            if let Some(claim) = volume.persistent_volume_claim.as_mut() {
                claim.claim_name = restored_claim_name(uid, &volume.name);
            }
        }
    }
    let mut vm = match target {
        Some(target) => {
            let mut vm = target.clone();
            if target.spec.running.is_some() {
                spec.running = Some(false);
                spec.run_strategy = None;
            } else {
                spec.running = None;
                spec.run_strategy = Some(
                    target
                        .spec
                        .run_strategy
                        .clone()
                        .unwrap_or_else(|| "Halted".to_string()),
                );
            }
            vm.spec = spec;
            vm
        }
        None => {
            if spec.running.is_some() {
                spec.running = Some(false);
            } else {
                spec.run_strategy = Some("Halted".to_string());
            }
            VirtualMachine {
                metadata: ObjectMeta {
                    name: Some(restore.spec.target.name.clone()),
                    namespace: restore.metadata.namespace.clone(),
                    labels: snapshot_vm.metadata.labels.clone(),
                    annotations: snapshot_vm.metadata.annotations.clone(),
                    ..ObjectMeta::default()
                },
                spec,
                status: None,
            }
        }
    };
    vm.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            LAST_RESTORE_ANNOTATION.to_string(),
            annotation_value(restore),
        );
    if target.is_none() && !restore.spec.patches.is_empty() {
        let value = serde_json::to_value(&vm).map_err(|e| e.to_string())?;
        let patched = apply_patches(value, &restore.spec.patches)
            .map_err(|e| format!("error patching VM {}: {e}", restore.spec.target.name))?;
        vm = serde_json::from_value(patched)
            .map_err(|e| format!("the patched VM does not parse: {e}"))?;
    }
    Ok(vm)
}

/// Applies JSON patch operations, each one JSON object, in order. As the patch library KubeVirt
/// uses, `replace` of a missing member of an object sets it.
pub fn apply_patches(mut value: Value, patches: &[String]) -> Result<Value, String> {
    for text in patches {
        let mut operation: Value =
            serde_json::from_str(text).map_err(|e| format!("cannot decode patch {text}: {e}"))?;
        let replaces_missing = operation["op"] == "replace"
            && operation["path"]
                .as_str()
                .is_some_and(|p| value.pointer(p).is_none() && parent_is_object(&value, p));
        if replaces_missing {
            operation["op"] = Value::from("add");
        }
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(vec![operation]))
            .map_err(|e| format!("cannot decode patch {text}: {e}"))?;
        json_patch::patch(&mut value, &patch)
            .map_err(|e| format!("failed to apply patch {text}: {e}"))?;
    }
    Ok(value)
}

fn parent_is_object(value: &Value, pointer: &str) -> bool {
    match pointer.rfind('/') {
        Some(i) => value.pointer(&pointer[..i]).is_some_and(Value::is_object),
        None => false,
    }
}
