//! `instancetype.kubevirt.io/v1beta1`: instance types (the size of a VM: vCPUs and memory, with
//! its scheduling) and preferences (defaults for the rest of its hardware), namespaced and
//! cluster-wide, as KubeVirt has them.
//!
//! A VM names them in `spec.instancetype` and `spec.preference` ([`Matcher`]). virt-controller
//! finds what they name ([`Kind::of`]), stores a copy of the object in a ControllerRevision of
//! the VM's ([`revision_name`], [`revision_labels`], [`revision_data`]) and records it in the
//! VM's `status.instancetypeRef` / `status.preferenceRef` ([`StatusRef`]), so that the VM keeps
//! the size it was created with when the instance type changes; each VMI it starts gets the
//! stored spec applied ([`apply`]). virt-api checks a VM against them when it is admitted
//! (conflicts, the preference's requirements) and expands a VM with them (`expand-spec`).
//!
//! The objects are handled as JSON values: applying one writes KubeVirt's VMI fields, and a field
//! Ferrovirt does not run is then refused by the VMI's own validation at its path, as if the
//! user had written it.

pub mod apply;
#[cfg(feature = "client")]
pub mod find;
pub mod requirements;
pub mod validation;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::other::Other;
use crate::siblings::{Scope, Sibling, UnsupportedCondition, Version};
use crate::validation::FieldError;
use crate::vm::VirtualMachine;
use crate::vmi::VirtualMachineInstanceSpec;

/// The API group.
pub const GROUP: &str = "instancetype.kubevirt.io";
/// The one version KubeVirt serves and stores.
pub const VERSION: &str = "v1beta1";
/// `instancetype.kubevirt.io/v1beta1`.
pub const API_VERSION: &str = "instancetype.kubevirt.io/v1beta1";

/// The labels of a stored ControllerRevision, as KubeVirt writes them.
pub const LABEL_OBJECT_NAME: &str = "instancetype.kubevirt.io/object-name";
pub const LABEL_OBJECT_KIND: &str = "instancetype.kubevirt.io/object-kind";
pub const LABEL_OBJECT_UID: &str = "instancetype.kubevirt.io/object-uid";
pub const LABEL_OBJECT_GENERATION: &str = "instancetype.kubevirt.io/object-generation";
pub const LABEL_OBJECT_VERSION: &str = "instancetype.kubevirt.io/object-version";

/// The VMI annotations that name what a VMI was sized and shaped by.
pub const ANNOTATION_INSTANCETYPE: &str = "kubevirt.io/instancetype-name";
pub const ANNOTATION_CLUSTER_INSTANCETYPE: &str = "kubevirt.io/cluster-instancetype-name";
pub const ANNOTATION_PREFERENCE: &str = "kubevirt.io/preference-name";
pub const ANNOTATION_CLUSTER_PREFERENCE: &str = "kubevirt.io/cluster-preference-name";

/// The four kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Instancetype,
    ClusterInstancetype,
    Preference,
    ClusterPreference,
}

/// Which of a VM's two references: `spec.instancetype` or `spec.preference`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    Instancetype,
    Preference,
}

