//! One pass over a VM restore (KubeVirt's `updateVMRestore`): it owns itself to its target,
//! waits for the target to run nothing (as its `targetReadinessPolicy` says), checks the
//! snapshot, marks the target `status.restoreInProgress`, writes the stored VM into it (a new VM
//! when the target does not exist) and completes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::snapshot::restore::{self as rules, restored_by, restored_vm};
use api::snapshot::{
    backup_path, restored_claim_name, VirtualMachineRestore, VirtualMachineRestoreStatus,
    VirtualMachineSnapshot, VirtualMachineSnapshotContent, VolumeBackup, FAILED, FAILURE,
    RESTORE_FINALIZER,
};
use api::{VirtualMachine, VirtualMachineInstance};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::copier::{self, ClaimPath, Job, Op, Progress};
use super::plan::{backup_location, restore_progressing, restore_status};
use super::{error_text, set_finalizer};
use crate::config::ClusterConfig;
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
    claims: Api<PersistentVolumeClaim>,
    pods: Api<Pod>,
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
        contents: Api::namespaced(client.clone(), &namespace),
        claims: Api::namespaced(client.clone(), &namespace),
        pods: Api::namespaced(client, &namespace),
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

    match restore_pass(&apis, &ctx.config(), &current, target.as_ref()).await {
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
        Ok(Pass::Copying) => {
            let copying = restore_status(&status, true, false, "Restoring volume data", now);
            if copying != status {
                write_status(&apis, &current, copying).await?;
            }
            Ok(Action::requeue(RETRY))
        }
        Ok(Pass::DataRestored(restores)) => {
            let mut restored = restore_status(&status, true, false, "Volume data restored", now);
            restored.restores = restores;
            write_status(&apis, &current, restored).await?;
            Ok(Action::requeue(Duration::ZERO))
        }
        Ok(Pass::Failed(message)) => {
            update_error(&apis, &ctx, &current, &status, &message, true, now).await?;
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
    /// The backups' data is being copied into the target's claims.
    Copying,
    /// The backups' data is in the target's claims: these are KubeVirt's `status.restores`.
    DataRestored(Vec<serde_json::Value>),
    /// The copy failed (what it said): the restore fails.
    Failed(String),
}

/// The snapshot checks and the target's update; an error is the message both conditions carry.
async fn restore_pass(
    apis: &Apis,
    cfg: &ClusterConfig,
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
    let backups = &content.spec.volume_backups;
    let restored_data = restore
        .status
        .as_ref()
        .is_some_and(|s| !s.restores.is_empty());
    if !backups.is_empty() && !restored_data {
        return restore_data(apis, cfg, restore, target.is_some(), backups).await;
    }
    let backed_up: Vec<String> = backups.iter().map(|b| b.volume_name.clone()).collect();
    let vm = restored_vm(stored, target, restore, &backed_up)?;
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

/// One step of writing the backups' data: over the claims of the same VM (`in_place`), or into
/// new claims for a new VM, created here from the backed-up claims' specs. `Copying` while its
/// Pod runs; `DataRestored` with KubeVirt's `status.restores` once done.
async fn restore_data(
    apis: &Apis,
    cfg: &ClusterConfig,
    restore: &VirtualMachineRestore,
    in_place: bool,
    backups: &[VolumeBackup],
) -> Result<Pass, String> {
    let uid = restore.metadata.uid.clone().unwrap_or_default();
    let mut ops = Vec::new();
    let mut restores = Vec::new();
    for backup in backups {
        let (name, claim) = backup_location(backup);
        let exists = apis
            .claims
            .get_opt(&claim)
            .await
            .map_err(|e| error_text(&e))?
            .is_some();
        if !exists {
            return Err(format!(
                "the backup of volume {:?} is in PersistentVolumeClaim {claim:?}, which does not exist",
                backup.volume_name
            ));
        }
        let from = ClaimPath::new(&claim, &backup_path(&name));
        let target_claim = if in_place {
            ops.push(Op::Overwrite {
                from,
                to: ClaimPath::new(&claim, "disk.img"),
            });
            claim
        } else {
            let new = restored_claim_name(&uid, &backup.volume_name);
            create_claim(apis, restore, backup, &new).await?;
            ops.push(Op::Copy {
                from,
                to: ClaimPath::new(&new, "disk.img"),
            });
            new
        };
        restores.push(json!({"volumeName": backup.volume_name,
                             "persistentVolumeClaim": target_claim,
                             "volumeSnapshotName": name}));
    }
    let job = Job {
        name: format!("vmrestore-{uid}"),
        namespace: restore.namespace().unwrap_or_default(),
        purpose: "restore",
        node: None,
        ops,
        owner: restore
            .controller_owner_ref(&())
            .ok_or("the restore has no uid")?,
    };
    match copier::step(&apis.pods, &job, cfg)
        .await
        .map_err(|e| error_text(&e))?
    {
        Progress::Running => Ok(Pass::Copying),
        Progress::Done => Ok(Pass::DataRestored(restores)),
        Progress::Failed(message) => Ok(Pass::Failed(message)),
    }
}

/// The claim a new VM gets for a backed-up volume: the backed-up claim's spec, less what
/// bound it to its volume (the cluster provisions or binds another).
async fn create_claim(
    apis: &Apis,
    restore: &VirtualMachineRestore,
    backup: &VolumeBackup,
    name: &str,
) -> Result<(), String> {
    let mut spec = backup.persistent_volume_claim.spec.clone();
    spec.volume_name = None;
    spec.data_source = None;
    spec.data_source_ref = None;
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: restore.namespace(),
            labels: backup.persistent_volume_claim.metadata.labels.clone(),
            annotations: Some(BTreeMap::from([(
                "restore.kubevirt.io/name".to_string(),
                restore.name_any(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    };
    match apis.claims.create(&PostParams::default(), &claim).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(error_text(&e)),
    }
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
