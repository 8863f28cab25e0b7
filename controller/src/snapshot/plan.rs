//! What the snapshot and restore controllers write, decided from what they read.

use api::snapshot::{
    self, BackedUpClaim, SnapshotError, SnapshotVirtualMachine, SourceSpec,
    VirtualMachineRestoreStatus, VirtualMachineSnapshot, VirtualMachineSnapshotContent,
    VirtualMachineSnapshotContentSpec, VirtualMachineSnapshotContentStatus,
    VirtualMachineSnapshotStatus, VolumeBackup, CONTENT_FINALIZER, FAILED, FAILURE, IN_PROGRESS,
    PROGRESSING, READY, SUCCEEDED,
};
use api::vm::VirtualMachineSpec;
use api::VirtualMachine;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

/// What the snapshot controller knows of the VM a snapshot is of.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub uid: String,
    /// The VM's `status.snapshotInProgress` names this snapshot and it has the source
    /// finalizer.
    pub locked: bool,
    /// It runs a VMI.
    pub online: bool,
    pub paused: bool,
    pub guest_agent: bool,
    /// Why it is not locked, when another snapshot holds it.
    pub held_by: Option<String>,
}

impl Source {
    fn lock_message(&self) -> String {
        match (&self.held_by, self.locked) {
            (_, true) => "Source locked and operation in progress".to_string(),
            (Some(other), false) => format!("Source not locked snapshot {other:?} in progress"),
            (None, false) => "Source not locked".to_string(),
        }
    }
}

fn phase(snapshot: &VirtualMachineSnapshot) -> Option<&str> {
    snapshot.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Neither failed nor succeeded.
pub fn progressing(snapshot: &VirtualMachineSnapshot) -> bool {
    !matches!(phase(snapshot), Some(FAILED) | Some(SUCCEEDED))
}

/// Failed, or still progressing past its deadline (none when `failureDeadline` is `0s`).
pub fn deadline_exceeded(snapshot: &VirtualMachineSnapshot, now: Timestamp) -> bool {
    if phase(snapshot) == Some(FAILED) {
        return true;
    }
    if !progressing(snapshot) {
        return false;
    }
    let deadline = snapshot::deadline(snapshot);
    let Some(created) = &snapshot.metadata.creation_timestamp else {
        return false;
    };
    !deadline.is_zero()
        && now.as_second() - created.0.as_second()
            > i64::try_from(deadline.as_secs()).unwrap_or(i64::MAX)
}

/// Being deleted or past its deadline: no longer works towards a content.
pub fn terminating(snapshot: &VirtualMachineSnapshot, now: Timestamp) -> bool {
    snapshot.metadata.deletion_timestamp.is_some() || deadline_exceeded(snapshot, now)
}

fn content_ready(content: &VirtualMachineSnapshotContent) -> bool {
    content
        .status
        .as_ref()
        .and_then(|s| s.ready_to_use)
        .unwrap_or(false)
}

/// The content goes when its snapshot goes: with the `Delete` policy (the default), or when it
/// never became ready.
pub fn delete_content(
    snapshot: &VirtualMachineSnapshot,
    content: &VirtualMachineSnapshotContent,
) -> bool {
    snapshot.spec.deletion_policy.as_deref().unwrap_or("Delete") == "Delete"
        || !content_ready(content)
}

/// The VM may be unlocked: the snapshot is done, or it is terminating and its content is
/// gone if it had to go.
pub fn can_unlock(
    snapshot: &VirtualMachineSnapshot,
    content: Option<&VirtualMachineSnapshotContent>,
    now: Timestamp,
) -> bool {
    !progressing(snapshot)
        || (terminating(snapshot, now) && content.is_none_or(|c| !delete_content(snapshot, c)))
}

/// The content of a snapshot: the VM's metadata (without managed fields) and spec, an empty
/// status, and the backups of its claims' data ([`volume_backups`]).
pub fn content_for(
    snapshot: &VirtualMachineSnapshot,
    vm: &VirtualMachine,
    volume_backups: Vec<VolumeBackup>,
) -> VirtualMachineSnapshotContent {
    let mut metadata = vm.metadata.clone();
    metadata.managed_fields = None;
    VirtualMachineSnapshotContent {
        metadata: ObjectMeta {
            name: Some(snapshot::content_name(snapshot)),
            namespace: snapshot.metadata.namespace.clone(),
            finalizers: Some(vec![CONTENT_FINALIZER.to_string()]),
            ..ObjectMeta::default()
        },
        spec: VirtualMachineSnapshotContentSpec {
            virtual_machine_snapshot_name: snapshot.metadata.name.clone(),
            source: SourceSpec {
                virtual_machine: Some(SnapshotVirtualMachine {
                    metadata,
                    spec: vm.spec.clone(),
                    status: Default::default(),
                }),
            },
            volume_backups,
            other: Default::default(),
        },
        status: None,
    }
}

/// The spec a VM's start recorded in its ControllerRevision (`{"spec": ...}`), which its VMI
/// runs: an online snapshot stores it, as KubeVirt's does, not a spec changed since.
pub fn started_spec(revision: &ControllerRevision) -> Option<VirtualMachineSpec> {
    let data = revision.data.as_ref()?;
    serde_json::from_value(data.0.get("spec")?.clone()).ok()
}

/// The backup of each of the VM's claims (its persistentVolumeClaim volumes), given the claims
/// as they are now; `Err` names a claim that does not exist.
pub fn volume_backups(
    snapshot: &VirtualMachineSnapshot,
    vm: &VirtualMachine,
    claims: &[PersistentVolumeClaim],
) -> Result<Vec<VolumeBackup>, String> {
    let uid = snapshot.metadata.uid.as_deref().unwrap_or_default();
    let volumes = vm.spec.template.spec.iter().flat_map(|s| &s.volumes);
    let mut backups = Vec::new();
    for volume in volumes {
        let Some(source) = &volume.persistent_volume_claim else {
            continue;
        };
        let claim = claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(source.claim_name.as_str()))
            .ok_or_else(|| {
                format!(
                    "PersistentVolumeClaim {:?} of volume {:?} does not exist",
                    source.claim_name, volume.name
                )
            })?;
        let metadata = ObjectMeta {
            name: claim.metadata.name.clone(),
            namespace: claim.metadata.namespace.clone(),
            labels: claim.metadata.labels.clone(),
            annotations: claim.metadata.annotations.clone(),
            ..ObjectMeta::default()
        };
        backups.push(VolumeBackup {
            volume_name: volume.name.clone(),
            persistent_volume_claim: BackedUpClaim {
                metadata,
                spec: claim.spec.clone().unwrap_or_default(),
            },
            volume_snapshot_name: Some(snapshot::volume_snapshot_name(uid, &volume.name)),
            other: Default::default(),
        });
    }
    Ok(backups)
}

