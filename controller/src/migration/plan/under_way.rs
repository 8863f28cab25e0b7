//! Scheduling to Running, and the end: Succeeded or Failed.

use std::collections::BTreeMap;
use std::time::Duration;

use api::migration::MigrationPhase;
use api::vmi::MigrationState;
use api::VirtualMachineInstance;
use contract::labels;

use super::{
    delete_target_pods, ended, event, fail, live, status_step, unschedulable_message, Plan, Step,
    Subject, World, UNSCHEDULABLE_TIMEOUT_SECONDS,
};

/// Scheduling to Running, and the end: follows the target Pod and what the handlers write into
/// the VMI's `migrationState`.
pub(super) fn under_way(
    world: &World,
    vmi: &VirtualMachineInstance,
    phase: MigrationPhase,
    ours: Option<&MigrationState>,
) -> Plan {
    let Some(state) = ours.cloned() else {
        return fail(world, "the VMI no longer records this migration".into());
    };
    if state.failed == Some(true) {
        let mut steps = delete_target_pods(world, state.target_pod.as_deref(), None);
        if vmi
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(labels::MIGRATION_TARGET_NODE))
        {
            steps.push(Step::PatchVmiLabels(BTreeMap::from([(
                labels::MIGRATION_TARGET_NODE.to_string(),
                None,
            )])));
        }
        let why = state.failure_reason.clone();
        steps.extend(status_step(world, MigrationPhase::Failed, Some(state), why));
        return Plan::of(steps);
    }
    if state.completed == Some(true) {
        return succeeded(world, vmi, state);
    }

    let target_pod = state.target_pod.as_deref().and_then(|name| {
        world
            .target_pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    });
    let pod_failed = match target_pod {
        None => Some("the target Pod is gone"),
        Some(pod) if !live(pod) => Some("the target Pod is being deleted"),
        Some(pod) if api::launcher_pod::ended(pod) => Some("the target Pod has ended"),
        Some(_) => None,
    };
    let (Some(pod), None) = (target_pod, pod_failed) else {
        // The source handler stops the stream when it sees this; the VM keeps running there.
        // The VMI's watch brings the pass that fails the migration.
        let why = pod_failed.unwrap_or("the target Pod is gone");
        return Plan::of(vec![Step::PatchVmiState(Box::new(ended(
            why.into(),
            world.now,
        )))]);
    };
    let pod_node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let mut requeue_after = None;
    if phase == MigrationPhase::Scheduling && pod_node.is_none() {
        let since = world
            .migration
            .status
            .as_ref()
            .and_then(|s| {
                s.phase_transition_timestamps
                    .iter()
                    .rev()
                    .find(|t| t.phase == MigrationPhase::Scheduling)
            })
            .map(|t| t.phase_transition_timestamp.0);
        if let Some(since) = since {
            let waited = world.now.duration_since(since).as_secs();
            if waited >= UNSCHEDULABLE_TIMEOUT_SECONDS {
                let why = format!(
                    "the target Pod could not be scheduled within {UNSCHEDULABLE_TIMEOUT_SECONDS} s: {}",
                    unschedulable_message(pod)
                );
                return Plan::of(vec![Step::PatchVmiState(Box::new(ended(why, world.now)))]);
            }
            // The Pod's watch brings the pass when it gets a node; nothing brings the one
            // when it did not.
            let left = (UNSCHEDULABLE_TIMEOUT_SECONDS - waited).max(0) as u64;
            requeue_after = Some(Duration::from_secs(left + 1));
        }
    }
    let pod_running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let mut state = state;
    let mut steps = Vec::new();
    let next = match phase {
        MigrationPhase::Scheduling => pod_node.map(|node| {
            steps.push(Step::PatchVmiState(Box::new(MigrationState {
                target_node: Some(node.clone()),
                ..MigrationState::default()
            })));
            steps.push(Step::PatchVmiLabels(BTreeMap::from([(
                labels::MIGRATION_TARGET_NODE.to_string(),
                Some(node.clone()),
            )])));
            state.target_node = Some(node);
            MigrationPhase::Scheduled
        }),
        MigrationPhase::Scheduled if pod_running => Some(MigrationPhase::PreparingTarget),
        MigrationPhase::PreparingTarget if state.target_node_address.is_some() => {
            Some(MigrationPhase::TargetReady)
        }
        MigrationPhase::TargetReady if state.mode.is_some() => Some(MigrationPhase::Running),
        _ => None,
    };
    steps.extend(status_step(world, next.unwrap_or(phase), Some(state), None));
    Plan {
        steps,
        requeue_after: requeue_after.filter(|_| next.is_none()),
        note: None,
    }
}

/// The source handler reported the switch-over: the VMI moves to the target node, the source
/// Pod and any other target Pod go.
fn succeeded(world: &World, vmi: &VirtualMachineInstance, state: MigrationState) -> Plan {
    let mut steps = Vec::new();
    let target = state.target_node.clone().unwrap_or_default();
    let mut status = vmi.status.clone().unwrap_or_default();
    if status.node_name.as_deref() != Some(target.as_str()) {
        status.node_name = Some(target.clone());
        status.interfaces.iter_mut().for_each(|i| {
            i.ip_address = None;
            i.ip_addresses.clear();
        });
        steps.push(Step::ReplaceVmiStatus(Box::new(status)));
        steps.push(Step::PatchVmiLabels(BTreeMap::from([
            (labels::NODE_NAME.to_string(), Some(target.clone())),
            (labels::MIGRATION_TARGET_NODE.to_string(), None),
        ])));
    }
    steps.extend(delete_target_pods(world, None, state.target_pod.as_deref()));
    steps.extend(state.source_pod.clone().map(Step::DeletePod));
    steps.push(event(
        Subject::Vmi,
        false,
        "Migrated",
        format!(
            "the VMI migrated from {} to {target}",
            state.source_node.clone().unwrap_or_default()
        ),
    ));
    steps.extend(status_step(
        world,
        MigrationPhase::Succeeded,
        Some(state),
        None,
    ));
    Plan::of(steps)
}

#[cfg(test)]
#[path = "under_way_tests.rs"]
mod tests;
