//! `snapshot.kubevirt.io/v1beta1`: VM snapshots, their contents and restores, as KubeVirt has
//! them.
//!
//! A `VirtualMachineSnapshot` names a VM. virt-controller locks the VM (its
//! `status.snapshotInProgress` and the [`SOURCE_FINALIZER`]), copies the VM into a
//! `VirtualMachineSnapshotContent` ([`content_name`]), marks both ready and unlocks the VM. A
//! `VirtualMachineRestore` names a snapshot and a target VM (the snapshot's own VM, or a new
//! name): virt-controller writes the stored VM spec into the target ([`restore::restored_vm`])
//! once the target runs no VMI, with the restore's JSON patches for a new VM.
//!
//! Volume data: Ferrovirt has no CSI `VolumeSnapshot` support, so it copies the data itself.
//! A persistentVolumeClaim volume (a `disk.img` on a filesystem claim, KubeVirt's layout) is
//! backed up into the same claim, at [`backup_path`] (`.ferrovirt-snapshots/<volume snapshot
//! name>/disk.img`), by a short-lived Pod of virt-controller's while a running VM is paused or
//! frozen; the content lists it in `spec.volumeBackups` as KubeVirt lists its VolumeSnapshots
//! ([`VolumeBackup`]). A restore into the same VM copies the backup over the claim's `disk.img`;
//! a restore into a new VM copies it into a new claim, `restore-<restore uid>-<volume>`
//! ([`restored_claim_name`]), as KubeVirt names it. Other volumes (containerDisk, emptyDisk,
//! cloud-init, ...) are excluded as in KubeVirt; a DataVolume (which Ferrovirt does not import)
//! makes the snapshot carry KubeVirt's `PartialSnapshot` indication, and each VM lists its
//! volumes in `status.volumeSnapshotStatuses` with the reason for each one left out
//! ([`volume_snapshot_statuses`]).

pub mod restore;
pub mod validation;

use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, TypedLocalObjectReference};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::condition::Condition;
use crate::other::Other;
use crate::siblings::{Column, Scope, Sibling, UnsupportedCondition, Version};
use crate::vm::{VirtualMachineSpec, VirtualMachineStatus};
use crate::volume::Volume;

// A VM's status holds these, so the type is defined with the VM (which must not depend on this
// module); re-exported at its old path.
pub use crate::vm::VolumeSnapshotStatus;

/// The API group.
pub const GROUP: &str = "snapshot.kubevirt.io";
/// The version KubeVirt stores (it also serves v1alpha1, with the same schema).
pub const VERSION: &str = "v1beta1";

/// On a snapshot until virt-controller has cleaned up after it.
pub const SNAPSHOT_FINALIZER: &str = "snapshot.kubevirt.io/vmsnapshot-protection";
/// On a content until its snapshot is gone.
pub const CONTENT_FINALIZER: &str = "snapshot.kubevirt.io/vmsnapshotcontent-protection";
/// On a VM while a snapshot of it is in progress.
pub const SOURCE_FINALIZER: &str = "snapshot.kubevirt.io/snapshot-source-protection";
/// On a restore until virt-controller has cleaned up after it.
pub const RESTORE_FINALIZER: &str = "snapshot.kubevirt.io/vmrestore-protection";
/// On a restored VM: `<restore name>-<restore uid>` of the restore that wrote it.
pub const LAST_RESTORE_ANNOTATION: &str = "restore.kubevirt.io/lastRestoreUID";

/// The feature gate KubeVirt guards snapshots and restores with (beta: on unless disabled).
pub const FEATURE_GATE: &str = "Snapshot";

/// How long a snapshot may take when `spec.failureDeadline` does not say (KubeVirt's
/// `DefaultFailureDeadline`), and how long a restore waits for its target to stop
/// (`DefaultGracePeriod`).
pub const DEFAULT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// The condition types of snapshots and restores.
pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const FAILURE: &str = "Failure";

/// The phases of a snapshot.
pub const IN_PROGRESS: &str = "InProgress";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";