impl Reference {
    /// The field of the VM's spec (and, with `Ref`, of its status).
    pub fn field(self) -> &'static str {
        match self {
            Reference::Instancetype => "instancetype",
            Reference::Preference => "preference",
        }
    }

    /// KubeVirt's name of the matcher type, in its error messages.
    fn matcher_type(self) -> &'static str {
        match self {
            Reference::Instancetype => "InstancetypeMatcher",
            Reference::Preference => "PreferenceMatcher",
        }
    }
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Instancetype,
        Kind::ClusterInstancetype,
        Kind::Preference,
        Kind::ClusterPreference,
    ];

    /// The kind a matcher names: its `kind` (any case, singular or plural), the cluster-wide
    /// kind when empty; KubeVirt's message otherwise.
    pub fn of(reference: Reference, kind: Option<&str>) -> Result<Kind, String> {
        let kind = kind.unwrap_or_default();
        let lower = kind.to_ascii_lowercase();
        let found = Kind::ALL.into_iter().find(|k| {
            k.reference() == reference
                && (lower == k.sibling().singular || lower == k.sibling().plural)
        });
        match (found, lower.is_empty(), reference) {
            (Some(k), _, _) => Ok(k),
            (None, true, Reference::Instancetype) => Ok(Kind::ClusterInstancetype),
            (None, true, Reference::Preference) => Ok(Kind::ClusterPreference),
            (None, false, _) => Err(format!(
                "got unexpected kind in {}: {kind}",
                reference.matcher_type()
            )),
        }
    }

    pub fn reference(self) -> Reference {
        match self {
            Kind::Instancetype | Kind::ClusterInstancetype => Reference::Instancetype,
            Kind::Preference | Kind::ClusterPreference => Reference::Preference,
        }
    }

    pub fn namespaced(self) -> bool {
        matches!(self, Kind::Instancetype | Kind::Preference)
    }

    /// `VirtualMachineInstancetype`, ...
    pub fn name(self) -> &'static str {
        self.sibling().kind
    }

    /// `virtualmachineinstancetypes`, ...
    pub fn plural(self) -> &'static str {
        self.sibling().plural
    }

    /// The kind of the webhook URL and KubeVirt's webhook name (`<plural>-validator...`).
    pub fn of_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }

    /// The annotation a VMI started with this kind carries its name in.
    pub fn annotation(self) -> &'static str {
        match self {
            Kind::Instancetype => ANNOTATION_INSTANCETYPE,
            Kind::ClusterInstancetype => ANNOTATION_CLUSTER_INSTANCETYPE,
            Kind::Preference => ANNOTATION_PREFERENCE,
            Kind::ClusterPreference => ANNOTATION_CLUSTER_PREFERENCE,
        }
    }

    /// The names, scope and short names, as KubeVirt's CRD has them.
    pub fn sibling(self) -> &'static Sibling {
        &DESCRIPTIONS[self as usize]
    }

    /// The CRD: KubeVirt's names and scope, no status, and a schema that requires what
    /// KubeVirt's requires (an instance type's `spec.cpu.guest` and `spec.memory.guest`) and
    /// keeps the rest for the validating webhook to judge.
    pub fn crd(self) -> CustomResourceDefinition {
        let kept = |required: &[&str], properties: Value| {
            let mut schema = json!({
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": properties,
            });
            if !required.is_empty() {
                schema["required"] = json!(required);
            }
            schema
        };
        let spec = match self.reference() {
            Reference::Instancetype => kept(
                &["cpu", "memory"],
                json!({
                    "cpu": kept(&["guest"], json!({"guest": {"type": "integer", "format": "int32", "minimum": 0}})),
                    "memory": kept(&["guest"], json!({"guest": {"x-kubernetes-int-or-string": true}})),
                }),
            ),
            Reference::Preference => kept(&[], json!({})),
        };
        let mut schema = json!({
            "type": "object",
            "description": format!("{} ({API_VERSION}).", self.name()),
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": spec,
            },
            "required": ["spec"],
        });
        schema["properties"]["spec"]["description"] = json!(match self.reference() {
            Reference::Instancetype => "The vCPUs, memory and scheduling of the VMs that name it.",
            Reference::Preference => "Defaults for the hardware of the VMs that name it.",
        });
        let mut crd = serde_json::to_value(self.sibling().crd()).expect("a CRD is JSON");
        let version = &mut crd["spec"]["versions"][0];
        version["schema"]["openAPIV3Schema"] = schema;
        version
            .as_object_mut()
            .expect("a CRD version is an object")
            .remove("subresources");
        serde_json::from_value(crd).expect("the instancetype CRD is a CustomResourceDefinition")
    }
}

const ALL_CATEGORY: &[&str] = &["all"];
const V1BETA1: &[Version] = &[Version {
    name: VERSION,
    storage: true,
    deprecation_warning: None,
}];
/// Unused: these kinds are served, not refused, and have no status.
const NO_CONDITION: UnsupportedCondition = UnsupportedCondition {
    type_: "",
    status: "",
};

/// KubeVirt's names of the four kinds, in [`Kind`]'s order.
const DESCRIPTIONS: [Sibling; 4] = [
    Sibling {
        group: GROUP,
        kind: "VirtualMachineInstancetype",
        plural: "virtualmachineinstancetypes",
        singular: "virtualmachineinstancetype",
        scope: Scope::Namespaced,
        short_names: &["vminstancetype", "vminstancetypes", "vmf", "vmfs"],
        categories: ALL_CATEGORY,
        versions: V1BETA1,
        columns: &[],
        condition: NO_CONDITION,
    },
    Sibling {
        group: GROUP,
        kind: "VirtualMachineClusterInstancetype",
        plural: "virtualmachineclusterinstancetypes",
        singular: "virtualmachineclusterinstancetype",
        scope: Scope::Cluster,
        short_names: &[
            "vmclusterinstancetype",
            "vmclusterinstancetypes",
            "vmcf",
            "vmcfs",
        ],
        categories: &[],
        versions: V1BETA1,
        columns: &[],
        condition: NO_CONDITION,
    },
    Sibling {
        group: GROUP,
        kind: "VirtualMachinePreference",
        plural: "virtualmachinepreferences",
        singular: "virtualmachinepreference",
        scope: Scope::Namespaced,
        short_names: &["vmpref", "vmprefs", "vmp", "vmps"],
        categories: ALL_CATEGORY,
        versions: V1BETA1,
        columns: &[],
        condition: NO_CONDITION,
    },
    Sibling {
        group: GROUP,
        kind: "VirtualMachineClusterPreference",
        plural: "virtualmachineclusterpreferences",
        singular: "virtualmachineclusterpreference",
        scope: Scope::Cluster,
        short_names: &["vmcp", "vmcps"],
        categories: &[],
        versions: V1BETA1,
        columns: &[],
        condition: NO_CONDITION,
    },
];

