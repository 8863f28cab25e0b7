//! The bodies of the migration controller's merge patches, typed: what [`super::reconcile`]
//! sends for each [`super::plan::Step`].
//!
//! The VMI's status is patched, never replaced, where virt-handler writes it at the same time
//! (`migrationState`): a merge patch names only the fields it sets. Writes to the migration
//! object carry the resourceVersion the pass read, so that a pass that decided on an old
//! object gets a 409 (and a new pass) instead of overwriting a newer one: this controller is
//! its status's only writer, but a finalizer list written over a newer one would drop a
//! finalizer someone else added meanwhile, and a deletion changes what a pass must do.

use std::collections::BTreeMap;

use api::migration::VirtualMachineInstanceMigrationStatus;
use api::vmi::MigrationState;
use serde::Serialize;
use serde_json::Value;

use super::settings;

/// `{"status": {"migrationState": …, "migrationMethod": …}}` for a VMI.
#[derive(Debug, Serialize)]
pub struct VmiStatusPatch<S: Serialize> {
    pub status: VmiStatusFields<S>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiStatusFields<S: Serialize> {
    pub migration_state: S,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_method: Option<&'static str>,
}

/// The fields of `state` that are set, merged into the VMI's `migrationState`: the unset ones
/// serialize to nothing and stay as they are.
pub fn vmi_state(state: &MigrationState) -> VmiStatusPatch<&MigrationState> {
    VmiStatusPatch {
        status: VmiStatusFields {
            migration_state: state,
            migration_method: None,
        },
    }
}

/// A new migration's `migrationState` ([`settings::start_patch`]: what it does not set is
/// nulled) and its `migrationMethod`.
pub fn vmi_start(state: &MigrationState, method: &'static str) -> VmiStatusPatch<Value> {
    VmiStatusPatch {
        status: VmiStatusFields {
            migration_state: settings::start_patch(state),
            migration_method: Some(method),
        },
    }
}

/// `{"metadata": {"labels": …}}`: a label set to `None` is removed.
#[derive(Debug, Serialize)]
pub struct LabelsPatch<'a> {
    pub metadata: LabelsMetadata<'a>,
}

#[derive(Debug, Serialize)]
pub struct LabelsMetadata<'a> {
    pub labels: &'a BTreeMap<String, Option<String>>,
}

pub fn labels(labels: &BTreeMap<String, Option<String>>) -> LabelsPatch<'_> {
    LabelsPatch {
        metadata: LabelsMetadata { labels },
    }
}

/// The migration's finalizer list, guarded by the resourceVersion read.
#[derive(Debug, Serialize)]
pub struct FinalizersPatch<'a> {
    pub metadata: FinalizersMetadata<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizersMetadata<'a> {
    pub resource_version: Option<&'a str>,
    pub finalizers: &'a [String],
}

pub fn finalizers<'a>(
    resource_version: Option<&'a str>,
    finalizers: &'a [String],
) -> FinalizersPatch<'a> {
    FinalizersPatch {
        metadata: FinalizersMetadata {
            resource_version,
            finalizers,
        },
    }
}

/// The migration's whole status, guarded by the resourceVersion read.
#[derive(Debug, Serialize)]
pub struct MigrationStatusPatch<'a> {
    pub metadata: ResourceVersion<'a>,
    pub status: &'a VirtualMachineInstanceMigrationStatus,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceVersion<'a> {
    pub resource_version: Option<&'a str>,
}

pub fn migration_status<'a>(
    resource_version: Option<&'a str>,
    status: &'a VirtualMachineInstanceMigrationStatus,
) -> MigrationStatusPatch<'a> {
    MigrationStatusPatch {
        metadata: ResourceVersion { resource_version },
        status,
    }
}

#[cfg(test)]
mod tests {
    use api::migration::MigrationPhase;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_state_patch_holds_only_the_fields_it_sets() {
        let state = MigrationState {
            abort_requested: Some(true),
            failed: Some(true),
            failure_reason: Some("gone".into()),
            ..MigrationState::default()
        };
        let patch = serde_json::to_value(vmi_state(&state)).unwrap();
        assert_eq!(
            patch,
            json!({"status": {"migrationState": {
                "abortRequested": true, "failed": true, "failureReason": "gone"}}})
        );
    }

    #[test]
    fn the_start_patch_sets_the_method_and_nulls_the_rest() {
        let state = MigrationState {
            migration_uid: Some("m".into()),
            ..MigrationState::default()
        };
        let patch = serde_json::to_value(vmi_start(&state, "BlockMigration")).unwrap();
        assert_eq!(patch["status"]["migrationMethod"], "BlockMigration");
        assert_eq!(patch["status"]["migrationState"]["migrationUid"], "m");
        assert_eq!(patch["status"]["migrationState"]["targetNode"], Value::Null);
        assert!(patch["status"]["migrationState"]
            .as_object()
            .unwrap()
            .contains_key("completed"));
    }

    #[test]
    fn a_label_set_to_none_is_removed() {
        let set = BTreeMap::from([
            ("a".to_string(), Some("x".to_string())),
            ("b".to_string(), None),
        ]);
        assert_eq!(
            serde_json::to_value(labels(&set)).unwrap(),
            json!({"metadata": {"labels": {"a": "x", "b": null}}})
        );
    }

    #[test]
    fn writes_to_the_migration_carry_the_resource_version_read() {
        let list = vec!["f".to_string()];
        assert_eq!(
            serde_json::to_value(finalizers(Some("7"), &list)).unwrap(),
            json!({"metadata": {"resourceVersion": "7", "finalizers": ["f"]}})
        );
        let status = VirtualMachineInstanceMigrationStatus {
            phase: Some(MigrationPhase::Scheduling),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(migration_status(Some("8"), &status)).unwrap(),
            json!({"metadata": {"resourceVersion": "8"}, "status": {"phase": "Scheduling"}})
        );
    }
}
