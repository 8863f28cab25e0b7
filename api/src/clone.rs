//! `clone.kubevirt.io/v1beta1`: `VirtualMachineClone`, a copy of a VM (or of a VM snapshot)
//! under another name, as KubeVirt has it.
//!
//! virt-controller clones through the snapshot kinds ([`crate::snapshot`]): a temporary
//! snapshot of the source VM (`tmp-snapshot-<clone uid>`), then a restore of it into the
//! target (`tmp-restore-<clone uid>`) with the clone's [`patches`]: new MAC addresses, a new
//! SMBIOS serial, no firmware UUID, the labels and annotations its filters leave out removed,
//! and the user's own patches. Both temporary objects go when the clone is done.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::condition::Condition;
use crate::other::{reject_other, Other};
use crate::siblings::{Column, Scope, Sibling, UnsupportedCondition, Version};
use crate::snapshot::ObjectReference;
use crate::validation::{FieldError, Path};
use crate::vm::VirtualMachine;

/// The API group.
pub const GROUP: &str = "clone.kubevirt.io";
/// The phases of a clone.
pub const SNAPSHOT_IN_PROGRESS: &str = "SnapshotInProgress";
pub const RESTORE_IN_PROGRESS: &str = "RestoreInProgress";
pub const CREATING_TARGET_VM: &str = "CreatingTargetVM";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";

/// KubeVirt's message when the `Snapshot` gate is off.
pub const GATE_OFF: &str = "snapshot feature gate is not enabled";

/// A clone (`v1beta1.VirtualMachineCloneSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "clone.kubevirt.io",
    version = "v1beta1",
    kind = "VirtualMachineClone",
    plural = "virtualmachineclones",
    namespaced,
    derive = "PartialEq",
    status = "VirtualMachineCloneStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineCloneSpec {
    /// A `VirtualMachine` or a `VirtualMachineSnapshot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ObjectReference>,
    /// A `VirtualMachine`; named `<source>-clone-<random>` when no name is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<ObjectReference>,
    /// Which of the source's annotations and labels the clone keeps (all when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_filters: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_filters: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<TemplateFilters>,
    /// Interface name to MAC address; interfaces not named get none (a new one is made).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub new_mac_addresses: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_s_m_bios_serial: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_name_policy: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// The filters of the VMI template's labels and annotations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateFilters {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_filters: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_filters: Option<Vec<String>>,
}

/// `v1beta1.VirtualMachineCloneStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineCloneStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_name: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// KubeVirt's names, versions and columns of the kind.
pub const DESCRIPTION: Sibling = Sibling {
    group: GROUP,
    kind: "VirtualMachineClone",
    plural: "virtualmachineclones",
    singular: "virtualmachineclone",
    scope: Scope::Namespaced,
    short_names: &["vmclone", "vmclones"],
    categories: &["all"],
    versions: &[
        Version {
            name: "v1alpha1",
            storage: false,
            deprecation_warning: None,
        },
        Version {
            name: "v1beta1",
            storage: true,
            deprecation_warning: None,
        },
    ],
    columns: &[
        Column {
            name: "Phase",
            type_: "string",
            json_path: ".status.phase",
        },
        Column {
            name: "SourceVirtualMachine",
            type_: "string",
            json_path: ".spec.source.name",
        },
        Column {
            name: "TargetVirtualMachine",
            type_: "string",
            json_path: ".spec.target.name",
        },
    ],
    condition: UnsupportedCondition {
        type_: "",
        status: "",
    },
};

/// The CRD: KubeVirt's names, versions, columns and status subresource; `spec` and `status`
/// kept whole for the webhook to judge.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(DESCRIPTION.crd()).expect("a CRD is JSON");
    for version in crd["spec"]["versions"]
        .as_array_mut()
        .expect("a CRD has versions")
    {
        let schema = &mut version["schema"]["openAPIV3Schema"];
        schema["description"] = json!("A copy of a VirtualMachine or of a VirtualMachineSnapshot under another name (clone.kubevirt.io).");
        schema["required"] = json!(["spec"]);
        schema["properties"]["spec"]["required"] = json!(["source"]);
        schema["properties"]["spec"]["description"] = json!("KubeVirt's spec of the kind.");
        schema["properties"]["status"]["description"] =
            json!("KubeVirt's status of the kind, written by virt-controller.");
    }
    serde_json::from_value(crd).expect("the clone CRD is a CustomResourceDefinition")
}

