//! One pass over a VM restore (KubeVirt's `updateVMRestore`): it owns itself to its target,
//! waits for the target to run nothing (as its `targetReadinessPolicy` says), checks the
//! snapshot, marks the target `status.restoreInProgress`, writes the stored VM into it (a new VM
//! when the target does not exist) and completes.

use std::sync::Arc;
use std::time::Duration;

use api::snapshot::restore::{self as rules, restored_by, restored_vm};
use api::snapshot::{
    VirtualMachineRestore, VirtualMachineRestoreStatus, VirtualMachineSnapshot,
    VirtualMachineSnapshotContent, FAILED, FAILURE, RESTORE_FINALIZER,
};
use api::{VirtualMachine, VirtualMachineInstance};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::plan::{restore_progressing, restore_status};
use super::{error_text, set_finalizer};
use crate::context::Context;
use crate::Error;

/// How often a restore that is not done is looked at again.
const RETRY: Duration = Duration::from_secs(2);

/// The Kubernetes APIs a pass uses, in the restore's namespace.
struct Apis {
    restores: Api<VirtualMachineRestore>,
    vms: Api<VirtualMachine>,
    vmis: Api<VirtualMachineInstance>,
    snapshots: Api<VirtualMachineSnapshot>,
    contents: Api<VirtualMachineSnapshotContent>,
}

pub async fn reconcile(
    restore: Arc<VirtualMachineRestore>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = restore.namespace().ok_or(Error::NotNamespaced)?;
    let client = ctx.client.clone();
    let apis = Apis {
        restores: Api::namespaced(client.clone(), &namespace),
        vms: Api::namespaced(client.clone(), &namespace),
        vmis: Api::namespaced(client.clone(), &namespace),
        snapshots: Api::namespaced(client.clone(), &namespace),
        contents: Api::namespaced(client, &namespace),
    };
    let now = Timestamp::now();
    let name = restore.name_any();

    let Some(status) = restore.status.clone() else {
        let initial = VirtualMachineRestoreStatus {
            complete: Some(false),
            ..Default::default()
        };
        let status = restore_status(
            &initial,
            true,
            false,
            "Initializing VirtualMachineRestore",
            now,
        );
        write_status(&apis, &restore, status).await?;
        return Ok(Action::requeue(Duration::ZERO));
    };
    let target = apis.vms.get_opt(&restore.spec.target.name).await?;

    if restore.metadata.deletion_timestamp.is_some() {
        if !restore.finalizers().iter().any(|f| f == RESTORE_FINALIZER) {
            return Ok(Action::await_change());
        }
        if let Some(target) = &target {
            done_restoring(&apis, target, &name).await?;
        }
        let deleting = restore_status(&status, false, false, "VM restore is deleting", now);
        if deleting != status {
            write_status(&apis, &restore, deleting).await?;
            return Ok(Action::requeue(Duration::ZERO));
        }
        set_finalizer(&apis.restores, restore.as_ref(), RESTORE_FINALIZER, false).await?;
        return Ok(Action::await_change());
    }
    if !restore_progressing(&status) {
        return Ok(Action::await_change());
    }

    // Owned by its target (when there is one yet) and held by the finalizer.
    let mut current = (*restore).clone();
    let owner = target
        .as_ref()
        .filter(|_| current.owner_references().is_empty());
    if owner.is_some() || !current.finalizers().iter().any(|f| f == RESTORE_FINALIZER) {
        let mut finalizers = current.finalizers().to_vec();
        if !finalizers.iter().any(|f| f == RESTORE_FINALIZER) {
            finalizers.push(RESTORE_FINALIZER.to_string());
        }
        let mut patch = json!({"metadata": {"finalizers": finalizers,
                                            "resourceVersion": current.resource_version()}});
        if let Some(vm) = owner {
            patch["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "name": vm.name_any(), "uid": vm.metadata.uid,
                "controller": true, "blockOwnerDeletion": true,
            }]);
        }
        current = apis
            .restores
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }

    // The target must run nothing.
    if let Some(vm) = &target {
        if apis.vmis.get_opt(&vm.name_any()).await?.is_some() {
            return target_not_ready(&apis, &ctx, &current, &status, vm, now).await;
        }
    }

    match restore_pass(&apis, &current, target.as_ref()).await {
        Ok(Pass::Updated) => {
            let mut updating = restore_status(&status, true, false, "Updating target spec", now);
            api::snapshot::set_condition(
                &mut updating.conditions,
                api::snapshot::READY,
                false,
                "Waiting for target update",
                &Time(now),
            );
            write_status(&apis, &current, updating).await?;
            Ok(Action::requeue(Duration::ZERO))
        }
        Ok(Pass::Done) => {
            ctx.event(
                &current,
                false,
                "VirtualMachineRestoreComplete",
                format!("Successfully completed VirtualMachineRestore {name}"),
            )
            .await;
            let mut done = restore_status(&status, false, true, "Operation complete", now);
            done.complete = Some(true);
            done.restore_time = Some(Time(now));
            write_status(&apis, &current, done).await?;
            Ok(Action::await_change())
        }
        Err(message) => {
            update_error(&apis, &ctx, &current, &status, &message, false, now).await?;
            Ok(Action::requeue(RETRY))
        }
    }
}