/// `spec.source` of a snapshot (a VM), `spec.target` of a restore.
pub type ObjectReference = TypedLocalObjectReference;

/// What a snapshot is of (`v1beta1.VirtualMachineSnapshotSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "snapshot.kubevirt.io",
    version = "v1beta1",
    kind = "VirtualMachineSnapshot",
    plural = "virtualmachinesnapshots",
    namespaced,
    derive = "PartialEq",
    status = "VirtualMachineSnapshotStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSnapshotSpec {
    pub source: ObjectReference,
    /// `Delete` (the default: the content goes with the snapshot) or `Retain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<String>,
    /// A Go duration (`5m`); the snapshot fails when it is not done by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_deadline: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1beta1.VirtualMachineSnapshotStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSnapshotStatus {
    #[serde(default, rename = "sourceUID", skip_serializing_if = "Option::is_none")]
    pub source_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_snapshot_content_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SnapshotError>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indications: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_indications: Vec<SourceIndication>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_volumes: Option<SnapshotVolumes>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1beta1.Error`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `v1beta1.SourceIndication`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceIndication {
    pub indication: String,
    pub message: String,
}

/// `v1beta1.SnapshotVolumesLists`: which of the VM's volumes the snapshot holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotVolumes {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included_volumes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded_volumes: Vec<String>,
}

/// What a snapshot holds (`v1beta1.VirtualMachineSnapshotContentSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "snapshot.kubevirt.io",
    version = "v1beta1",
    kind = "VirtualMachineSnapshotContent",
    plural = "virtualmachinesnapshotcontents",
    namespaced,
    derive = "PartialEq",
    status = "VirtualMachineSnapshotContentStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSnapshotContentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_snapshot_name: Option<String>,
    pub source: SourceSpec,
    /// The claims whose data the snapshot holds (KubeVirt's: a PVC and its VolumeSnapshot
    /// each; Ferrovirt's: a PVC and the backup file [`backup_path`] in it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_backups: Vec<VolumeBackup>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1beta1.VolumeBackup`: a volume of the VM, its claim as it was, and the name of its data's
/// snapshot (for Ferrovirt the directory of [`backup_path`] in that claim).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeBackup {
    pub volume_name: String,
    pub persistent_volume_claim: BackedUpClaim,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_name: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1beta1.PersistentVolumeClaim`: a claim's metadata and spec, as the snapshot found it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackedUpClaim {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PersistentVolumeClaimSpec,
}

/// Where a claim's backups are, relative to the claim's root.
pub const BACKUP_DIR: &str = ".ferrovirt-snapshots";

/// The name of a volume's data snapshot, as KubeVirt names its VolumeSnapshots:
/// `vmsnapshot-<snapshot uid>-volume-<volume>`.
pub fn volume_snapshot_name(snapshot_uid: &str, volume: &str) -> String {
    format!("vmsnapshot-{snapshot_uid}-volume-{volume}")
}

/// The directory of a volume's backup, relative to its claim's root.
pub fn backup_dir(volume_snapshot_name: &str) -> String {
    format!("{BACKUP_DIR}/{volume_snapshot_name}")
}

/// The backup of a volume's `disk.img`, relative to its claim's root.
pub fn backup_path(volume_snapshot_name: &str) -> String {
    format!("{}/disk.img", backup_dir(volume_snapshot_name))
}

/// The claim a restore into a new VM creates for a backed-up volume (KubeVirt's name).
pub fn restored_claim_name(restore_uid: &str, volume: &str) -> String {
    format!("restore-{restore_uid}-{volume}")
}

/// `v1beta1.SourceSpec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine: Option<SnapshotVirtualMachine>,
}

/// The VM as the snapshot took it (`v1beta1.VirtualMachine`): its metadata, spec and an empty
/// status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotVirtualMachine {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: VirtualMachineSpec,
    #[serde(default)]
    pub status: VirtualMachineStatus,
}

/// `v1beta1.VirtualMachineSnapshotContentStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSnapshotContentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SnapshotError>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_snapshot_status: Vec<Value>,
    #[serde(flatten)]
    pub other: Other,
}

