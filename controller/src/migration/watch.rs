//! What brings a migration's next pass. Besides the migrations themselves, the controller
//! watches (see `run.rs`):
//!
//! - the VMIs ([`migrations_of_vmi`]): the handlers write a migration's progress, and its end,
//!   into the VMI's `migrationState`; a VMI that stops migrating (or goes) frees a migration
//!   waiting for it;
//! - the target Pods, labelled `kubevirt.io/migrationJobUID` ([`migration_of_pod`]): scheduled,
//!   running, failed, deleted;
//! - the migrations again ([`waiting_for_limits`]): a migration that ends or goes frees a place
//!   under the limits for the Pending ones.
//!
//! The mappers read the controller's own store of migrations.

use std::sync::Arc;

use api::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use api::VirtualMachineInstance;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;

fn unfinished(migration: &VirtualMachineInstanceMigration) -> bool {
    !migration
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(MigrationPhase::is_final)
}

/// The migrations a change of `vmi` concerns: the unfinished ones of its namespace that its
/// `migrationState` names or that ask to move it (one may wait for another to end). A finished
/// migration needs no pass: the VMI keeps naming it long after, and changes often.
pub fn migrations_of_vmi(
    migrations: &[Arc<VirtualMachineInstanceMigration>],
    vmi: &VirtualMachineInstance,
) -> Vec<ObjectRef<VirtualMachineInstanceMigration>> {
    let namespace = vmi.metadata.namespace.as_deref();
    let name = vmi.metadata.name.as_deref();
    let recorded = vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|s| s.migration_uid.as_deref());
    migrations
        .iter()
        .filter(|m| m.metadata.namespace.as_deref() == namespace)
        .filter(|m| unfinished(m))
        .filter(|m| {
            let named = recorded.is_some() && m.metadata.uid.as_deref() == recorded;
            named || m.spec.vmi_name.as_deref() == name
        })
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

/// The migration whose target Pod `pod` is, by the UID in its `kubevirt.io/migrationJobUID`
/// label.
pub fn migration_of_pod(
    migrations: &[Arc<VirtualMachineInstanceMigration>],
    pod: &Pod,
) -> Option<ObjectRef<VirtualMachineInstanceMigration>> {
    let uid = pod
        .metadata
        .labels
        .as_ref()?
        .get(contract::labels::MIGRATION_JOB)?;
    migrations
        .iter()
        .find(|m| {
            m.metadata.uid.as_ref() == Some(uid) && m.metadata.namespace == pod.metadata.namespace
        })
        .map(|m| ObjectRef::from_obj(m.as_ref()))
}

/// The migrations of the cluster that may wait for the limits, when `changed` has ended or is
/// being deleted (it no longer counts): the Pending ones. Any other change of a migration frees
/// nothing.
pub fn waiting_for_limits(
    migrations: &[Arc<VirtualMachineInstanceMigration>],
    changed: &VirtualMachineInstanceMigration,
) -> Vec<ObjectRef<VirtualMachineInstanceMigration>> {
    if unfinished(changed) && changed.metadata.deletion_timestamp.is_none() {
        return vec![];
    }
    migrations
        .iter()
        .filter(|m| m.metadata.uid != changed.metadata.uid)
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            m.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_none_or(|p| p == MigrationPhase::Pending)
        })
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn migration(
        name: &str,
        namespace: &str,
        vmi: &str,
        phase: Option<&str>,
    ) -> Arc<VirtualMachineInstanceMigration> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name, "namespace": namespace, "uid": format!("{name}-uid")},
                "spec": {"vmiName": vmi},
                "status": {"phase": phase}
            }))
            .unwrap(),
        )
    }

    fn names(refs: Vec<ObjectRef<VirtualMachineInstanceMigration>>) -> Vec<String> {
        let mut names: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn a_vmi_maps_to_its_unfinished_migrations() {
        let all = [
            migration("running", "ns", "v", Some("Running")),
            migration("queued", "ns", "v", None),
            migration("done", "ns", "v", Some("Succeeded")),
            migration("last", "ns", "v", Some("Failed")),
            migration("elsewhere", "other", "v", Some("Running")),
            migration("other-vmi", "ns", "w", Some("Running")),
        ];
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}},
            "status": {"migrationState": {"migrationUid": "last-uid"}}
        }))
        .unwrap();
        assert_eq!(names(migrations_of_vmi(&all, &vmi)), ["queued", "running"]);
        let refs = migrations_of_vmi(&all, &vmi);
        assert!(refs.iter().all(|r| r.namespace.as_deref() == Some("ns")));
        // A VMI of another namespace with the same name concerns only its own.
        let mut other = vmi.clone();
        other.metadata.namespace = Some("other".into());
        other.status = None;
        assert_eq!(names(migrations_of_vmi(&all, &other)), ["elsewhere"]);
    }

    #[test]
    fn a_target_pod_maps_to_the_migration_its_label_names() {
        let all = [
            migration("a", "ns", "v", Some("Scheduling")),
            migration("b", "ns", "v", Some("Pending")),
        ];
        let pod = |namespace: &str, labels: serde_json::Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "virt-launcher-v-xyzab", "namespace": namespace,
                             "labels": labels}
            }))
            .unwrap()
        };
        let target = pod("ns", json!({(contract::labels::MIGRATION_JOB): "a-uid"}));
        assert_eq!(
            migration_of_pod(&all, &target).map(|r| r.name),
            Some("a".to_string())
        );
        let launcher = pod("ns", json!({"kubevirt.io": "virt-launcher"}));
        assert_eq!(migration_of_pod(&all, &launcher), None);
        let stray = pod("other", json!({(contract::labels::MIGRATION_JOB): "a-uid"}));
        assert_eq!(migration_of_pod(&all, &stray), None);
    }

    #[test]
    fn an_ended_migration_maps_to_the_pending_ones_of_the_cluster() {
        let all = [
            migration("new", "a", "v", None),
            migration("waiting", "b", "w", Some("Pending")),
            migration("running", "a", "x", Some("Running")),
            migration("ended", "a", "y", Some("Succeeded")),
        ];
        assert_eq!(names(waiting_for_limits(&all, &all[3])), ["new", "waiting"]);
        // A change of a migration under way frees nothing.
        assert!(waiting_for_limits(&all, &all[2]).is_empty());
        // Its deletion does.
        let mut going = (*all[2]).clone();
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(names(waiting_for_limits(&all, &going)), ["new", "waiting"]);
    }
}
