//! Unit tests of the start: Pending to Scheduling, and the waits before it.

use std::collections::BTreeMap;

use api::migration::MigrationPhase;
use api::VmiPhase;
use contract::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::super::fixtures::*;
use super::super::*;

#[test]
fn pending_under_the_limits_starts_the_migration_and_the_target_pod() {
    let plan = plan_of(&world(migration(None), Some(vmi(None)), vec![]));
    assert_eq!(plan.requeue_after, None);
    let [Step::StartVmiState { state, method }, Step::CreatePod(pod), Step::Event { reason, .. }, Step::PatchStatus(status)] =
        plan.steps.as_slice()
    else {
        panic!("{plan:#?}");
    };
    // The VMI names the target Pod before it exists, as the Pod is named.
    let name = target_pod_name("virt-launcher-v-", UID);
    assert_eq!(pod.metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(state.target_pod.as_deref(), Some(name.as_str()));
    assert_eq!(
        pod.metadata.labels.as_ref().unwrap()[labels::MIGRATION_JOB],
        UID
    );
    assert_eq!(state.migration_uid.as_deref(), Some(UID));
    assert_eq!(state.source_node.as_deref(), Some("node-a"));
    assert_eq!(state.source_pod.as_deref(), Some(SOURCE_POD));
    assert_eq!(state.start_timestamp, Some(Time(now())));
    assert_eq!(state.migration_policy_name.as_deref(), Some("slow"));
    assert_eq!(
        state
            .migration_configuration
            .as_ref()
            .unwrap()
            .completion_timeout_per_gib,
        Some(5)
    );
    assert_eq!(*method, "BlockMigration");
    assert_eq!(reason, "PreparingTarget");
    assert_eq!(status.phase, Some(MigrationPhase::Scheduling));
    assert_eq!(status.migration_state.as_ref(), Some(state.as_ref()));
    let last = status.phase_transition_timestamps.last().unwrap();
    assert_eq!(
        (last.phase, &last.phase_transition_timestamp),
        (MigrationPhase::Scheduling, &Time(now()))
    );
}

#[test]
fn pending_over_the_limits_waits_and_looks_again_later() {
    let running = |uid: &str, source: &str| -> VirtualMachineInstanceMigration {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": uid, "namespace": "other", "uid": uid},
            "spec": {"vmiName": uid},
            "status": {"phase": "Running", "migrationState": {"sourceNode": source}}
        }))
        .unwrap()
    };
    // Five migrations run in the cluster: KubeVirt's parallelMigrationsPerCluster.
    let mut full = world(migration(None), Some(vmi(None)), vec![]);
    if let Some(facts) = full.start.as_mut() {
        facts.migrations = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| running(n, &format!("node-{n}-x")))
            .collect();
    }
    let plan = plan_of(&full);
    assert_eq!(plan.requeue_after, Some(LIMITS_RECHECK));
    assert!(plan
        .note
        .as_deref()
        .unwrap()
        .contains("parallelMigrationsPerCluster 5"));
    // A new migration says it is Pending; nothing else is written.
    assert_eq!(plan.steps.len(), 1);
    assert_eq!(phase_written(&plan), Some(MigrationPhase::Pending));
    full.migration = migration(Some("Pending"));
    assert_eq!(plan_of(&full).steps, []);

    // Two leave node-a: parallelOutboundMigrationsPerNode.
    let mut busy_node = world(migration(Some("Pending")), Some(vmi(None)), vec![]);
    if let Some(facts) = busy_node.start.as_mut() {
        facts.migrations = vec![running("a", "node-a"), running("b", "node-a")];
    }
    let plan = plan_of(&busy_node);
    assert!(plan
        .note
        .as_deref()
        .unwrap()
        .contains("parallelOutboundMigrationsPerNode 2"));
    assert!(plan.steps.is_empty());
    // One of them ends (its watch brings this pass): it starts.
    if let Some(facts) = busy_node.start.as_mut() {
        facts.migrations[1] = running("b", "node-a");
        if let Some(status) = facts.migrations[1].status.as_mut() {
            status.phase = Some(MigrationPhase::Succeeded);
        }
    }
    let plan = plan_of(&busy_node);
    assert_eq!(phase_written(&plan), Some(MigrationPhase::Scheduling));
}

