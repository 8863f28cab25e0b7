//! The admission webhooks for what is judged against other objects: instancetypes and
//! preferences, and the VMs that name them; snapshots, restores and clones.

use serde_json::{json, Value};

use super::tests::{fixture, review_body};
use super::*;

/// The validating webhook's answer for `object`, judged with `references`.
fn validate_with(object: &Value, references: &References) -> Value {
    let kind = object["kind"].as_str().unwrap();
    let plural = RESOURCES.iter().find(|(_, k)| *k == kind).unwrap().0;
    let body = review_with(
        Webhook::Validate,
        plural,
        &review_body("CREATE", object, None, "alice"),
        &AdmissionConfig::default(),
        references,
    )
    .unwrap();
    serde_json::from_slice::<Value>(&body).unwrap()["response"].clone()
}

fn causes(response: &Value) -> Vec<(String, String, String)> {
    response["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (text("reason"), text("field"), text("message"))
        })
        .collect()
}

fn instancetype_object(kind: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": kind,
        "metadata": {"name": "it"},
        "spec": spec,
    })
}

#[test]
fn the_instancetype_kinds_have_kubevirts_validating_webhooks_only() {
    for (plural, name) in [
        (
            "virtualmachineinstancetypes",
            "virtualmachineinstancetype-validator.instancetype.kubevirt.io",
        ),
        (
            "virtualmachineclusterinstancetypes",
            "virtualmachineclusterinstancetype-validator.instancetype.kubevirt.io",
        ),
        (
            "virtualmachinepreferences",
            "virtualmachinepreference-validator.instancetype.kubevirt.io",
        ),
        (
            "virtualmachineclusterpreferences",
            "virtualmachineclusterpreference-validator.instancetype.kubevirt.io",
        ),
    ] {
        let (group, versions, webhook, mutates) = webhook_target(plural);
        assert_eq!(group, "instancetype.kubevirt.io");
        assert_eq!(versions, ["v1beta1"]);
        assert_eq!(webhook, name);
        assert!(!mutates, "{plural}");
        assert!(RESOURCES.iter().any(|(r, _)| *r == plural), "{plural}");
    }
}

#[test]
fn an_instancetype_is_judged_by_kubevirts_rules() {
    for kind in [
        "VirtualMachineInstancetype",
        "VirtualMachineClusterInstancetype",
    ] {
        let valid = instancetype_object(
            kind,
            json!({"cpu": {"guest": 2}, "memory": {"guest": "128Mi", "overcommitPercent": 10}}),
        );
        let ok = validate_with(&valid, &References::default());
        assert_eq!(ok["allowed"], true, "{kind}: {ok}");

        let invalid = instancetype_object(
            kind,
            json!({"cpu": {}, "memory": {"guest": "128Mi", "overcommitPercent": 150}}),
        );
        let denied = validate_with(&invalid, &References::default());
        assert_eq!(denied["allowed"], false, "{kind}");
        assert_eq!(denied["status"]["code"], 422);
        assert_eq!(denied["status"]["reason"], "Invalid");
        let causes = causes(&denied);
        assert!(causes.contains(&(
            "FieldValueRequired".into(),
            "spec.cpu.guest".into(),
            "Required value".into()
        )));
        assert!(causes.contains(&(
            "FieldValueInvalid".into(),
            "spec.memory.overcommitPercent".into(),
            "spec.memory.overcommitPercent '150': must be in range between 0 and 100.".into()
        )));
    }
}

