use http::StatusCode;
use serde_json::json;

use super::*;

fn vm_json(namespace: Option<&str>, spec: serde_json::Value) -> serde_json::Value {
    let mut metadata = json!({"name": "testvm"});
    if let Some(ns) = namespace {
        metadata["namespace"] = ns.into();
    }
    let mut vm = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": metadata,
        "spec": {
            "runStrategy": "Always",
            "template": {"spec": {"domain": {"devices": {}, "memory": {"guest": "128Mi"}}}}
        }
    });
    for (key, value) in spec.as_object().unwrap() {
        vm["spec"][key] = value.clone();
    }
    vm
}

fn body(vm: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(vm).unwrap()
}

#[test]
fn vm_without_instancetype_or_preference_is_unchanged() {
    // A `null` reference asks for nothing, as in KubeVirt (a nil pointer).
    for spec in [json!({}), json!({"instancetype": null, "preference": null})] {
        let sent = vm_json(Some("default"), spec);
        let vm = vm_from_body(&body(&sent), "default").unwrap();
        assert!(!names_any(&vm));
        let expanded = expand_with(&vm, None, None).unwrap();
        assert_eq!(expanded, vm);
        let mut want = sent.clone();
        want["spec"]
            .as_object_mut()
            .unwrap()
            .retain(|_, v| !v.is_null());
        assert_eq!(serde_json::to_value(&expanded).unwrap(), want);
    }
}

#[test]
fn body_without_namespace_gets_the_request_namespace() {
    let vm = vm_from_body(&body(&vm_json(None, json!({}))), "ns").unwrap();
    assert_eq!(vm.metadata.namespace.as_deref(), Some("ns"));
    let vm = vm_from_body(&body(&vm_json(Some(""), json!({}))), "ns").unwrap();
    assert_eq!(vm.metadata.namespace.as_deref(), Some("ns"));
}

#[test]
fn body_in_another_namespace_is_a_bad_request() {
    let e = vm_from_body(&body(&vm_json(Some("other"), json!({}))), "ns").unwrap_err();
    assert_eq!(e.code, StatusCode::BAD_REQUEST);
    assert_eq!(e.message, "VM namespace must be empty or ns");
}

#[test]
fn unparsable_bodies_are_bad_requests() {
    for sent in [&b""[..], b"{", b"[1]", br#"{"spec": {"runStrategy": 1}}"#] {
        let e = vm_from_body(sent, "ns").unwrap_err();
        assert_eq!(e.code, StatusCode::BAD_REQUEST, "{sent:?}");
    }
    let e = vm_from_body(b"{", "ns").unwrap_err();
    assert!(
        e.message
            .starts_with("Can not unmarshal Request body to struct, error: "),
        "{}",
        e.message
    );
    assert_eq!(
        vm_from_body(b"", "ns").unwrap_err().message,
        "empty request body"
    );
}

#[test]
fn a_vm_is_expanded_with_its_instancetype_and_preference() {
    let mut sent = vm_json(
        Some("ns"),
        json!({
            "instancetype": {"name": "small", "kind": "VirtualMachineInstancetype"},
            "preference": {"name": "pref"},
        }),
    );
    let template = &mut sent["spec"]["template"];
    template["spec"]["domain"]
        .as_object_mut()
        .unwrap()
        .remove("memory");
    template["metadata"] = json!({"annotations": {"mine": "1"}});
    sent["status"] = json!({
        "instancetypeRef": {"name": "small", "controllerRevisionRef": {"name": "r1"}},
        "preferenceRef": {"name": "pref", "controllerRevisionRef": {"name": "r2"}},
    });
    let vm = vm_from_body(&body(&sent), "ns").unwrap();
    let it = json!({"cpu": {"guest": 2}, "memory": {"guest": "256Mi"}, "annotations": {"from-it": "yes"}});
    let pref = json!({"cpu": {"preferredCPUTopology": "cores"}});
    let expanded = expand_with(&vm, Some(&it), Some(&pref)).unwrap();
    assert_eq!(expanded.spec.instancetype, None);
    assert_eq!(expanded.spec.preference, None);
    let status = expanded.status.as_ref().unwrap();
    assert_eq!(status.instancetype_ref, None);
    assert_eq!(status.preference_ref, None);
    let out = serde_json::to_value(&expanded).unwrap();
    let spec = &out["spec"]["template"]["spec"];
    assert_eq!(spec["domain"]["cpu"]["cores"], 2, "{spec}");
    assert_eq!(spec["domain"]["cpu"]["sockets"], 1, "{spec}");
    assert_eq!(spec["domain"]["memory"]["guest"], "256Mi", "{spec}");
    let annotations = &out["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["mine"], "1");
    assert_eq!(annotations["from-it"], "yes");
    // The names are annotated on the VMIs virt-controller starts, not on an expanded VM.
    assert!(annotations.get("kubevirt.io/instancetype-name").is_none());
    // The VMI defaults are applied to the template.
    let mut defaulted = expanded.spec.template.spec.clone().unwrap();
    api::defaults::default_vmi_spec(&mut defaulted);
    assert_eq!(Some(defaulted), expanded.spec.template.spec);
}

#[test]
fn a_vm_setting_what_its_instancetype_owns_is_not_expanded() {
    let mut sent = vm_json(None, json!({"instancetype": {"name": "small"}}));
    sent["spec"]["template"]["spec"]["domain"]["cpu"] = json!({"sockets": 2});
    let vm = vm_from_body(&body(&sent), "ns").unwrap();
    let it = json!({"cpu": {"guest": 2}, "memory": {"guest": "128Mi"}});
    let e = expand_with(&vm, Some(&it), None).unwrap_err();
    assert_eq!(
        e,
        "VM field(s) spec.template.spec.domain.cpu.sockets, spec.template.spec.domain.memory.guest conflicts with selected instance type"
    );
}

#[test]
fn a_vm_naming_neither_is_not_looked_up() {
    let parse = |spec| vm_from_body(&body(&vm_json(None, spec)), "ns").unwrap();
    assert!(!names_any(&parse(json!({}))));
    assert!(!names_any(&parse(
        json!({"instancetype": null, "preference": null})
    )));
    assert!(names_any(&parse(json!({"instancetype": {"name": "u1"}}))));
    assert!(names_any(&parse(json!({"preference": {"name": "p"}}))));
}
