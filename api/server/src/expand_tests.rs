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
        let expanded = expand(vm.clone()).unwrap();
        assert_eq!(expanded, vm);
        assert_eq!(serde_json::to_value(&expanded).unwrap(), sent);
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
fn instancetype_and_preference_are_refused_by_path() {
    let parse = |spec| vm_from_body(&body(&vm_json(None, spec)), "ns").unwrap();
    let e = expand(parse(json!({"instancetype": {"name": "u1.small"}}))).unwrap_err();
    assert_eq!(e.code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(e.message, "spec.instancetype: not supported by ferrovirt");
    let status: serde_json::Value = serde_json::from_slice(&e.to_status_json()).unwrap();
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["code"], 422);

    let e = expand(parse(json!({"preference": {"name": "fedora"}}))).unwrap_err();
    assert_eq!(e.message, "spec.preference: not supported by ferrovirt");

    let e = expand(parse(
        json!({"instancetype": {}, "preference": {"name": "fedora"}}),
    ))
    .unwrap_err();
    assert_eq!(
        e.message,
        "spec.instancetype: not supported by ferrovirt, spec.preference: not supported by ferrovirt"
    );
}
