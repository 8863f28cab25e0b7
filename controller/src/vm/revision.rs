//! The ControllerRevision of the VM's spec that each start records, KubeVirt's way: named
//! `revision-start-vm-<VM UID>-<generation>`, its data the VM's `{"spec": ...}`, its revision
//! number the VM's generation, owned by the VM. The VMI the start creates names it in
//! `status.virtualMachineRevisionName`; the revisions of the VM's earlier starts are deleted.

use api::VirtualMachine;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};

/// What every start revision of the VM with `uid` is named with.
fn prefix(uid: &str) -> String {
    format!("revision-start-vm-{uid}-")
}

/// The name of the revision of the VM's spec as it is now.
pub fn name(vm: &VirtualMachine) -> String {
    let generation = vm.metadata.generation.unwrap_or(0);
    format!("{}{generation}", prefix(&vm.uid().unwrap_or_default()))
}

/// The revision of the VM's spec as it is now.
pub fn revision(vm: &VirtualMachine) -> Result<ControllerRevision, serde_json::Error> {
    let data = serde_json::json!({ "spec": serde_json::to_value(&vm.spec)? });
    Ok(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name(vm)),
            namespace: vm.namespace(),
            owner_references: Some(vec![super::controller_ref(vm)]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(data)),
        revision: vm.metadata.generation.unwrap_or(0),
    })
}

/// Which of `revisions` are start revisions of `vm` other than the current one.
pub fn stale<'a>(vm: &VirtualMachine, revisions: &'a [ControllerRevision]) -> Vec<&'a str> {
    let (prefix, current) = (prefix(&vm.uid().unwrap_or_default()), name(vm));
    revisions
        .iter()
        .filter_map(|r| r.metadata.name.as_deref())
        .filter(|n| n.starts_with(&prefix) && *n != current)
        .collect()
}

/// Stores the revision of the VM's spec (kept when it exists: a start retried at the same
/// generation) and deletes those of earlier starts; returns its name.
pub async fn record(client: &Client, vm: &VirtualMachine) -> Result<String, String> {
    let namespace = vm.namespace().unwrap_or_default();
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let revision = revision(vm).map_err(|e| format!("the VM's spec as JSON: {e}"))?;
    let name = name(vm);
    match revisions.create(&PostParams::default(), &revision).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(format!("creating ControllerRevision {name}: {e}")),
    }
    let all = revisions
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing the ControllerRevisions of {namespace}: {e}"))?;
    for old in stale(vm, &all.items) {
        match revisions.delete(old, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(format!("deleting ControllerRevision {old}: {e}")),
        }
    }
    Ok(name)
}
