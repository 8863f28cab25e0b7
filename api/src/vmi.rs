//! `VirtualMachineInstance`: one running VM (`kubevirt.io/v1`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::domain::DomainSpec;
use crate::other::Other;
use crate::volume::{Network, Volume};

/// The desired state of a VMI (`v1.VirtualMachineInstanceSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    derive = "PartialEq",
    doc = "A virtual machine instance: one running VM (kubevirt.io/v1).",
    kind = "VirtualMachineInstance",
    plural = "virtualmachineinstances",
    singular = "virtualmachineinstance",
    namespaced,
    status = "VirtualMachineInstanceStatus",
    shortname = "vmi",
    shortname = "vmis",
    category = "all",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "IP",
        type_ = "string",
        json_path = ".status.interfaces[0].ipAddress"
    ),
    printcolumn(name = "NodeName", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "Live-Migratable",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='LiveMigratable')].status",
        priority = 1
    ),
    printcolumn(
        name = "Paused",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Paused')].status",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceSpec {
    /// The VM's virtual hardware.
    pub domain: DomainSpec,
    /// Volumes that back the disks, matched by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// Networks that the interfaces connect to, matched by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    /// Copied to the launcher Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Copied to the launcher Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Copied to the launcher Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Seconds the guest gets to power off after a graceful shutdown request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// `None`, `LiveMigrate`, `LiveMigrateIfPossible` or `External`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_strategy: Option<String>,
    /// `Paused` starts the VM paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_strategy: Option<String>,
    /// The guest's hostname; the VMI name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    /// Copied to the launcher Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Copied to the launcher Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// `amd64` (the only architecture Ferrovirt runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// Phases of a VMI, as KubeVirt names them.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum VmiPhase {
    Pending,
    Scheduling,
    Scheduled,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl VmiPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            VmiPhase::Pending => "Pending",
            VmiPhase::Scheduling => "Scheduling",
            VmiPhase::Scheduled => "Scheduled",
            VmiPhase::Running => "Running",
            VmiPhase::Succeeded => "Succeeded",
            VmiPhase::Failed => "Failed",
            VmiPhase::Unknown => "Unknown",
        }
    }

    /// Succeeded and Failed are final: a VMI never leaves them.
    pub fn is_final(self) -> bool {
        matches!(self, VmiPhase::Succeeded | VmiPhase::Failed)
    }

    /// The event KubeVirt records when a VMI enters this phase, as (warning, reason, message):
    /// Running is a Normal `Started`, Succeeded a Normal `Stopped`, Failed a Warning `Stopped`
    /// (what `kubectl get events` and KubeVirt's own tests look for). Other phases have none.
    pub fn entered_event(self) -> Option<(bool, &'static str, &'static str)> {
        match self {
            VmiPhase::Running => Some((false, "Started", "VirtualMachineInstance started.")),
            VmiPhase::Succeeded => Some((
                false,
                "Stopped",
                "The VirtualMachineInstance was shut down.",
            )),
            VmiPhase::Failed => Some((true, "Stopped", "The VirtualMachineInstance crashed.")),
            _ => None,
        }
    }
}

/// The observed state of a VMI (`v1.VirtualMachineInstanceStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<VmiPhase>,
    /// Why the VMI is in its phase (set for Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<VmiNetworkInterface>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_state: Option<MigrationState>,
    /// `BlockMigration` or `LiveMigration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "guestOSInfo")]
    pub guest_os_info: Option<GuestOsInfo>,
    /// `frozen` while the guest agent holds the guest's filesystems frozen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_freeze_status: Option<String>,
    /// When the VMI entered each phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phase_transition_timestamps: Vec<PhaseTransitionTimestamp>,
    /// UIDs of the launcher Pods and the nodes they run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_pods: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_container_image_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<String>,
    /// The user the launcher runs as: 107, KubeVirt's non-root user, or 0 with the `Root`
    /// feature gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_user: Option<u64>,
    #[serde(rename = "VSOCKCID", default, skip_serializing_if = "Option::is_none")]
    pub vsock_cid: Option<u32>,
    /// The guest's memory as the VM runs it (what the VMI asked, rounded up to what the backend
    /// needs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStatus>,
    /// The ControllerRevision of its VM's spec the VM controller recorded when it started this
    /// VMI (`revision-start-vm-<VM UID>-<generation>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_revision_name: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// The guest's memory (`v1.MemoryStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStatus {
    /// What the guest booted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_at_boot: Option<Quantity>,
    /// What the guest has now (no hotplug or balloon here: what it booted with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_current: Option<Quantity>,
    /// What the VMI asks for (`spec.domain.memory.guest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_requested: Option<Quantity>,
}

/// A guest interface as seen from the host (`v1.VirtualMachineInstanceNetworkInterface`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmiNetworkInterface {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_addresses: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_interface_name: Option<String>,
    /// `domain`, `guest-agent`, ... where the information comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_count: Option<i32>,
}

/// The state of the VMI's current or last migration (`v1.VirtualMachineInstanceMigrationState`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_requested: Option<bool>,
    /// How the abort ended: `Aborting`, `Succeeded`, or `Failed` (the migration completed
    /// before the abort reached it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_status: Option<String>,
    /// `PreCopy` (the only mode Ferrovirt has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The MigrationPolicy that applies to this migration, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_policy_name: Option<String>,
    /// The settings in force for this migration: the KubeVirt CR's, with the policy's over
    /// them; virt-handler runs the migration by these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_configuration: Option<crate::kubevirt::MigrationConfiguration>,
    #[serde(flatten)]
    pub other: Other,
}

/// What the guest reports about its OS (`v1.VirtualMachineInstanceGuestOSInfo`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuestOsInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pretty_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_release: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// When a VMI entered a phase (`v1.VirtualMachineInstancePhaseTransitionTimestamp`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PhaseTransitionTimestamp {
    pub phase: VmiPhase,
    pub phase_transition_timestamp: Time,
}

/// Sets the phase and records when it changed (`status.phaseTransitionTimestamps`).
pub fn set_phase(
    status: &mut VirtualMachineInstanceStatus,
    phase: VmiPhase,
    now: k8s_openapi::jiff::Timestamp,
) {
    if status.phase == Some(phase) {
        return;
    }
    status.phase = Some(phase);
    status
        .phase_transition_timestamps
        .push(PhaseTransitionTimestamp {
            phase,
            phase_transition_timestamp: Time(now),
        });
}

/// Replaces the condition of the same type, keeping its transition time when the status is the
/// same.
pub fn set_condition(status: &mut VirtualMachineInstanceStatus, mut new: Condition) {
    match status.conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old
                    .last_transition_time
                    .clone()
                    .or(new.last_transition_time);
            }
            *old = new;
        }
        None => status.conditions.push(new),
    }
}

/// Removes the condition of the given type.
pub fn remove_condition(status: &mut VirtualMachineInstanceStatus, type_: &str) {
    status.conditions.retain(|c| c.type_ != type_);
}

/// The condition virt-handler gives a running VMI to say which backend runs its VM: True for
/// QEMU TCG (software emulation), False for Ferrovirt's KVM VMM; its reason names the backend.
pub const SOFTWARE_EMULATION: &str = "SoftwareEmulation";

/// Whether the VMI's VM runs under software emulation ([`SOFTWARE_EMULATION`]); `None` before
/// virt-handler has said.
pub fn software_emulation(status: Option<&VirtualMachineInstanceStatus>) -> Option<bool> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == SOFTWARE_EMULATION)
        .map(Condition::is_true)
}
