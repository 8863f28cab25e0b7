//! What the VM controller does for a VM, as a pure function of the VM, its VMI and the time.
//!
//! Run strategies, as KubeVirt defines them:
//! - `Always`: a VMI always exists; a finished one is replaced (with crash-loop back-off after
//!   failures).
//! - `RerunOnFailure`: a failed VMI is replaced (its deletion adds a `Start` request, served
//!   after the crash-loop back-off); a succeeded one is deleted and not replaced; with no VMI,
//!   one is created only when the VM is new or has just switched to this strategy (its
//!   `status.runStrategy` differs), or for a `Start` request: a VM stopped by a `Stop` request
//!   (`virtctl stop`) stays stopped with its strategy.
//! - `Once`: one VMI, never replaced.
//! - `Halted`: no VMI.
//! - `Manual`: only `Start`/`Stop` requests in `status.stateChangeRequests` (from the `start`,
//!   `stop` and `restart` subresources) create or delete the VMI.
//!
//! A `Stop` request with a UID applies to that VMI only; it is dropped once that VMI is gone.
//! A `Start` request is dropped once a VMI exists. `restart` is Stop(uid) then Start.

use api::condition::{self, Condition};
use api::vm::{StartFailure, StateChangeRequest, VirtualMachine, VirtualMachineStatus};
use api::{RunStrategy, VirtualMachineInstance, VmiPhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// What to do to the VMI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmiAction {
    Nothing,
    Create,
    /// Delete the VMI with this UID.
    Delete {
        uid: String,
    },
}

/// The VM controller's decision for one VM.
#[derive(Clone, Debug, PartialEq)]
pub struct VmPlan {
    pub action: VmiAction,
    pub status: VirtualMachineStatus,
    /// The Create serves a `Start` request that asked to start paused (`virtctl start
    /// --paused`): the new VMI gets `startStrategy: Paused`.
    pub start_paused: bool,
}

/// Back-off after the first failure; doubles per consecutive failure up to the maximum.
const BACKOFF_START_SECONDS: i64 = 10;
const BACKOFF_MAX_SECONDS: i64 = 300;

