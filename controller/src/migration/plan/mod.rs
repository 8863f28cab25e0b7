//! What the migration controller does for a migration, as a pure function of what one pass
//! read ([`World`]): the writes that move it on ([`Plan`], a list of [`Step`]s that
//! [`super::reconcile`] performs in order) and when to look again if no watch says so first.
//!
//! A plan takes one step of the migration and then waits for the watch event its own write, or
//! the handlers', brings ([`super::watch`]): it never waits by polling. Only two waits are
//! timed ([`Plan::requeue_after`]): the unschedulable timeout of the target Pod, and a
//! migration held back by the limits (which the end of another migration, mapped by a watch,
//! also ends; the timer covers a change of the limits themselves).

use std::collections::BTreeMap;
use std::time::Duration;

use api::kubevirt::MigrationConfiguration;
use api::migration::{
    MigrationPhase, MigrationPhaseTransitionTimestamp, VirtualMachineInstanceMigration,
    VirtualMachineInstanceMigrationStatus,
};
use api::vmi::MigrationState;
use api::{VirtualMachineInstance, VirtualMachineInstanceStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub use super::checks::{
    abort_status, cancel_step, check_migratable, migratable_condition, over_limits,
    refresh_live_migratable, running_sources, Cancel, NotMigratable,
};
pub use super::target::{render_target_pod, target_pod_name, visible_pods};
use crate::config::ClusterConfig;
use crate::pod::RenderError;

mod start;
mod under_way;

use start::start;
use under_way::under_way;

/// KubeVirt's default `unschedulablePendingTimeoutSeconds`: how long a target Pod may wait for
/// a node.
pub const UNSCHEDULABLE_TIMEOUT_SECONDS: i64 = 300;

/// How often a migration held back by the limits looks at them again. The end of a migration
/// under way brings its pass at once (a watch maps it to the Pending migrations); this timer
/// is for the limits themselves, which the KubeVirt CR may raise, and which this controller
/// reads from the shared KubeVirt store rather than by a watch of its own.
pub const LIMITS_RECHECK: Duration = Duration::from_secs(30);

/// What a pass read: the migration (fresh from the API server), its VMI, and the Pods that
/// carry its UID; for a migration that is to start, [`StartFacts`] too.
#[derive(Clone, Debug)]
pub struct World {
    pub migration: VirtualMachineInstanceMigration,
    pub vmi: Option<VirtualMachineInstance>,
    /// The Pods labelled with the migration's UID (`kubevirt.io/migrationJobUID`): its target
    /// Pods.
    pub target_pods: Vec<Pod>,
    /// Read only when [`needs`] says so.
    pub start: Option<StartFacts>,
    pub config: ClusterConfig,
    pub now: Timestamp,
}

/// What starting a migration needs besides its VMI.
#[derive(Clone, Debug, Default)]
pub struct StartFacts {
    /// The access modes of the VMI's PVCs, by claim name.
    pub pvc_access_modes: BTreeMap<String, Vec<String>>,
    /// Every migration of the cluster, for the limits.
    pub migrations: Vec<VirtualMachineInstanceMigration>,
    /// The VMI's launcher Pods (by `kubevirt.io/created-by`), to find the source Pod.
    pub launcher_pods: Vec<Pod>,
    /// The MigrationPolicy that applies, and the settings in force ([`super::settings`]).
    pub policy: Option<String>,
    pub settings: MigrationConfiguration,
}

/// What a pass must read for `migration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// The VMI and the target Pods. A finished migration needs nothing of them, not even the
    /// VMI CRD (which an uninstall may already have removed).
    pub vmi: bool,
    /// [`StartFacts`]: the migration is Pending.
    pub start: bool,
}

pub fn needs(migration: &VirtualMachineInstanceMigration) -> Needs {
    let phase = phase_of(migration);
    let vmi = !phase.is_final();
    Needs {
        vmi,
        start: vmi
            && phase == MigrationPhase::Pending
            && migration.metadata.deletion_timestamp.is_none(),
    }
}