#[test]
fn a_preference_is_judged_by_kubevirts_rules_and_warned_of_deprecated_topologies() {
    for kind in [
        "VirtualMachinePreference",
        "VirtualMachineClusterPreference",
    ] {
        let ok = validate_with(
            &instancetype_object(kind, json!({"cpu": {"preferredCPUTopology": "cores"}})),
            &References::default(),
        );
        assert_eq!(ok["allowed"], true, "{kind}: {ok}");
        assert!(ok.get("warnings").is_none(), "{ok}");

        let warned = validate_with(
            &instancetype_object(
                kind,
                json!({"cpu": {"preferredCPUTopology": "preferSockets"}}),
            ),
            &References::default(),
        );
        assert_eq!(warned["allowed"], true, "{kind}: {warned}");
        assert_eq!(
            warned["warnings"],
            json!(["PreferredCPUTopology preferSockets is deprecated for removal in a future release, please use sockets instead"])
        );

        let denied = validate_with(
            &instancetype_object(kind, json!({"cpu": {"preferredCPUTopology": "diagonal"}})),
            &References::default(),
        );
        assert_eq!(denied["allowed"], false, "{kind}");
        assert_eq!(
            causes(&denied),
            [(
                "FieldValueInvalid".to_string(),
                "spec.cpu.preferredCPUTopology".to_string(),
                "unknown preferredCPUTopology diagonal".to_string()
            )]
        );
    }
}

#[test]
fn an_instancetype_webhook_refuses_another_kind() {
    let mut object = instancetype_object(
        "VirtualMachinePreference",
        json!({"cpu": {"guest": 1}, "memory": {"guest": "1Gi"}}),
    );
    let body = review_body("CREATE", &object, None, "alice");
    let out = review(
        Webhook::Validate,
        "virtualmachineinstancetypes",
        &body,
        &AdmissionConfig::default(),
    )
    .unwrap();
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(out["response"]["allowed"], false);
    // Deleting (finalizers being removed) is not judged again.
    object["kind"] = json!("VirtualMachineInstancetype");
    object["spec"] = json!({});
    object["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    assert_eq!(
        validate_with(&object, &References::default())["allowed"],
        true
    );
}

/// vm-demo naming an instance type and a preference, without memory of its own.
fn vm_with_references() -> Value {
    let mut vm = fixture("vm-demo.yaml");
    vm["metadata"]["namespace"] = json!("default");
    vm["spec"]["instancetype"] = json!({"name": "small", "kind": "VirtualMachineInstancetype"});
    vm["spec"]["preference"] = json!({"name": "pref", "kind": "VirtualMachinePreference"});
    let domain = vm["spec"]["template"]["spec"]["domain"]
        .as_object_mut()
        .unwrap();
    domain.remove("memory");
    vm
}

fn references(instancetype: Option<Value>, preference: Option<Value>) -> References {
    References {
        instancetype,
        preference,
        ..Default::default()
    }
}

#[test]
fn a_vm_that_sets_what_its_instancetype_owns_is_denied() {
    let mut vm = vm_with_references();
    vm["spec"]["template"]["spec"]["domain"]["cpu"] = json!({"sockets": 2});
    let denied = validate_with(
        &vm,
        &references(
            Some(json!({"cpu": {"guest": 2}, "memory": {"guest": "128Mi"}})),
            None,
        ),
    );
    assert_eq!(denied["allowed"], false, "{denied}");
    assert_eq!(denied["status"]["code"], 422);
    assert_eq!(
        causes(&denied),
        [(
            "FieldValueInvalid".to_string(),
            "spec.template.spec.domain.cpu.sockets".to_string(),
            "VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type"
                .to_string()
        )]
    );
}

#[test]
fn a_vm_whose_instancetype_falls_short_of_its_preference_is_denied() {
    let denied = validate_with(
        &vm_with_references(),
        &references(
            Some(json!({"cpu": {"guest": 1}, "memory": {"guest": "128Mi"}})),
            Some(json!({"requirements": {"cpu": {"guest": 2}}})),
        ),
    );
    assert_eq!(denied["allowed"], false, "{denied}");
    let message = denied["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("failure checking preference requirements: insufficient CPU resources"),
        "{message}"
    );
    assert_eq!(causes(&denied)[0].1, "spec.instancetype");
}