#[test]
fn a_vmi_migrating_elsewhere_holds_the_migration_back() {
    let other = Some(json!({"migrationUid": "other", "sourceNode": "node-a"}));
    let plan = plan_of(&world(migration(Some("Pending")), Some(vmi(other)), vec![]));
    assert!(
        plan.steps.is_empty() && plan.requeue_after.is_none(),
        "{plan:#?}"
    );
    assert!(plan.note.unwrap().contains("other"));
    // Once that one ended, this one starts.
    let ended = Some(json!({"migrationUid": "other", "completed": true}));
    let plan = plan_of(&world(migration(Some("Pending")), Some(vmi(ended)), vec![]));
    assert_eq!(phase_written(&plan), Some(MigrationPhase::Scheduling));
}

#[test]
fn a_start_that_did_not_finish_goes_on_with_its_pod() {
    // The VMI records this migration and its Pod exists; the status write did not happen.
    let earlier = "2026-11-29T11:58:00Z";
    let state = ours(json!({"startTimestamp": earlier}));
    let plan = plan_of(&world(
        migration(Some("Pending")),
        Some(vmi(Some(state))),
        vec![target("target", None, "Pending")],
    ));
    assert!(!plan.steps.iter().any(|s| matches!(s, Step::CreatePod(_))));
    let status = written(&plan);
    assert_eq!(status.phase, Some(MigrationPhase::Scheduling));
    let state = status.migration_state.as_ref().unwrap();
    assert_eq!(state.target_pod.as_deref(), Some("target"));
    assert_eq!(state.start_timestamp, Some(Time(at(earlier))));
}

#[test]
fn a_vmi_that_cannot_migrate_says_why_and_the_migration_fails() {
    let mut v = vmi(None);
    v.spec.volumes = serde_json::from_value(
        json!([{"name": "p", "persistentVolumeClaim": {"claimName": "local"}}]),
    )
    .unwrap();
    let mut w = world(migration(None), Some(v), vec![]);
    if let Some(facts) = w.start.as_mut() {
        facts.pvc_access_modes =
            BTreeMap::from([("local".to_string(), vec!["ReadWriteOnce".to_string()])]);
    }
    let plan = plan_of(&w);
    let [Step::ReplaceVmiStatus(status), Step::Event { on, reason, .. }, Step::PatchStatus(_)] =
        plan.steps.as_slice()
    else {
        panic!("{plan:#?}");
    };
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "LiveMigratable")
        .unwrap();
    assert_eq!(condition.reason.as_deref(), Some("DisksNotLiveMigratable"));
    assert_eq!(
        (*on, reason.as_str()),
        (Subject::Migration, "DisksNotLiveMigratable")
    );
    assert!(failure_written(&plan).contains("PVC local is not shared"));
}

#[test]
fn the_live_migratable_condition_is_written_before_anything_else() {
    let mut v = vmi(None);
    if let Some(status) = v.status.as_mut() {
        status.conditions.clear();
    }
    let plan = plan_of(&world(migration(None), Some(v), vec![]));
    // The VMI's watch brings the pass that starts it, from the VMI as written.
    assert!(
        matches!(plan.steps.as_slice(), [Step::ReplaceVmiStatus(_)]),
        "{plan:#?}"
    );
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn a_vmi_missing_or_not_running_fails_the_migration() {
    let plan = plan_of(&world(migration(None), None, vec![]));
    assert_eq!(failure_written(&plan), "VMI v does not exist");
    let mut stopped = vmi(None);
    if let Some(status) = stopped.status.as_mut() {
        status.phase = Some(VmiPhase::Succeeded);
    }
    let plan = plan_of(&world(migration(None), Some(stopped), vec![]));
    assert_eq!(failure_written(&plan), "VMI v is not running");
}
