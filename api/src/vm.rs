//! `VirtualMachine`: a VM that keeps existing while stopped, and starts VMIs from its template
//! according to its run strategy (`kubevirt.io/v1`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::instancetype_types::{Matcher, StatusRef};
use crate::other::Other;
use crate::vmi::VirtualMachineInstanceSpec;

/// The desired state of a VM (`v1.VirtualMachineSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    derive = "PartialEq",
    doc = "A virtual machine: starts and stops VirtualMachineInstances from its template according to its runStrategy (kubevirt.io/v1).",
    kind = "VirtualMachine",
    plural = "virtualmachines",
    singular = "virtualmachine",
    namespaced,
    status = "VirtualMachineStatus",
    shortname = "vm",
    shortname = "vms",
    category = "all",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.printableStatus"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSpec {
    /// `Always`, `Halted`, `Manual`, `RerunOnFailure` or `Once`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    /// Deprecated alias: `true` is `Always`, `false` is `Halted`. Exclusive with runStrategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// The VMI this VM runs.
    pub template: VirtualMachineInstanceTemplateSpec,
    /// The instance type that sizes the VM (`v1.InstancetypeMatcher`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instancetype: Option<Matcher>,
    /// The preference that fills in the rest of its hardware (`v1.PreferenceMatcher`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference: Option<Matcher>,
    #[serde(flatten)]
    pub other: Other,
}

/// A VMI to create: labels and annotations plus its spec
/// (`v1.VirtualMachineInstanceTemplateSpec`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VirtualMachineInstanceTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserved_object")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<VirtualMachineInstanceSpec>,
}

/// How the VM controller keeps a VMI running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStrategy {
    Always,
    Halted,
    Manual,
    RerunOnFailure,
    Once,
}

impl RunStrategy {
    pub const ALL: [RunStrategy; 5] = [
        RunStrategy::Always,
        RunStrategy::Halted,
        RunStrategy::Manual,
        RunStrategy::RerunOnFailure,
        RunStrategy::Once,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStrategy::Always => "Always",
            RunStrategy::Halted => "Halted",
            RunStrategy::Manual => "Manual",
            RunStrategy::RerunOnFailure => "RerunOnFailure",
            RunStrategy::Once => "Once",
        }
    }

    pub fn parse(value: &str) -> Option<RunStrategy> {
        RunStrategy::ALL.into_iter().find(|s| s.as_str() == value)
    }
}

impl VirtualMachineSpec {
    /// The effective run strategy: `runStrategy`, else the deprecated `running`, else Halted.
    /// `None` when runStrategy holds a value that is not a strategy (validation reports it).
    pub fn effective_run_strategy(&self) -> Option<RunStrategy> {
        match (&self.run_strategy, self.running) {
            (Some(value), _) => RunStrategy::parse(value),
            (None, Some(true)) => Some(RunStrategy::Always),
            (None, Some(false) | None) => Some(RunStrategy::Halted),
        }
    }

    /// Whether the VM names an instance type or a preference (`instancetype::names_any`).
    pub fn names_instancetype_or_preference(&self) -> bool {
        self.instancetype.is_some() || self.preference.is_some()
    }
}

/// The observed state of a VM (`v1.VirtualMachineStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    /// Stopped, Provisioning, Starting, Running, Paused, Stopping, Terminating,
    /// CrashLoopBackOff, Migrating, ErrorUnschedulable, ErrImagePull, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    /// Start/Stop requests from the `start`, `stop` and `restart` subresources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_change_requests: Vec<StateChangeRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<StartFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_generation: Option<i64>,
    /// The instance type in use and the ControllerRevision that stores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instancetype_ref: Option<StatusRef>,
    /// The preference in use and the ControllerRevision that stores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference_ref: Option<StatusRef>,
    /// The snapshot that holds the VM locked (`snapshot.kubevirt.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_in_progress: Option<String>,
    /// The restore that is writing the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_in_progress: Option<String>,
    /// For each volume, whether a snapshot would hold its data, and why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_snapshot_statuses: Vec<VolumeSnapshotStatus>,
    #[serde(flatten)]
    pub other: Other,
}

/// A pending start or stop (`v1.VirtualMachineStateChangeRequest`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateChangeRequest {
    /// `Start` or `Stop`.
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<std::collections::BTreeMap<String, String>>,
    /// For Stop: the UID of the VMI to stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// Crash-loop back-off state (`v1.VirtualMachineStartFailure`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartFailure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_fail_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "lastFailedVMIUID")]
    pub last_failed_vmi_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// One entry of a VM's `status.volumeSnapshotStatuses` (`v1.VolumeSnapshotStatus`), as the
/// `snapshot` module computes them (re-exported there).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VolumeSnapshotStatus {
    pub name: String,
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