#[test]
fn a_vm_without_memory_is_admitted() {
    let vm = vm_with_references();
    let ok = validate_with(
        &vm,
        &references(
            Some(json!({"cpu": {"guest": 2}, "memory": {"guest": "128Mi"}})),
            Some(json!({"cpu": {"preferredCPUTopology": "cores"}})),
        ),
    );
    assert_eq!(ok["allowed"], true, "{ok}");
    // Not found (yet): admitted too, virt-controller waits for it.
    let ok = validate_with(&vm, &References::default());
    assert_eq!(ok["allowed"], true, "{ok}");
    // Naming none, the VM is admitted too, as in KubeVirt; the VMI made of it is refused.
    let mut plain = vm.clone();
    let spec = plain["spec"].as_object_mut().unwrap();
    spec.remove("instancetype");
    spec.remove("preference");
    let ok = validate_with(&plain, &References::default());
    assert_eq!(ok["allowed"], true, "{ok}");
}

#[test]
fn only_a_created_or_updated_vm_naming_a_reference_is_looked_up() {
    assert!(needs_references(Webhook::Validate, "virtualmachines"));
    assert!(!needs_references(Webhook::Mutate, "virtualmachines"));
    assert!(!needs_references(
        Webhook::Validate,
        "virtualmachineinstances"
    ));

    let mut vm = vm_with_references();
    vm["metadata"].as_object_mut().unwrap().remove("namespace");
    let found = vm_of_review(&review_body("CREATE", &vm, None, "alice")).unwrap();
    assert_eq!(found.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        found.spec.instancetype.as_ref().unwrap().name(),
        Some("small")
    );
    assert!(vm_of_review(&review_body("UPDATE", &vm, Some(&vm), "alice")).is_some());
    assert!(vm_of_review(&review_body("DELETE", &vm, None, "alice")).is_none());
    assert!(vm_of_review(&review_body(
        "CREATE",
        &fixture("vm-demo.yaml"),
        None,
        "alice"
    ))
    .is_none());
    assert!(vm_of_review(b"nope").is_none());
}

fn snapshot_object(kind: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "snapshot.kubevirt.io/v1beta1",
        "kind": kind,
        "metadata": {"name": "s", "namespace": "default"},
        "spec": spec,
    })
}

fn vm_ref(kind: &str) -> Value {
    json!({"apiGroup": "kubevirt.io", "kind": kind, "name": "vm"})
}

fn answer_with(op: &str, object: &Value, old: Option<&Value>, references: &References) -> Value {
    let kind = object["kind"].as_str().unwrap();
    let plural = RESOURCES.iter().find(|(_, k)| *k == kind).unwrap().0;
    let body = review_with(
        Webhook::Validate,
        plural,
        &review_body(op, object, old, "alice"),
        &AdmissionConfig::default(),
        references,
    )
    .unwrap();
    serde_json::from_slice::<Value>(&body).unwrap()["response"].clone()
}

#[test]
fn snapshots_and_restores_have_kubevirts_validating_webhooks() {
    for (plural, name) in [
        (
            "virtualmachinesnapshots",
            "virtualmachinesnapshot-validator.snapshot.kubevirt.io",
        ),
        (
            "virtualmachinerestores",
            "virtualmachinerestore-validator.snapshot.kubevirt.io",
        ),
    ] {
        let (group, versions, validator, mutates) = webhook_target(plural);
        assert_eq!(
            (group, validator.as_str(), mutates),
            ("snapshot.kubevirt.io", name, false)
        );
        assert_eq!(versions, ["v1alpha1", "v1beta1"]);
        assert!(needs_snapshot_facts(Webhook::Validate, plural));
    }
    assert!(!needs_snapshot_facts(Webhook::Validate, "virtualmachines"));
}

