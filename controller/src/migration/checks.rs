//! The rules a migration follows that need no cluster: whether a VMI can migrate (and its
//! `LiveMigratable` condition), how a deleted migration is cancelled, and the limits on
//! migrations under way.

use std::collections::BTreeMap;

use api::condition::Condition;
use api::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use api::vmi::{set_condition, MigrationState};
use api::{VirtualMachineInstance, VirtualMachineInstanceStatus};

use crate::config::ClusterConfig;

/// Why a VMI cannot be live-migrated: the `LiveMigratable` condition's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotMigratable {
    pub reason: &'static str,
    pub message: String,
}

/// Checks that `vmi` can be live-migrated. `pvc_access_modes`: the access modes of the PVCs
/// it uses, by claim name (a missing claim is not migratable).
pub fn check_migratable(
    vmi: &VirtualMachineInstance,
    pvc_access_modes: &BTreeMap<String, Vec<String>>,
) -> Result<(), NotMigratable> {
    for volume in &vmi.spec.volumes {
        if let Some(pvc) = &volume.persistent_volume_claim {
            let shared = pvc_access_modes
                .get(&pvc.claim_name)
                .is_some_and(|modes| modes.iter().any(|m| m == "ReadWriteMany"));
            if !shared {
                return Err(NotMigratable {
                    reason: "DisksNotLiveMigratable",
                    message: format!(
                        "cannot migrate VMI: PVC {} is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)",
                        pvc.claim_name
                    ),
                });
            }
        }
        if volume.other.contains_key("hostDisk") {
            return Err(NotMigratable {
                reason: "HostDiskNotLiveMigratable",
                message: format!(
                    "cannot migrate VMI: volume {} is a hostDisk, which stays on its node",
                    volume.name
                ),
            });
        }
    }
    Ok(())
}

/// The `LiveMigratable` condition for the result of [`check_migratable`].
pub fn migratable_condition(result: &Result<(), NotMigratable>) -> Condition {
    match result {
        Ok(()) => Condition::new("LiveMigratable", true, "", ""),
        Err(e) => Condition::new("LiveMigratable", false, e.reason, &e.message),
    }
}

/// Brings the `LiveMigratable` condition in `status`, the status `vmi` is about to get, up to
/// date, as KubeVirt keeps it on every running VMI. Returns the verdict and whether the
/// condition changed (a status write is then due).
pub fn refresh_live_migratable(
    vmi: &VirtualMachineInstance,
    status: &mut VirtualMachineInstanceStatus,
    pvc_access_modes: &BTreeMap<String, Vec<String>>,
) -> (Result<(), NotMigratable>, bool) {
    let verdict = check_migratable(vmi, pvc_access_modes);
    let condition = migratable_condition(&verdict);
    let known = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition.type_)
        .map(|c| (&c.status, &c.reason, &c.message));
    let changed = known != Some((&condition.status, &condition.reason, &condition.message));
    if changed {
        set_condition(status, condition);
    }
    (verdict, changed)
}

/// What to do with a migration object that is being deleted before it finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// Nothing of it runs (never started, or not this VMI's migration): let the object go.
    Release,
    /// The source has not started sending: fail it now and delete the target Pod.
    FailNow,
    /// The source is sending: ask its handler to abort (`abortRequested`) and wait.
    RequestAbort,
    /// Abort requested: wait for the source handler to report how the stream ended.
    Wait,
    /// The handler reported the end (completed, when the switch-over won the race with the
    /// abort, or failed): settle it as any finished migration, then let the object go.
    Settle,
}

/// How to cancel a migration whose object is being deleted. `state`: the VMI's
/// `migrationState` when it belongs to this migration. The target Pod must stay until the
/// source knows the stream is over: a switch-over that completes while the abort is on its way
/// leaves the only running copy of the VM in that Pod.
pub fn cancel_step(phase: MigrationPhase, state: Option<&MigrationState>) -> Cancel {
    let Some(state) = state.filter(|_| !phase.is_final()) else {
        return Cancel::Release;
    };
    if state.completed == Some(true) || state.failed == Some(true) {
        Cancel::Settle
    } else if state.mode.is_none() {
        Cancel::FailNow
    } else if state.abort_requested == Some(true) {
        Cancel::Wait
    } else {
        Cancel::RequestAbort
    }
}

