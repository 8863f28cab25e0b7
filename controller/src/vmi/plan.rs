//! What the VMI controller does for a VMI, as a pure function of the VMI and its launcher Pods.
//!
//! Phases the controller owns: Pending (no Pod yet) -> Scheduling (Pod created, not running) ->
//! Scheduled (launcher running on a node). virt-handler takes it from there to Running and, when
//! the guest stops, to Succeeded or Failed. The controller marks the VMI Failed when its Pod
//! fails or disappears first, and Succeeded when the launcher exits cleanly before the handler
//! said so. Deleting a VMI deletes its Pods (the launcher shuts the guest down within the grace
//! period on SIGTERM); the finalizer goes when no Pod is left.

use api::condition::{self, Condition};
use api::launcher_pod;
pub use api::vmi::{remove_condition, set_condition, set_phase};
use api::{VirtualMachineInstance, VirtualMachineInstanceStatus, VmiPhase};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// What to do besides writing the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmiAction {
    Nothing,
    AddFinalizer,
    CreatePod,
    DeletePods(Vec<String>),
    RemoveFinalizer,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VmiPlan {
    pub action: VmiAction,
    /// The new status, when it differs from the old one.
    pub status: Option<VirtualMachineInstanceStatus>,
    /// The node the launcher Pod is bound to while the VMI has no `status.nodeName` yet.
    pub bound_node: Option<String>,
}

/// Plans the next step for `vmi`, whose launcher Pods (by the created-by label) are `pods`.
pub fn plan(vmi: &VirtualMachineInstance, pods: &[Pod], now: Timestamp) -> VmiPlan {
    let old = vmi.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let has_finalizer = vmi
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == contract::finalizers::VMI));
    let live_pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();

    if vmi.metadata.deletion_timestamp.is_some() {
        let action = if !live_pods.is_empty() {
            VmiAction::DeletePods(
                live_pods
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .collect(),
            )
        } else if pods.is_empty() && has_finalizer {
            VmiAction::RemoveFinalizer
        } else {
            VmiAction::Nothing
        };
        return VmiPlan {
            action,
            status: None,
            bound_node: None,
        };
    }
    if !has_finalizer {
        return VmiPlan {
            action: VmiAction::AddFinalizer,
            status: None,
            bound_node: None,
        };
    }

    let phase = old.phase;
    let mut action = VmiAction::Nothing;
    // The newest Pod is the current one.
    let pod = pods
        .iter()
        .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    match (phase, pod) {
        (Some(p), _) if p.is_final() => {
            if !live_pods.is_empty() {
                action = VmiAction::DeletePods(
                    live_pods
                        .iter()
                        .filter_map(|p| p.metadata.name.clone())
                        .collect(),
                );
            }
        }
        (None | Some(VmiPhase::Pending), None) => {
            set_phase(&mut status, VmiPhase::Pending, now);
            action = VmiAction::CreatePod;
        }
        (Some(_), None) => {
            set_phase(&mut status, VmiPhase::Failed, now);
            status.reason = Some("PodNotExists".into());
            set_condition(
                &mut status,
                Condition::new("Ready", false, "PodNotExists", "the launcher Pod is gone"),
            );
        }
        (_, Some(pod)) => follow_pod(&mut status, pod, now),
    }
    if let Some(pod) = pod {
        if let (Some(uid), node) = (
            pod.metadata.uid.clone(),
            pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        ) {
            status
                .active_pods
                .get_or_insert_with(Default::default)
                .insert(uid, node.unwrap_or_default());
        }
    }
    let bound_node = pod
        .filter(|_| status.node_name.is_none())
        .and_then(|p| p.spec.as_ref()?.node_name.clone());
    VmiPlan {
        action,
        status: (status != old).then_some(status),
        bound_node,
    }
}

/// Moves the VMI along with its launcher Pod.
fn follow_pod(status: &mut VirtualMachineInstanceStatus, pod: &Pod, now: Timestamp) {
    let pod_status = pod.status.clone().unwrap_or_default();
    // The compute container's end is the launcher's, whatever the containerDisks' do.
    let pod_phase = launcher_pod::phase(pod);
    let conditions = pod_status.conditions.clone().unwrap_or_default();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let phase = status.phase.unwrap_or(VmiPhase::Pending);

    // The Pod's QoS class, as KubeVirt reports it on the VMI.
    if pod_status.qos_class.is_some() {
        status.qos_class = pod_status.qos_class.clone();
    }
    // The user its launcher runs as, as KubeVirt reports it (0 for a root launcher).
    let user = (pod.spec.as_ref())
        .and_then(|s| s.security_context.as_ref())
        .and_then(|c| c.run_as_user);
    status.runtime_user = Some(user.and_then(|u| u64::try_from(u).ok()).unwrap_or(0));
    if let Some(scheduled) = conditions.iter().find(|c| c.type_ == "PodScheduled") {
        let mut copy = Condition::new(
            "PodScheduled",
            scheduled.status == "True",
            scheduled.reason.as_deref().unwrap_or(""),
            scheduled.message.as_deref().unwrap_or(""),
        );
        copy.last_transition_time = scheduled.last_transition_time.clone();
        set_condition(status, copy);
    }
    let containers = pod_status.container_statuses.unwrap_or_default();
    let compute = (containers.iter())
        .find(|c| c.name == launcher_pod::COMPUTE_CONTAINER)
        .cloned();
    // An image that cannot be pulled: the launcher's, a containerDisk's or a kernelBoot's.
    let waiting = pod_status
        .init_container_statuses
        .unwrap_or_default()
        .into_iter()
        .chain(containers)
        .filter_map(|c| c.state.and_then(|s| s.waiting))
        .find(|w| {
            matches!(
                w.reason.as_deref(),
                Some("ErrImagePull" | "ImagePullBackOff" | "InvalidImageName")
            )
        });
    match waiting {
        Some(w) => set_condition(
            status,
            Condition::new(
                "Synchronized",
                false,
                w.reason.as_deref().unwrap_or(""),
                w.message.as_deref().unwrap_or(""),
            ),
        ),
        None => remove_condition(status, "Synchronized"),
    }

    match pod_phase {
        "Failed" | "Succeeded" => {
            let terminated = compute.and_then(|c| c.state).and_then(|s| s.terminated);
            let message = terminated
                .as_ref()
                .and_then(|t| t.message.clone().or(t.reason.clone()))
                .unwrap_or_else(|| format!("the launcher Pod {pod_phase}"));
            if pod_phase == "Succeeded" {
                set_phase(status, VmiPhase::Succeeded, now);
            } else {
                set_phase(status, VmiPhase::Failed, now);
                status.reason = Some("LauncherFailed".into());
            }
            set_condition(
                status,
                Condition::new("Ready", false, "LauncherExited", &message),
            );
        }
        "Running" if phase < VmiPhase::Scheduled => {
            // A Pod already running when first seen was scheduled too: record every phase.
            if phase < VmiPhase::Scheduling {
                set_phase(status, VmiPhase::Scheduling, now);
            }
            set_phase(status, VmiPhase::Scheduled, now);
            status.node_name = node;
        }
        _ if phase < VmiPhase::Scheduling => set_phase(status, VmiPhase::Scheduling, now),
        _ => {}
    }
}

/// Whether a VMI is Ready (for printing and the VM status).
pub fn is_ready(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| condition::find(&s.conditions, "Ready"))
        .is_some_and(Condition::is_true)
}