/// Plans the next step for `vm`, whose VMI (same name) is `vmi`.
pub fn plan(vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>, now: Timestamp) -> VmPlan {
    let old = vm.status.clone().unwrap_or_default();
    let mut status = VirtualMachineStatus {
        state_change_requests: old.state_change_requests.clone(),
        start_failure: old.start_failure.clone(),
        instancetype_ref: old.instancetype_ref.clone(),
        preference_ref: old.preference_ref.clone(),
        // Written by the snapshot and restore controllers.
        snapshot_in_progress: old.snapshot_in_progress.clone(),
        restore_in_progress: old.restore_in_progress.clone(),
        volume_snapshot_statuses: api::snapshot::volume_snapshot_statuses(&vm.spec),
        other: old.other.clone(),
        ..VirtualMachineStatus::default()
    };
    let strategy = vm.spec.effective_run_strategy();
    status.run_strategy = strategy.map(|s| s.as_str().to_string());
    // As KubeVirt: desired is the VM's generation, observed the one its running VMI was made
    // from (the VMI's `kubevirt.io/vm-generation`; a template change shows until a restart).
    status.desired_generation = vm.metadata.generation;
    status.observed_generation = vmi.and_then(vmi_generation).or(vm.metadata.generation);

    let vmi_phase = vmi.and_then(|v| v.status.as_ref()).and_then(|s| s.phase);
    let vmi_uid = vmi.and_then(|v| v.metadata.uid.clone());
    let vmi_deleting = vmi.is_some_and(|v| v.metadata.deletion_timestamp.is_some());
    let vmi_final = vmi_phase.is_some_and(VmiPhase::is_final);

    // Crash-loop bookkeeping: count a failed VMI once, reset when one runs.
    if vmi_phase == Some(VmiPhase::Failed) {
        let already = status
            .start_failure
            .as_ref()
            .and_then(|f| f.last_failed_vmi_uid.as_ref())
            == vmi_uid.as_ref();
        if !already {
            let count = status
                .start_failure
                .as_ref()
                .and_then(|f| f.consecutive_fail_count)
                .unwrap_or(0)
                + 1;
            let backoff = (BACKOFF_START_SECONDS << (count - 1).min(8)).min(BACKOFF_MAX_SECONDS);
            status.start_failure = Some(StartFailure {
                consecutive_fail_count: Some(count),
                last_failed_vmi_uid: vmi_uid.clone(),
                retry_after_timestamp: Some(Time(now + SignedDuration::from_secs(backoff))),
            });
        }
    } else if vmi_phase == Some(VmiPhase::Running) {
        status.start_failure = None;
    }
    let backing_off = status
        .start_failure
        .as_ref()
        .and_then(|f| f.retry_after_timestamp.as_ref())
        .is_some_and(|t| t.0 > now);

    let deleting_vm = vm.metadata.deletion_timestamp.is_some();
    // `kubectl delete --cascade=orphan`: the garbage collector takes the VM's owner reference
    // off the VMI, which stays (KubeVirt's VM controller checks the same finalizer).
    let orphaning = vm
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == "orphan"));
    let mut requests = status.state_change_requests.clone();
    // Drop requests that are done.
    requests.retain(|r| match r.action.as_str() {
        "Stop" => match (&r.uid, &vmi_uid) {
            (Some(uid), Some(current)) => uid == current,
            (Some(_), None) => false,
            (None, current) => current.is_some(),
        },
        "Start" => true,
        _ => false,
    });
    if let Some(first) = requests.first() {
        if first.action == "Start" && vmi.is_some() && !vmi_final && !vmi_deleting {
            requests.remove(0);
        }
    }

    let delete = |uid: &Option<String>| match uid {
        Some(uid) => VmiAction::Delete { uid: uid.clone() },
        None => VmiAction::Nothing,
    };
    let action = if deleting_vm {
        if vmi.is_some() && !vmi_deleting && !orphaning {
            delete(&vmi_uid)
        } else {
            VmiAction::Nothing
        }
    } else if vmi_deleting {
        VmiAction::Nothing
    } else if let Some(request) = requests.first() {
        match (request.action.as_str(), vmi.is_some()) {
            ("Stop", true) => delete(&vmi_uid),
            ("Start", false) if backing_off => VmiAction::Nothing,
            ("Start", false) => VmiAction::Create,
            ("Start", true) if vmi_final => delete(&vmi_uid),
            _ => VmiAction::Nothing,
        }
    } else {
        match (strategy, vmi, vmi_phase) {
            (None, _, _) => VmiAction::Nothing,
            (Some(RunStrategy::Halted), Some(_), _) => delete(&vmi_uid),
            (Some(RunStrategy::Halted), None, _) => VmiAction::Nothing,
            (Some(RunStrategy::Manual), _, _) => VmiAction::Nothing,
            (Some(RunStrategy::RerunOnFailure), None, _)
                if old.run_strategy.as_deref() == Some(RunStrategy::RerunOnFailure.as_str()) =>
            {
                VmiAction::Nothing
            }
            (
                Some(RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once),
                None,
                _,
            ) => {
                if backing_off {
                    VmiAction::Nothing
                } else {
                    VmiAction::Create
                }
            }
            (Some(RunStrategy::Always), Some(_), Some(VmiPhase::Succeeded | VmiPhase::Failed)) => {
                delete(&vmi_uid)
            }
            (Some(RunStrategy::RerunOnFailure), Some(_), Some(VmiPhase::Failed)) => {
                // Replaced through a Start request once it is gone.
                requests.push(StateChangeRequest {
                    action: "Start".into(),
                    ..StateChangeRequest::default()
                });
                delete(&vmi_uid)
            }
            (Some(RunStrategy::RerunOnFailure), Some(_), Some(VmiPhase::Succeeded)) => {
                delete(&vmi_uid)
            }
            (Some(_), Some(_), _) => VmiAction::Nothing,
        }
    };
    // A VM locked by a snapshot or restore does not start: their Pods may be copying its
    // claims' data. The start waits (a Start request stays queued) until the lock goes.
    let locked = old.snapshot_in_progress.is_some() || old.restore_in_progress.is_some();
    let action = if action == VmiAction::Create && locked {
        VmiAction::Nothing
    } else {
        action
    };
    // A Create while a request is first means the request is being served.
    let mut start_paused = false;
    if action == VmiAction::Create && requests.first().is_some_and(|r| r.action == "Start") {
        let served = requests.remove(0);
        start_paused = served
            .data
            .as_ref()
            .and_then(|d| d.get("startPaused"))
            .is_some_and(|v| v == "true");
    }
    status.state_change_requests = requests;

    status.created = Some(vmi.is_some());
    let ready = vmi
        .and_then(|v| v.status.as_ref())
        .and_then(|s| condition::find(&s.conditions, "Ready"))
        .is_some_and(Condition::is_true);
    status.ready = Some(ready);
    status.conditions = vm_conditions(vmi, ready);
    status.printable_status = Some(
        printable_status(
            vm,
            vmi,
            backing_off,
            action == VmiAction::Create
                || status
                    .state_change_requests
                    .first()
                    .is_some_and(|r| r.action == "Start"),
        )
        .to_string(),
    );
    VmPlan {
        action,
        status,
        start_paused,
    }
}

fn vm_conditions(vmi: Option<&VirtualMachineInstance>, ready: bool) -> Vec<Condition> {
    let mut conditions = vec![Condition::new(
        "Ready",
        ready,
        if ready { "" } else { "VMINotReady" },
        "",
    )];
    if let Some(vmi_status) = vmi.and_then(|v| v.status.as_ref()) {
        for copied in ["Paused", "PodScheduled", "Failure"] {
            if let Some(c) = condition::find(&vmi_status.conditions, copied) {
                conditions.push(c.clone());
            }
        }
    }
    conditions
}

