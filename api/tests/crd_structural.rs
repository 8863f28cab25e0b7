//! The generated CRDs against the apiextensions.k8s.io/v1 rules that can be checked offline:
//! structural schemas (every node typed unless it preserves unknown fields, no `$ref`, value
//! validations only inside `anyOf`/`allOf`/`oneOf`/`not`, properties and additionalProperties
//! exclusive), names and short names as KubeVirt's, printer columns that point at real fields,
//! and descriptions that make `kubectl explain` useful.

use serde_json::Value;

fn crds() -> Vec<Value> {
    api::crd::all()
        .into_iter()
        .map(|crd| serde_json::to_value(crd).expect("CRD serialises"))
        .collect()
}

/// The CRDs of the kinds Ferrovirt implements (typed schemas), without the siblings.
fn implemented() -> Vec<Value> {
    crds()
        .into_iter()
        .filter(|crd| {
            api::siblings::find(
                crd["spec"]["group"].as_str().unwrap_or_default(),
                crd["spec"]["names"]["kind"].as_str().unwrap_or_default(),
            )
            .is_none()
        })
        .collect()
}

fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

/// Collects structural-schema violations of `node` at `path`.
fn check_structural(node: &Value, path: &str, in_junction: bool, problems: &mut Vec<String>) {
    let Some(object) = node.as_object() else {
        problems.push(format!("{path}: schema is not an object"));
        return;
    };
    let preserves = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let int_or_string = object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    for forbidden in ["$ref", "definitions", "$defs"] {
        if object.contains_key(forbidden) {
            problems.push(format!("{path}: has {forbidden}"));
        }
    }
    if in_junction {
        for key in [
            "type",
            "additionalProperties",
            "description",
            "default",
            "nullable",
        ] {
            if object.contains_key(key) {
                problems.push(format!("{path}: {key} inside anyOf/allOf/oneOf/not"));
            }
        }
    } else if !object.contains_key("type") && !preserves && !int_or_string {
        problems.push(format!("{path}: no type"));
    }
    if let Some(Value::String(t)) = object.get("type") {
        if !["object", "array", "string", "integer", "number", "boolean"].contains(&t.as_str()) {
            problems.push(format!("{path}: type {t:?}"));
        }
    } else if let Some(t) = object.get("type") {
        problems.push(format!("{path}: type must be one string, is {t}"));
    }
    if object.contains_key("properties")
        && object
            .get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(false))
    {
        problems.push(format!("{path}: both properties and additionalProperties"));
    }
    if let Some(Value::Object(properties)) = object.get("properties") {
        for (name, child) in properties {
            check_structural(child, &format!("{path}.{name}"), in_junction, problems);
        }
    }
    if let Some(items) = object.get("items") {
        check_structural(items, &format!("{path}[]"), in_junction, problems);
    }
    if let Some(additional @ Value::Object(_)) = object.get("additionalProperties") {
        check_structural(additional, &format!("{path}{{}}"), in_junction, problems);
    }
    for junction in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(branches)) = object.get(junction) {
            for (i, branch) in branches.iter().enumerate() {
                check_structural(branch, &format!("{path}.{junction}[{i}]"), true, problems);
            }
        }
    }
    if let Some(not) = object.get("not") {
        check_structural(not, &format!("{path}.not"), true, problems);
    }
}

#[test]
fn schemas_are_structural() {
    let mut problems = Vec::new();
    for crd in crds() {
        let name = crd["metadata"]["name"].as_str().unwrap().to_string();
        let schema = schema_of(&crd);
        assert_eq!(schema["type"], "object", "{name}: root is an object");
        check_structural(schema, &name, false, &mut problems);
        if let Some(metadata) = schema["properties"].get("metadata") {
            let keys: Vec<_> = metadata.as_object().unwrap().keys().cloned().collect();
            assert!(
                keys.iter().all(|k| k == "type"),
                "{name}: root metadata may only say it is an object, has {keys:?}"
            );
        }
    }
    assert!(
        problems.is_empty(),
        "not structural:\n{}",
        problems.join("\n")
    );
}