/// A restore of a snapshot into a VM (`v1beta1.VirtualMachineRestoreSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "snapshot.kubevirt.io",
    version = "v1beta1",
    kind = "VirtualMachineRestore",
    plural = "virtualmachinerestores",
    namespaced,
    derive = "PartialEq",
    status = "VirtualMachineRestoreStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineRestoreSpec {
    pub target: ObjectReference,
    #[serde(default)]
    pub virtual_machine_snapshot_name: String,
    /// What to do while the target runs: `WaitGracePeriod` (the default), `StopTarget`,
    /// `FailImmediate`, `WaitEventually`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_readiness_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_restore_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_ownership_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_restore_overrides: Vec<Value>,
    /// JSON patch operations (each one JSON object) applied to a new target VM.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1beta1.VirtualMachineRestoreStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineRestoreStatus {
    /// The volumes whose data the restore wrote (`v1beta1.VolumeRestore`: volumeName,
    /// persistentVolumeClaim, volumeSnapshotName).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restores: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted_data_volumes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub other: Other,
}

/// The three kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Snapshot,
    Content,
    Restore,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Snapshot, Kind::Content, Kind::Restore];

    /// KubeVirt's names, scope, versions and columns.
    pub fn sibling(self) -> &'static Sibling {
        &DESCRIPTIONS[self as usize]
    }

    /// The kind of a plural resource name.
    pub fn of_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.sibling().plural == plural)
    }

    /// The CRD: KubeVirt's names, versions, columns and status subresource, with a schema that
    /// keeps `spec` and `status` whole: the validating webhook judges them
    /// ([`validation`]), and a content keeps the VM exactly as it was taken.
    pub fn crd(self) -> CustomResourceDefinition {
        let mut crd = serde_json::to_value(self.sibling().crd()).expect("a CRD is JSON");
        let description = match self {
            Kind::Snapshot => "A snapshot of a VirtualMachine (snapshot.kubevirt.io).",
            Kind::Content => "What a VirtualMachineSnapshot holds (snapshot.kubevirt.io).",
            Kind::Restore => {
                "A restore of a VirtualMachineSnapshot into a VirtualMachine (snapshot.kubevirt.io)."
            }
        };
        let required = match self {
            Kind::Snapshot => json!(["source"]),
            Kind::Content => json!(["source"]),
            Kind::Restore => json!(["target", "virtualMachineSnapshotName"]),
        };
        for version in crd["spec"]["versions"]
            .as_array_mut()
            .expect("a CRD has versions")
        {
            let schema = &mut version["schema"]["openAPIV3Schema"];
            schema["description"] = json!(description);
            schema["required"] = json!(["spec"]);
            schema["properties"]["spec"]["required"] = required.clone();
            schema["properties"]["spec"]["description"] = json!("KubeVirt's spec of the kind.");
            schema["properties"]["status"]["description"] =
                json!("KubeVirt's status of the kind, written by virt-controller.");
        }
        serde_json::from_value(crd).expect("the snapshot CRD is a CustomResourceDefinition")
    }
}

/// The CRDs of the three kinds.
pub fn crds() -> Vec<CustomResourceDefinition> {
    Kind::ALL.into_iter().map(Kind::crd).collect()
}

const fn column(name: &'static str, type_: &'static str, json_path: &'static str) -> Column {
    Column {
        name,
        type_,
        json_path,
    }
}

const VERSIONS: &[Version] = &[
    Version {
        name: "v1alpha1",
        storage: false,
        deprecation_warning: None,
    },
    Version {
        name: VERSION,
        storage: true,
        deprecation_warning: None,
    },
];
const PHASE: Column = column("Phase", "string", ".status.phase");
const SOURCE_KIND: Column = column("SourceKind", "string", ".spec.source.kind");
const SOURCE_NAME: Column = column("SourceName", "string", ".spec.source.name");
const READY_TO_USE: Column = column("ReadyToUse", "boolean", ".status.readyToUse");
const CREATION_TIME: Column = column("CreationTime", "date", ".status.creationTime");
const ERROR: Column = column("Error", "string", ".status.error.message");
/// Unused: these kinds are served and implemented.
const NO_CONDITION: UnsupportedCondition = UnsupportedCondition {
    type_: "",
    status: "",
};