/// The name of a volume backup's snapshot, and the claim it is in.
pub fn backup_location(backup: &VolumeBackup) -> (String, String) {
    (
        backup.volume_snapshot_name.clone().unwrap_or_default(),
        backup
            .persistent_volume_claim
            .metadata
            .name
            .clone()
            .unwrap_or_default(),
    )
}

/// A content whose volume data is copied (none to copy, or its copy Pod succeeded) is created
/// and ready, with each backup ready in `volumeSnapshotStatus`.
pub fn content_status(
    content: &VirtualMachineSnapshotContent,
    now: Timestamp,
) -> VirtualMachineSnapshotContentStatus {
    let mut status = content.status.clone().unwrap_or_default();
    if status.creation_time.is_none() {
        status.creation_time = Some(Time(now));
    }
    status.ready_to_use = Some(true);
    status.error = None;
    status.volume_snapshot_status = content
        .spec
        .volume_backups
        .iter()
        .map(|b| {
            serde_json::json!({"volumeSnapshotName": backup_location(b).0,
                               "creationTime": status.creation_time, "readyToUse": true})
        })
        .collect();
    status
}

/// A content whose copy Pod failed: not ready, with what the Pod said (KubeVirt shows a
/// VolumeSnapshot's error the same way; the snapshot fails at its deadline).
pub fn content_error(
    content: &VirtualMachineSnapshotContent,
    message: &str,
    now: Timestamp,
) -> VirtualMachineSnapshotContentStatus {
    let mut status = content.status.clone().unwrap_or_default();
    status.ready_to_use = Some(false);
    status.error = Some(SnapshotError {
        time: Some(Time(now)),
        message: Some(message.to_string()),
    });
    status
}