/// The temporary snapshot and restore of a clone.
pub fn snapshot_name(clone: &VirtualMachineClone) -> String {
    format!(
        "tmp-snapshot-{}",
        clone.metadata.uid.as_deref().unwrap_or_default()
    )
}
pub fn restore_name(clone: &VirtualMachineClone) -> String {
    format!(
        "tmp-restore-{}",
        clone.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// KubeVirt's name of a target the clone does not name: `<source>-clone-<5 random>`; `random`
/// supplies the suffix's characters.
pub fn generated_target_name(source: &str, random: &str) -> String {
    let base = format!("{source}-clone");
    let base = if base.len() > 252 {
        "clone-object".to_string()
    } else {
        base
    };
    format!("{base}-{random}")
}

/// A clone with the `Snapshot` gate on: KubeVirt's rules (`vmclone-admitter`), with its field
/// paths (`spec.Source.Kind` and so on, as KubeVirt writes them).
pub fn validate(clone: &VirtualMachineClone) -> Vec<FieldError> {
    let spec = &clone.spec;
    let mut errors = Vec::new();
    let filters = [
        (&spec.annotation_filters, "spec.annotations"),
        (&spec.label_filters, "spec.labels"),
        (
            &spec
                .template
                .as_ref()
                .and_then(|t| t.annotation_filters.clone()),
            "spec.template.annotations",
        ),
        (
            &spec.template.as_ref().and_then(|t| t.label_filters.clone()),
            "spec.template.labels",
        ),
    ];
    for (list, field) in filters {
        for filter in list.iter().flatten() {
            check_filter(filter, field, &mut errors);
        }
    }
    let source_kinds = ["VirtualMachine", "VirtualMachineSnapshot"];
    match &spec.source {
        None => errors.push(FieldError::invalid(
            Path::root("spec.Source"),
            "Source cannot be nil",
        )),
        Some(source) => {
            if !source_kinds.contains(&source.kind.as_str()) {
                errors.push(FieldError::invalid(
                    Path::root("spec.Source.Kind"),
                    "Source kind is not supported",
                ));
            }
            if source.api_group.as_deref().unwrap_or_default().is_empty() {
                errors.push(FieldError::invalid(
                    Path::root("spec.Source.APIGroup"),
                    "Source's APIGroup cannot be empty",
                ));
            }
            if source.kind.is_empty() {
                errors.push(FieldError::invalid(
                    Path::root("spec.Source"),
                    "Source's Kind cannot be empty",
                ));
            }
            if source.name.is_empty() {
                errors.push(FieldError::invalid(
                    Path::root("spec.Source.Name"),
                    "Source's name cannot be empty",
                ));
            }
        }
    }
    if let Some(target) = &spec.target {
        if target.kind != "VirtualMachine" {
            errors.push(FieldError::invalid(
                Path::root("spec.Target.Kind"),
                "Target kind is not supported",
            ));
        }
        let same = spec
            .source
            .as_ref()
            .is_some_and(|s| s.kind == "VirtualMachine" && s.name == target.name);
        if same && target.kind == "VirtualMachine" {
            errors.push(FieldError::invalid(
                Path::root("spec").child("target").child("name"),
                "Target name cannot be equal to source name when both are VirtualMachines",
            ));
        }
    }
    for (interface, mac) in &spec.new_mac_addresses {
        if !mac.is_empty() && crate::domain::parse_mac_address(mac).is_none() {
            errors.push(FieldError::invalid(
                Path::root("spec").child("newMacAddresses").child(interface),
                format!("interface {interface} has malformed MAC address ({mac})."),
            ));
        }
    }
    for (i, patch) in spec.patches.iter().enumerate() {
        if serde_json::from_str::<Value>(patch).is_err() {
            errors.push(FieldError::invalid(
                Path::root("spec").child("patches").index(i),
                format!("patch is not valid JSON ({patch})"),
            ));
        }
    }
    if let Some(policy) = &spec.volume_name_policy {
        if !["RandomizeNames", "PrefixTargetName"].contains(&policy.as_str()) {
            errors.push(FieldError::invalid(
                Path::root("spec").child("volumeNamePolicy"),
                format!("{policy:?} must be one of [\"RandomizeNames\", \"PrefixTargetName\"]"),
            ));
        }
    }
    reject_other(
        &spec.other,
        "v1beta1.VirtualMachineCloneSpec",
        &Path::root("spec"),
        &mut errors,
    );
    errors
}

/// KubeVirt's filter rules: `!` only first, `*` only last, a lone `!` is no filter.
fn check_filter(filter: &str, field: &str, errors: &mut Vec<FieldError>) {
    if filter.len() <= 1 {
        if filter == "!" {
            errors.push(FieldError::invalid(
                Path::root(field),
                "a negation character is not a valid filter",
            ));
        }
        return;
    }
    let pattern = |what: &str, c: &str, rule: &str| {
        format!("{field} filter {filter} is invalid: cannot contain a {what} character ({c}); FilterRules: {rule}")
    };
    if filter[1..].contains('!') {
        errors.push(FieldError::invalid(
            Path::root(field),
            pattern(
                "negation",
                "!",
                "NegationChar can be only used at the beginning of the filter",
            ),
        ));
    }
    if filter[..filter.len() - 1].contains('*') {
        errors.push(FieldError::invalid(
            Path::root(field),
            pattern(
                "wildcard",
                "*",
                "WildcardChar can be only at the end of the filter",
            ),
        ));
    }
}

/// The keys of `map` a filter list does not keep (KubeVirt's `addRemovePatchesFromFilter`):
/// without filters every key stays; `*` keeps all, other filters are regular expressions
/// searched in the key, `!` filters take keys back out.
pub fn filtered_out(map: &BTreeMap<String, String>, filters: Option<&[String]>) -> Vec<String> {
    let Some(filters) = filters else {
        return Vec::new();
    };
    let compile = |f: &str| regex::Regex::new(f).ok();
    let keep: Vec<regex::Regex> = filters
        .iter()
        .filter(|f| !f.starts_with('!'))
        .filter_map(|f| compile(if f == "*" { ".*" } else { f }))
        .collect();
    let drop: Vec<regex::Regex> = filters
        .iter()
        .filter_map(|f| f.strip_prefix('!'))
        .filter_map(compile)
        .collect();
    map.keys()
        .filter(|key| {
            let kept =
                keep.iter().any(|r| r.is_match(key)) && !drop.iter().any(|r| r.is_match(key));
            !kept
        })
        .cloned()
        .collect()
}

/// `~` and `/` escaped for a JSON pointer.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The patches the clone's restore applies to the new VM (KubeVirt's `generatePatches`), then
/// the clone's own.
pub fn patches(source: &VirtualMachine, spec: &VirtualMachineCloneSpec) -> Vec<String> {
    let mut out: Vec<Value> = Vec::new();
    let template = source.spec.template.spec.as_ref();
    if let Some(template) = template {
        for (i, interface) in template.domain.devices.interfaces.iter().enumerate() {
            let mac = spec
                .new_mac_addresses
                .get(&interface.name)
                .cloned()
                .unwrap_or_default();
            out.push(json!({"op": "replace",
                            "path": format!("/spec/template/spec/domain/devices/interfaces/{i}/macAddress"),
                            "value": mac}));
        }
    }
    let firmware = serde_json::to_value(source)
        .ok()
        .map(|v| v["spec"]["template"]["spec"]["domain"]["firmware"].clone())
        .filter(|f| !f.is_null());
    if firmware.is_some() {
        out.push(
            json!({"op": "replace", "path": "/spec/template/spec/domain/firmware/serial",
                        "value": spec.new_s_m_bios_serial.clone().unwrap_or_default()}),
        );
    }
    let removals =
        |map: Option<&BTreeMap<String, String>>, filters: Option<&Vec<String>>, base: &str| {
            filtered_out(map.unwrap_or(&BTreeMap::new()), filters.map(Vec::as_slice))
                .into_iter()
                .map(|key| json!({"op": "remove", "path": format!("{base}/{}", escape(&key))}))
                .collect::<Vec<_>>()
        };
    out.extend(removals(
        source.metadata.labels.as_ref(),
        spec.label_filters.as_ref(),
        "/metadata/labels",
    ));
    let mut annotations = source.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(crate::snapshot::LAST_RESTORE_ANNOTATION);
    out.extend(removals(
        Some(&annotations),
        spec.annotation_filters.as_ref(),
        "/metadata/annotations",
    ));
    let template_meta = source.spec.template.metadata.as_ref();
    let template_filters = spec.template.as_ref();
    out.extend(removals(
        template_meta.and_then(|m| m.labels.as_ref()),
        template_filters.and_then(|t| t.label_filters.as_ref()),
        "/spec/template/metadata/labels",
    ));
    out.extend(removals(
        template_meta.and_then(|m| m.annotations.as_ref()),
        template_filters.and_then(|t| t.annotation_filters.as_ref()),
        "/spec/template/metadata/annotations",
    ));
    if firmware.is_some() {
        out.push(json!({"op": "replace", "path": "/spec/template/spec/domain/firmware/uuid", "value": ""}));
    }
    let mut patches: Vec<String> = out.iter().map(Value::to_string).collect();
    patches.extend(spec.patches.iter().cloned());
    patches
}

#[cfg(test)]
#[path = "clone_tests.rs"]
mod tests;
