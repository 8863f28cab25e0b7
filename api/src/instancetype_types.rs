//! The types of `instancetype.kubevirt.io/v1beta1` that the `kubevirt.io` kinds use: the four
//! kinds ([`Kind`]) with their names and CRDs, which of a VM's two references names one
//! ([`Reference`]), the VM's `spec.instancetype` / `spec.preference` ([`Matcher`]) and its
//! `status.instancetypeRef` / `status.preferenceRef` ([`StatusRef`]), and KubeVirt's labels
//! and annotations.
//!
//! Only types and their names live here, below the `vm` module that holds them and the
//! `validation` module that checks them. What needs a VM, its defaults or its validation
//! (applying, expanding, finding, admitting) is the `instancetype` module's, which re-exports
//! all of this at its old paths.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::other::Other;
use crate::siblings::{Scope, Sibling, UnsupportedCondition, Version};

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
