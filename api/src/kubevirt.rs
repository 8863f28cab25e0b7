//! `KubeVirt`: the CR that virt-operator installs Ferrovirt from.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::other::Other;

/// What to install and how to configure it (`v1.KubeVirtSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    derive = "PartialEq",
    doc = "The installation of Ferrovirt: virt-operator deploys the components from it (kubevirt.io/v1).",
    kind = "KubeVirt",
    plural = "kubevirts",
    singular = "kubevirt",
    namespaced,
    status = "KubeVirtStatus",
    shortname = "kv",
    shortname = "kvs",
    category = "all",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase")
)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<KubeVirtConfiguration>,
    /// Tag of the component images; the operator's own when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
    /// Registry of the component images; the operator's own when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_registry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// `RemoveWorkloads` (default) or `BlockUninstallIfWorkloadsExist`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall_strategy: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// Cluster-wide settings the components read (`v1.KubeVirtConfiguration`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub developer_configuration: Option<DeveloperConfiguration>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1.DeveloperConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeveloperConfiguration {
    /// Run every VM with QEMU TCG (software emulation) instead of KVM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_emulation: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feature_gates: Vec<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// Phases of an install, as KubeVirt names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum KubeVirtPhase {
    Deploying,
    Deployed,
    Deleting,
    Deleted,
}

/// `v1.KubeVirtStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<KubeVirtPhase>,
    /// Available, Progressing, Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_kube_virt_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_kube_virt_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_kube_virt_registry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_kube_virt_registry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(flatten)]
    pub other: Other,
}