/// `status.printableStatus`, what `kubectl get vm` shows.
pub fn printable_status(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    backing_off: bool,
    will_start: bool,
) -> &'static str {
    if vm.metadata.deletion_timestamp.is_some() {
        return "Terminating";
    }
    let Some(vmi) = vmi else {
        if backing_off {
            return "CrashLoopBackOff";
        }
        return if will_start { "Starting" } else { "Stopped" };
    };
    if vmi.metadata.deletion_timestamp.is_some() {
        return "Stopping";
    }
    let status = vmi.status.clone().unwrap_or_default();
    if let Some(scheduled) = condition::find(&status.conditions, "PodScheduled") {
        if !scheduled.is_true() && scheduled.reason.as_deref() == Some("Unschedulable") {
            return "ErrorUnschedulable";
        }
    }
    if let Some(sync) = condition::find(&status.conditions, "Synchronized") {
        match sync.reason.as_deref() {
            Some("ErrImagePull") => return "ErrImagePull",
            Some("ImagePullBackOff") => return "ImagePullBackOff",
            _ => {}
        }
    }
    match status.phase {
        None | Some(VmiPhase::Pending | VmiPhase::Scheduling | VmiPhase::Scheduled) => "Starting",
        Some(VmiPhase::Running) => {
            let paused =
                condition::find(&status.conditions, "Paused").is_some_and(Condition::is_true);
            if paused {
                "Paused"
            } else if status.migration_state.as_ref().is_some_and(|m| {
                m.completed != Some(true) && m.failed != Some(true) && m.start_timestamp.is_some()
            }) {
                "Migrating"
            } else {
                "Running"
            }
        }
        Some(VmiPhase::Succeeded) => "Stopped",
        Some(VmiPhase::Failed) if backing_off => "CrashLoopBackOff",
        Some(VmiPhase::Failed) => "Stopped",
        Some(VmiPhase::Unknown) => "Unknown",
    }
}

/// The annotation on a VMI with the generation of the VM it was made from.
pub const VM_GENERATION_ANNOTATION: &str = "kubevirt.io/vm-generation";

fn vmi_generation(vmi: &VirtualMachineInstance) -> Option<i64> {
    vmi.metadata
        .annotations
        .as_ref()?
        .get(VM_GENERATION_ANNOTATION)?
        .parse()
        .ok()
}

/// The namespace of legacy firmware UUIDs: virt-controller's `magicUUID`,
/// 6a1a24a1-4061-4607-8bf4-a3963d0c5895.
const FIRMWARE_UUID_NAMESPACE: [u8; 16] = [
    0x6a, 0x1a, 0x24, 0xa1, 0x40, 0x61, 0x46, 0x07, 0x8b, 0xf4, 0xa3, 0x96, 0x3d, 0x0c, 0x58, 0x95,
];

/// The firmware UUID of a VM whose template has none: KubeVirt's `CalculateLegacyUUID`, the
/// name-based UUID (RFC 4122 version 5, SHA-1) of the VM's name, so the guest sees the same
/// system UUID at every start, and the same one it would see on KubeVirt.
pub fn legacy_firmware_uuid(vm_name: &str) -> String {
    let mut input = FIRMWARE_UUID_NAMESPACE.to_vec();
    input.extend(vm_name.as_bytes());
    let hash = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    let mut b = [0u8; 16];
    b.copy_from_slice(&hash.as_ref()[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The VMI a VM runs: its template, named and owned by the VM, with the VM's legacy firmware
/// UUID when the template sets none.
pub fn vmi_for(vm: &VirtualMachine) -> Option<VirtualMachineInstance> {
    use kube::Resource;
    let mut spec = vm.spec.template.spec.clone()?;
    let name = vm.metadata.name.clone()?;
    let firmware = spec.domain.firmware.get_or_insert_with(Default::default);
    if firmware.uuid.as_deref().unwrap_or_default().is_empty() {
        firmware.uuid = Some(legacy_firmware_uuid(&name));
    }
    let template_meta = vm.spec.template.metadata.clone().unwrap_or_default();
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.insert(contract::labels::VMI_NAME.into(), name.clone());
    let mut vmi = VirtualMachineInstance::new(&name, spec);
    vmi.metadata.namespace = vm.metadata.namespace.clone();
    vmi.metadata.labels = Some(labels);
    let mut annotations = template_meta.annotations.unwrap_or_default();
    if let Some(generation) = vm.metadata.generation {
        annotations.insert(VM_GENERATION_ANNOTATION.into(), generation.to_string());
    }
    vmi.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    vmi.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: VirtualMachine::api_version(&()).into_owned(),
            kind: VirtualMachine::kind(&()).into_owned(),
            name,
            uid: vm.metadata.uid.clone()?,
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    Some(vmi)
}
