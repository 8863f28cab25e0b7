//! One pass over a VM snapshot: its finalizer, the VM's lock, the content, the status, and the
//! clean-up when it goes (KubeVirt's `updateVMSnapshot` and the content controller in one).

use std::sync::Arc;
use std::time::Duration;

use api::snapshot::{
    VirtualMachineSnapshot, VirtualMachineSnapshotContent, SNAPSHOT_FINALIZER, SOURCE_FINALIZER,
};
use api::{VirtualMachine, VirtualMachineInstance};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::copier;
use super::plan::{self, Source};
use super::set_finalizer;
use super::volumes::{self, Volumes};
use crate::context::Context;
use crate::Error;

/// How often a snapshot that is not done is looked at again.
const RETRY: Duration = Duration::from_secs(1);

pub async fn reconcile(
    snapshot: Arc<VirtualMachineSnapshot>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = snapshot.namespace().ok_or(Error::NotNamespaced)?;
    let name = snapshot.name_any();
    let client = ctx.client.clone();
    let snapshots: Api<VirtualMachineSnapshot> = Api::namespaced(client.clone(), &namespace);
    let contents: Api<VirtualMachineSnapshotContent> = Api::namespaced(client.clone(), &namespace);
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace);
    let now = Timestamp::now();

    let terminating = plan::terminating(&snapshot, now);
    if !terminating
        && !snapshot
            .finalizers()
            .iter()
            .any(|f| f == SNAPSHOT_FINALIZER)
    {
        set_finalizer(&snapshots, snapshot.as_ref(), SNAPSHOT_FINALIZER, true).await?;
        return Ok(Action::requeue(Duration::ZERO));
    }

    // The VM it is of: named by the source, and the same VM it started with.
    let source_ref = &snapshot.spec.source;
    let mut vm = if source_ref.api_group.as_deref() == Some("kubevirt.io")
        && source_ref.kind == "VirtualMachine"
    {
        vms.get_opt(&source_ref.name).await?
    } else {
        None
    };
    let recorded = snapshot
        .status
        .as_ref()
        .and_then(|s| s.source_uid.as_deref());
    if let (Some(uid), Some(found)) = (recorded, &vm) {
        if found.metadata.uid.as_deref() != Some(uid) {
            vm = None;
        }
    }
    let content_name = api::snapshot::content_name(&snapshot);
    let mut content = contents.get_opt(&content_name).await?;

    let mut source = match &vm {
        Some(vm) => Some(source_of(vm, &name, vmis.get_opt(&vm.name_any()).await?)),
        None => None,
    };
    if let (Some(found), Some(source)) = (&mut vm, &mut source) {
        if snapshot.status.is_some() && plan::progressing(&snapshot) && !terminating {
            if !source.locked && source.held_by.is_none() {
                *found = lock(&vms, found, &name).await?;
                source.locked = true;
            } else if source.locked && content.is_none() {
                let stored = stored_vm(&ctx, found, vmis.get_opt(&found.name_any()).await?).await?;
                let claims: Api<PersistentVolumeClaim> =
                    Api::namespaced(client.clone(), &namespace);
                let backups = match plan::volume_backups(
                    &snapshot,
                    &stored,
                    &claims.list(&ListParams::default()).await?.items,
                ) {
                    Ok(backups) => backups,
                    Err(message) => {
                        ctx.event(snapshot.as_ref(), true, "VolumeBackupFailed", message)
                            .await;
                        return Ok(Action::requeue(Duration::from_secs(5)));
                    }
                };
                let new = plan::content_for(&snapshot, &stored, backups);
                match contents.create(&PostParams::default(), &new).await {
                    Ok(created) => {
                        ctx.event(
                            snapshot.as_ref(),
                            false,
                            "SuccessfulVirtualMachineSnapshotContentCreate",
                            format!(
                                "Successfully created VirtualMachineSnapshotContent {content_name}"
                            ),
                        )
                        .await;
                        content = Some(created);
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        content = contents.get_opt(&content_name).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        } else if plan::can_unlock(&snapshot, content.as_ref(), now) && source.locked {
            unlock(&vms, found, &name).await?;
            source.locked = false;
        }
    }

    // The content: ready once its claims' data is copied (at once when it has none); released
    // when its snapshot goes, and deleted with it (and its backups) unless retained.
    if let Some(found) = &content {
        let volumes = Volumes {
            ctx: &ctx,
            pods: Api::namespaced(client.clone(), &namespace),
            content: found,
        };
        if terminating {
            let delete = plan::delete_content(&snapshot, found);
            volumes.release(source.as_ref()).await;
            if delete && !volumes.remove_backups().await? {
                return Ok(Action::requeue(RETRY));
            }
            set_finalizer(&contents, found, api::snapshot::CONTENT_FINALIZER, false).await?;
            if delete {
                match contents
                    .delete(&content_name, &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
                content = None;
            }
        } else if found
            .status
            .as_ref()
            .is_none_or(|s| s.creation_time.is_none() && s.error.is_none())
        {
            let vmi = match &vm {
                Some(vm) => vmis.get_opt(&vm.name_any()).await?,
                None => None,
            };
            let status = match volumes.back_up(vmi.as_ref(), source.as_ref()).await? {
                copier::Progress::Running => None,
                copier::Progress::Done => Some(plan::content_status(found, now)),
                copier::Progress::Failed(message) => {
                    ctx.event(
                        snapshot.as_ref(),
                        true,
                        "VolumeBackupFailed",
                        message.clone(),
                    )
                    .await;
                    Some(plan::content_error(found, &message, now))
                }
            };
            if let Some(status) = status {
                volumes.release(source.as_ref()).await;
                // A merge: the release may have changed the content's annotations.
                let patch = json!({"status": status});
                content = Some(
                    contents
                        .patch_status(
                            &content_name,
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await?,
                );
            }
        }
    }

    // A VM paused for the copy of its volumes is not a VM its user paused (KubeVirt's `Paused`
    // indication).
    if let (Some(source), Some(content)) = (&mut source, &content) {
        if volumes::paused_for_backup(content) {
            source.paused = false;
        }
    }
    let status = plan::snapshot_status(&snapshot, source.as_ref(), content.as_ref(), now);
    let mut current = (*snapshot).clone();
    if snapshot.status.as_ref() != Some(&status) {
        current.status = Some(status);
        current = snapshots
            .replace_status(&name, &PostParams::default(), &current)
            .await?;
    }

    if current.metadata.deletion_timestamp.is_some() && !source.as_ref().is_some_and(|s| s.locked) {
        set_finalizer(&snapshots, &current, SNAPSHOT_FINALIZER, false).await?;
        return Ok(Action::await_change());
    }
    if plan::progressing(&current) || source.as_ref().is_some_and(|s| s.locked) {
        return Ok(Action::requeue(RETRY));
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// The snapshot a content belongs to: a change of the content brings its snapshot's next pass.
pub fn of_content(
    content: &VirtualMachineSnapshotContent,
) -> Option<ObjectRef<VirtualMachineSnapshot>> {
    let snapshot = content.spec.virtual_machine_snapshot_name.as_deref()?;
    Some(ObjectRef::new(snapshot).within(&content.namespace()?))
}

/// The VM a snapshot stores: with the spec its running VMI was started from (the VMI's
/// `status.virtualMachineRevisionName`), as KubeVirt's online snapshots store it; as it is when
/// it runs nothing, or its start recorded no revision.
async fn stored_vm(
    ctx: &Context,
    vm: &VirtualMachine,
    vmi: Option<VirtualMachineInstance>,
) -> Result<VirtualMachine, Error> {
    let mut stored = vm.clone();
    let revision_name = vmi
        .and_then(|v| v.status)
        .and_then(|s| s.virtual_machine_revision_name);
    let Some(revision_name) = revision_name else {
        return Ok(stored);
    };
    let revisions: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &vm.namespace().unwrap_or_default());
    match revisions.get_opt(&revision_name).await?.as_ref().and_then(plan::started_spec) {
        Some(spec) => stored.spec = spec,
        None => log::warn!(
            "VM {}: revision {revision_name} of its running VMI holds no spec; the snapshot stores the VM's",
            vm.name_any()
        ),
    }
    Ok(stored)
}

/// What a snapshot needs to know of its VM.
fn source_of(vm: &VirtualMachine, snapshot: &str, vmi: Option<VirtualMachineInstance>) -> Source {
    let in_progress = vm
        .status
        .as_ref()
        .and_then(|s| s.snapshot_in_progress.clone());
    let locked = in_progress.as_deref() == Some(snapshot)
        && vm.finalizers().iter().any(|f| f == SOURCE_FINALIZER);
    let conditions = vmi
        .as_ref()
        .and_then(|v| v.status.as_ref())
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    Source {
        uid: vm.metadata.uid.clone().unwrap_or_default(),
        locked,
        online: vmi.is_some(),
        paused: api::condition::find(&conditions, "Paused").is_some_and(|c| c.is_true()),
        guest_agent: api::condition::find(&conditions, "AgentConnected").is_some(),
        held_by: in_progress.filter(|other| other != snapshot),
    }
}

/// Locks the VM for the snapshot: `status.snapshotInProgress`, then the source finalizer.
async fn lock(
    vms: &Api<VirtualMachine>,
    vm: &VirtualMachine,
    snapshot: &str,
) -> Result<VirtualMachine, Error> {
    let mut vm = vm.clone();
    if vm
        .status
        .as_ref()
        .and_then(|s| s.snapshot_in_progress.as_deref())
        != Some(snapshot)
    {
        let patch = json!({"metadata": {"resourceVersion": vm.resource_version()},
                           "status": {"snapshotInProgress": snapshot}});
        vm = vms
            .patch_status(
                &vm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    set_finalizer(vms, &vm, SOURCE_FINALIZER, true).await?;
    log::info!("VM {} locked for snapshot {snapshot}", vm.name_any());
    Ok(vm)
}

/// Unlocks the VM: the source finalizer, then `status.snapshotInProgress`.
async fn unlock(
    vms: &Api<VirtualMachine>,
    vm: &VirtualMachine,
    snapshot: &str,
) -> Result<(), Error> {
    set_finalizer(vms, vm, SOURCE_FINALIZER, false).await?;
    let patch = json!({"status": {"snapshotInProgress": null}});
    vms.patch_status(
        &vm.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    log::info!("VM {} unlocked after snapshot {snapshot}", vm.name_any());
    Ok(())
}
