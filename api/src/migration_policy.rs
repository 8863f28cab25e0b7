//! `MigrationPolicy` (`migrations.kubevirt.io/v1alpha1`, cluster-scoped): migration settings for
//! the VMIs its selectors pick, over the KubeVirt CR's `spec.configuration.migrations`.
//!
//! virt-controller picks the policy when a migration starts ([`match_policy`], KubeVirt's
//! rule: the matching policy with the most matching labels, VMI labels breaking ties, then the
//! lowest name) and writes the settings in force ([`apply`]) and the policy's name into the
//! VMI's `status.migrationState`, where virt-handler reads them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::kubevirt::MigrationConfiguration;
use crate::other::Other;

/// The settings a policy overrides, and which VMIs it applies to
/// (`v1alpha1.MigrationPolicySpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "migrations.kubevirt.io",
    version = "v1alpha1",
    derive = "PartialEq",
    doc = "Migration settings for the VMIs its selectors pick (migrations.kubevirt.io).",
    kind = "MigrationPolicy",
    plural = "migrationpolicies",
    singular = "migrationpolicy",
    status = "MigrationPolicyStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct MigrationPolicySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selectors: Option<Selectors>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_auto_converge: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_per_migration: Option<Quantity>,
    #[serde(
        default,
        rename = "completionTimeoutPerGiB",
        skip_serializing_if = "Option::is_none"
    )]
    pub completion_timeout_per_gib: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_post_copy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_workload_disruption: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_downtime_ms: Option<i64>,
    #[serde(flatten)]
    pub other: Other,
}

/// Which VMIs a policy applies to (`v1alpha1.Selectors`): every label of each map must be on
/// the VMI (resp. its namespace).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selectors {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_instance_selector: Option<BTreeMap<String, String>>,
    #[serde(flatten)]
    pub other: Other,
}

/// KubeVirt's `v1alpha1.MigrationPolicyStatus` has no fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MigrationPolicyStatus {
    #[serde(flatten)]
    pub other: Other,
}

/// How well a policy matches: (labels matched in all, VMI labels matched), compared in that
/// order; `None` when a selector label is missing.
fn score(
    policy: &MigrationPolicy,
    vmi_labels: &BTreeMap<String, String>,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<(usize, usize)> {
    let selectors = policy.spec.selectors.as_ref()?;
    let count = |wanted: &Option<BTreeMap<String, String>>, have: &BTreeMap<String, String>| {
        let wanted = wanted.as_ref().map(|w| w.iter()).into_iter().flatten();
        let mut n = 0;
        for (key, value) in wanted {
            if have.get(key) != Some(value) {
                return None;
            }
            n += 1;
        }
        Some(n)
    };
    let vmi = count(&selectors.virtual_machine_instance_selector, vmi_labels)?;
    let namespace = count(&selectors.namespace_selector, namespace_labels)?;
    Some((vmi + namespace, vmi))
}

/// The policy that applies to a VMI with `vmi_labels` in a namespace with `namespace_labels`:
/// among those whose selectors match, the one with the most matching labels (VMI labels count
/// first on a tie), then the lowest name. A policy without selectors matches nothing.
pub fn match_policy<'a>(
    policies: &'a [MigrationPolicy],
    vmi_labels: &BTreeMap<String, String>,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<&'a MigrationPolicy> {
    policies
        .iter()
        .filter_map(|p| Some((score(p, vmi_labels, namespace_labels)?, p)))
        .max_by(|(a, pa), (b, pb)| {
            a.cmp(b)
                .then_with(|| pb.metadata.name.cmp(&pa.metadata.name))
        })
        .map(|(_, p)| p)
}

