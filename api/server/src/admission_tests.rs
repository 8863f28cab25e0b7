use std::path::PathBuf;

use serde_json::{json, Value};

use super::*;

/// The project's own manifests (`api/testdata/manifests/`).
fn manifests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/manifests")
}

pub(super) fn fixture(name: &str) -> Value {
    let path = manifests_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap()
}

pub(super) fn review_body(
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    user: &str,
) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap();
    let plural = RESOURCES.iter().find(|(_, k)| *k == kind).unwrap().0;
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "kubevirt.io", "version": "v1", "kind": kind},
            "resource": {"group": "kubevirt.io", "version": "v1", "resource": plural},
            "name": object["metadata"]["name"],
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": user},
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    })
    .to_string()
    .into_bytes()
}

fn answer(webhook: Webhook, object: &Value, op: &str, old: Option<&Value>, user: &str) -> Value {
    let kind = object["kind"].as_str().unwrap();
    let plural = RESOURCES.iter().find(|(_, k)| *k == kind).unwrap().0;
    let config = AdmissionConfig {
        privileged_users: vec!["system:serviceaccount:kubevirt:kubevirt-apiserver".into()],
    };
    let body = review(
        webhook,
        plural,
        &review_body(op, object, old, user),
        &config,
    )
    .unwrap();
    let out: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(out["kind"], "AdmissionReview");
    assert_eq!(
        out["response"]["uid"],
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    out["response"].clone()
}

fn apply_patch(object: &Value, response: &Value) -> Value {
    let mut patched = object.clone();
    if let Some(patch) = response["patch"].as_str() {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    patched
}

#[test]
fn mutation_patch_yields_the_defaulted_object() {
    for name in [
        "vm-demo.yaml",
        "vmi-demo.yaml",
        "migration-demo.yaml",
        "vmirs-demo.yaml",
    ] {
        let object = fixture(name);
        let response = answer(Webhook::Mutate, &object, "CREATE", None, "alice");
        assert_eq!(response["allowed"], true, "{name}: {response}");
        let patched = apply_patch(&object, &response);
        let mut expected = KubeVirtObject::from_value(object.clone()).unwrap();
        expected.apply_defaults();
        let mut expected = expected.to_value().unwrap();
        if expected["kind"] == "VirtualMachineInstance" {
            expected["metadata"]["finalizers"] = json!([contract::finalizers::VMI]);
        }
        if expected != object {
            assert_eq!(response["patchType"], "JSONPatch", "{name}");
        }
        assert_eq!(patched, expected, "{name}");
        // A second pass has nothing left to default.
        let again = answer(Webhook::Mutate, &patched, "CREATE", None, "alice");
        assert!(again.get("patch").is_none(), "{name}: {again}");
    }
}

#[test]
fn a_vmi_gets_virt_controllers_finalizer_on_create_only_and_once() {
    let mut vmi = fixture("vmi-demo.yaml");
    vmi["metadata"]["finalizers"] = json!(["example.com/keep"]);
    let created = apply_patch(
        &vmi,
        &answer(Webhook::Mutate, &vmi, "CREATE", None, "alice"),
    );
    assert_eq!(
        created["metadata"]["finalizers"],
        json!(["example.com/keep", contract::finalizers::VMI])
    );
    let again = apply_patch(
        &created,
        &answer(Webhook::Mutate, &created, "CREATE", None, "alice"),
    );
    assert_eq!(
        again["metadata"]["finalizers"],
        created["metadata"]["finalizers"]
    );
    // An update (virt-controller removing it, say) is not given it back.
    let mut removed = created.clone();
    removed["metadata"]["finalizers"] = json!(["example.com/keep"]);
    let updated = apply_patch(
        &removed,
        &answer(Webhook::Mutate, &removed, "UPDATE", Some(&created), "alice"),
    );
    assert_eq!(
        updated["metadata"]["finalizers"],
        json!(["example.com/keep"])
    );
}

#[test]
fn every_refused_fixture_is_denied_with_the_validation_field_paths() {
    let dir = manifests_dir();
    let mut refused = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !name.ends_with(".yaml") {
            continue;
        }
        let object = fixture(&name);
        let Ok(mut parsed) = KubeVirtObject::from_value(object.clone()) else {
            continue; // a kind Ferrovirt does not serve has no webhook
        };
        parsed.apply_defaults();
        let defaulted = parsed.to_value().unwrap();
        let response = answer(Webhook::Validate, &defaulted, "CREATE", None, "alice");
        match parsed.validate() {
            Ok(()) => assert_eq!(response["allowed"], true, "{name}: {response}"),
            Err(errors) => {
                refused += 1;
                assert_eq!(response["allowed"], false, "{name}");
                assert_eq!(response["status"]["code"], 422, "{name}");
                let causes = response["status"]["details"]["causes"].as_array().unwrap();
                let fields: Vec<&str> = causes
                    .iter()
                    .map(|c| c["field"].as_str().unwrap())
                    .collect();
                let want: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
                assert_eq!(fields, want, "{name}");
                for (cause, error) in causes.iter().zip(&errors) {
                    assert_eq!(cause["reason"], error.kind.cause_type());
                }
                let message = response["status"]["message"].as_str().unwrap();
                for e in &errors {
                    assert!(
                        message.contains(&format!("{}: {}", e.field, e.message)),
                        "{message}"
                    );
                }
            }
        }
    }
    assert!(refused > 0, "the manifests include refused ones");
}

#[test]
fn vmi_spec_update_is_refused_metadata_update_allowed() {
    let old = fixture("vmi-demo.yaml");
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"] = json!({"a": "b"});
    let ok = answer(
        Webhook::Validate,
        &relabelled,
        "UPDATE",
        Some(&old),
        "alice",
    );
    assert_eq!(ok["allowed"], true, "{ok}");

    let mut changed = old.clone();
    changed["spec"]["domain"]["cpu"] = json!({"cores": 3});
    let denied = answer(Webhook::Validate, &changed, "UPDATE", Some(&old), "alice");
    assert_eq!(denied["allowed"], false);
    assert_eq!(denied["status"]["details"]["causes"][0]["field"], "spec");
    assert_eq!(
        denied["status"]["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );
}

#[test]
fn only_virt_api_may_override_the_grace_period() {
    let old = fixture("vmi-demo.yaml");
    let mut new = old.clone();
    new["spec"]["terminationGracePeriodSeconds"] = json!(7);
    let user = "system:serviceaccount:kubevirt:kubevirt-apiserver";
    assert_eq!(
        answer(Webhook::Validate, &new, "UPDATE", Some(&old), user)["allowed"],
        true
    );
    assert_eq!(
        answer(Webhook::Validate, &new, "UPDATE", Some(&old), "alice")["allowed"],
        false
    );
    new["spec"]["domain"]["cpu"] = json!({"cores": 3});
    assert_eq!(
        answer(Webhook::Validate, &new, "UPDATE", Some(&old), user)["allowed"],
        false
    );
}

#[test]
fn wrong_kind_and_garbage_are_handled() {
    let vm = fixture("vm-demo.yaml");
    let body = review_body("CREATE", &vm, None, "alice");
    let out = review(
        Webhook::Validate,
        "kubevirts",
        &body,
        &AdmissionConfig::default(),
    )
    .unwrap();
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(out["response"]["allowed"], false);
    assert!(review(
        Webhook::Validate,
        "kubevirts",
        b"nope",
        &AdmissionConfig::default()
    )
    .is_err());
}

#[test]
fn a_new_vmi_requests_its_guest_memory_over_the_clusters_memory_overcommit() {
    let mut vmi = fixture("vmi-demo.yaml");
    let domain = vmi["spec"]["domain"].as_object_mut().unwrap();
    domain.remove("resources");
    domain.insert("memory".into(), json!({"guest": "1Gi"}));
    let mutated = |operation: &str, percent: Option<u32>| {
        let references = References {
            memory_overcommit: percent,
            ..References::default()
        };
        let body = review_with(
            Webhook::Mutate,
            "virtualmachineinstances",
            &review_body(operation, &vmi, Some(&vmi), "alice"),
            &AdmissionConfig::default(),
            &references,
        )
        .unwrap();
        let out: Value = serde_json::from_slice(&body).unwrap();
        apply_patch(&vmi, &out["response"])["spec"]["domain"]["resources"]["requests"]["memory"]
            .clone()
    };
    assert_eq!(mutated("CREATE", Some(200)), json!("536870912"));
    assert_eq!(mutated("CREATE", Some(100)), json!("1Gi"));
    assert_eq!(mutated("CREATE", None), Value::Null);
    // Only where the VMI is created: its spec cannot change after.
    assert_eq!(mutated("UPDATE", Some(200)), Value::Null);
}