/// Which object an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    Vmi,
    Migration,
}

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The migration's finalizer list with the controller's finalizer added (guarded by the
    /// resourceVersion read).
    AddFinalizer(Vec<String>),
    /// The list without it.
    RemoveFinalizer(Vec<String>),
    /// The VMI's whole status (guarded by the resourceVersion read: it comes before any other
    /// write to the VMI in a plan).
    ReplaceVmiStatus(Box<VirtualMachineInstanceStatus>),
    /// A new `migrationState`, nulling what an earlier migration left, and `migrationMethod`.
    StartVmiState {
        state: Box<MigrationState>,
        method: &'static str,
    },
    /// A merge patch of the fields set into the VMI's `migrationState`.
    PatchVmiState(Box<MigrationState>),
    /// A merge patch of the VMI's labels (`None` removes one).
    PatchVmiLabels(BTreeMap<String, Option<String>>),
    CreatePod(Box<Pod>),
    /// Deletes a Pod of the migration's namespace (gone already is fine).
    DeletePod(String),
    /// The migration's status (guarded by the resourceVersion read).
    PatchStatus(Box<VirtualMachineInstanceMigrationStatus>),
    Event {
        on: Subject,
        warning: bool,
        reason: String,
        note: String,
    },
}

/// The writes of one pass, in order, and when to come back if no watch event comes first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub requeue_after: Option<Duration>,
    /// Why the migration waits, for the log.
    pub note: Option<String>,
}

impl Plan {
    fn of(steps: Vec<Step>) -> Plan {
        Plan {
            steps,
            ..Plan::default()
        }
    }
}

fn phase_of(migration: &VirtualMachineInstanceMigration) -> MigrationPhase {
    migration
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .unwrap_or(MigrationPhase::Pending)
}

/// The VMI's `migrationState` when it belongs to the migration with UID `uid`.
pub fn state_of<'a>(vmi: &'a VirtualMachineInstance, uid: &str) -> Option<&'a MigrationState> {
    vmi.status
        .as_ref()?
        .migration_state
        .as_ref()
        .filter(|s| s.migration_uid.as_deref() == Some(uid))
}

fn live(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
}

/// The migration state of a migration that ended at `now`, failed for `reason`.
fn ended(reason: String, now: Timestamp) -> MigrationState {
    MigrationState {
        failed: Some(true),
        failure_reason: Some(reason),
        end_timestamp: Some(Time(now)),
        ..MigrationState::default()
    }
}

/// What the scheduler said about a Pod it could not place.
fn unschedulable_message(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| "no node was found".into())
}

