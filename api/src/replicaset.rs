//! `VirtualMachineInstanceReplicaSet`: N interchangeable VMIs from one template.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::other::Other;
use crate::vm::VirtualMachineInstanceTemplateSpec;

/// The desired replicas (`v1.VirtualMachineInstanceReplicaSetSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    derive = "PartialEq",
    doc = "N interchangeable VirtualMachineInstances from one template (kubevirt.io/v1).",
    kind = "VirtualMachineInstanceReplicaSet",
    plural = "virtualmachineinstancereplicasets",
    singular = "virtualmachineinstancereplicaset",
    namespaced,
    status = "VirtualMachineInstanceReplicaSetStatus",
    shortname = "vmirs",
    shortname = "vmirss",
    category = "all",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Current", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceReplicaSetSpec {
    /// Number of VMIs; 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Must match the template's labels.
    pub selector: LabelSelector,
    pub template: VirtualMachineInstanceTemplateSpec,
    /// Stop creating and deleting VMIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

impl VirtualMachineInstanceReplicaSetSpec {
    /// The labels of the template's VMIs (none when the template has no metadata), which the
    /// selector must match.
    pub fn template_labels(&self) -> BTreeMap<String, String> {
        self.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }
}

/// Observed replicas (`v1.VirtualMachineInstanceReplicaSetStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceReplicaSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// The selector as a string, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
