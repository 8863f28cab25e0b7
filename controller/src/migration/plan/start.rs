//! Pending: whether and when a migration starts, and its start.

use std::time::Duration;

use api::migration::MigrationPhase;
use api::vmi::MigrationState;
use api::{VirtualMachineInstance, VmiPhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    event, fail, live, over_limits, refresh_live_migratable, render_target_pod, running_sources,
    status_step, Plan, Step, Subject, World, LIMITS_RECHECK,
};
use crate::pod::RenderError;

/// Pending: checks the VMI and the limits, then starts the migration: records it in the VMI's
/// `migrationState`, creates the target Pod, and moves to Scheduling.
pub(super) fn start(
    world: &World,
    vmi: &VirtualMachineInstance,
    ours: Option<&MigrationState>,
) -> Result<Plan, RenderError> {
    let migration = &world.migration;
    let uid = migration.metadata.uid.clone().unwrap_or_default();
    let vmi_name = vmi.metadata.name.clone().unwrap_or_default();
    let Some(facts) = &world.start else {
        // Not read (see `needs`): come back soon rather than decide without them.
        return Ok(Plan {
            requeue_after: Some(Duration::from_secs(1)),
            note: Some("the facts to start it were not read".into()),
            ..Plan::default()
        });
    };
    let mut steps = Vec::new();
    // Is it migratable? Say so on the VMI either way.
    let mut vmi_status = vmi.status.clone().unwrap_or_default();
    let (migratable, changed) =
        refresh_live_migratable(vmi, &mut vmi_status, &facts.pvc_access_modes);
    if changed {
        steps.push(Step::ReplaceVmiStatus(Box::new(vmi_status)));
        if migratable.is_ok() {
            // Go on from the VMI as written: its watch brings the next pass.
            return Ok(Plan::of(steps));
        }
    }
    if let Err(not) = migratable {
        steps.push(event(
            Subject::Migration,
            true,
            not.reason,
            not.message.clone(),
        ));
        steps.extend(status_step(
            world,
            MigrationPhase::Failed,
            None,
            Some(not.message),
        ));
        return Ok(Plan::of(steps));
    }
    let status = vmi.status.clone().unwrap_or_default();
    if status.phase != Some(VmiPhase::Running) {
        return Ok(fail(world, format!("VMI {vmi_name} is not running")));
    }
    let busy = status
        .migration_state
        .as_ref()
        .filter(|s| s.completed != Some(true) && s.failed != Some(true));
    if let Some(other) = busy.filter(|_| ours.is_none()) {
        // The VMI's watch brings the next pass when that migration ends.
        return Ok(Plan {
            note: Some(format!(
                "waiting: the VMI is migrating ({})",
                other
                    .migration_uid
                    .as_deref()
                    .unwrap_or("another migration")
            )),
            ..Plan::default()
        });
    }
    let source_node = status.node_name.clone().unwrap_or_default();
    let running = running_sources(&facts.migrations, &uid);
    if let Some(wait) = over_limits(&running, &source_node, &world.config) {
        return Ok(Plan {
            steps: status_step(world, MigrationPhase::Pending, None, None)
                .into_iter()
                .collect(),
            requeue_after: Some(LIMITS_RECHECK),
            note: Some(format!("waiting: {wait}")),
        });
    }
    // One target Pod per migration, also when an earlier pass created it and then failed.
    let existing = world.target_pods.iter().find(|p| live(p));
    let (target_pod, create) = match existing {
        Some(pod) => (pod.metadata.name.clone(), None),
        None => {
            let pod = render_target_pod(vmi, &world.config, &uid, &source_node)?;
            (pod.metadata.name.clone(), Some(pod))
        }
    };
    // The source Pod: the VMI's live launcher Pod on the source node.
    let source_pod = facts
        .launcher_pods
        .iter()
        .filter(|p| live(p) && p.metadata.name != target_pod)
        .find(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(source_node.as_str())
        })
        .and_then(|p| p.metadata.name.clone());
    let state = MigrationState {
        migration_uid: Some(uid.clone()),
        source_node: Some(source_node),
        source_pod,
        target_pod: target_pod.clone(),
        // A pass that repeats the start (its status write failed) keeps the first one's time.
        start_timestamp: Some(
            ours.and_then(|s| s.start_timestamp.clone())
                .unwrap_or(Time(world.now)),
        ),
        migration_policy_name: facts.policy.clone(),
        migration_configuration: Some(facts.settings.clone()),
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
    // The VMI names the migration before its target Pod exists: the VMI controller then never
    // takes the new Pod for the VMI's launcher (`visible_pods`).
    steps.push(Step::StartVmiState {
        state: Box::new(state.clone()),
        method,
    });
    steps.extend(create.map(|pod| Step::CreatePod(Box::new(pod))));
    steps.push(event(
        Subject::Vmi,
        false,
        "PreparingTarget",
        format!(
            "migration {}: target Pod {} created",
            migration.metadata.name.as_deref().unwrap_or_default(),
            target_pod.unwrap_or_default()
        ),
    ));
    steps.extend(status_step(
        world,
        MigrationPhase::Scheduling,
        Some(state),
        None,
    ));
    Ok(Plan::of(steps))
}

#[cfg(test)]
#[path = "start_tests.rs"]
mod tests;
