//! `VirtualMachinePool` (`pool.kubevirt.io/v1beta1`): N VirtualMachines from one template,
//! named `<pool>-<index>`, scaled in and out and kept up to date with the template.
//!
//! KubeVirt serves the kind as `v1beta1` (stored) and `v1alpha1` (the same schema, still
//! served); [`crd`] gives both.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::other::Other;
use crate::vm::VirtualMachineSpec;

/// The finalizer the pool controller puts on a pool and on each of its VMs.
pub const FINALIZER: &str = "pool.kubevirt.io/finalizer";
/// The label on a pool's VMs and their VMIs that names the ControllerRevision (the pool's spec
/// at a generation) the VM was written from (`virtv1.VirtualMachinePoolRevisionName`).
pub const REVISION_LABEL: &str = "kubevirt.io/vm-pool-revision-name";

/// The desired pool (`v1beta1.VirtualMachinePoolSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pool.kubevirt.io",
    version = "v1beta1",
    derive = "PartialEq",
    doc = "N VirtualMachines from one template, named <pool>-<index> (pool.kubevirt.io).",
    kind = "VirtualMachinePool",
    plural = "virtualmachinepools",
    singular = "virtualmachinepool",
    namespaced,
    status = "VirtualMachinePoolStatus",
    shortname = "vmpool",
    shortname = "vmpools",
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
pub struct VirtualMachinePoolSpec {
    /// Number of VMs; 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Must match the template's labels; immutable.
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_template: Option<VirtualMachineTemplateSpec>,
    /// Stop creating, deleting and updating VMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_generation: Option<NameGeneration>,
    /// How many VMs a proactive update may have not Ready at once: a count or `N%` of the
    /// replicas (100% when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in_strategy: Option<ScaleInStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    #[serde(flatten)]
    pub other: Other,
}

/// A VM to create: labels and annotations plus its spec (`v1beta1.VirtualMachineTemplateSpec`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VirtualMachineTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserved_object")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<VirtualMachineSpec>,
}

/// Whether the index of a VM is appended to the ConfigMaps and Secrets its volumes name
/// (`v1beta1.VirtualMachinePoolNameGeneration`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NameGeneration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_index_to_config_map_refs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_index_to_secret_refs: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

/// How the pool removes VMs when it has too many (`v1beta1.VirtualMachinePoolScaleInStrategy`);
/// at most one is set, proactive when none is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleInStrategy {
    /// The pool never deletes a VM: the user scales in by deleting VMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmanaged: Option<Empty>,
    /// The pool deletes no VM itself; a VM deleted by someone else is not replaced while the
    /// pool has enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opportunistic: Option<OpportunisticScaleIn>,
    /// The pool deletes the excess VMs, picked by the selection policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proactive: Option<ProactiveScaleIn>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1beta1.VirtualMachinePoolOpportunisticScaleInStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpportunisticScaleIn {
    /// `Disabled` (the default), `Offline` or `Online`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1beta1.VirtualMachinePoolProactiveScaleInStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProactiveScaleIn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_policy: Option<SelectionPolicy>,
    /// `Disabled` (the default), `Offline` or `Online`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// Which VMs go first (`v1beta1.VirtualMachinePoolSelectionPolicy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectionPolicy {
    /// `AscendingOrder`, `DescendingOrder`, `Newest`, `Oldest` or `Random` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selectors: Option<Selectors>,
    #[serde(flatten)]
    pub other: Other,
}

/// Only the VMs whose VMI template matches are picked (`v1beta1.VirtualMachinePoolSelectors`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selectors {
    /// Against the labels of the VM's VMI template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Against the node selector of the VM's VMI template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector_requirement_matcher: Option<Vec<NodeSelectorRequirement>>,
    #[serde(flatten)]
    pub other: Other,
}

/// How the pool brings its VMs to a changed template (`v1beta1.VirtualMachinePoolUpdateStrategy`);
/// at most one is set, proactive when none is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// Neither VMs nor VMIs are touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmanaged: Option<Empty>,
    /// The VMs are rewritten; a running VMI keeps its old spec until it restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opportunistic: Option<Empty>,
    /// The VMs are rewritten and their outdated VMIs restarted, picked by the selection
    /// policy, at most `maxUnavailable` not Ready at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proactive: Option<ProactiveUpdate>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1beta1.VirtualMachinePoolProactiveUpdateStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProactiveUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_policy: Option<SelectionPolicy>,
    #[serde(flatten)]
    pub other: Other,
}

/// A strategy without settings (`unmanaged: {}`, `opportunistic: {}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Empty {
    #[serde(flatten)]
    pub other: Other,
}

/// Observed pool (`v1beta1.VirtualMachinePoolStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachinePoolStatus {
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

impl VirtualMachinePoolSpec {
    /// The labels of the template's VMs, which the selector must match.
    pub fn template_labels(&self) -> BTreeMap<String, String> {
        self.virtual_machine_template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }
}