#[test]
fn names_and_subresources_are_kubevirts() {
    let want = [
        ("kubevirts.kubevirt.io", "KubeVirt", vec!["kv", "kvs"]),
        (
            "virtualmachines.kubevirt.io",
            "VirtualMachine",
            vec!["vm", "vms"],
        ),
        (
            "virtualmachineinstances.kubevirt.io",
            "VirtualMachineInstance",
            vec!["vmi", "vmis"],
        ),
        (
            "virtualmachineinstancemigrations.kubevirt.io",
            "VirtualMachineInstanceMigration",
            vec!["vmim", "vmims"],
        ),
        (
            "virtualmachineinstancereplicasets.kubevirt.io",
            "VirtualMachineInstanceReplicaSet",
            vec!["vmirs", "vmirss"],
        ),
    ];
    let crds: Vec<Value> = implemented()
        .into_iter()
        .filter(|crd| crd["spec"]["group"] == "kubevirt.io")
        .collect();
    assert_eq!(crds.len(), want.len());
    assert_eq!(
        self::crds().len(),
        want.len()
            + 2
            + api::instancetype::Kind::ALL.len()
            + api::snapshot::Kind::ALL.len()
            + 1
            + api::siblings::ALL.len(),
        "the pool, the migration policy, the instance type, preference, snapshot and clone kinds and every sibling are installed too"
    );
    for (crd, (name, kind, short)) in crds.iter().zip(want) {
        assert_eq!(crd["metadata"]["name"], name);
        assert_eq!(crd["spec"]["group"], "kubevirt.io");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["names"]["shortNames"], serde_json::json!(short));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(version["served"], true);
        assert_eq!(version["storage"], true);
        assert!(
            version["subresources"]["status"].is_object(),
            "{name}: status subresource"
        );
    }
    let rs = &crds[4]["spec"]["versions"][0]["subresources"]["scale"];
    assert_eq!(rs["specReplicasPath"], ".spec.replicas");
}

/// Walks a printer column's JSONPath (`.status.conditions[?(@.type=='Ready')].status`) through
/// the schema.
fn resolves(schema: &Value, json_path: &str) -> bool {
    let mut node = schema;
    let mut rest = json_path;
    while let Some(stripped) = rest.strip_prefix('.') {
        let end = stripped.find(['.', '[']).unwrap_or(stripped.len());
        let field = &stripped[..end];
        rest = &stripped[end..];
        if field == "metadata" && node == schema {
            return true;
        }
        if node["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
            // A sibling's spec and status: any field may be there.
            return true;
        }
        node = match node["properties"].get(field) {
            Some(child) => child,
            None => return false,
        };
        if let Some(after) = rest.strip_prefix('[') {
            let Some(close) = after.find(']') else {
                return false;
            };
            rest = &after[close + 1..];
            node = &node["items"];
        }
    }
    rest.is_empty()
}

#[test]
fn printer_columns_point_at_fields() {
    for crd in crds() {
        let schema = schema_of(&crd);
        let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        // Some of KubeVirt's sibling kinds (presets) have no columns, nor do its MigrationPolicy
        // and its instance types and preferences.
        let sibling = api::siblings::find(
            crd["spec"]["group"].as_str().unwrap(),
            crd["spec"]["names"]["kind"].as_str().unwrap(),
        )
        .is_some()
            || crd["spec"]["names"]["kind"] == "MigrationPolicy"
            || crd["spec"]["group"] == api::instancetype::GROUP;
        assert!(
            sibling || !columns.is_empty(),
            "{}: no printer columns",
            crd["metadata"]["name"]
        );
        for column in columns {
            let path = column["jsonPath"].as_str().unwrap();
            assert!(
                resolves(schema, path),
                "{}: {path} is not in the schema",
                crd["metadata"]["name"]
            );
        }
    }
    let vmi = &crds()[2];
    let names: Vec<_> = vmi["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "Age",
            "Phase",
            "IP",
            "NodeName",
            "Ready",
            "Live-Migratable",
            "Paused"
        ]
    );
}

#[test]
fn kubectl_explain_has_descriptions() {
    let vm = &crds()[1];
    let domain = &schema_of(vm)["properties"]["spec"]["properties"]["template"]["properties"]
        ["spec"]["properties"]["domain"];
    assert!(domain["description"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));
    for field in ["cpu", "memory", "resources", "firmware", "devices"] {
        let child = &domain["properties"][field];
        assert!(child.is_object(), "domain.{field} is in the schema");
        assert!(
            child["description"].as_str().is_some_and(|d| !d.is_empty()),
            "domain.{field} has a description"
        );
    }
    let disks = &domain["properties"]["devices"]["properties"]["disks"];
    assert_eq!(disks["type"], "array");
    assert!(disks["items"]["properties"]["name"].is_object());
}
