//! A launcher Pod's phase as its VMI sees it.
//!
//! The launcher Pod holds, beside the launcher's `compute` container, a container per
//! containerDisk that sleeps until the Pod is deleted (virt-controller's Pod layout). When the
//! launcher exits, the kubelet keeps such a Pod `Running`; the VM has ended all the same. As
//! KubeVirt's controllers check `isComputeContainerDown` beside the Pod's phase, the phase here
//! is `Succeeded` or `Failed` by the compute container's exit code once it has terminated, and
//! the Pod's own otherwise.

use k8s_openapi::api::core::v1::Pod;

/// The name of the launcher's container.
pub const COMPUTE_CONTAINER: &str = "compute";

/// The Pod's phase (`Pending` when it has none yet), or how its compute container ended.
pub fn phase(pod: &Pod) -> &str {
    let status = pod.status.as_ref();
    let compute_end = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == COMPUTE_CONTAINER))
        .and_then(|c| c.state.as_ref()?.terminated.as_ref());
    match compute_end {
        Some(end) if end.exit_code == 0 => "Succeeded",
        Some(_) => "Failed",
        None => status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending"),
    }
}

/// Whether the launcher in the Pod has ended (its Pod or its compute container).
pub fn ended(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status}))
            .unwrap()
    }

    #[test]
    fn the_compute_container_decides_once_it_has_ended() {
        let sleeping = serde_json::json!({"name": "volumecontainerdisk", "ready": true,
            "restartCount": 0, "image": "x", "imageID": "", "state": {"running": {}}});
        let compute = |state: serde_json::Value| {
            serde_json::json!({"name": "compute", "ready": false, "restartCount": 0,
                "image": "l", "imageID": "", "state": state})
        };
        let cases = [
            (serde_json::json!({}), "Pending", false),
            (
                serde_json::json!({"phase": "Running", "containerStatuses":
                    [sleeping, compute(serde_json::json!({"running": {}}))]}),
                "Running",
                false,
            ),
            (
                serde_json::json!({"phase": "Running", "containerStatuses":
                    [sleeping, compute(serde_json::json!({"terminated": {"exitCode": 0}}))]}),
                "Succeeded",
                true,
            ),
            (
                serde_json::json!({"phase": "Running", "containerStatuses":
                    [sleeping, compute(serde_json::json!({"terminated": {"exitCode": 137}}))]}),
                "Failed",
                true,
            ),
            (
                serde_json::json!({"phase": "Failed", "containerStatuses": [sleeping]}),
                "Failed",
                true,
            ),
        ];
        for (status, want, ended_) in cases {
            let pod = pod(status.clone());
            assert_eq!((phase(&pod), ended(&pod)), (want, ended_), "{status}");
        }
    }
}
