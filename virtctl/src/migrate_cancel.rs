//! `virtctl migrate-cancel VM`: deletes the VM's migration that is under way, as KubeVirt's
//! virtctl does (virt-controller then aborts it; the VM stays on its node unless the switch-over
//! had already happened). Messages are KubeVirt's.

use api::migration::VirtualMachineInstanceMigration;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};

/// The migration of VMI `vmi` that is not final, if any (there is at most one).
pub fn active<'a>(
    migrations: &'a [VirtualMachineInstanceMigration],
    vmi: &str,
) -> Option<&'a VirtualMachineInstanceMigration> {
    migrations.iter().find(|m| {
        m.spec.vmi_name.as_deref() == Some(vmi)
            && !m
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(|p| p.is_final())
    })
}

/// Cancels the migration of `vmi` in `namespace`; returns what to print.
pub async fn run(client: &Client, namespace: &str, vmi: &str) -> Result<String, String> {
    let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("Error fetching virtual machine instance migration list  {e}"))?;
    let migration = active(&list.items, vmi)
        .ok_or_else(|| format!("Found no migration to cancel for {vmi}"))?
        .name_any();
    api.delete(&migration, &DeleteParams::default())
        .await
        .map_err(|e| {
            format!("Error canceling migration {migration} of a VirtualMachine {vmi}: {e}")
        })?;
    Ok(format!("VM {vmi} was scheduled to migrate-cancel"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migration(name: &str, vmi: &str, phase: Option<&str>) -> VirtualMachineInstanceMigration {
        let mut m = serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"vmiName": vmi}
        });
        if let Some(phase) = phase {
            m["status"] = serde_json::json!({"phase": phase});
        }
        serde_json::from_value(m).unwrap()
    }

    #[test]
    fn only_the_migration_under_way_of_that_vm_is_cancelled() {
        let all = [
            migration("done", "vm1", Some("Succeeded")),
            migration("other", "vm2", Some("Running")),
            migration("failed", "vm1", Some("Failed")),
            migration("now", "vm1", Some("Running")),
        ];
        assert_eq!(
            active(&all, "vm1").map(|m| m.name_any()),
            Some("now".into())
        );
        let fresh = [migration("new", "vm1", None)];
        assert_eq!(
            active(&fresh, "vm1").map(|m| m.name_any()),
            Some("new".into())
        );
        assert!(active(&all[..3], "vm1").is_none());
    }
}
