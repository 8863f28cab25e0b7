use api::vm::{VirtualMachine, VirtualMachineSpec};
use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::json;

use crate::vm::revision::{name, revision, stale};

fn vm(generation: i64) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "ns", "uid": "vm-uid", "generation": generation},
        "spec": {"runStrategy": "Always",
                 "template": {"metadata": {"labels": {"kubevirt.io/vm": "vm1"}},
                              "spec": {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}}}
    }))
    .unwrap()
}

#[test]
fn a_start_revision_holds_the_vms_spec_at_its_generation_owned_by_the_vm() {
    let vm = vm(2);
    assert_eq!(name(&vm), "revision-start-vm-vm-uid-2");
    let stored = revision(&vm).unwrap();
    assert_eq!(stored.revision, 2);
    assert_eq!(stored.metadata.namespace.as_deref(), Some("ns"));
    let owner = &stored.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("VirtualMachine", "vm1", "vm-uid")
    );
    assert_eq!(owner.controller, Some(true));
    // KubeVirt's clients read the data as a VirtualMachine whose spec is the VM's.
    let data = &stored.data.as_ref().unwrap().0;
    assert_eq!(data.as_object().unwrap().len(), 1, "{data}");
    let spec: VirtualMachineSpec = serde_json::from_value(data["spec"].clone()).unwrap();
    assert_eq!(spec, vm.spec);
    assert_eq!(data["spec"]["runStrategy"], "Always");
}

#[test]
fn the_revisions_of_earlier_starts_are_stale_and_nothing_else() {
    let named = |name: &str| ControllerRevision {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let all = [
        named("revision-start-vm-vm-uid-2"),
        named("revision-start-vm-vm-uid-5"),
        named("revision-start-vm-other-uid-2"),
        named("vm1-small-instancetype-abc"),
    ];
    assert_eq!(stale(&vm(5), &all), ["revision-start-vm-vm-uid-2"]);
    assert!(stale(&vm(2), &all[..1]).is_empty());
}
