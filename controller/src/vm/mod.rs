//! The VM controller: VirtualMachine -> VirtualMachineInstance by run strategy.

pub mod instancetype;
pub mod plan;
pub mod reconcile;
pub mod revision;

use api::VirtualMachine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

/// The owner reference that makes `vm` the controller of what it owns (its ControllerRevisions).
pub fn controller_ref(vm: &VirtualMachine) -> OwnerReference {
    OwnerReference {
        api_version: VirtualMachine::api_version(&()).into_owned(),
        kind: VirtualMachine::kind(&()).into_owned(),
        name: vm.name_any(),
        uid: vm.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}
