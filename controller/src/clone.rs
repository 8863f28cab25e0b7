//! VM clones (`clone.kubevirt.io`), as KubeVirt's clone controller runs them: a temporary
//! snapshot of the source VM (none when the source is a snapshot), a temporary restore of it
//! into the target with the clone's patches, the target VM checked, then the temporary objects
//! deleted. A clone whose target VM is deleted after it succeeded is deleted too.

use std::sync::Arc;
use std::time::Duration;

use api::clone::{
    self, VirtualMachineClone, VirtualMachineCloneStatus, CREATING_TARGET_VM, FAILED,
    RESTORE_IN_PROGRESS, SNAPSHOT_IN_PROGRESS, SUCCEEDED,
};
use api::snapshot::{
    ObjectReference, VirtualMachineRestore, VirtualMachineSnapshot, VirtualMachineSnapshotContent,
};
use api::VirtualMachine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::Error;

/// How often a clone that is not done is looked at again.
const RETRY: Duration = Duration::from_secs(2);

/// What one pass found, and what the status says about it.
#[derive(Debug, Default)]
struct Sync {
    /// Waiting for something outside the clone (its source); the event and reason.
    pending: Option<(&'static str, String)>,
    /// The clone cannot succeed; the event and reason.
    failing: Option<(&'static str, String)>,
    snapshot_name: Option<String>,
    snapshot_ready: bool,
    restore_name: Option<String>,
    restore_ready: bool,
    target_name: Option<String>,
    target_created: bool,
    cleaned_up: bool,
}

pub async fn reconcile(
    clone: Arc<VirtualMachineClone>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = clone.namespace().ok_or(Error::NotNamespaced)?;
    let client = ctx.client.clone();
    let clones: Api<VirtualMachineClone> = Api::namespaced(client.clone(), &namespace);
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace);
    let status = clone.status.clone().unwrap_or_default();
    if clone.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if status.phase.as_deref() == Some(SUCCEEDED) {
        let target = status.target_name.as_deref().unwrap_or_default();
        if vms.get_opt(target).await?.is_none() {
            log::info!(
                "clone {}: target VM {target} deleted; deleting the clone",
                clone.name_any()
            );
            clones
                .delete(&clone.name_any(), &DeleteParams::default())
                .await?;
            return Ok(Action::await_change());
        }
    }
    if status.phase.as_deref() == Some(FAILED) {
        return Ok(Action::await_change());
    }
    let sync = sync(&clone, &ctx, &namespace).await?;
    for (reason, note) in [&sync.pending, &sync.failing].into_iter().flatten() {
        ctx.event(clone.as_ref(), false, reason, note.clone()).await;
    }
    let next = next_status(&status, &sync, Timestamp::now());
    if clone.status.as_ref() != Some(&next) {
        let mut updated = (*clone).clone();
        updated.status = Some(next.clone());
        clones
            .replace_status(&clone.name_any(), &PostParams::default(), &updated)
            .await?;
    }
    match next.phase.as_deref() {
        Some(FAILED) => Ok(Action::await_change()),
        Some(SUCCEEDED) if next.snapshot_name.is_none() && next.restore_name.is_none() => {
            Ok(Action::await_change())
        }
        _ => Ok(Action::requeue(RETRY)),
    }
}

/// The next status (KubeVirt's `updateStatus`): conditions, then the phase moved on as far as
/// the pass got.
fn next_status(
    old: &VirtualMachineCloneStatus,
    sync: &Sync,
    now: Timestamp,
) -> VirtualMachineCloneStatus {
    let time = Time(now);
    let mut status = old.clone();
    if status.creation_time.is_none() {
        status.creation_time = Some(time.clone());
    }
    let set = |status: &mut VirtualMachineCloneStatus,
               progressing: bool,
               p: &str,
               ready: bool,
               r: &str| {
        api::snapshot::set_condition(&mut status.conditions, "Progressing", progressing, p, &time);
        api::snapshot::set_condition(&mut status.conditions, "Ready", ready, r, &time);
    };
    if let Some((_, reason)) = &sync.pending {
        set(&mut status, false, "Pending", false, reason);
    } else if let Some((_, reason)) = &sync.failing {
        status.phase = Some(FAILED.to_string());
        set(&mut status, false, "Failed", false, reason);
    } else {
        set(
            &mut status,
            true,
            "Still processing",
            false,
            "Still processing",
        );
    }
    let phase = |status: &VirtualMachineCloneStatus| status.phase.clone().unwrap_or_default();
    if phase(&status).is_empty() && sync.pending.is_none() {
        status.phase = Some(SNAPSHOT_IN_PROGRESS.to_string());
    }
    if phase(&status) == SNAPSHOT_IN_PROGRESS {
        if sync.snapshot_name.is_some() {
            status.snapshot_name = sync.snapshot_name.clone();
        }
        if sync.snapshot_ready {
            status.phase = Some(RESTORE_IN_PROGRESS.to_string());
        }
    }
    if phase(&status) == RESTORE_IN_PROGRESS {
        if sync.restore_name.is_some() {
            status.restore_name = sync.restore_name.clone();
        }
        if sync.target_name.is_some() {
            status.target_name = sync.target_name.clone();
        }
        if sync.restore_ready {
            status.phase = Some(CREATING_TARGET_VM.to_string());
        }
    }
    if phase(&status) == CREATING_TARGET_VM && sync.target_created {
        status.phase = Some(SUCCEEDED.to_string());
    }
    if phase(&status) == SUCCEEDED {
        set(&mut status, false, "Ready", true, "Ready");
    }
    if sync.cleaned_up {
        status.snapshot_name = None;
        status.restore_name = None;
    }
    status
}

fn owned_by(clone: &VirtualMachineClone) -> OwnerReference {
    OwnerReference {
        api_version: "clone.kubevirt.io/v1beta1".into(),
        kind: "VirtualMachineClone".into(),
        name: clone.name_any(),
        uid: clone.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// KubeVirt's `syncTargetVM`: as far as it can get in one pass.
async fn sync(clone: &VirtualMachineClone, ctx: &Context, namespace: &str) -> Result<Sync, Error> {
    let client = ctx.client.clone();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let snapshots: Api<VirtualMachineSnapshot> = Api::namespaced(client.clone(), namespace);
    let contents: Api<VirtualMachineSnapshotContent> = Api::namespaced(client.clone(), namespace);
    let restores: Api<VirtualMachineRestore> = Api::namespaced(client, namespace);
    let status = clone.status.clone().unwrap_or_default();
    let mut sync = Sync::default();
    let Some(source) = clone.spec.source.as_ref() else {
        sync.failing = Some(("SourceDoesNotExist", "the clone has no source".to_string()));
        return Ok(sync);
    };
    let from_vm = source.kind == "VirtualMachine";
    let missing = || {
        Some((
            "SourceDoesNotExist",
            format!(
                "Source doesnt exist: {} {namespace}/{}",
                source.kind, source.name
            ),
        ))
    };
    let mut snapshot_name = status.snapshot_name.clone();
    let source_vm = if from_vm {
        let Some(vm) = vms.get_opt(&source.name).await? else {
            sync.pending = missing();
            return Ok(sync);
        };
        Some(vm)
    } else {
        if snapshots.get_opt(&source.name).await?.is_none() {
            sync.pending = missing();
            return Ok(sync);
        }
        snapshot_name = Some(source.name.clone());
        None
    };
    let phase = status.phase.clone().unwrap_or_default();

    if phase.is_empty() || phase == SNAPSHOT_IN_PROGRESS {
        if let (Some(vm), None) = (&source_vm, &status.snapshot_name) {
            if let Some(reason) = volumes_not_snapshotted(vm) {
                sync.pending = Some(("VMVolumeSnapshotsInvalid", reason));
                return Ok(sync);
            }
            let name = clone::snapshot_name(clone);
            let snapshot: VirtualMachineSnapshot = serde_json::from_value(serde_json::json!({
                "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineSnapshot",
                "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owned_by(clone)]},
                "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": vm.name_any()}},
            }))
            .expect("a snapshot");
            match snapshots.create(&PostParams::default(), &snapshot).await {
                Ok(_) => {
                    let note = format!("created snapshot {name} for clone {}", clone.name_any());
                    ctx.event(clone, false, "SnapshotCreated", note).await;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            sync.snapshot_name = Some(name);
            return Ok(sync);
        }
        let name = snapshot_name.clone().unwrap_or_default();
        let Some(snapshot) = snapshots.get_opt(&name).await? else {
            return Ok(sync);
        };
        sync.snapshot_name = Some(name.clone());
        if snapshot.status.as_ref().and_then(|s| s.ready_to_use) != Some(true) {
            return Ok(sync);
        }
        let note = format!(
            "snapshot {name} for clone {} is ready to use",
            clone.name_any()
        );
        ctx.event(clone, false, "SnapshotReady", note).await;
        sync.snapshot_ready = true;
    }

    if phase.is_empty() || phase == SNAPSHOT_IN_PROGRESS || phase == RESTORE_IN_PROGRESS {
        let snapshot_name = snapshot_name.unwrap_or_default();
        if status.restore_name.is_none() {
            let Some(snapshot) = snapshots.get_opt(&snapshot_name).await? else {
                return Ok(sync);
            };
            let content_name = api::snapshot::content_name(&snapshot);
            let stored = contents
                .get_opt(&content_name)
                .await?
                .and_then(|c| c.spec.source.virtual_machine);
            let Some(stored) = stored else {
                sync.failing = Some((
                    "SnapshotContentInvalid",
                    format!("snapshot {snapshot_name} has no VM in its content {content_name}"),
                ));
                return Ok(sync);
            };
            let stored_vm = VirtualMachine {
                metadata: stored.metadata.clone(),
                spec: stored.spec.clone(),
                status: None,
            };
            let mut target = clone
                .spec
                .target
                .clone()
                .unwrap_or_else(|| ObjectReference {
                    api_group: Some("kubevirt.io".into()),
                    kind: "VirtualMachine".into(),
                    name: String::new(),
                });
            if target.name.is_empty() {
                target.name = clone::generated_target_name(&stored_vm.name_any(), &random_suffix());
            }
            let name = clone::restore_name(clone);
            let restore = VirtualMachineRestore {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(namespace.to_string()),
                    owner_references: Some(vec![owned_by(clone)]),
                    ..ObjectMeta::default()
                },
                spec: api::snapshot::VirtualMachineRestoreSpec {
                    target: target.clone(),
                    virtual_machine_snapshot_name: snapshot_name.clone(),
                    patches: clone::patches(&stored_vm, &clone.spec),
                    volume_restore_policy: clone.spec.volume_name_policy.clone(),
                    ..Default::default()
                },
                status: None,
            };
            match restores.create(&PostParams::default(), &restore).await {
                Ok(_) => {
                    let note = format!("created restore {name} for clone {}", clone.name_any());
                    ctx.event(clone, false, "RestoreCreated", note).await;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(kube::Error::Api(e)) => {
                    let note = format!(
                        "failed creating restore {name} for clone {}: {}",
                        clone.name_any(),
                        e.message
                    );
                    ctx.event(clone, true, "RestoreCreationFailed", note).await;
                    return Ok(sync);
                }
                Err(e) => return Err(e.into()),
            }
            sync.restore_name = Some(name);
            sync.target_name = Some(target.name);
            return Ok(sync);
        }
        let name = status.restore_name.clone().unwrap_or_default();
        let Some(restore) = restores.get_opt(&name).await? else {
            return Ok(sync);
        };
        let restore_status = restore.status.clone().unwrap_or_default();
        if crate::snapshot::plan::restore_progressing(&restore_status) {
            return Ok(sync);
        }
        let note = format!(
            "restore {name} for clone {} is ready to use",
            clone.name_any()
        );
        ctx.event(clone, false, "RestoreReady", note).await;
        sync.restore_ready = true;
        sync.target_name = Some(restore.spec.target.name.clone());
    }

    if phase != SUCCEEDED {
        let target = sync
            .target_name
            .clone()
            .or(status.target_name.clone())
            .unwrap_or_default();
        if vms.get_opt(&target).await?.is_none() {
            return Ok(sync);
        }
        let note = format!("created target VM {target} for clone {}", clone.name_any());
        ctx.event(clone, false, "TargetVMCreated", note).await;
        sync.target_created = true;
    }

    // Done: the temporary restore, and the temporary snapshot of a VM source, go.
    if let Some(name) = &status.restore_name {
        delete_quietly(&restores, name).await?;
    }
    if from_vm {
        if let Some(name) = &status.snapshot_name {
            delete_quietly(&snapshots, name).await?;
        }
    }
    sync.cleaned_up = true;
    Ok(sync)
}

async fn delete_quietly<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// KubeVirt's check before a VM is snapshotted for a clone: every PVC or DataVolume volume must
/// be snapshottable, or the clone would share the source's disk.
fn volumes_not_snapshotted(vm: &VirtualMachine) -> Option<String> {
    let statuses = vm
        .status
        .as_ref()
        .map(|s| s.volume_snapshot_statuses.clone())
        .unwrap_or_default();
    let volumes = vm
        .spec
        .template
        .spec
        .as_ref()
        .map(|s| s.volumes.clone())
        .unwrap_or_default();
    let problems: Vec<String> = volumes
        .iter()
        .filter(|v| v.persistent_volume_claim.is_some() || v.data_volume.is_some())
        .filter_map(|v| match statuses.iter().find(|s| s.name == v.name) {
            Some(s) if s.enabled => None,
            Some(_) => Some(format!(
                "Virtual Machine volume {} does not support snapshots",
                v.name
            )),
            None => Some(format!(
                "Virtual Machine volume {} snapshot support unknown",
                v.name
            )),
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join("\n"))
}

/// Five characters from KubeVirt's random-name alphabet (`bcdfghjklmnpqrstvwxz2456789`).
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut seed = Timestamp::now().as_nanosecond() as u64;
    (0..5)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ALPHABET[((seed >> 33) % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
}

/// The clones a VM change concerns: those whose target it is (a deleted target deletes its
/// succeeded clone) and those whose source it is (a clone waits for its source).
pub fn clones_of_vm(
    clones: &Store<VirtualMachineClone>,
    vm: &VirtualMachine,
) -> Vec<ObjectRef<VirtualMachineClone>> {
    let namespace = vm.namespace();
    let name = vm.name_any();
    clones
        .state()
        .iter()
        .filter(|c| c.namespace() == namespace)
        .filter(|c| {
            let target = c.status.as_ref().and_then(|s| s.target_name.as_deref());
            let source = c.spec.source.as_ref().map(|s| s.name.as_str());
            target == Some(name.as_str()) || source == Some(name.as_str())
        })
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_moves_as_far_as_the_pass_got() {
        let now = Timestamp::from_second(10).unwrap();
        let start = next_status(
            &VirtualMachineCloneStatus::default(),
            &Sync {
                snapshot_name: Some("tmp-snapshot-u".into()),
                ..Sync::default()
            },
            now,
        );
        assert_eq!(start.phase.as_deref(), Some(SNAPSHOT_IN_PROGRESS));
        assert_eq!(start.snapshot_name.as_deref(), Some("tmp-snapshot-u"));
        let found = |t: &str| {
            api::condition::find(&start.conditions, t)
                .and_then(|c| c.reason.clone())
                .unwrap_or_default()
        };
        assert_eq!(found("Progressing"), "Still processing");
        let all_at_once = next_status(
            &start,
            &Sync {
                snapshot_ready: true,
                restore_name: Some("tmp-restore-u".into()),
                target_name: Some("copy".into()),
                restore_ready: true,
                target_created: true,
                cleaned_up: true,
                ..Sync::default()
            },
            now,
        );
        assert_eq!(all_at_once.phase.as_deref(), Some(SUCCEEDED));
        assert_eq!(all_at_once.target_name.as_deref(), Some("copy"));
        assert_eq!(
            (
                all_at_once.snapshot_name.clone(),
                all_at_once.restore_name.clone()
            ),
            (None, None)
        );
        let ready = api::condition::find(&all_at_once.conditions, "Ready").unwrap();
        assert!(ready.is_true());
    }

    #[test]
    fn a_missing_source_leaves_the_clone_pending_without_a_phase() {
        let status = next_status(
            &VirtualMachineCloneStatus::default(),
            &Sync {
                pending: Some((
                    "SourceDoesNotExist",
                    "Source doesnt exist: VirtualMachineSnapshot ns/s".into(),
                )),
                ..Sync::default()
            },
            Timestamp::from_second(1).unwrap(),
        );
        assert_eq!(status.phase, None);
        let ready = api::condition::find(&status.conditions, "Ready").unwrap();
        assert_eq!(
            ready.reason.as_deref(),
            Some("Source doesnt exist: VirtualMachineSnapshot ns/s")
        );
        let failing = next_status(
            &status,
            &Sync {
                failing: Some(("SnapshotContentInvalid", "bad".into())),
                ..Sync::default()
            },
            Timestamp::from_second(2).unwrap(),
        );
        assert_eq!(failing.phase.as_deref(), Some(FAILED));
    }

    #[test]
    fn a_claim_whose_snapshot_support_is_not_known_yet_holds_the_clone() {
        let vm: VirtualMachine = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm"},
            "spec": {"template": {"spec": {"domain": {"devices": {}},
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}},
                            {"name": "disk", "containerDisk": {"image": "i"}}]}}},
        }))
        .unwrap();
        assert_eq!(
            volumes_not_snapshotted(&vm).as_deref(),
            Some("Virtual Machine volume data snapshot support unknown")
        );
        let mut with_status = vm.clone();
        with_status.status = Some(api::VirtualMachineStatus {
            volume_snapshot_statuses: api::snapshot::volume_snapshot_statuses(&vm.spec),
            ..Default::default()
        });
        assert_eq!(volumes_not_snapshotted(&with_status), None);
        let mut refused = with_status.clone();
        let statuses = &mut refused.status.as_mut().unwrap().volume_snapshot_statuses;
        statuses[0].enabled = false;
        assert_eq!(
            volumes_not_snapshotted(&refused).as_deref(),
            Some("Virtual Machine volume data does not support snapshots")
        );
        let suffix = random_suffix();
        assert_eq!(suffix.len(), 5);
        assert!(suffix
            .bytes()
            .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)));
    }
}
