//! One pass over a `VirtualMachineInstanceMigration`: read the VMI and the target Pod, move
//! the phase on, write the VMI's `migrationState` and the migration's status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::migration::{
    MigrationPhase, MigrationPhaseTransitionTimestamp, VirtualMachineInstanceMigration,
    VirtualMachineInstanceMigrationStatus,
};
use api::vmi::MigrationState;
use api::{VirtualMachineInstance, VmiPhase};
use contract::labels;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::plan::{
    abort_status, cancel_step, over_limits, refresh_live_migratable, render_target_pod, Cancel,
};
use super::settings;
use crate::context::Context;
use crate::Error;

const POLL: Duration = Duration::from_secs(1);
/// KubeVirt's default `unschedulablePendingTimeoutSeconds`: how long a target Pod may wait for
/// a node.
const UNSCHEDULABLE_TIMEOUT_SECONDS: i64 = 300;

/// What the scheduler said about a Pod it could not place.
fn unschedulable_message(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| "no node was found".into())
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// The migration state of a migration that ended now, failed for `reason`.
fn ended(reason: String) -> MigrationState {
    MigrationState {
        failed: Some(true),
        failure_reason: Some(reason),
        end_timestamp: Some(now()),
        ..MigrationState::default()
    }
}

/// The access modes of the PVCs `vmi` uses, by claim name; a missing claim is left out (and
/// so counts as not shared).
pub async fn pvc_access_modes(
    client: &kube::Client,
    namespace: &str,
    vmi: &VirtualMachineInstance,
) -> Result<BTreeMap<String, Vec<String>>, kube::Error> {
    let mut modes = BTreeMap::new();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    for volume in &vmi.spec.volumes {
        if let Some(pvc) = &volume.persistent_volume_claim {
            if let Some(claim) = claims.get_opt(&pvc.claim_name).await? {
                let access = claim.spec.and_then(|s| s.access_modes).unwrap_or_default();
                modes.insert(pvc.claim_name.clone(), access);
            }
        }
    }
    Ok(modes)
}