/// The settings in force under `policy`: the cluster's, with each field the policy sets
/// replaced (and `allowWorkloadDisruption` following `allowPostCopy` when only that is set,
/// as in KubeVirt).
pub fn apply(
    base: &MigrationConfiguration,
    policy: &MigrationPolicySpec,
) -> MigrationConfiguration {
    let mut out = base.clone();
    if policy.allow_workload_disruption.is_none() && policy.allow_post_copy.is_some() {
        out.allow_workload_disruption = policy.allow_post_copy;
    }
    if policy.allow_auto_converge.is_some() {
        out.allow_auto_converge = policy.allow_auto_converge;
    }
    if policy.bandwidth_per_migration.is_some() {
        out.bandwidth_per_migration = policy.bandwidth_per_migration.clone();
    }
    if policy.completion_timeout_per_gib.is_some() {
        out.completion_timeout_per_gib = policy.completion_timeout_per_gib;
    }
    if policy.max_downtime_ms.is_some() {
        out.max_downtime_ms = policy.max_downtime_ms;
    }
    if policy.allow_post_copy.is_some() {
        out.allow_post_copy = policy.allow_post_copy;
    }
    if policy.allow_workload_disruption.is_some() {
        out.allow_workload_disruption = policy.allow_workload_disruption;
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(name: &str, vmi: serde_json::Value, namespace: serde_json::Value) -> MigrationPolicy {
        serde_json::from_value(json!({
            "apiVersion": "migrations.kubevirt.io/v1alpha1",
            "kind": "MigrationPolicy",
            "metadata": {"name": name},
            "spec": {"selectors": {
                "virtualMachineInstanceSelector": vmi,
                "namespaceSelector": namespace
            }, "bandwidthPerMigration": "1Mi"}
        }))
        .unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_most_specific_policy_wins_vmi_labels_break_ties_then_names() {
        let policies = [
            policy("b-one-vmi", json!({"app": "db"}), json!({})),
            policy("a-one-ns", json!({}), json!({"team": "x"})),
            policy("c-two", json!({"app": "db"}), json!({"team": "x"})),
            policy(
                "d-mismatch",
                json!({"app": "db", "tier": "gold"}),
                json!({}),
            ),
        ];
        let vmi = labels(&[("app", "db")]);
        let ns = labels(&[("team", "x")]);
        let name = |p: Option<&MigrationPolicy>| p.and_then(|p| p.metadata.name.clone());
        assert_eq!(
            name(match_policy(&policies, &vmi, &ns)).as_deref(),
            Some("c-two")
        );
        // Without c-two: one label each; the VMI label wins over the namespace's.
        assert_eq!(
            name(match_policy(&policies[..2], &vmi, &ns)).as_deref(),
            Some("b-one-vmi")
        );
        // Equal scores: the lowest name.
        let twins = [
            policy("z", json!({"app": "db"}), json!({})),
            policy("m", json!({"app": "db"}), json!({})),
        ];
        assert_eq!(name(match_policy(&twins, &vmi, &ns)).as_deref(), Some("m"));
        assert!(match_policy(&policies[3..], &vmi, &ns).is_none());
    }

    #[test]
    fn a_policy_overrides_only_what_it_sets() {
        let base = MigrationConfiguration {
            completion_timeout_per_gib: Some(150),
            max_downtime_ms: Some(300),
            ..Default::default()
        };
        let spec = MigrationPolicySpec {
            bandwidth_per_migration: Some(Quantity("256Ki".into())),
            completion_timeout_per_gib: Some(5),
            ..Default::default()
        };
        let out = apply(&base, &spec);
        assert_eq!(out.bandwidth_bytes_per_second(), 256 * 1024);
        assert_eq!(out.completion_timeout_per_gib, Some(5));
        assert_eq!(out.max_downtime_ms, Some(300));
    }

    #[test]
    fn a_policy_is_validated_like_the_crs_migration_settings() {
        let with = |spec: serde_json::Value| -> Vec<String> {
            let p: MigrationPolicy = serde_json::from_value(json!({
                "apiVersion": "migrations.kubevirt.io/v1alpha1",
                "kind": "MigrationPolicy",
                "metadata": {"name": "p"},
                "spec": spec
            }))
            .unwrap();
            crate::validation::validate_migration_policy(&p)
                .err()
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.field)
                .collect()
        };
        assert!(
            with(json!({"bandwidthPerMigration": "64Mi", "completionTimeoutPerGiB": 10}))
                .is_empty()
        );
        assert_eq!(with(json!({"allowPostCopy": true})), ["spec.allowPostCopy"]);
        assert_eq!(
            with(json!({"completionTimeoutPerGiB": -1})),
            ["spec.completionTimeoutPerGiB"]
        );
        assert_eq!(
            with(json!({"bandwidthPerMigration": "lots"})),
            ["spec.bandwidthPerMigration"]
        );
        assert_eq!(
            with(json!({"experimental": {"compression": "zstd"}})),
            ["spec.experimental"]
        );
    }
}