/// The CRD: `v1beta1` stored, `v1alpha1` served with the same schema, as KubeVirt installs it.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = VirtualMachinePool::crd();
    let mut alpha = crd.spec.versions[0].clone();
    alpha.name = "v1alpha1".into();
    alpha.storage = false;
    crd.spec.versions.insert(0, alpha);
    crd
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::{validate_pool, validate_pool_update};

    fn pool(spec: serde_json::Value) -> VirtualMachinePool {
        let mut value = json!({
            "apiVersion": "pool.kubevirt.io/v1beta1",
            "kind": "VirtualMachinePool",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "virtualMachineTemplate": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"runStrategy": "Always", "template": {"spec": {
                        "domain": {"devices": {}, "memory": {"guest": "16Mi"}}}}}
                }
            }
        });
        if let (Some(base), Some(extra)) = (value["spec"].as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap()
    }

    fn fields(pool: &VirtualMachinePool) -> Vec<String> {
        validate_pool(pool)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn the_crd_serves_v1alpha1_and_stores_v1beta1_with_the_scale_subresource() {
        let crd = serde_json::to_value(crd()).unwrap();
        assert_eq!(
            crd["metadata"]["name"],
            "virtualmachinepools.pool.kubevirt.io"
        );
        assert_eq!(
            crd["spec"]["names"]["shortNames"],
            json!(["vmpool", "vmpools"])
        );
        let versions = crd["spec"]["versions"].as_array().unwrap();
        let served: Vec<_> = versions
            .iter()
            .map(|v| (v["name"].as_str().unwrap(), v["storage"].as_bool().unwrap()))
            .collect();
        assert_eq!(served, [("v1alpha1", false), ("v1beta1", true)]);
        for version in versions {
            assert_eq!(
                version["subresources"]["scale"]["labelSelectorPath"],
                ".status.labelSelector"
            );
        }
    }

    #[test]
    fn a_valid_pool_passes_and_a_selector_that_misses_the_template_is_refused() {
        assert!(validate_pool(&pool(json!({}))).is_ok());
        let other = pool(json!({"selector": {"matchLabels": {"app": "other"}}}));
        let errors = validate_pool(&other).unwrap_err();
        assert_eq!(errors[0].field, "spec.selector");
        assert_eq!(errors[0].message, "selector does not match labels.");
    }

    #[test]
    fn the_vm_template_is_validated_at_its_path() {
        let bad = pool(json!({"virtualMachineTemplate": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"runStrategy": "Sometimes", "template": {"spec": {
                "domain": {"devices": {"disks": [{"name": "testdisk"}]}}}}}
        }}));
        let got = fields(&bad);
        assert!(
            got.contains(&"spec.virtualMachineTemplate.spec.runStrategy".to_string()),
            "{got:?}"
        );
        assert!(
            got.contains(
                &"spec.virtualMachineTemplate.spec.template.spec.domain.devices.disks[0].name"
                    .to_string()
            ),
            "{got:?}"
        );
    }

    #[test]
    fn max_unavailable_strategies_and_state_preservation_are_checked() {
        let cases = [
            (json!({"maxUnavailable": 0}), "spec.maxUnavailable"),
            (json!({"maxUnavailable": "50"}), "spec.maxUnavailable"),
            (json!({"maxUnavailable": "150%"}), "spec.maxUnavailable"),
            (
                json!({"updateStrategy": {"unmanaged": {}, "opportunistic": {}}}),
                "spec.updateStrategy",
            ),
            (
                json!({"scaleInStrategy": {"proactive": {"statePreservation": "Offline"}}}),
                "spec.scaleInStrategy.proactive.statePreservation",
            ),
            (
                json!({"scaleInStrategy": {"proactive": {"selectionPolicy": {"sortPolicy": "Sideways"}}}}),
                "spec.scaleInStrategy.proactive.selectionPolicy.sortPolicy",
            ),
            (
                json!({"autohealing": {"startUpFailureThreshold": 2}}),
                "spec.autohealing",
            ),
            (json!({"replicas": -1}), "spec.replicas"),
        ];
        for (spec, field) in cases {
            assert_eq!(fields(&pool(spec.clone())), [field], "{spec}");
        }
        assert!(validate_pool(&pool(json!({"maxUnavailable": "25%"}))).is_ok());
    }

    #[test]
    fn the_selector_is_immutable() {
        let old = pool(json!({}));
        let mut new = old.clone();
        new.spec
            .selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert("tier".into(), "gold".into());
        if let Some(labels) = new
            .spec
            .virtual_machine_template
            .as_mut()
            .and_then(|t| t.metadata.as_mut())
            .and_then(|m| m.labels.as_mut())
        {
            labels.insert("tier".into(), "gold".into());
        }
        let errors = validate_pool_update(&old, &new).unwrap_err();
        assert_eq!(errors[0].message, "selector is immutable after creation.");
    }
}