pub async fn reconcile(
    migration: Arc<VirtualMachineInstanceMigration>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = migration.namespace().ok_or(Error::NotNamespaced)?;
    let uid = migration.uid().ok_or(Error::NoUid)?;
    let migrations: Api<VirtualMachineInstanceMigration> =
        Api::namespaced(ctx.client.clone(), &namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let status = migration.status.clone().unwrap_or_default();
    let phase = status.phase.unwrap_or(MigrationPhase::Pending);
    let vmi_name = migration.spec.vmi_name.clone().unwrap_or_default();
    // A finished migration needs nothing of its VMI to go, not even the VMI CRD (which an
    // uninstall may already have removed: the apiserver then answers 404 without a Status).
    if migration.metadata.deletion_timestamp.is_some() && phase.is_final() {
        release(&migrations, &migration).await?;
        return Ok(Action::await_change());
    }
    let vmi = match vmis.get_opt(&vmi_name).await {
        Ok(vmi) => vmi,
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => return Err(e.into()),
    };
    let ours = |vmi: &VirtualMachineInstance| {
        vmi.status
            .as_ref()
            .and_then(|s| s.migration_state.as_ref())
            .and_then(|s| s.migration_uid.as_deref())
            == Some(uid.as_str())
    };

    if migration.metadata.deletion_timestamp.is_some() {
        let state = vmi
            .as_ref()
            .filter(|v| ours(v))
            .and_then(|v| v.status.as_ref()?.migration_state.as_ref());
        match cancel_step(phase, state) {
            Cancel::Release => {
                release(&migrations, &migration).await?;
                return Ok(Action::await_change());
            }
            Cancel::FailNow => {
                let vmi = vmi.as_ref().expect("a state comes from the VMI");
                let reason = "cancelled: the migration object was deleted";
                patch_vmi_state(
                    &vmis,
                    vmi,
                    MigrationState {
                        abort_requested: Some(true),
                        abort_status: Some("Succeeded".into()),
                        ..ended(reason.into())
                    },
                )
                .await?;
                delete_target_pod(&pods, vmi).await?;
                ctx.event(vmi, true, "MigrationCancelled", reason.into())
                    .await;
                return Ok(Action::requeue(Duration::from_millis(100)));
            }
            Cancel::RequestAbort => {
                let vmi = vmi.as_ref().expect("a state comes from the VMI");
                patch_vmi_state(
                    &vmis,
                    vmi,
                    MigrationState {
                        abort_requested: Some(true),
                        abort_status: Some("Aborting".into()),
                        ..MigrationState::default()
                    },
                )
                .await?;
                ctx.event(
                    vmi,
                    true,
                    "MigrationAbortRequested",
                    "the migration object was deleted: aborting the migration".into(),
                )
                .await;
                return Ok(Action::requeue(POLL));
            }
            Cancel::Wait => return Ok(Action::requeue(POLL)),
            Cancel::Settle => {
                // Record how the abort ended, then finish it below as any migration.
                let vmi = vmi.as_ref().expect("a state comes from the VMI");
                let state = state.expect("settled from a state");
                if phase == MigrationPhase::Pending {
                    // Failed before the handlers were involved: nothing below to finish.
                    delete_target_pod(&pods, vmi).await?;
                    release(&migrations, &migration).await?;
                    return Ok(Action::await_change());
                }
                let status = abort_status(state);
                if status.is_some() && state.abort_status.as_deref() != status {
                    let settled = MigrationState {
                        abort_status: status.map(String::from),
                        ..MigrationState::default()
                    };
                    patch_vmi_state(&vmis, vmi, settled).await?;
                    return Ok(Action::requeue(Duration::from_millis(100)));
                }
            }
        }
    }
    if phase.is_final() {
        return Ok(Action::await_change());
    }
    if !migration
        .finalizers()
        .iter()
        .any(|f| f == contract::finalizers::MIGRATION)
    {
        let mut finalizers = migration.finalizers().to_vec();
        finalizers.push(contract::finalizers::MIGRATION.into());
        patch_finalizers(&migrations, &migration, finalizers).await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    }

    let Some(vmi) = vmi else {
        set_phase(
            &migrations,
            &migration,
            MigrationPhase::Failed,
            None,
            Some(format!("VMI {vmi_name} does not exist")),
        )
        .await?;
        return Ok(Action::await_change());
    };
    let vmi_status = vmi.status.clone().unwrap_or_default();
    let state = vmi_status.migration_state.clone().filter(|_| ours(&vmi));

    if phase == MigrationPhase::Pending {
        // Is it migratable? Say so on the VMI either way.
        let modes = pvc_access_modes(&ctx.client, &namespace, &vmi).await?;
        let mut updated = vmi.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        let (migratable, changed) = refresh_live_migratable(&vmi, status, &modes);
        if changed {
            vmis.replace_status(&vmi_name, &PostParams::default(), &updated)
                .await?;
            if migratable.is_ok() {
                // Go on from the VMI as written.
                return Ok(Action::requeue(Duration::from_millis(100)));
            }
        }
        if let Err(not) = migratable {
            ctx.event(migration.as_ref(), true, not.reason, not.message.clone())
                .await;
            set_phase(
                &migrations,
                &migration,
                MigrationPhase::Failed,
                None,
                Some(not.message),
            )
            .await?;
            return Ok(Action::await_change());
        }
        if vmi_status.phase != Some(VmiPhase::Running) {
            let why = format!("VMI {vmi_name} is not running");
            set_phase(
                &migrations,
                &migration,
                MigrationPhase::Failed,
                None,
                Some(why),
            )
            .await?;
            return Ok(Action::await_change());
        }
        let busy = vmi_status
            .migration_state
            .as_ref()
            .is_some_and(|s| s.completed != Some(true) && s.failed != Some(true));
        if busy {
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        let source_node = vmi_status.node_name.clone().unwrap_or_default();
        let all = Api::<VirtualMachineInstanceMigration>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await?;
        let mut running_sources = Vec::new();
        for other in all.items.iter().filter(|m| m.uid() != Some(uid.clone())) {
            let p = other.status.as_ref().and_then(|s| s.phase);
            if p.is_some_and(|p| p != MigrationPhase::Pending && !p.is_final()) {
                let source = other
                    .status
                    .as_ref()
                    .and_then(|s| s.migration_state.as_ref())
                    .and_then(|s| s.source_node.clone())
                    .unwrap_or_default();
                running_sources.push(source);
            }
        }
        if let Some(wait) = over_limits(&running_sources, &source_node, &ctx.config()) {
            log::info!("migration {}: waiting: {wait}", migration.name_any());
            set_phase(&migrations, &migration, MigrationPhase::Pending, None, None).await?;
            return Ok(Action::requeue(Duration::from_secs(3)));
        }
        // One target Pod per migration, also when an earlier pass created it and then failed.
        let existing = pods
            .list(&ListParams::default().labels(&format!("{}={uid}", labels::MIGRATION_JOB)))
            .await?
            .items
            .into_iter()
            .find(|p| p.metadata.deletion_timestamp.is_none());
        let created = match existing {
            Some(pod) => pod,
            None => {
                let pod = render_target_pod(&vmi, &ctx.config(), &uid, &source_node)
                    .map_err(Error::Render)?;
                pods.create(&PostParams::default(), &pod).await?
            }
        };
        // The source Pod: the VMI's live launcher Pod on the source node.
        let source_pod = pods
            .list(&ListParams::default().labels(&format!(
                "{}={}",
                labels::CREATED_BY,
                vmi.uid().unwrap_or_default()
            )))
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.metadata.name != created.metadata.name)
            .find(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(source_node.as_str())
            })
            .and_then(|p| p.metadata.name);
        let (policy, settings) = settings::settings_for(&ctx, &vmi).await?;
        let state = MigrationState {
            migration_uid: Some(uid.clone()),
            source_node: Some(source_node.clone()),
            source_pod,
            target_pod: created.metadata.name.clone(),
            start_timestamp: Some(now()),
            migration_policy_name: policy,
            migration_configuration: Some(settings),
            ..MigrationState::default()
        };
        let method = if vmi
            .spec
            .volumes
            .iter()
            .any(|v| v.container_disk.is_some() || v.empty_disk.is_some())
        {
            "BlockMigration"
        } else {
            "LiveMigration"
        };
        // A merge patch: the handlers write the VMI's status at the same time.
        let fields = settings::start_patch(&state);
        let patch = json!({"status": {"migrationState": fields, "migrationMethod": method}});
        vmis.patch_status(&vmi_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        ctx.event(
            &vmi,
            false,
            "PreparingTarget",
            format!(
                "migration {}: target Pod {} created",
                migration.name_any(),
                created.name_any()
            ),
        )
        .await;
        set_phase(
            &migrations,
            &migration,
            MigrationPhase::Scheduling,
            Some(state),
            None,
        )
        .await?;
        return Ok(Action::requeue(POLL));
    }

    let Some(state) = state else {
        set_phase(
            &migrations,
            &migration,
            MigrationPhase::Failed,
            None,
            Some("the VMI no longer records this migration".into()),
        )
        .await?;
        return Ok(Action::await_change());
    };
    if state.failed == Some(true) {
        delete_target_pod(&pods, &vmi).await?;
        delete_other_target_pods(&pods, &uid, None).await?;
        let _ = remove_target_label(&vmis, &vmi).await;
        let why = state.failure_reason.clone();
        set_phase(
            &migrations,
            &migration,
            MigrationPhase::Failed,
            Some(state),
            why,
        )
        .await?;
        return Ok(Action::await_change());
    }
    if state.completed == Some(true) {
        let target = state.target_node.clone().unwrap_or_default();
        let mut updated = vmi.clone();
        let s = updated.status.get_or_insert_with(Default::default);
        if s.node_name.as_deref() != Some(target.as_str()) {
            s.node_name = Some(target.clone());
            s.interfaces.iter_mut().for_each(|i| {
                i.ip_address = None;
                i.ip_addresses.clear();
            });
            vmis.replace_status(&vmi_name, &PostParams::default(), &updated)
                .await?;
            let patch = json!({"metadata": {"labels": {labels::NODE_NAME: target, labels::MIGRATION_TARGET_NODE: null}}});
            vmis.patch(&vmi_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        delete_other_target_pods(&pods, &uid, state.target_pod.as_deref()).await?;
        if let Some(source) = &state.source_pod {
            match pods.delete(source, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        ctx.event(
            &vmi,
            false,
            "Migrated",
            format!(
                "the VMI migrated from {} to {target}",
                state.source_node.clone().unwrap_or_default()
            ),
        )
        .await;
        set_phase(
            &migrations,
            &migration,
            MigrationPhase::Succeeded,
            Some(state),
            None,
        )
        .await?;
        return Ok(Action::await_change());
    }

    // Under way: follow the target Pod and the handlers.
    let target_pod = match &state.target_pod {
        Some(name) => pods.get_opt(name).await?,
        None => None,
    };
    let pod_failed = match &target_pod {
        None => Some("the target Pod is gone".to_string()),
        Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
            Some("the target Pod is being deleted".to_string())
        }
        Some(pod) => match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Failed") | Some("Succeeded") => Some("the target Pod has ended".to_string()),
            _ => None,
        },
    };
    if let Some(why) = pod_failed {
        // The source handler stops the stream when it sees this; the VM keeps running there.
        patch_vmi_state(&vmis, &vmi, ended(why)).await?;
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let pod = target_pod.expect("checked above");
    let pod_node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    if phase == MigrationPhase::Scheduling && pod_node.is_none() {
        let since = status
            .phase_transition_timestamps
            .iter()
            .rev()
            .find(|t| t.phase == MigrationPhase::Scheduling)
            .map(|t| t.phase_transition_timestamp.0);
        let waited = since.map(|t| Timestamp::now().duration_since(t).as_secs());
        if waited.is_some_and(|secs| secs >= UNSCHEDULABLE_TIMEOUT_SECONDS) {
            let why = format!(
                "the target Pod could not be scheduled within {UNSCHEDULABLE_TIMEOUT_SECONDS} s: {}",
                unschedulable_message(&pod)
            );
            patch_vmi_state(&vmis, &vmi, ended(why)).await?;
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
    }
    let pod_running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let mut state = state;
    let next = match phase {
        MigrationPhase::Scheduling if pod_node.is_some() => {
            let node = pod_node.clone().unwrap_or_default();
            patch_vmi_state(
                &vmis,
                &vmi,
                MigrationState {
                    target_node: Some(node.clone()),
                    ..MigrationState::default()
                },
            )
            .await?;
            let patch = json!({"metadata": {"labels": {labels::MIGRATION_TARGET_NODE: node}}});
            vmis.patch(&vmi_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            state.target_node = pod_node.clone();
            Some(MigrationPhase::Scheduled)
        }
        MigrationPhase::Scheduled if pod_running => Some(MigrationPhase::PreparingTarget),
        MigrationPhase::PreparingTarget if state.target_node_address.is_some() => {
            Some(MigrationPhase::TargetReady)
        }
        MigrationPhase::TargetReady if state.mode.is_some() => Some(MigrationPhase::Running),
        _ => None,
    };
    if let Some(next) = next {
        set_phase(&migrations, &migration, next, Some(state), None).await?;
    } else if status.migration_state.as_ref() != Some(&state) {
        set_phase(&migrations, &migration, phase, Some(state), None).await?;
    }
    Ok(Action::requeue(POLL))
}

/// Writes the migration's phase (with its transition time), its copy of the migration state,
/// and, for Failed, the reason as a condition.
async fn set_phase(
    migrations: &Api<VirtualMachineInstanceMigration>,
    migration: &VirtualMachineInstanceMigration,
    phase: MigrationPhase,
    state: Option<MigrationState>,
    failure: Option<String>,
) -> Result<(), Error> {
    let mut status: VirtualMachineInstanceMigrationStatus =
        migration.status.clone().unwrap_or_default();
    if status.phase != Some(phase) {
        status.phase = Some(phase);
        status
            .phase_transition_timestamps
            .push(MigrationPhaseTransitionTimestamp {
                phase,
                phase_transition_timestamp: now(),
            });
        log::info!("migration {}: {phase:?}", migration.name_any());
    }
    if let Some(state) = state {
        status.migration_state = Some(state);
    }
    if let Some(reason) = failure {
        status.conditions.retain(|c| c.type_ != "Failed");
        status.conditions.push(api::Condition::new(
            "Failed",
            true,
            "MigrationFailed",
            &reason,
        ));
        if let Some(state) = status.migration_state.as_mut() {
            state.failed = Some(true);
            state.failure_reason.get_or_insert(reason);
        }
    }
    if Some(&status) == migration.status.as_ref() {
        return Ok(());
    }
    let patch = json!({"status": status});
    migrations
        .patch_status(
            &migration.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Lets a deleted migration object go: removes the finalizer.
async fn release(
    migrations: &Api<VirtualMachineInstanceMigration>,
    migration: &VirtualMachineInstanceMigration,
) -> Result<(), Error> {
    let finalizers: Vec<String> = migration
        .finalizers()
        .iter()
        .filter(|f| *f != contract::finalizers::MIGRATION)
        .cloned()
        .collect();
    if finalizers.len() != migration.finalizers().len() {
        patch_finalizers(migrations, migration, finalizers).await?;
    }
    Ok(())
}

async fn patch_finalizers(
    migrations: &Api<VirtualMachineInstanceMigration>,
    migration: &VirtualMachineInstanceMigration,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    // Guarded by the resourceVersion read: a list written over a newer one would drop a
    // finalizer someone else added meanwhile (409 instead, and a pass on the new object).
    let patch = json!({
        "metadata": {"resourceVersion": migration.resource_version(), "finalizers": finalizers},
    });
    migrations
        .patch(
            &migration.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

async fn patch_vmi_state(
    vmis: &Api<VirtualMachineInstance>,
    vmi: &VirtualMachineInstance,
    fields: MigrationState,
) -> Result<(), Error> {
    // A merge patch of the fields set: the unset ones serialize to nothing.
    let patch = json!({"status": {"migrationState": fields}});
    vmis.patch_status(
        &vmi.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

async fn delete_target_pod(pods: &Api<Pod>, vmi: &VirtualMachineInstance) -> Result<(), Error> {
    let target = vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|s| s.target_pod.clone());
    if let Some(name) = target {
        match pods.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Deletes the Pods of migration `uid` other than `keep`.
async fn delete_other_target_pods(
    pods: &Api<Pod>,
    uid: &str,
    keep: Option<&str>,
) -> Result<(), Error> {
    let list = pods
        .list(&ListParams::default().labels(&format!("{}={uid}", labels::MIGRATION_JOB)))
        .await?;
    for pod in list.items {
        let name = pod.name_any();
        if Some(name.as_str()) == keep || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match pods.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn remove_target_label(
    vmis: &Api<VirtualMachineInstance>,
    vmi: &VirtualMachineInstance,
) -> Result<(), Error> {
    if vmi.labels().contains_key(labels::MIGRATION_TARGET_NODE) {
        let patch = json!({"metadata": {"labels": {labels::MIGRATION_TARGET_NODE: null}}});
        vmis.patch(
            &vmi.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_state_patch_holds_only_the_fields_it_sets() {
        let patch = serde_json::to_value(MigrationState {
            abort_requested: Some(true),
            ..ended("gone".into())
        })
        .unwrap();
        let mut keys: Vec<&String> = patch.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            ["abortRequested", "endTimestamp", "failed", "failureReason"]
        );
        assert_eq!(patch["failureReason"], "gone");
        assert_eq!(patch["failed"], true);
    }
}
