//! Unit tests of [`super::plan`]: what a pass reads, the finalizer, and the cancel.

use api::migration::MigrationPhase;
use serde_json::json;

use super::fixtures::*;
use super::*;

#[test]
fn what_a_pass_reads() {
    assert_eq!(
        needs(&migration(None)),
        Needs {
            vmi: true,
            start: true
        }
    );
    assert_eq!(
        needs(&migration(Some("Running"))),
        Needs {
            vmi: true,
            start: false
        }
    );
    assert_eq!(
        needs(&deleted(migration(Some("Pending")))),
        Needs {
            vmi: true,
            start: false
        }
    );
    // A finished migration, deleted or not, needs nothing of its VMI (nor the VMI CRD).
    for phase in ["Succeeded", "Failed"] {
        assert!(!needs(&deleted(migration(Some(phase)))).vmi);
    }
}

#[test]
fn a_new_migration_gets_the_finalizer_first() {
    let mut m = migration(None);
    m.metadata.finalizers = Some(vec!["other".into()]);
    let plan = plan_of(&world(m, Some(vmi(None)), vec![]));
    assert_eq!(
        plan.steps,
        [Step::AddFinalizer(vec![
            "other".into(),
            contract::finalizers::MIGRATION.into()
        ])]
    );
}

#[test]
fn cancelling_before_the_source_sends_fails_it_at_once() {
    let state = ours(json!({"targetNode": "node-b"}));
    let m = deleted(a_migration_under_way("Scheduled", state.clone()));
    let plan = plan_of(&world(
        m,
        Some(vmi(Some(state))),
        vec![target("target", Some("node-b"), "Running")],
    ));
    let patch = vmi_state_patch(&plan);
    assert_eq!(
        (
            patch.abort_requested,
            patch.abort_status.as_deref(),
            patch.failed
        ),
        (Some(true), Some("Succeeded"), Some(true))
    );
    assert!(patch
        .failure_reason
        .as_deref()
        .unwrap()
        .contains("cancelled"));
    assert_eq!(deletions(&plan), ["target"]);
    assert!(plan
        .steps
        .iter()
        .any(|s| matches!(s, Step::Event { reason, .. } if reason == "MigrationCancelled")));
}

#[test]
fn cancelling_while_the_source_sends_asks_it_to_abort_and_keeps_the_target() {
    let sending = ours(json!({"targetNode": "node-b", "mode": "PreCopy"}));
    let m = deleted(a_migration_under_way("Running", sending.clone()));
    let pods = vec![target("target", Some("node-b"), "Running")];
    let plan = plan_of(&world(m.clone(), Some(vmi(Some(sending))), pods.clone()));
    let patch = vmi_state_patch(&plan);
    assert_eq!(
        (patch.abort_requested, patch.abort_status.as_deref()),
        (Some(true), Some("Aborting"))
    );
    assert_eq!(patch.failed, None);
    assert!(deletions(&plan).is_empty());
    // Asked: the source handler reports on the VMI (its watch); nothing to do meanwhile.
    let asked = ours(json!({"targetNode": "node-b", "mode": "PreCopy",
                            "abortRequested": true, "abortStatus": "Aborting"}));
    let plan = plan_of(&world(m.clone(), Some(vmi(Some(asked))), pods.clone()));
    assert_eq!(plan, Plan::default());
    // The abort stopped the stream: record it, then fail as any migration, then let go.
    let aborted = ours(
        json!({"targetNode": "node-b", "mode": "PreCopy", "abortRequested": true,
                              "abortStatus": "Aborting", "failed": true,
                              "failureReason": "aborted"}),
    );
    let plan = plan_of(&world(
        m.clone(),
        Some(vmi(Some(aborted.clone()))),
        pods.clone(),
    ));
    assert_eq!(plan.steps.len(), 1);
    assert_eq!(
        vmi_state_patch(&plan).abort_status.as_deref(),
        Some("Succeeded")
    );
    let mut settled = aborted;
    settled["abortStatus"] = json!("Succeeded");
    let plan = plan_of(&world(m.clone(), Some(vmi(Some(settled))), pods));
    assert_eq!(deletions(&plan), ["target"]);
    assert_eq!(failure_written(&plan), "aborted");
    let mut failed = m;
    if let Some(status) = failed.status.as_mut() {
        status.phase = Some(MigrationPhase::Failed);
    }
    let plan = plan_of(&world(failed, None, vec![]));
    assert_eq!(plan.steps, [Step::RemoveFinalizer(vec![])]);
}

#[test]
fn a_switch_over_that_beat_the_abort_completes() {
    let won = ours(
        json!({"targetNode": "node-b", "mode": "PreCopy", "abortRequested": true,
                          "abortStatus": "Failed", "completed": true}),
    );
    let m = deleted(a_migration_under_way("Running", won.clone()));
    let plan = plan_of(&world(
        m,
        Some(vmi(Some(won))),
        vec![target("target", Some("node-b"), "Running")],
    ));
    assert_eq!(deletions(&plan), [SOURCE_POD]);
    assert_eq!(phase_written(&plan), Some(MigrationPhase::Succeeded));
}

#[test]
fn deleting_a_migration_that_runs_nothing_lets_it_go() {
    // Never started, or the VMI records another migration.
    let plan = plan_of(&world(
        deleted(migration(Some("Pending"))),
        Some(vmi(None)),
        vec![],
    ));
    assert_eq!(plan.steps, [Step::RemoveFinalizer(vec![])]);
    let other = Some(json!({"migrationUid": "other"}));
    let m = deleted(a_migration_under_way("Running", ours(json!({}))));
    let plan = plan_of(&world(m, Some(vmi(other)), vec![]));
    assert_eq!(plan.steps, [Step::RemoveFinalizer(vec![])]);
    // Failed at once while Pending: its Pod goes with it.
    let cancelled = ours(json!({"failed": true, "abortRequested": true}));
    let plan = plan_of(&world(
        deleted(migration(Some("Pending"))),
        Some(vmi(Some(cancelled))),
        vec![target("target", None, "Pending")],
    ));
    assert_eq!(
        plan.steps,
        [
            Step::DeletePod("target".into()),
            Step::RemoveFinalizer(vec![])
        ]
    );
}

#[test]
fn a_vmi_that_forgot_the_migration_fails_it() {
    let m = a_migration_under_way("Running", ours(json!({})));
    let other = Some(json!({"migrationUid": "other"}));
    let plan = plan_of(&world(m, Some(vmi(other)), vec![]));
    assert_eq!(
        failure_written(&plan),
        "the VMI no longer records this migration"
    );
    // A finished migration is left alone.
    let plan = plan_of(&world(
        migration(Some("Succeeded")),
        Some(vmi(None)),
        vec![],
    ));
    assert_eq!(plan, Plan::default());
}
