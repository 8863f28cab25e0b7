use api::instancetype::find::Found;
use api::instancetype::{Kind, StatusRef};
use api::VirtualMachineInstance;
use serde_json::json;

use crate::vm::instancetype::{apply_to_vmi, Resolved};

fn found(kind: Kind, spec: serde_json::Value) -> Option<Found> {
    Some(Found {
        kind,
        spec,
        object: None,
        revision: Some("rev".into()),
    })
}

fn named(name: &str) -> Option<StatusRef> {
    Some(StatusRef {
        name: Some(name.into()),
        ..StatusRef::default()
    })
}

fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "annotations": {"from-template": "1"}},
        "spec": spec,
    }))
    .unwrap()
}

#[test]
fn a_started_vmi_gets_the_instancetype_the_preference_and_their_names() {
    let resolved = Resolved {
        instancetype: found(
            Kind::Instancetype,
            json!({"cpu": {"guest": 2}, "memory": {"guest": "64Mi"}}),
        ),
        preference: found(
            Kind::ClusterPreference,
            json!({"cpu": {"preferredCPUTopology": "cores"}, "devices": {"preferredInterfaceModel": "virtio"}}),
        ),
        instancetype_ref: named("small"),
        preference_ref: named("linux"),
    };
    let mut vmi = vmi(json!({"domain": {"devices": {}}}));
    apply_to_vmi(&mut vmi, &resolved).unwrap();
    let cpu = vmi.spec.domain.cpu.as_ref().unwrap();
    assert_eq!(
        (cpu.sockets, cpu.cores, cpu.threads),
        (Some(1), Some(2), Some(1))
    );
    assert_eq!(
        vmi.spec
            .domain
            .memory
            .as_ref()
            .unwrap()
            .guest
            .as_ref()
            .unwrap()
            .0,
        "64Mi"
    );
    // The default interface is added before the preference, which gives it its model.
    let interfaces = &vmi.spec.domain.devices.interfaces;
    assert_eq!(interfaces.len(), 1);
    assert_eq!(interfaces[0].model.as_deref(), Some("virtio"));
    let annotations = vmi.metadata.annotations.unwrap();
    assert_eq!(annotations["kubevirt.io/instancetype-name"], "small");
    assert_eq!(annotations["kubevirt.io/cluster-preference-name"], "linux");
    assert_eq!(annotations["from-template"], "1");
}

#[test]
fn a_template_that_sets_what_the_instancetype_sets_does_not_start() {
    let resolved = Resolved {
        instancetype: found(
            Kind::ClusterInstancetype,
            json!({"cpu": {"guest": 2}, "memory": {"guest": "64Mi"}}),
        ),
        instancetype_ref: named("small"),
        ..Resolved::default()
    };
    let mut vmi =
        vmi(json!({"domain": {"cpu": {"cores": 2}, "memory": {"guest": "1Gi"}, "devices": {}}}));
    assert_eq!(
        apply_to_vmi(&mut vmi, &resolved),
        Err("Failure while starting VMI: VMI conflicts with instancetype spec in fields: [spec.domain.cpu.cores, spec.domain.memory.guest]".into())
    );
}

#[test]
fn the_reference_policy_says_which_vms_are_expanded() {
    use crate::vm::instancetype::to_expand;
    let vm = |status: serde_json::Value| -> api::VirtualMachine {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "v"},
            "spec": {"instancetype": {"name": "small"}, "template": {"spec": {"domain": {"devices": {}}}}},
            "status": status,
        }))
        .unwrap()
    };
    let fresh = vm(json!({}));
    let stored =
        vm(json!({"instancetypeRef": {"name": "small", "controllerRevisionRef": {"name": "r"}}}));
    assert!(!to_expand(&fresh, "reference"));
    assert!(to_expand(&fresh, "expand"));
    assert!(!to_expand(&stored, "expand"));
    assert!(to_expand(&stored, "expandAll"));
    let mut plain = fresh.clone();
    plain.spec.instancetype = None;
    assert!(!to_expand(&plain, "expandAll"));
}
