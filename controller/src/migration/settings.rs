//! The settings a migration runs by: the MigrationPolicy that picks its VMI, applied over the
//! KubeVirt CR's `spec.configuration.migrations`, and the `migrationState` patch that records
//! them (with the policy's name) when the migration starts.

use std::collections::BTreeMap;

use api::kubevirt::MigrationConfiguration;
use api::vmi::MigrationState;
use api::VirtualMachineInstance;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use crate::context::Context;
use crate::Error;

/// The MigrationPolicy that applies to `vmi` (by its labels and its namespace's) and the
/// settings in force for its migration: the KubeVirt CR's, with the policy's over them.
pub async fn settings_for(
    ctx: &Context,
    vmi: &VirtualMachineInstance,
) -> Result<(Option<String>, MigrationConfiguration), Error> {
    let base = ctx.migration_config();
    let policies = Api::<api::MigrationPolicy>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    if policies.is_empty() {
        return Ok((None, base));
    }
    let namespace_labels = match vmi.namespace() {
        Some(ns) => Api::<k8s_openapi::api::core::v1::Namespace>::all(ctx.client.clone())
            .get(&ns)
            .await?
            .metadata
            .labels
            .unwrap_or_default(),
        None => Default::default(),
    };
    let vmi_labels = vmi.metadata.labels.clone().unwrap_or_default();
    Ok(resolve(&base, &policies, &vmi_labels, &namespace_labels))
}

/// [`settings_for`] from what it read: the policy's name and the settings, `base` (the
/// KubeVirt CR's) with the matching policy's over them.
pub fn resolve(
    base: &MigrationConfiguration,
    policies: &[api::MigrationPolicy],
    vmi_labels: &BTreeMap<String, String>,
    namespace_labels: &BTreeMap<String, String>,
) -> (Option<String>, MigrationConfiguration) {
    match api::migration_policy::match_policy(policies, vmi_labels, namespace_labels) {
        Some(policy) => (
            policy.metadata.name.clone(),
            api::migration_policy::apply(base, &policy.spec),
        ),
        None => (None, base.clone()),
    }
}

/// A new migration's `migrationState` as a status merge patch. A merge patch keeps what it does
/// not name, and merges objects key by key: every field an earlier migration may have left, and
/// every setting this migration does not have, is nulled.
pub fn start_patch(state: &MigrationState) -> Value {
    let mut fields = serde_json::to_value(state).unwrap_or_else(|_| json!({}));
    let Some(map) = fields.as_object_mut() else {
        return fields;
    };
    for stale in [
        "targetNode",
        "targetNodeAddress",
        "endTimestamp",
        "completed",
        "failed",
        "failureReason",
        "abortRequested",
        "mode",
        "migrationPolicyName",
    ] {
        map.entry(stale).or_insert(Value::Null);
    }
    if let Some(settings) = map
        .get_mut("migrationConfiguration")
        .and_then(Value::as_object_mut)
    {
        for field in api::kubevirt_fields::fields("v1.MigrationConfiguration") {
            settings.entry(field.to_string()).or_insert(Value::Null);
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_patch_nulls_what_an_earlier_migration_left() {
        let state = MigrationState {
            migration_uid: Some("m".into()),
            migration_configuration: Some(MigrationConfiguration {
                completion_timeout_per_gib: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        };
        let patch = start_patch(&state);
        assert_eq!(patch["migrationUid"], "m");
        assert_eq!(patch["mode"], Value::Null);
        assert_eq!(patch["migrationPolicyName"], Value::Null);
        let settings = &patch["migrationConfiguration"];
        assert_eq!(settings["completionTimeoutPerGiB"], 5);
        assert!(settings
            .get("bandwidthPerMigration")
            .is_some_and(Value::is_null));
    }

    #[test]
    fn the_policy_that_picks_the_namespace_goes_over_the_crs_settings() {
        let policy: api::MigrationPolicy = serde_json::from_value(json!({
            "apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
            "metadata": {"name": "slow"},
            "spec": {"completionTimeoutPerGiB": 5,
                     "selectors": {"namespaceSelector": {"team": "a"}}}
        }))
        .unwrap();
        let base = MigrationConfiguration {
            completion_timeout_per_gib: Some(150),
            parallel_migrations_per_cluster: Some(3),
            ..Default::default()
        };
        let none = BTreeMap::new();
        let team = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let (name, settings) = resolve(&base, std::slice::from_ref(&policy), &none, &team);
        assert_eq!(name.as_deref(), Some("slow"));
        assert_eq!(settings.completion_timeout_per_gib, Some(5));
        assert_eq!(settings.parallel_migrations_per_cluster, Some(3));
        assert_eq!(resolve(&base, &[policy], &none, &none), (None, base));
    }
}