/// What a pass did to the target.
enum Pass {
    /// The target was written; the next pass finishes.
    Updated,
    /// The target holds the snapshot's VM.
    Done,
}

/// The snapshot checks and the target's update; an error is the message both conditions carry.
async fn restore_pass(
    apis: &Apis,
    restore: &VirtualMachineRestore,
    target: Option<&VirtualMachine>,
) -> Result<Pass, String> {
    let namespace = restore.namespace().unwrap_or_default();
    let snapshot_name = &restore.spec.virtual_machine_snapshot_name;
    let key = format!("{namespace}/{snapshot_name}");
    let snapshot = apis
        .snapshots
        .get_opt(snapshot_name)
        .await
        .map_err(|e| error_text(&e))?
        .ok_or_else(|| format!("VMSnapshot {key} does not exist"))?;
    let snapshot_status = snapshot.status.clone().unwrap_or_default();
    if snapshot_status.phase.as_deref() == Some(FAILED) {
        return Err(format!("VMSnapshot {key} failed and is invalid to use"));
    }
    if snapshot_status.ready_to_use != Some(true) {
        return Err(format!("VMSnapshot {key} not ready"));
    }
    let content_name = snapshot_status
        .virtual_machine_snapshot_content_name
        .clone()
        .ok_or_else(|| format!("no snapshot content name in {key}"))?;
    let restored = target.is_some_and(|t| restored_by(t, restore));
    if let Some(vm) = target.filter(|_| !restored) {
        if snapshot_status.source_uid.is_some() && snapshot_status.source_uid != vm.metadata.uid {
            return Err(rules::TARGET_EXISTS.to_string());
        }
        let holder = vm
            .status
            .as_ref()
            .and_then(|s| s.restore_in_progress.clone());
        match holder {
            Some(other) if other != restore.name_any() => {
                return Err(format!("vm restore {other} in progress"));
            }
            Some(_) => {}
            None => {
                let patch = json!({"metadata": {"resourceVersion": vm.resource_version()},
                                   "status": {"restoreInProgress": restore.name_any()}});
                apis.vms
                    .patch_status(
                        &vm.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(|e| error_text(&e))?;
                // The target changed: the next pass reads it again.
                return Ok(Pass::Updated);
            }
        }
    }
    if restored {
        if let Some(vm) = target {
            done_restoring(apis, vm, &restore.name_any())
                .await
                .map_err(|e| e.to_string())?;
        }
        return Ok(Pass::Done);
    }
    let content_key = format!("{namespace}/{content_name}");
    let content = apis
        .contents
        .get_opt(&content_name)
        .await
        .map_err(|e| error_text(&e))?
        .ok_or_else(|| format!("VMSnapshotContent {content_key} does not exist"))?;
    if content.status.as_ref().and_then(|s| s.ready_to_use) != Some(true) {
        return Err(format!("VMSnapshotContent {content_key} not ready"));
    }
    let stored = content
        .spec
        .source
        .virtual_machine
        .as_ref()
        .ok_or_else(|| "unexpected snapshot source".to_string())?;
    let vm = restored_vm(stored, target, restore)?;
    let written = match target {
        Some(_) => {
            apis.vms
                .replace(&vm.name_any(), &PostParams::default(), &vm)
                .await
        }
        None => apis.vms.create(&PostParams::default(), &vm).await,
    };
    let written = written.map_err(|e| error_text(&e))?;
    log::info!(
        "restore {}: VM {} written from snapshot {snapshot_name}",
        restore.name_any(),
        written.name_any()
    );
    Ok(Pass::Updated)
}

/// Clears the target's `status.restoreInProgress` when it names this restore.
async fn done_restoring(apis: &Apis, vm: &VirtualMachine, restore: &str) -> Result<(), Error> {
    let holder = vm
        .status
        .as_ref()
        .and_then(|s| s.restore_in_progress.as_deref());
    if holder != Some(restore) {
        return Ok(());
    }
    let patch = json!({"status": {"restoreInProgress": null}});
    apis.vms
        .patch_status(
            &vm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// The target runs a VMI: wait, stop it or fail, as the restore's `targetReadinessPolicy` says.
async fn target_not_ready(
    apis: &Apis,
    ctx: &Context,
    restore: &VirtualMachineRestore,
    status: &VirtualMachineRestoreStatus,
    vm: &VirtualMachine,
    now: Timestamp,
) -> Result<Action, Error> {
    let policy = restore
        .spec
        .target_readiness_policy
        .as_deref()
        .unwrap_or("WaitGracePeriod");
    let reason = match policy {
        "StopTarget" => {
            ctx.event(
                restore,
                true,
                "RestoreTargetNotReady",
                rules::STOP_TARGET.to_string(),
            )
            .await;
            let patch = if vm.spec.running.is_some() {
                json!({"spec": {"running": false}})
            } else {
                json!({"spec": {"runStrategy": "Halted"}})
            };
            if let Err(e) = apis
                .vms
                .patch(
                    &vm.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                update_error(apis, ctx, restore, status, &error_text(&e), false, now).await?;
                return Ok(Action::requeue(RETRY));
            }
            rules::STOP_TARGET
        }
        "FailImmediate" => {
            update_error(
                apis,
                ctx,
                restore,
                status,
                rules::TARGET_NOT_READY_FAILURE,
                true,
                now,
            )
            .await?;
            return Ok(Action::await_change());
        }
        "WaitEventually" => rules::WAIT_EVENTUALLY,
        _ => {
            let created = restore
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(now.as_second(), |t| t.0.as_second());
            let waited = now.as_second() - created;
            if waited > api::snapshot::DEFAULT_DEADLINE.as_secs() as i64 {
                update_error(
                    apis,
                    ctx,
                    restore,
                    status,
                    rules::GRACE_PERIOD_EXCEEDED,
                    true,
                    now,
                )
                .await?;
                return Ok(Action::await_change());
            }
            rules::WAIT_GRACE_PERIOD
        }
    };
    if policy != "StopTarget" {
        ctx.event(
            restore,
            true,
            "RestoreTargetNotReady",
            rules::VMI_EXISTS_EVENT.to_string(),
        )
        .await;
    }
    write_status(
        apis,
        restore,
        restore_status(status, false, false, reason, now),
    )
    .await?;
    Ok(Action::requeue(RETRY))
}

/// KubeVirt's error path: both conditions False with the message, a Warning event, and with
/// `fail` the Failure condition (a failed restore is not retried).
async fn update_error(
    apis: &Apis,
    ctx: &Context,
    restore: &VirtualMachineRestore,
    status: &VirtualMachineRestoreStatus,
    message: &str,
    fail: bool,
    now: Timestamp,
) -> Result<(), Error> {
    let mut updated = restore_status(status, false, false, message, now);
    let (reason, note) = if fail {
        api::snapshot::set_condition(&mut updated.conditions, FAILURE, true, message, &Time(now));
        (
            "Operation failed",
            format!("VirtualMachineRestore failed {message}"),
        )
    } else {
        (
            "VirtualMachineRestoreError",
            format!("VirtualMachineRestore encountered error {message}"),
        )
    };
    ctx.event(restore, true, reason, note).await;
    write_status(apis, restore, updated).await
}

async fn write_status(
    apis: &Apis,
    restore: &VirtualMachineRestore,
    status: VirtualMachineRestoreStatus,
) -> Result<(), Error> {
    if restore.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut updated = restore.clone();
    updated.status = Some(status);
    apis.restores
        .replace_status(&restore.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}