/// KubeVirt's names of the three kinds, in [`Kind`]'s order.
const DESCRIPTIONS: [Sibling; 3] = [
    Sibling {
        group: GROUP,
        kind: "VirtualMachineSnapshot",
        plural: "virtualmachinesnapshots",
        singular: "virtualmachinesnapshot",
        scope: Scope::Namespaced,
        short_names: &["vmsnapshot", "vmsnapshots"],
        categories: &["all"],
        versions: VERSIONS,
        columns: &[
            SOURCE_KIND,
            SOURCE_NAME,
            PHASE,
            READY_TO_USE,
            CREATION_TIME,
            ERROR,
        ],
        condition: NO_CONDITION,
    },
    Sibling {
        group: GROUP,
        kind: "VirtualMachineSnapshotContent",
        plural: "virtualmachinesnapshotcontents",
        singular: "virtualmachinesnapshotcontent",
        scope: Scope::Namespaced,
        short_names: &["vmsnapshotcontent", "vmsnapshotcontents"],
        categories: &["all"],
        versions: VERSIONS,
        columns: &[READY_TO_USE, CREATION_TIME, ERROR],
        condition: NO_CONDITION,
    },
    Sibling {
        group: GROUP,
        kind: "VirtualMachineRestore",
        plural: "virtualmachinerestores",
        singular: "virtualmachinerestore",
        scope: Scope::Namespaced,
        short_names: &["vmrestore", "vmrestores"],
        categories: &["all"],
        versions: VERSIONS,
        columns: &[
            column("TargetKind", "string", ".spec.target.kind"),
            column("TargetName", "string", ".spec.target.name"),
            column("Complete", "boolean", ".status.complete"),
            column("RestoreTime", "date", ".status.restoreTime"),
        ],
        condition: NO_CONDITION,
    },
];

/// Whether snapshots and restores may be created: KubeVirt's `Snapshot` gate is beta, so it is
/// on unless the CR's `developerConfiguration.disabledFeatureGates` lists it.
pub fn gate_enabled(kubevirt: Option<&crate::KubeVirt>) -> bool {
    let developer = kubevirt
        .and_then(|kv| kv.spec.configuration.as_ref())
        .and_then(|c| c.developer_configuration.as_ref());
    match developer {
        Some(d) if d.feature_gates.iter().any(|g| g == FEATURE_GATE) => true,
        Some(d) => !d.disabled_feature_gates.iter().any(|g| g == FEATURE_GATE),
        None => true,
    }
}