#[test]
fn a_snapshot_is_judged_by_kubevirts_rules_and_the_gate() {
    let good = snapshot_object(
        "VirtualMachineSnapshot",
        json!({"source": vm_ref("VirtualMachine")}),
    );
    assert_eq!(
        validate_with(&good, &References::default())["allowed"],
        true
    );
    let bad = snapshot_object(
        "VirtualMachineSnapshot",
        json!({"source": vm_ref("VirtualMachineInstance")}),
    );
    let response = validate_with(&bad, &References::default());
    assert_eq!(response["allowed"], false);
    assert_eq!(
        causes(&response),
        [(
            "FieldValueInvalid".into(),
            "spec.source.kind".into(),
            "invalid kind".into()
        )]
    );
    let gate_off = References {
        snapshots: SnapshotFacts {
            gate_off: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let response = validate_with(&good, &gate_off);
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"]["message"],
        "snapshot feature gate not enabled"
    );
    let mut changed = good.clone();
    changed["spec"]["source"]["name"] = json!("other");
    let response = answer_with("UPDATE", &changed, Some(&good), &References::default());
    assert_eq!(
        causes(&response),
        [(
            "FieldValueInvalid".into(),
            "spec".into(),
            "spec in immutable after creation".into()
        )]
    );
    let mut relabelled = good.clone();
    relabelled["metadata"]["labels"] = json!({"a": "b"});
    assert_eq!(
        answer_with("UPDATE", &relabelled, Some(&good), &References::default())["allowed"],
        true
    );
}

#[test]
fn a_second_restore_of_the_same_target_is_denied_while_one_is_in_progress() {
    let restore = snapshot_object(
        "VirtualMachineRestore",
        json!({"target": vm_ref("VirtualMachine"), "virtualMachineSnapshotName": "snap"}),
    );
    assert_eq!(
        validate_with(&restore, &References::default())["allowed"],
        true
    );
    let busy = References {
        snapshots: SnapshotFacts {
            restores_in_progress: vec!["first".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let response = validate_with(&restore, &busy);
    assert_eq!(response["allowed"], false);
    assert!(response["status"]["message"]
        .as_str()
        .unwrap()
        .contains("VirtualMachineRestore \"first\" in progress"));
    let found = restore_of_review(&review_body("CREATE", &restore, None, "alice")).unwrap();
    assert_eq!(found.spec.virtual_machine_snapshot_name, "snap");
    assert_eq!(found.metadata.namespace.as_deref(), Some("default"));
    assert!(restore_of_review(&review_body("UPDATE", &restore, Some(&restore), "alice")).is_none());
}

#[test]
fn a_vm_being_snapshotted_keeps_its_volumes() {
    let mut old = fixture("vm-demo.yaml");
    old["status"] = json!({"snapshotInProgress": "snap"});
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["volumes"] = json!([]);
    let response = answer_with("UPDATE", &new, Some(&old), &References::default());
    assert_eq!(response["allowed"], false);
    assert!(response["status"]["message"]
        .as_str()
        .unwrap()
        .contains("Cannot update vm disks or volumes until snapshot \"snap\" completes"));
}

#[test]
fn a_clone_is_judged_by_kubevirts_rules_and_the_gate() {
    let (group, versions, validator, mutates) = webhook_target("virtualmachineclones");
    assert_eq!(
        (group, versions, validator.as_str(), mutates),
        (
            "clone.kubevirt.io",
            &["v1beta1"][..],
            "vm-clone-validator.kubevirt.io",
            false
        )
    );
    let object = |target: &str| {
        json!({
            "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"source": vm_ref("VirtualMachine"),
                     "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": target}},
        })
    };
    assert_eq!(
        validate_with(&object("copy"), &References::default())["allowed"],
        true
    );
    let response = validate_with(&object("vm"), &References::default());
    assert_eq!(
        causes(&response),
        [(
            "FieldValueInvalid".into(),
            "spec.target.name".into(),
            "Target name cannot be equal to source name when both are VirtualMachines".into()
        )]
    );
    let gate_off = References {
        snapshots: SnapshotFacts {
            gate_off: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let response = validate_with(&object("copy"), &gate_off);
    assert_eq!(
        response["status"]["message"],
        "snapshot feature gate is not enabled"
    );
}
