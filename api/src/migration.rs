//! `VirtualMachineInstanceMigration`: a request to move a running VMI to another node.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::other::Other;
use crate::vmi::MigrationState;

/// Which VMI to migrate (`v1.VirtualMachineInstanceMigrationSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    derive = "PartialEq",
    doc = "A live migration of a VirtualMachineInstance to another node (kubevirt.io/v1).",
    kind = "VirtualMachineInstanceMigration",
    plural = "virtualmachineinstancemigrations",
    singular = "virtualmachineinstancemigration",
    namespaced,
    status = "VirtualMachineInstanceMigrationStatus",
    shortname = "vmim",
    shortname = "vmims",
    category = "all",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "VMI", type_ = "string", json_path = ".spec.vmiName")
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceMigrationSpec {
    /// Name of the VMI, in the migration's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi_name: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// Phases of a migration, as KubeVirt names them.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum MigrationPhase {
    Pending,
    Scheduling,
    Scheduled,
    PreparingTarget,
    TargetReady,
    Running,
    Succeeded,
    Failed,
}

impl MigrationPhase {
    pub fn is_final(self) -> bool {
        matches!(self, MigrationPhase::Succeeded | MigrationPhase::Failed)
    }
}

/// Progress of a migration (`v1.VirtualMachineInstanceMigrationStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceMigrationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MigrationPhase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_state: Option<MigrationState>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phase_transition_timestamps: Vec<MigrationPhaseTransitionTimestamp>,
    #[serde(flatten)]
    pub other: Other,
}

/// When a migration entered a phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationPhaseTransitionTimestamp {
    pub phase: MigrationPhase,
    pub phase_transition_timestamp: Time,
}