/// The snapshot's status (KubeVirt's `updateSnapshotStatus`): what the content says, the phase,
/// the conditions, the indications while it runs and the volume lists when it succeeded.
pub fn snapshot_status(
    snapshot: &VirtualMachineSnapshot,
    source: Option<&Source>,
    content: Option<&VirtualMachineSnapshotContent>,
    now: Timestamp,
) -> VirtualMachineSnapshotStatus {
    let time = Time(now);
    let mut status = snapshot
        .status
        .clone()
        .unwrap_or_else(|| VirtualMachineSnapshotStatus {
            ready_to_use: Some(false),
            ..Default::default()
        });
    if let Some(source) = source {
        status.source_uid = Some(source.uid.clone());
    }
    if let Some((content, content_status)) = content.and_then(|c| Some((c, c.status.as_ref()?))) {
        status.virtual_machine_snapshot_content_name = content.metadata.name.clone();
        status.creation_time = content_status.creation_time.clone();
        status.ready_to_use = content_status.ready_to_use;
        status.error = content_status.error.clone();
    }
    let conditions = &mut status.conditions;
    if deadline_exceeded(snapshot, now) {
        status.phase = Some(FAILED.to_string());
        snapshot::set_condition(
            conditions,
            FAILURE,
            true,
            "snapshot deadline exceeded",
            &time,
        );
        snapshot::set_condition(conditions, PROGRESSING, false, "Operation failed", &time);
    } else if phase(snapshot) == Some(SUCCEEDED) || status.creation_time.is_some() {
        status.phase = Some(SUCCEEDED.to_string());
        snapshot::set_condition(conditions, PROGRESSING, false, "Operation complete", &time);
        if let Some(vm) = content.and_then(|c| c.spec.source.virtual_machine.as_ref()) {
            let (lists, partial) = snapshot::snapshot_volumes(&vm.spec);
            status.snapshot_volumes = Some(lists);
            if partial && !status.indications.iter().any(|i| i == "PartialSnapshot") {
                status.indications.push("PartialSnapshot".to_string());
                status.source_indications = snapshot::source_indications(&status.indications);
            }
        }
    } else {
        status.phase = Some(IN_PROGRESS.to_string());
        match source {
            Some(source) => {
                snapshot::set_condition(
                    conditions,
                    PROGRESSING,
                    source.locked,
                    &source.lock_message(),
                    &time,
                );
                status.indications = if source.online {
                    snapshot::online_indications(source.paused, source.guest_agent)
                } else {
                    Vec::new()
                };
                status.source_indications = snapshot::source_indications(&status.indications);
            }
            None => {
                snapshot::set_condition(
                    conditions,
                    PROGRESSING,
                    false,
                    "Source does not exist",
                    &time,
                );
            }
        }
        if snapshot.metadata.deletion_timestamp.is_some() {
            status.phase = Some("Deleting".to_string());
            snapshot::set_condition(
                conditions,
                PROGRESSING,
                false,
                "VM snapshot is deleting",
                &time,
            );
        }
    }
    if status.ready_to_use == Some(true) {
        snapshot::set_condition(&mut status.conditions, READY, true, "Ready", &time);
    } else {
        snapshot::set_condition(&mut status.conditions, READY, false, "Not ready", &time);
    }
    if status.error.is_some() {
        snapshot::set_condition(
            &mut status.conditions,
            PROGRESSING,
            false,
            "In error state",
            &time,
        );
    }
    status
}

/// A restore's status with both conditions set: Progressing and Ready, with one reason.
pub fn restore_status(
    status: &VirtualMachineRestoreStatus,
    progressing: bool,
    ready: bool,
    reason: &str,
    now: Timestamp,
) -> VirtualMachineRestoreStatus {
    let time = Time(now);
    let mut status = status.clone();
    snapshot::set_condition(
        &mut status.conditions,
        PROGRESSING,
        progressing,
        reason,
        &time,
    );
    snapshot::set_condition(&mut status.conditions, READY, ready, reason, &time);
    status
}

/// A restore is progressing until it is complete or failed.
pub fn restore_progressing(status: &VirtualMachineRestoreStatus) -> bool {
    status.complete != Some(true) && api::condition::find(&status.conditions, FAILURE).is_none()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