/// The name of a snapshot's content: `vmsnapshot-content-<snapshot uid>`, or what its status
/// already names.
pub fn content_name(snapshot: &VirtualMachineSnapshot) -> String {
    if let Some(name) = snapshot
        .status
        .as_ref()
        .and_then(|s| s.virtual_machine_snapshot_content_name.clone())
    {
        return name;
    }
    format!(
        "vmsnapshot-content-{}",
        snapshot.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// How long a snapshot may take.
pub fn deadline(snapshot: &VirtualMachineSnapshot) -> std::time::Duration {
    snapshot
        .spec
        .failure_deadline
        .as_deref()
        .and_then(|d| crate::duration::parse(d).ok())
        .unwrap_or(DEFAULT_DEADLINE)
}

/// The indications of a snapshot taken while the VM ran, sorted as KubeVirt lists them:
/// `Online`, and `Paused`, `GuestAgent` or `NoGuestAgent`.
pub fn online_indications(paused: bool, guest_agent: bool) -> Vec<String> {
    let second = if paused {
        "Paused"
    } else if guest_agent {
        "GuestAgent"
    } else {
        "NoGuestAgent"
    };
    let mut list = vec!["Online".to_string(), second.to_string()];
    list.sort();
    list
}

/// KubeVirt's message for an indication.
pub fn indication_message(indication: &str) -> &'static str {
    match indication {
        "Online" => "Snapshot taken while the VM was running. Consistency depends on guest-agent quiescing.",
        "GuestAgent" => "Guest agent was active and attempted to quiesce the filesystem for application consistency.",
        "NoGuestAgent" => "Guest agent was not available. Snapshot is crash-consistent and may not be application-consistent.",
        "QuiesceTimeout" => "Guest agent quiesced the filesystem, but the freeze window timed out before completion. Snapshot is crash-consistent and may not be application-consistent.",
        "Paused" => "Snapshot taken while the VM was paused. Snapshot is crash-consistent and may not be application-consistent.",
        "PartialSnapshot" => "Not all snapshotable volumes were included in the snapshot. Check status.snapshotVolumes for excluded volumes and VM VolumeSnapshotStatus for details.",
        _ => "Unknown indication",
    }
}

/// The `sourceIndications` of a list of indications.
pub fn source_indications(indications: &[String]) -> Vec<SourceIndication> {
    indications
        .iter()
        .map(|i| SourceIndication {
            indication: i.clone(),
            message: indication_message(i).to_string(),
        })
        .collect()
}

fn volumes(spec: &VirtualMachineSpec) -> &[Volume] {
    spec.template
        .spec
        .as_ref()
        .map(|s| s.volumes.as_slice())
        .unwrap_or_default()
}

/// Whether KubeVirt would snapshot a volume's data (a PVC or DataVolume).
fn holds_data(volume: &Volume) -> bool {
    volume.persistent_volume_claim.is_some() || volume.data_volume.is_some()
}

/// A snapshot's `status.snapshotVolumes` for the VM it holds (its claims included, the rest
/// excluded), and whether a volume KubeVirt would have snapshotted was left out (a DataVolume:
/// the `PartialSnapshot` indication).
pub fn snapshot_volumes(spec: &VirtualMachineSpec) -> (SnapshotVolumes, bool) {
    let (included, excluded): (Vec<&Volume>, Vec<&Volume>) = volumes(spec)
        .iter()
        .partition(|v| v.persistent_volume_claim.is_some());
    let partial = excluded.iter().any(|v| holds_data(v));
    let names = |list: Vec<&Volume>| list.into_iter().map(|v| v.name.clone()).collect();
    (
        SnapshotVolumes {
            included_volumes: names(included),
            excluded_volumes: names(excluded),
        },
        partial,
    )
}

/// A VM's `status.volumeSnapshotStatuses`: its claims enabled, every other volume not, with
/// the reason.
pub fn volume_snapshot_statuses(spec: &VirtualMachineSpec) -> Vec<VolumeSnapshotStatus> {
    volumes(spec)
        .iter()
        .map(|v| {
            let reason = if v.persistent_volume_claim.is_some() {
                None
            } else if holds_data(v) {
                Some(format!(
                    "Ferrovirt snapshots persistentVolumeClaim volumes only, not DataVolumes [{}]",
                    v.name
                ))
            } else {
                Some(format!(
                    "Snapshot is not supported for this volumeSource type [{}]",
                    v.name
                ))
            };
            VolumeSnapshotStatus {
                name: v.name.clone(),
                enabled: reason.is_none(),
                reason,
            }
        })
        .collect()
}

/// Sets a condition as KubeVirt's snapshot controllers do: the reason carries the text, and
/// the transition time changes only when the status or reason does. Conditions keep the order
/// they were first set in.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    now: &Time,
) {
    let mut condition = Condition::new(type_, status, reason, "");
    condition.last_transition_time = Some(now.clone());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != condition.status || existing.reason != condition.reason {
                *existing = condition;
            }
        }
        None => conditions.push(condition),
    }
}

/// Whether a list holds a condition of the type with status True.
pub fn condition_true(conditions: &[Condition], type_: &str) -> bool {
    crate::condition::find(conditions, type_).is_some_and(Condition::is_true)
}

#[cfg(test)]
mod tests;