/// The CRDs of the four kinds.
pub fn crds() -> Vec<CustomResourceDefinition> {
    Kind::ALL.into_iter().map(Kind::crd).collect()
}

/// A VM's `spec.instancetype` (`v1.InstancetypeMatcher`) or `spec.preference`
/// (`v1.PreferenceMatcher`): the same fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Matcher {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which kind `name` is (any case, singular or plural); the cluster-wide one when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A ControllerRevision of the VM's namespace holding the object to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_name: Option<String>,
    /// Inferring the name from a volume's labels (not supported by Ferrovirt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infer_from_volume: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infer_from_volume_failure_policy: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

impl Matcher {
    /// `name`, when set and not empty.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref().filter(|n| !n.is_empty())
    }

    /// `revisionName`, when set and not empty.
    pub fn revision_name(&self) -> Option<&str> {
        self.revision_name.as_deref().filter(|n| !n.is_empty())
    }
}

/// A VM's `status.instancetypeRef` / `status.preferenceRef` (`v1.InstancetypeStatusRef`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_revision_ref: Option<RevisionRef>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1.ControllerRevisionRef`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RevisionRef {
    pub name: String,
}

impl StatusRef {
    /// The stored revision's name, when there is one.
    pub fn revision(&self) -> Option<&str> {
        self.controller_revision_ref
            .as_ref()
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty())
    }
}

/// KubeVirt's name of the ControllerRevision that stores `object` for a VM:
/// `<vm>-<object>-v1beta1-<object uid>-<object generation>`.
pub fn revision_name(vm: &str, object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{vm}-{}-{VERSION}-{}-{}",
        meta["name"].as_str().unwrap_or_default(),
        meta["uid"].as_str().unwrap_or_default(),
        meta["generation"].as_i64().unwrap_or_default()
    )
}

/// The labels of the ControllerRevision that stores `object` of `kind`.
pub fn revision_labels(kind: Kind, object: &Value) -> BTreeMap<String, String> {
    let meta = &object["metadata"];
    let text = |field: &str| meta[field].as_str().unwrap_or_default().to_string();
    BTreeMap::from([
        (
            LABEL_OBJECT_GENERATION.to_string(),
            meta["generation"].as_i64().unwrap_or_default().to_string(),
        ),
        (LABEL_OBJECT_KIND.to_string(), kind.name().to_string()),
        (LABEL_OBJECT_NAME.to_string(), text("name")),
        (LABEL_OBJECT_UID.to_string(), text("uid")),
        (LABEL_OBJECT_VERSION.to_string(), VERSION.to_string()),
    ])
}

/// What a ControllerRevision stores of `object`: the whole object with its apiVersion and kind,
/// its spec as it is, and its metadata without labels, annotations, finalizers, owners and
/// managed fields.
pub fn revision_data(kind: Kind, object: &Value) -> Value {
    let mut data = object.clone();
    data["apiVersion"] = json!(API_VERSION);
    data["kind"] = json!(kind.name());
    if let Some(meta) = data.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
        ] {
            meta.remove(field);
        }
    }
    data
}

/// The spec a ControllerRevision's `data` stores, if it holds an object of `reference`'s kinds.
pub fn spec_of_revision(reference: Reference, data: &Value) -> Result<Value, String> {
    let kind = data["kind"].as_str().unwrap_or_default();
    let api_version = data["apiVersion"].as_str().unwrap_or_default();
    let known = Kind::ALL
        .into_iter()
        .any(|k| k.reference() == reference && k.name() == kind);
    if !known || api_version != API_VERSION {
        return Err(format!(
            "unexpected type in ControllerRevision: {api_version} {kind}"
        ));
    }
    Ok(data.get("spec").cloned().unwrap_or_else(|| json!({})))
}

