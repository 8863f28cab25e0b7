use serde_json::json;

use super::*;

fn clone(spec: Value) -> VirtualMachineClone {
    serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": {"name": "c", "namespace": "ns", "uid": "clone-uid"},
        "spec": spec,
    }))
    .unwrap()
}

fn source(kind: &str, name: &str) -> Value {
    json!({"apiGroup": if kind == "VirtualMachine" { "kubevirt.io" } else { "snapshot.kubevirt.io" },
           "kind": kind, "name": name})
}

fn fields(errors: &[FieldError]) -> Vec<(&str, &str)> {
    errors
        .iter()
        .map(|e| (e.field.as_str(), e.message.as_str()))
        .collect()
}

#[test]
fn the_crd_has_kubevirts_names() {
    let crd = serde_json::to_value(crd()).unwrap();
    assert_eq!(
        crd["metadata"]["name"],
        "virtualmachineclones.clone.kubevirt.io"
    );
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        json!(["vmclone", "vmclones"])
    );
    let versions: Vec<&str> = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["v1alpha1", "v1beta1"]);
    assert_eq!(
        crd["spec"]["versions"][1]["subresources"],
        json!({"status": {}})
    );
}

#[test]
fn kubevirts_rules() {
    let good = clone(json!({"source": source("VirtualMachine", "vm"),
                            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"},
                            "labelFilters": ["*", "!secret/*"],
                            "newMacAddresses": {"default": "DE-AD-00-00-BE-AF", "other": ""},
                            "patches": [r#"{"op": "add", "path": "/metadata/labels/x", "value": "y"}"#]}));
    assert!(validate(&good).is_empty(), "{:?}", validate(&good));
    assert!(validate(&clone(
        json!({"source": source("VirtualMachineSnapshot", "snap")})
    ))
    .is_empty());
    let bad = clone(json!({
        "source": {"kind": "VirtualMachineInstance", "name": ""},
        "target": {"apiGroup": "kubevirt.io", "kind": "Pod", "name": "copy"},
        "annotationFilters": ["!", "a!b", "a*b"],
        "newMacAddresses": {"default": "zz"},
        "patches": ["{not json"],
        "volumeNamePolicy": "Keep",
    }));
    assert_eq!(
        fields(&validate(&bad)),
        [
            ("spec.annotations", "a negation character is not a valid filter"),
            ("spec.annotations", "spec.annotations filter a!b is invalid: cannot contain a negation character (!); FilterRules: NegationChar can be only used at the beginning of the filter"),
            ("spec.annotations", "spec.annotations filter a*b is invalid: cannot contain a wildcard character (*); FilterRules: WildcardChar can be only at the end of the filter"),
            ("spec.Source.Kind", "Source kind is not supported"),
            ("spec.Source.APIGroup", "Source's APIGroup cannot be empty"),
            ("spec.Source.Name", "Source's name cannot be empty"),
            ("spec.Target.Kind", "Target kind is not supported"),
            ("spec.newMacAddresses.default", "interface default has malformed MAC address (zz)."),
            ("spec.patches[0]", "patch is not valid JSON ({not json)"),
            ("spec.volumeNamePolicy", "\"Keep\" must be one of [\"RandomizeNames\", \"PrefixTargetName\"]"),
        ]
    );
    let same = clone(json!({"source": source("VirtualMachine", "vm"),
                            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"}}));
    assert_eq!(
        fields(&validate(&same)),
        [(
            "spec.target.name",
            "Target name cannot be equal to source name when both are VirtualMachines"
        )]
    );
    assert_eq!(
        fields(&validate(&clone(json!({})))),
        [("spec.Source", "Source cannot be nil")]
    );
}

#[test]
fn filters_keep_what_they_match_and_negations_take_back() {
    let map: BTreeMap<String, String> = [("app", "a"), ("team/x", "b"), ("secret/key", "c")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(filtered_out(&map, None).is_empty(), "no filters keep all");
    let filters = vec!["*".to_string(), "!secret/*".to_string()];
    assert_eq!(filtered_out(&map, Some(&filters)), ["secret/key"]);
    let only_app = vec!["app".to_string()];
    assert_eq!(
        filtered_out(&map, Some(&only_app)),
        ["secret/key", "team/x"]
    );
    assert_eq!(
        filtered_out(&map, Some(&[])),
        ["app", "secret/key", "team/x"]
    );
}

#[test]
fn patches_give_new_macs_drop_filtered_keys_and_end_with_the_users() {
    let vm: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm", "labels": {"app": "a", "secret/key": "s"},
                     "annotations": {"restore.kubevirt.io/lastRestoreUID": "r-1", "note": "n"}},
        "spec": {"template": {
            "metadata": {"labels": {"kubevirt.io/vm": "vm"}},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}, "macAddress": "02:00:00:00:00:01"},
                {"name": "second", "masquerade": {}}]}}}}},
    }))
    .unwrap();
    let spec = clone(json!({"source": source("VirtualMachine", "vm"),
                            "labelFilters": ["*", "!secret/*"],
                            "annotationFilters": ["note"],
                            "newMacAddresses": {"second": "02:00:00:00:00:09"},
                            "patches": ["{\"op\": \"add\", \"path\": \"/spec/x\", \"value\": 1}"]}))
    .spec;
    let patches: Vec<Value> = patches(&vm, &spec)
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    assert_eq!(
        patches,
        [
            json!({"op": "replace", "path": "/spec/template/spec/domain/devices/interfaces/0/macAddress", "value": ""}),
            json!({"op": "replace", "path": "/spec/template/spec/domain/devices/interfaces/1/macAddress", "value": "02:00:00:00:00:09"}),
            json!({"op": "remove", "path": "/metadata/labels/secret~1key"}),
            json!({"op": "add", "path": "/spec/x", "value": 1}),
        ]
    );
    let mut with_firmware = vm.clone();
    let mut value = serde_json::to_value(&with_firmware).unwrap();
    value["spec"]["template"]["spec"]["domain"]["firmware"] = json!({});
    with_firmware = serde_json::from_value(value).unwrap();
    let patches = patches_of(&with_firmware);
    assert!(patches.contains(
        &json!({"op": "replace", "path": "/spec/template/spec/domain/firmware/serial", "value": ""})
    ));
    assert_eq!(
        patches.last().unwrap(),
        &json!({"op": "replace", "path": "/spec/template/spec/domain/firmware/uuid", "value": ""})
    );
}

fn patches_of(vm: &VirtualMachine) -> Vec<Value> {
    patches(vm, &VirtualMachineCloneSpec::default())
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect()
}

#[test]
fn names() {
    let c = clone(json!({"source": source("VirtualMachine", "vm")}));
    assert_eq!(snapshot_name(&c), "tmp-snapshot-clone-uid");
    assert_eq!(restore_name(&c), "tmp-restore-clone-uid");
    assert_eq!(generated_target_name("vm", "ab1cd"), "vm-clone-ab1cd");
    assert_eq!(
        generated_target_name(&"v".repeat(250), "ab1cd"),
        "clone-object-ab1cd"
    );
}