/// KubeVirt's `abortStatus` once a migration that was asked to abort has ended.
pub fn abort_status(state: &MigrationState) -> Option<&'static str> {
    match (state.abort_requested, state.completed) {
        (Some(true), Some(true)) => Some("Failed"),
        (Some(true), _) if state.failed == Some(true) => Some("Succeeded"),
        (Some(true), _) => Some("Aborting"),
        _ => None,
    }
}

/// Why a migration must wait, given the source nodes of the migrations under way and the
/// limits of `config`.
pub fn over_limits(
    running_sources: &[String],
    source_node: &str,
    config: &ClusterConfig,
) -> Option<String> {
    let per_cluster = config.parallel_migrations_per_cluster;
    if running_sources.len() >= per_cluster {
        return Some(format!(
            "{} migrations run in the cluster (parallelMigrationsPerCluster {per_cluster})",
            running_sources.len()
        ));
    }
    let per_node = config.parallel_outbound_migrations_per_node;
    let outbound = running_sources.iter().filter(|n| *n == source_node).count();
    (outbound >= per_node).then(|| {
        format!(
            "{outbound} migrations leave node {source_node} (parallelOutboundMigrationsPerNode {per_node})"
        )
    })
}

/// The source nodes of the migrations under way in the cluster (past Pending, not finished),
/// other than the one with UID `except`: what [`over_limits`] counts.
pub fn running_sources(
    migrations: &[VirtualMachineInstanceMigration],
    except: &str,
) -> Vec<String> {
    migrations
        .iter()
        .filter(|m| m.metadata.uid.as_deref() != Some(except))
        .filter_map(|m| {
            let status = m.status.as_ref()?;
            let phase = status.phase?;
            (phase != MigrationPhase::Pending && !phase.is_final()).then(|| {
                status
                    .migration_state
                    .as_ref()
                    .and_then(|s| s.source_node.clone())
                    .unwrap_or_default()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::migration::fixtures::vmi;

    #[test]
    fn rwo_pvcs_and_host_disks_are_not_migratable() {
        let ok = vmi(json!([
            {"name": "c", "containerDisk": {"image": "x"}},
            {"name": "e", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "i", "cloudInitNoCloud": {"userData": "#!/bin/sh\n"}},
            {"name": "p", "persistentVolumeClaim": {"claimName": "shared"}}
        ]));
        let modes = BTreeMap::from([
            ("shared".to_string(), vec!["ReadWriteMany".to_string()]),
            ("local".to_string(), vec!["ReadWriteOnce".to_string()]),
        ]);
        assert_eq!(check_migratable(&ok, &modes), Ok(()));
        let rwo = vmi(json!([{"name": "p", "persistentVolumeClaim": {"claimName": "local"}}]));
        let err = check_migratable(&rwo, &modes).unwrap_err();
        assert_eq!(err.reason, "DisksNotLiveMigratable");
        assert!(
            err.message.contains("PVC local is not shared"),
            "{}",
            err.message
        );
        let missing = vmi(json!([{"name": "p", "persistentVolumeClaim": {"claimName": "gone"}}]));
        assert!(check_migratable(&missing, &modes).is_err());
        let condition = migratable_condition(&Err(err));
        assert!(!condition.is_true());
        assert_eq!(condition.reason.as_deref(), Some("DisksNotLiveMigratable"));
    }

    #[test]
    fn a_vmi_on_the_kvm_vmm_is_migratable() {
        let mut kvm = vmi(json!([{"name": "c", "containerDisk": {"image": "x"}}]));
        kvm.status.as_mut().unwrap().conditions.push(Condition::new(
            "SoftwareEmulation",
            false,
            "Kvm",
            "",
        ));
        assert_eq!(check_migratable(&kvm, &BTreeMap::new()), Ok(()));
    }

    #[test]
    fn live_migratable_follows_the_status_about_to_be_written() {
        let v = vmi(json!([{"name": "c", "containerDisk": {"image": "x"}}]));
        let mut status = VirtualMachineInstanceStatus::default();
        let (verdict, changed) = refresh_live_migratable(&v, &mut status, &BTreeMap::new());
        assert!(verdict.is_ok() && changed);
        let condition = |s: &VirtualMachineInstanceStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "LiveMigratable")
                .cloned()
                .unwrap()
        };
        assert!(condition(&status).is_true());
        // Nothing new: no write.
        assert!(!refresh_live_migratable(&v, &mut status, &BTreeMap::new()).1);
        // A hostDisk volume added to the VMI: now it is not migratable.
        let host = vmi(json!([{"name": "h", "hostDisk": {"path": "/x", "type": "Disk"}}]));
        let (verdict, changed) = refresh_live_migratable(&host, &mut status, &BTreeMap::new());
        assert!(verdict.is_err() && changed);
        let now = condition(&status);
        assert!(!now.is_true());
        assert_eq!(now.reason.as_deref(), Some("HostDiskNotLiveMigratable"));
        assert_eq!(
            status
                .conditions
                .iter()
                .filter(|c| c.type_ == "LiveMigratable")
                .count(),
            1
        );
    }

    #[test]
    fn a_deleted_migration_keeps_its_target_until_the_source_says_the_stream_ended() {
        use MigrationPhase::*;
        let state =
            |mode: Option<&str>, abort: bool, completed: bool, failed: bool| MigrationState {
                mode: mode.map(String::from),
                abort_requested: abort.then_some(true),
                completed: completed.then_some(true),
                failed: failed.then_some(true),
                ..MigrationState::default()
            };
        assert_eq!(cancel_step(Pending, None), Cancel::Release);
        let idle = state(None, false, false, false);
        assert_eq!(cancel_step(Succeeded, Some(&idle)), Cancel::Release);
        assert_eq!(cancel_step(Scheduled, Some(&idle)), Cancel::FailNow);
        let sending = state(Some("PreCopy"), false, false, false);
        assert_eq!(cancel_step(Running, Some(&sending)), Cancel::RequestAbort);
        assert_eq!(abort_status(&sending), None);
        let asked = state(Some("PreCopy"), true, false, false);
        assert_eq!(cancel_step(Running, Some(&asked)), Cancel::Wait);
        assert_eq!(abort_status(&asked), Some("Aborting"));
        // The switch-over won: the VM now runs in the target Pod, which must not be deleted.
        let won = state(Some("PreCopy"), true, true, false);
        assert_eq!(cancel_step(Running, Some(&won)), Cancel::Settle);
        assert_eq!(abort_status(&won), Some("Failed"));
        let aborted = state(Some("PreCopy"), true, false, true);
        assert_eq!(cancel_step(Running, Some(&aborted)), Cancel::Settle);
        assert_eq!(abort_status(&aborted), Some("Succeeded"));
    }

    #[test]
    fn kubevirt_default_limits() {
        let defaults = ClusterConfig::default();
        let two_from_a = vec!["a".to_string(), "a".to_string()];
        assert!(over_limits(&two_from_a, "a", &defaults).is_some());
        assert_eq!(over_limits(&two_from_a, "b", &defaults), None);
        let five: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        assert!(over_limits(&five, "f", &defaults)
            .unwrap()
            .contains("parallelMigrationsPerCluster 5"));
        assert_eq!(over_limits(&[], "a", &defaults), None);
    }

    #[test]
    fn limits_from_the_kubevirt_cr() {
        let kv: api::KubeVirt = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": {"migrations": {
                "parallelMigrationsPerCluster": 1, "parallelOutboundMigrationsPerNode": 3}}}
        }))
        .unwrap();
        let mut config = ClusterConfig::default();
        config.apply_kubevirt(&kv);
        let one = vec!["a".to_string()];
        let why = over_limits(&one, "b", &config).expect("one migration fills the cluster");
        assert!(why.contains("parallelMigrationsPerCluster 1"), "{why}");
        config.parallel_migrations_per_cluster = 10;
        let three = vec!["a".to_string(); 3];
        let why = over_limits(&three, "a", &config).expect("three leave a");
        assert!(why.contains("parallelOutboundMigrationsPerNode 3"), "{why}");
        assert_eq!(over_limits(&three[..2], "a", &config), None);
    }

    #[test]
    fn only_migrations_past_pending_and_unfinished_count() {
        let migration = |uid: &str, phase: Option<&str>| -> VirtualMachineInstanceMigration {
            serde_json::from_value(json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": uid, "namespace": "default", "uid": uid},
                "spec": {"vmiName": "v"},
                "status": {"phase": phase, "migrationState": {"sourceNode": "node-a"}}
            }))
            .unwrap()
        };
        let all = [
            migration("new", None),
            migration("waiting", Some("Pending")),
            migration("scheduling", Some("Scheduling")),
            migration("running", Some("Running")),
            migration("done", Some("Succeeded")),
            migration("failed", Some("Failed")),
            migration("me", Some("Running")),
        ];
        assert_eq!(running_sources(&all, "me"), ["node-a", "node-a"]);
    }
}
