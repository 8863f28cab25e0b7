//! What the plan's unit tests build their worlds from: migration `mig` of the Running VMI `v`
//! on node-a, its target Pods, and checks of the plans made.

use api::kubevirt::MigrationConfiguration;
use api::migration::{
    MigrationPhase, VirtualMachineInstanceMigration, VirtualMachineInstanceMigrationStatus,
};
use api::vmi::MigrationState;
use api::VirtualMachineInstance;
use contract::labels;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use super::{plan, Plan, StartFacts, Step, World};
use crate::config::ClusterConfig;

pub(super) const UID: &str = "mig-uid";
pub(super) const SOURCE_POD: &str = "virt-launcher-v-src";

pub(super) fn at(rfc3339: &str) -> Timestamp {
    rfc3339.parse().unwrap()
}

/// When the test migrations entered their phase.
pub(super) fn entered() -> Timestamp {
    at("2026-11-29T11:59:00Z")
}

pub(super) fn now() -> Timestamp {
    at("2026-11-29T12:00:00Z")
}

/// Migration `mig` of VMI `v`, with the finalizer, in `phase` since [`entered`].
pub(super) fn migration(phase: Option<&str>) -> VirtualMachineInstanceMigration {
    let mut value = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "mig", "namespace": "default", "uid": UID, "resourceVersion": "5",
                     "finalizers": [contract::finalizers::MIGRATION]},
        "spec": {"vmiName": "v"}
    });
    if let Some(phase) = phase {
        value["status"] = json!({"phase": phase, "phaseTransitionTimestamps": [
            {"phase": phase, "phaseTransitionTimestamp": entered().to_string()}]});
    }
    serde_json::from_value(value).unwrap()
}

pub(super) fn deleted(
    mut migration: VirtualMachineInstanceMigration,
) -> VirtualMachineInstanceMigration {
    migration.metadata.deletion_timestamp = Some(Time(now()));
    migration
}

/// This migration's `migrationState` on the VMI, with `extra` fields.
pub(super) fn ours(extra: Value) -> Value {
    let mut state = json!({"migrationUid": UID, "sourceNode": "node-a", "sourcePod": SOURCE_POD,
                           "targetPod": "target"});
    for (k, v) in extra.as_object().unwrap() {
        state[k] = v.clone();
    }
    state
}

/// Running VMI `v` on node-a, live-migratable, with `state` as its `migrationState`.
pub(super) fn vmi(state: Option<Value>) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "namespace": "default", "uid": "vmi-uid",
                     "labels": {(labels::NODE_NAME): "node-a"}},
        "spec": {"domain": {"devices": {}, "memory": {"guest": "128Mi"}},
                 "volumes": [{"name": "c", "containerDisk": {"image": "x"}}]},
        "status": {"phase": "Running", "nodeName": "node-a", "migrationState": state,
                   "conditions": [{"type": "LiveMigratable", "status": "True"}],
                   "interfaces": [{"name": "default", "ipAddress": "10.0.0.5"}]}
    }))
    .unwrap()
}

/// A Pod of this migration (its UID label) on `node`, in `phase`.
pub(super) fn target(name: &str, node: Option<&str>, phase: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default",
                     "labels": {(labels::MIGRATION_JOB): UID}},
        "spec": {"containers": [{"name": "compute"}], "nodeName": node},
        "status": {"phase": phase}
    }))
    .unwrap()
}

pub(super) fn world(
    migration: VirtualMachineInstanceMigration,
    vmi: Option<VirtualMachineInstance>,
    target_pods: Vec<Pod>,
) -> World {
    let source: Pod = serde_json::from_value(json!({
        "metadata": {"name": SOURCE_POD, "namespace": "default",
                     "labels": {(labels::CREATED_BY): "vmi-uid"}},
        "spec": {"containers": [{"name": "compute"}], "nodeName": "node-a"}
    }))
    .unwrap();
    World {
        migration,
        vmi,
        target_pods,
        start: Some(StartFacts {
            launcher_pods: vec![source],
            policy: Some("slow".into()),
            settings: MigrationConfiguration {
                completion_timeout_per_gib: Some(5),
                ..Default::default()
            },
            ..StartFacts::default()
        }),
        config: ClusterConfig::default(),
        now: now(),
    }
}

/// Plans, and checks what the apply relies on: the guarded writes of a plan are consistent
/// with the resourceVersions read (one write to the migration's metadata or status at most,
/// and the VMI's status replaced only before any other write to the VMI).
pub(super) fn plan_of(world: &World) -> Plan {
    let plan = plan(world).unwrap();
    let migration_writes = plan
        .steps
        .iter()
        .filter(|s| {
            matches!(
                s,
                Step::AddFinalizer(_) | Step::RemoveFinalizer(_) | Step::PatchStatus(_)
            )
        })
        .count();
    assert!(migration_writes <= 1, "{plan:#?}");
    let vmi_write = |s: &Step| {
        matches!(
            s,
            Step::ReplaceVmiStatus(_)
                | Step::StartVmiState { .. }
                | Step::PatchVmiState(_)
                | Step::PatchVmiLabels(_)
        )
    };
    if let Some(i) = plan
        .steps
        .iter()
        .position(|s| matches!(s, Step::ReplaceVmiStatus(_)))
    {
        assert!(!plan.steps[..i].iter().any(vmi_write), "{plan:#?}");
    }
    plan
}

/// The migration status the plan writes.
pub(super) fn written(plan: &Plan) -> &VirtualMachineInstanceMigrationStatus {
    plan.steps
        .iter()
        .find_map(|s| match s {
            Step::PatchStatus(status) => Some(status.as_ref()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no status write in {plan:#?}"))
}

pub(super) fn phase_written(plan: &Plan) -> Option<MigrationPhase> {
    written(plan).phase
}

pub(super) fn failure_written(plan: &Plan) -> String {
    let status = written(plan);
    assert_eq!(status.phase, Some(MigrationPhase::Failed));
    let condition = status.conditions.iter().find(|c| c.type_ == "Failed");
    condition
        .and_then(|c| c.message.clone())
        .unwrap_or_default()
}

/// The `migrationState` fields a plan that only patches them writes.
pub(super) fn vmi_state_patch(plan: &Plan) -> &MigrationState {
    match plan.steps.as_slice() {
        [Step::PatchVmiState(state), ..] => state,
        _ => panic!("not a migrationState patch: {plan:#?}"),
    }
}

pub(super) fn deletions(plan: &Plan) -> Vec<&str> {
    plan.steps
        .iter()
        .filter_map(|s| match s {
            Step::DeletePod(name) => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

pub(super) fn a_migration_under_way(phase: &str, state: Value) -> VirtualMachineInstanceMigration {
    let mut m = migration(Some(phase));
    if let Some(status) = m.status.as_mut() {
        status.migration_state = serde_json::from_value(state).unwrap();
    }
    m
}
