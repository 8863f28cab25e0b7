//! Unit tests of a migration under way: Scheduling to Running, Succeeded, Failed.

use std::time::Duration;

use k8s_openapi::jiff::SignedDuration;
use std::collections::BTreeMap;

use api::migration::MigrationPhase;
use contract::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::super::fixtures::*;
use super::super::*;

#[test]
fn scheduling_becomes_scheduled_when_the_target_pod_has_a_node() {
    let m = a_migration_under_way("Scheduling", ours(json!({})));
    let plan = plan_of(&world(
        m,
        Some(vmi(Some(ours(json!({}))))),
        vec![target("target", Some("node-b"), "Pending")],
    ));
    let [Step::PatchVmiState(state), Step::PatchVmiLabels(set), Step::PatchStatus(status)] =
        plan.steps.as_slice()
    else {
        panic!("{plan:#?}");
    };
    assert_eq!(state.target_node.as_deref(), Some("node-b"));
    assert_eq!(state.migration_uid, None, "only the field that changes");
    assert_eq!(
        set[labels::MIGRATION_TARGET_NODE].as_deref(),
        Some("node-b")
    );
    assert_eq!(status.phase, Some(MigrationPhase::Scheduled));
    assert_eq!(
        status
            .migration_state
            .as_ref()
            .and_then(|s| s.target_node.as_deref()),
        Some("node-b")
    );
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn the_target_side_moves_the_phase_on() {
    let scheduled = ours(json!({"targetNode": "node-b"}));
    let ready = ours(json!({"targetNode": "node-b", "targetNodeAddress": "10.0.0.9:4000"}));
    let sending = ours(
        json!({"targetNode": "node-b", "targetNodeAddress": "10.0.0.9:4000",
                              "mode": "PreCopy"}),
    );
    let cases = [
        // Scheduled -> PreparingTarget when the target Pod runs.
        (
            "Scheduled",
            &scheduled,
            "Running",
            Some(MigrationPhase::PreparingTarget),
        ),
        ("Scheduled", &scheduled, "Pending", None),
        // PreparingTarget -> TargetReady when the target handler published its address.
        ("PreparingTarget", &scheduled, "Running", None),
        (
            "PreparingTarget",
            &ready,
            "Running",
            Some(MigrationPhase::TargetReady),
        ),
        // TargetReady -> Running when the source handler sends.
        ("TargetReady", &ready, "Running", None),
        (
            "TargetReady",
            &sending,
            "Running",
            Some(MigrationPhase::Running),
        ),
        // Running: the source handler reports the end on the VMI.
        ("Running", &sending, "Running", None),
    ];
    for (phase, state, pod_phase, next) in cases {
        let m = a_migration_under_way(phase, state.clone());
        let plan = plan_of(&world(
            m,
            Some(vmi(Some(state.clone()))),
            vec![target("target", Some("node-b"), pod_phase)],
        ));
        match next {
            Some(next) => assert_eq!(phase_written(&plan), Some(next), "{phase}"),
            None => assert_eq!(plan, Plan::default(), "{phase} with the Pod {pod_phase}"),
        }
    }
    // The migration's copy of the state follows the VMI's without a phase change.
    let m = a_migration_under_way("Scheduled", ours(json!({})));
    let plan = plan_of(&world(
        m,
        Some(vmi(Some(scheduled))),
        vec![target("target", Some("node-b"), "Pending")],
    ));
    let status = written(&plan);
    assert_eq!(status.phase, Some(MigrationPhase::Scheduled));
    assert_eq!(status.phase_transition_timestamps.len(), 1);
    assert_eq!(
        status
            .migration_state
            .as_ref()
            .and_then(|s| s.target_node.as_deref()),
        Some("node-b")
    );
}

#[test]
fn succeeded_moves_the_vmi_and_deletes_the_source_pod() {
    let done = ours(json!({"targetNode": "node-b", "mode": "PreCopy", "completed": true}));
    let m = a_migration_under_way("Running", done.clone());
    let pods = vec![
        target("target", Some("node-b"), "Running"),
        target("stray", None, "Pending"),
    ];
    let plan = plan_of(&world(
        m.clone(),
        Some(vmi(Some(done.clone()))),
        pods.clone(),
    ));
    let [Step::ReplaceVmiStatus(status), Step::PatchVmiLabels(set), ..] = plan.steps.as_slice()
    else {
        panic!("{plan:#?}");
    };
    assert_eq!(status.node_name.as_deref(), Some("node-b"));
    assert!(status.interfaces.iter().all(|i| i.ip_address.is_none()));
    assert_eq!(
        *set,
        BTreeMap::from([
            (labels::NODE_NAME.to_string(), Some("node-b".to_string())),
            (labels::MIGRATION_TARGET_NODE.to_string(), None),
        ])
    );
    // The target Pod is the VMI's launcher now: only the other Pods go.
    assert_eq!(deletions(&plan), ["stray", SOURCE_POD]);
    assert!(plan.steps.iter().any(
        |s| matches!(s, Step::Event { reason, note, .. } if reason == "Migrated" && note.contains("from node-a to node-b"))
    ));
    assert_eq!(phase_written(&plan), Some(MigrationPhase::Succeeded));
    // A pass that repeats it does not move the VMI again.
    let mut moved = vmi(Some(done));
    if let Some(status) = moved.status.as_mut() {
        status.node_name = Some("node-b".into());
    }
    let plan = plan_of(&world(m, Some(moved), pods));
    assert!(!plan
        .steps
        .iter()
        .any(|s| matches!(s, Step::ReplaceVmiStatus(_) | Step::PatchVmiLabels(_))));
    assert_eq!(phase_written(&plan), Some(MigrationPhase::Succeeded));
}

#[test]
fn failed_deletes_the_target_pod_and_the_vm_stays() {
    let broken = ours(
        json!({"targetNode": "node-b", "mode": "PreCopy", "failed": true,
                             "failureReason": "the stream broke"}),
    );
    let m = a_migration_under_way("Running", broken.clone());
    let mut v = vmi(Some(broken));
    v.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(labels::MIGRATION_TARGET_NODE.into(), "node-b".into());
    let plan = plan_of(&world(
        m,
        Some(v),
        vec![target("target", Some("node-b"), "Running")],
    ));
    assert_eq!(deletions(&plan), ["target"]);
    assert!(plan.steps.contains(&Step::PatchVmiLabels(BTreeMap::from([(
        labels::MIGRATION_TARGET_NODE.to_string(),
        None
    )]))));
    assert_eq!(failure_written(&plan), "the stream broke");
    assert!(!plan
        .steps
        .iter()
        .any(|s| matches!(s, Step::ReplaceVmiStatus(_))));
}

#[test]
fn a_target_pod_that_fails_or_goes_fails_the_migration() {
    let state = ours(json!({"targetNode": "node-b"}));
    let m = a_migration_under_way("PreparingTarget", state.clone());
    let mut deleting = target("target", Some("node-b"), "Running");
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let cases = [
        (vec![], "the target Pod is gone"),
        (
            vec![target("target", Some("node-b"), "Failed")],
            "the target Pod has ended",
        ),
        (vec![deleting], "the target Pod is being deleted"),
    ];
    for (pods, why) in cases {
        let plan = plan_of(&world(m.clone(), Some(vmi(Some(state.clone()))), pods));
        assert_eq!(plan.steps.len(), 1, "{plan:#?}");
        let patch = vmi_state_patch(&plan);
        assert_eq!(
            (patch.failed, patch.failure_reason.as_deref()),
            (Some(true), Some(why))
        );
        assert_eq!(patch.end_timestamp, Some(Time(now())));
    }
}

#[test]
fn an_unschedulable_target_pod_times_out() {
    let state = ours(json!({}));
    let m = a_migration_under_way("Scheduling", state.clone());
    let mut pod = target("target", None, "Pending");
    pod.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/2 nodes are available"}]}))
    .unwrap();
    let mut w = world(m, Some(vmi(Some(state))), vec![pod]);
    // Entered Scheduling 60 s ago: nothing to write, and no watch says when 300 s are up.
    let plan = plan_of(&w);
    assert_eq!(plan.steps, []);
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(241)));
    w.now = entered()
        .checked_add(SignedDuration::from_secs(UNSCHEDULABLE_TIMEOUT_SECONDS))
        .unwrap();
    let plan = plan_of(&w);
    let patch = vmi_state_patch(&plan);
    let why = patch.failure_reason.as_deref().unwrap();
    assert!(
        why.contains("could not be scheduled within 300 s: 0/2 nodes are available"),
        "{why}"
    );
    assert_eq!(patch.failed, Some(true));
}