/// A VMI spec (of a VMI at `path` `spec`, or of a VM's template at `spec.template.spec`) with
/// the instance type and the preference applied, KubeVirt's way: the disks of volumes and the
/// default interface first, so that the preference shapes them too. The VMI defaults are not
/// applied. On conflicts, their paths.
pub fn apply_to_spec(
    path: &str,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
    spec: &VirtualMachineInstanceSpec,
    annotations: &mut BTreeMap<String, String>,
) -> Result<VirtualMachineInstanceSpec, Vec<String>> {
    let mut spec = spec.clone();
    crate::defaults::default_devices(&mut spec);
    let mut value = serde_json::to_value(&spec).expect("a VMI spec is JSON");
    apply::apply(path, instancetype, preference, &mut value, annotations)?;
    serde_json::from_value(value).map_err(|e| vec![format!("{path}: {e}")])
}

/// The VM with its instance type and preference written into it, as KubeVirt's `expand-spec`
/// answers it and its `expand` reference policy stores it: the template with both applied and
/// the VMI defaults, and neither the references nor their status. A VM that names neither is
/// returned as it is. On conflicts, KubeVirt's message.
pub fn expand_vm(
    vm: &VirtualMachine,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
) -> Result<VirtualMachine, String> {
    if !names_any(vm) {
        return Ok(vm.clone());
    }
    let mut expanded = vm.clone();
    let template = &mut expanded.spec.template;
    if let Some(spec) = template.spec.as_mut() {
        let meta = template.metadata.get_or_insert_with(Default::default);
        let mut annotations = meta.annotations.clone().unwrap_or_default();
        let mut applied = apply_to_spec(
            "spec.template.spec",
            instancetype,
            preference,
            spec,
            &mut annotations,
        )
        .map_err(|paths| apply::conflict_message(&paths))?;
        crate::defaults::default_vmi_spec(&mut applied);
        *spec = applied;
        meta.annotations = (!annotations.is_empty()).then_some(annotations);
    }
    expanded.spec.instancetype = None;
    expanded.spec.preference = None;
    if let Some(status) = expanded.status.as_mut() {
        status.instancetype_ref = None;
        status.preference_ref = None;
    }
    Ok(expanded)
}

/// Whether a VM names an instance type or a preference.
pub fn names_any(vm: &VirtualMachine) -> bool {
    vm.spec.instancetype.is_some() || vm.spec.preference.is_some()
}

/// Validates a VM as virt-api admits it, with what its references were found to be (`None` for
/// one that names nothing or was not found): with an instance type or a preference the VM is
/// judged as it will run, with both applied and the VMI defaults, after KubeVirt's conflict and
/// requirements checks. A VM whose instance type is not found yet is admitted without memory
/// (the instance type will give it; virt-controller waits for it, and the VMI is validated
/// when it starts).
pub fn validate_vm(
    vm: &VirtualMachine,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
) -> Result<(), Vec<FieldError>> {
    let mut expanded = vm.clone();
    let template = &mut expanded.spec.template;
    if let Some(spec) = template.spec.as_mut() {
        if instancetype.is_some() || preference.is_some() {
            let path = "spec.template.spec";
            let mut annotations = template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.clone())
                .unwrap_or_default();
            match apply_to_spec(path, instancetype, preference, spec, &mut annotations) {
                Ok(applied) => *spec = applied,
                Err(paths) => {
                    return Err(paths
                        .iter()
                        .map(|p| {
                            FieldError::invalid(
                                crate::validation::Path::root(p),
                                apply::conflict_message(std::slice::from_ref(p)),
                            )
                        })
                        .collect())
                }
            }
            crate::defaults::default_vmi_spec(spec);
            let value = serde_json::to_value(&*spec).expect("a VMI spec is JSON");
            if let Err(unmet) = requirements::check_requirements(instancetype, preference, &value) {
                return Err(vec![FieldError::invalid(
                    crate::validation::Path::root(&unmet.field),
                    format!(
                        "failure checking preference requirements: {}",
                        unmet.message
                    ),
                )]);
            }
        } else if vm.spec.instancetype.is_some() {
            let memory = spec.domain.memory.get_or_insert_with(Default::default);
            let resources = spec.domain.resources.as_ref();
            let given = memory.guest.is_some()
                || resources.is_some_and(|r| {
                    [&r.requests, &r.limits]
                        .iter()
                        .any(|m| m.as_ref().is_some_and(|m| m.contains_key("memory")))
                });
            if !given {
                memory.guest = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                    "1Gi".to_string(),
                ));
            }
        }
    }
    crate::validation::validate_vm(&expanded)
}

#[cfg(test)]
mod tests;