/// The status write that moves the migration to `phase` (with its transition time), records
/// `state`, and, with `failure`, the reason as a Failed condition; none when nothing changes.
fn status_step(
    world: &World,
    phase: MigrationPhase,
    state: Option<MigrationState>,
    failure: Option<String>,
) -> Option<Step> {
    let old = world.migration.status.clone().unwrap_or_default();
    let mut status = old.clone();
    if status.phase != Some(phase) {
        status.phase = Some(phase);
        status
            .phase_transition_timestamps
            .push(MigrationPhaseTransitionTimestamp {
                phase,
                phase_transition_timestamp: Time(world.now),
            });
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
    (status != old).then(|| Step::PatchStatus(Box::new(status)))
}

fn fail(world: &World, reason: String) -> Plan {
    Plan::of(
        status_step(world, MigrationPhase::Failed, None, Some(reason))
            .into_iter()
            .collect(),
    )
}

fn event(on: Subject, warning: bool, reason: &str, note: String) -> Step {
    Step::Event {
        on,
        warning,
        reason: reason.into(),
        note,
    }
}

/// Lets a deleted migration object go: removes the finalizer.
fn release(migration: &VirtualMachineInstanceMigration) -> Vec<Step> {
    let all = migration.metadata.finalizers.clone().unwrap_or_default();
    let kept: Vec<String> = all
        .iter()
        .filter(|f| *f != contract::finalizers::MIGRATION)
        .cloned()
        .collect();
    if kept.len() == all.len() {
        return vec![];
    }
    vec![Step::RemoveFinalizer(kept)]
}

/// Deletes `named` (the target Pod the VMI records) and every other live Pod of the migration
/// but `keep`.
fn delete_target_pods(world: &World, named: Option<&str>, keep: Option<&str>) -> Vec<Step> {
    let mut names: Vec<String> = Vec::new();
    if let Some(named) = named.filter(|n| Some(*n) != keep) {
        let going = world
            .target_pods
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(named) && !live(p));
        if !going {
            names.push(named.to_string());
        }
    }
    for pod in world.target_pods.iter().filter(|p| live(p)) {
        let Some(name) = pod.metadata.name.as_deref() else {
            continue;
        };
        if Some(name) != keep && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names.into_iter().map(Step::DeletePod).collect()
}

/// Plans the next step of `world.migration`. Fails only when the target Pod cannot be
/// rendered.
pub fn plan(world: &World) -> Result<Plan, RenderError> {
    let migration = &world.migration;
    let uid = migration.metadata.uid.as_deref().unwrap_or_default();
    let phase = phase_of(migration);
    let deleting = migration.metadata.deletion_timestamp.is_some();
    if deleting && phase.is_final() {
        return Ok(Plan::of(release(migration)));
    }
    let ours = world.vmi.as_ref().and_then(|v| state_of(v, uid));

    if deleting {
        let Some(state) = ours else {
            // Nothing of it runs (never started, or not this VMI's migration).
            return Ok(Plan::of(release(migration)));
        };
        match cancel_step(phase, Some(state)) {
            Cancel::Release => return Ok(Plan::of(release(migration))),
            Cancel::FailNow => {
                let reason = "cancelled: the migration object was deleted";
                let mut steps = vec![Step::PatchVmiState(Box::new(MigrationState {
                    abort_requested: Some(true),
                    abort_status: Some("Succeeded".into()),
                    ..ended(reason.into(), world.now)
                }))];
                steps.extend(state.target_pod.clone().map(Step::DeletePod));
                steps.push(event(
                    Subject::Vmi,
                    true,
                    "MigrationCancelled",
                    reason.into(),
                ));
                return Ok(Plan::of(steps));
            }
            Cancel::RequestAbort => {
                return Ok(Plan::of(vec![
                    Step::PatchVmiState(Box::new(MigrationState {
                        abort_requested: Some(true),
                        abort_status: Some("Aborting".into()),
                        ..MigrationState::default()
                    })),
                    event(
                        Subject::Vmi,
                        true,
                        "MigrationAbortRequested",
                        "the migration object was deleted: aborting the migration".into(),
                    ),
                ]));
            }
            // The source handler reports how the stream ended on the VMI: its watch.
            Cancel::Wait => return Ok(Plan::default()),
            Cancel::Settle => {
                if phase == MigrationPhase::Pending {
                    // Failed before the handlers were involved: nothing below to finish.
                    let mut steps = delete_target_pods(world, state.target_pod.as_deref(), None);
                    steps.extend(release(migration));
                    return Ok(Plan::of(steps));
                }
                // Record how the abort ended, then finish it below as any migration.
                let settled = abort_status(state);
                if settled.is_some() && state.abort_status.as_deref() != settled {
                    return Ok(Plan::of(vec![Step::PatchVmiState(Box::new(
                        MigrationState {
                            abort_status: settled.map(String::from),
                            ..MigrationState::default()
                        },
                    ))]));
                }
            }
        }
    }
    if phase.is_final() {
        return Ok(Plan::default());
    }
    let finalized = migration
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == contract::finalizers::MIGRATION);
    if !finalized && !deleting {
        let mut finalizers = migration.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(contract::finalizers::MIGRATION.into());
        return Ok(Plan::of(vec![Step::AddFinalizer(finalizers)]));
    }
    let Some(vmi) = &world.vmi else {
        let name = migration.spec.vmi_name.clone().unwrap_or_default();
        return Ok(fail(world, format!("VMI {name} does not exist")));
    };
    if phase == MigrationPhase::Pending {
        return start(world, vmi, ours);
    }
    Ok(under_way(world, vmi, phase, ours))
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;
