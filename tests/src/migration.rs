//! The counting VM that the migration tests move between nodes, and the checks they share.

use std::time::Duration;

use api::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use api::vmi::MigrationState;
use api::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};

use crate::counter::{self, console_counts, Count};
use crate::{kubectl, migration_phase as phase, wait_for, wait_running};

/// What the guest writes at the start of its emptyDisk (`/dev/vdc`).
pub const DISK_MARKER: &str = "ferrovirt-emptydisk-marker";

pub fn counting_vm(name: &str, empty_disk: &str) -> VirtualMachine {
    // The guest writes DISK_MARKER on its emptyDisk, then counts.
    let user_data = counter::user_data(&format!("echo {DISK_MARKER} > /dev/vdc; sync\n"));
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": {
                    "domain": {
                        "devices": {"disks": [
                            {"name": "containerdisk", "disk": {"bus": "virtio"}},
                            {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                            {"name": "emptydisk", "disk": {"bus": "virtio"}}
                        ]},
                        "memory": {"guest": "128Mi"},
                        "resources": {}
                    },
                    "terminationGracePeriodSeconds": 0,
                    "volumes": [
                        {"name": "containerdisk",
                         "containerDisk": {"image": "registry:5000/ferrovirt/tiny-container-disk:devel"}},
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": user_data}},
                        {"name": "emptydisk", "emptyDisk": {"capacity": empty_disk}}
                    ]
                }
            }
        }
    }))
    .expect("a VirtualMachine")
}

/// Starts the counting VM and waits until it runs and counts.
pub async fn running_vm(
    client: &Client,
    namespace: &str,
    name: &str,
    empty_disk: &str,
) -> (VirtualMachineInstance, String, Vec<Count>) {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    vms.create(&PostParams::default(), &counting_vm(name, empty_disk))
        .await
        .expect("VM created");
    let vmi = wait_running(&vmis, name, Duration::from_secs(300)).await;
    let node = vmi
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("nodeName");
    let uid = vmi.uid().expect("uid");
    // Before any migration is asked for, the VMI says it could migrate (as KubeVirt's do).
    wait_for(
        "LiveMigratable=True on the running VMI",
        Duration::from_secs(30),
        || async {
            let vmi = vmis.get(name).await.ok()?;
            vmi.status?
                .conditions
                .iter()
                .any(|c| c.type_ == "LiveMigratable" && c.is_true())
                .then_some(())
        },
    )
    .await;
    let seen = console_counts(&node, &uid, 3, Duration::from_secs(180)).await;
    (vmi, node, seen)
}

/// A migration of a counting VM, caught while its stream runs.
pub struct UnderWay {
    pub uid: String,
    pub source_node: String,
    pub migration: String,
    pub target_pod: String,
}

/// Waits for an interrupted migration to end, and checks that it failed and that the VM runs
/// on, on the source node, its counter going on. Returns the VMI's `migrationState`.
pub async fn failed_and_still_counting_on_the_source(
    client: &Client,
    ns: &str,
    name: &str,
    under: &UnderWay,
) -> MigrationState {
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    // A deleted migration object goes once it has ended.
    let ended = wait_for("the migration to end", Duration::from_secs(180), || async {
        match migrations.get_opt(&under.migration).await.ok()? {
            Some(m) => phase(&m)
                .is_some_and(MigrationPhase::is_final)
                .then_some(Some(m)),
            None => Some(None),
        }
    })
    .await;
    if let Some(ended) = ended {
        let status = ended.status.clone().unwrap_or_default();
        assert_eq!(status.phase, Some(MigrationPhase::Failed), "{status:?}");
        println!("migration failed: {:?}", status.conditions);
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vmi = vmis.get(name).await.expect("VMI");
    let s = vmi.status.clone().unwrap_or_default();
    assert_eq!(s.phase, Some(VmiPhase::Running), "{s:?}");
    assert_eq!(s.node_name.as_deref(), Some(under.source_node.as_str()));
    let state = s.migration_state.clone().expect("migrationState");
    assert_eq!(state.failed, Some(true), "{state:?}");
    let node = &under.source_node;
    let seen = console_counts(node, &under.uid, 1, Duration::from_secs(30)).await;
    let last = seen.last().cloned().expect("counts");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = console_counts(node, &under.uid, 1, Duration::from_secs(30)).await;
    assert!(
        later.last().expect("counts").n > last.n,
        "the guest stopped counting on the source after the failed migration"
    );
    state
}

/// Deletes a cluster-scoped MigrationPolicy when the test ends, also when it fails.
pub struct PolicyGuard(pub &'static str);

impl Drop for PolicyGuard {
    fn drop(&mut self) {
        let out = kubectl(
            "default",
            &["delete", "migrationpolicy", self.0, "--ignore-not-found"],
        );
        if out.code != Some(0) {
            eprintln!("could not delete MigrationPolicy {}: {out:?}", self.0);
        }
    }
}

/// Creates MigrationPolicy `name` with `spec`, for namespace `ns` only: the namespace gets the
/// label `ferrovirt.io/e2e-policy=<ns>`, and the policy selects it by that label.
pub async fn namespace_policy(
    client: &Client,
    ns: &str,
    name: &'static str,
    mut spec: serde_json::Value,
) -> PolicyGuard {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            ns,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "metadata": {"labels": {"ferrovirt.io/e2e-policy": ns}}
            })),
        )
        .await
        .expect("namespace labelled");
    let guard = PolicyGuard(name);
    spec["selectors"] = serde_json::json!({"namespaceSelector": {"ferrovirt.io/e2e-policy": ns}});
    let policy: api::MigrationPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "migrations.kubevirt.io/v1alpha1",
        "kind": "MigrationPolicy",
        "metadata": {"name": name},
        "spec": spec
    }))
    .expect("a policy");
    Api::<api::MigrationPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy created");
    guard
}
