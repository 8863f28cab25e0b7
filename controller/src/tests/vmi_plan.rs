use api::{VirtualMachineInstance, VmiPhase};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::vmi::plan::{plan, VmiAction};

fn now() -> Timestamp {
    "2026-11-29T12:00:00Z".parse().unwrap()
}

fn vmi(phase: Option<VmiPhase>) -> VirtualMachineInstance {
    let mut vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "namespace": "default", "uid": "u1", "finalizers": [contract::finalizers::VMI]},
        "spec": {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}
    }))
    .unwrap();
    vmi.status = phase.map(|p| api::VirtualMachineInstanceStatus {
        phase: Some(p),
        ..Default::default()
    });
    vmi
}

fn pod(status: serde_json::Value, node: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "virt-launcher-v-abcde", "uid": "pod-uid",
                     "creationTimestamp": "2026-11-29T11:59:00Z"},
        "spec": {"containers": [{"name": "compute"}], "nodeName": node},
        "status": status
    }))
    .unwrap()
}

#[test]
fn a_new_vmi_gets_a_finalizer_then_a_pod() {
    let mut fresh = vmi(None);
    fresh.metadata.finalizers = None;
    assert_eq!(plan(&fresh, &[], now()).action, VmiAction::AddFinalizer);
    let p = plan(&vmi(None), &[], now());
    assert_eq!(p.action, VmiAction::CreatePod);
    let status = p.status.unwrap();
    assert_eq!(status.phase, Some(VmiPhase::Pending));
    assert_eq!(
        status.phase_transition_timestamps[0].phase,
        VmiPhase::Pending
    );
    assert_eq!(
        status.phase_transition_timestamps[0].phase_transition_timestamp,
        Time(now())
    );
}

#[test]
fn phases_follow_the_pod() {
    let pending = pod(json!({"phase": "Pending"}), None);
    let p = plan(&vmi(Some(VmiPhase::Pending)), &[pending], now());
    assert_eq!(p.status.as_ref().unwrap().phase, Some(VmiPhase::Scheduling));

    let running = pod(
        json!({"phase": "Running", "containerStatuses": [
        {"name": "compute", "ready": true, "restartCount": 0, "image": "l", "imageID": "",
         "state": {"running": {}}}]}),
        Some("node01"),
    );
    let p = plan(
        &vmi(Some(VmiPhase::Scheduling)),
        std::slice::from_ref(&running),
        now(),
    );
    let status = p.status.unwrap();
    assert_eq!(status.phase, Some(VmiPhase::Scheduled));
    assert_eq!(status.node_name.as_deref(), Some("node01"));
    assert_eq!(status.active_pods.unwrap()["pod-uid"], "node01");

    // Running is the handler's; the controller leaves it.
    let mut handler_running = vmi(Some(VmiPhase::Running));
    let status = handler_running.status.as_mut().unwrap();
    status.active_pods = Some([("pod-uid".to_string(), "node01".to_string())].into());
    status.runtime_user = Some(0);
    assert_eq!(plan(&handler_running, &[running], now()).status, None);
}

#[test]
fn the_node_of_a_bound_pod_is_known_before_the_vmi_is_scheduled() {
    let unbound = pod(json!({"phase": "Pending"}), None);
    let p = plan(&vmi(Some(VmiPhase::Scheduling)), &[unbound], now());
    assert_eq!(p.bound_node, None);
    let bound = pod(json!({"phase": "Pending"}), Some("node-a"));
    let p = plan(&vmi(Some(VmiPhase::Scheduling)), &[bound], now());
    assert_eq!(p.bound_node.as_deref(), Some("node-a"));
    assert_eq!(
        p.status.and_then(|s| s.node_name),
        None,
        "not Scheduled yet"
    );
    // Once the VMI has its node, that is the one (a migration target's Pod does not move it).
    let mut scheduled = vmi(Some(VmiPhase::Running));
    scheduled.status.as_mut().unwrap().node_name = Some("node-a".into());
    let elsewhere = pod(json!({"phase": "Running"}), Some("node-b"));
    assert_eq!(plan(&scheduled, &[elsewhere], now()).bound_node, None);
}

#[test]
fn the_pods_qos_class_is_the_vmis() {
    let pending = pod(json!({"phase": "Pending", "qosClass": "Burstable"}), None);
    let p = plan(&vmi(Some(VmiPhase::Pending)), &[pending], now());
    assert_eq!(p.status.unwrap().qos_class.as_deref(), Some("Burstable"));
}

#[test]
fn the_launchers_user_is_the_vmis_runtime_user() {
    let mut non_root = pod(json!({"phase": "Pending"}), None);
    non_root.spec.as_mut().unwrap().security_context =
        Some(serde_json::from_value(json!({"runAsUser": 107, "runAsNonRoot": true})).unwrap());
    let p = plan(&vmi(Some(VmiPhase::Pending)), &[non_root], now());
    assert_eq!(p.status.unwrap().runtime_user, Some(107));
    let root = pod(json!({"phase": "Pending"}), None);
    let p = plan(&vmi(Some(VmiPhase::Pending)), &[root], now());
    assert_eq!(p.status.unwrap().runtime_user, Some(0));
}

#[test]
fn a_pod_first_seen_running_records_scheduling_and_scheduled() {
    let running = pod(
        json!({"phase": "Running", "containerStatuses": [
        {"name": "compute", "ready": true, "restartCount": 0, "image": "l", "imageID": "",
         "state": {"running": {}}}]}),
        Some("node01"),
    );
    let mut pending = vmi(None);
    api::vmi::set_phase(
        pending.status.get_or_insert_with(Default::default),
        VmiPhase::Pending,
        now(),
    );
    let status = plan(&pending, &[running], now()).status.unwrap();
    let phases: Vec<VmiPhase> = status
        .phase_transition_timestamps
        .iter()
        .map(|t| t.phase)
        .collect();
    assert_eq!(
        phases,
        [VmiPhase::Pending, VmiPhase::Scheduling, VmiPhase::Scheduled]
    );
}

#[test]
fn unschedulable_and_image_pull_errors_are_conditions() {
    let unschedulable = pod(
        json!({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/1 nodes are available: 1 Insufficient memory."}]}),
        None,
    );
    let status = plan(&vmi(Some(VmiPhase::Scheduling)), &[unschedulable], now())
        .status
        .unwrap();
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    assert!(c.message.as_ref().unwrap().contains("Insufficient memory"));

    let pull = pod(
        json!({"phase": "Pending", "containerStatuses": [
        {"name": "volumecontainerdisk", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}),
        Some("node01"),
    );
    let status = plan(&vmi(Some(VmiPhase::Scheduling)), &[pull], now())
        .status
        .unwrap();
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Synchronized")
        .unwrap();
    assert_eq!(c.reason.as_deref(), Some("ErrImagePull"));
}

#[test]
fn a_dead_or_missing_launcher_fails_the_vmi() {
    let failed = pod(
        json!({"phase": "Failed", "containerStatuses": [
        {"name": "compute", "ready": false, "restartCount": 0, "image": "l", "imageID": "",
         "state": {"terminated": {"exitCode": 137, "reason": "Error", "message": "killed"}}}]}),
        Some("node01"),
    );
    let status = plan(&vmi(Some(VmiPhase::Running)), &[failed], now())
        .status
        .unwrap();
    assert_eq!(status.phase, Some(VmiPhase::Failed));
    assert_eq!(status.reason.as_deref(), Some("LauncherFailed"));
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.message.as_deref(), Some("killed"));

    let status = plan(&vmi(Some(VmiPhase::Running)), &[], now())
        .status
        .unwrap();
    assert_eq!(status.phase, Some(VmiPhase::Failed));
    assert_eq!(status.reason.as_deref(), Some("PodNotExists"));

    let done = pod(json!({"phase": "Succeeded"}), Some("node01"));
    let status = plan(&vmi(Some(VmiPhase::Running)), &[done], now())
        .status
        .unwrap();
    assert_eq!(status.phase, Some(VmiPhase::Succeeded));

    // A containerDisk's container sleeps on in a Pod still Running: the launcher's end counts.
    for (code, phase) in [(0, VmiPhase::Succeeded), (1, VmiPhase::Failed)] {
        let launcher_ended = pod(
            json!({"phase": "Running", "containerStatuses": [
            {"name": "volumecontainerdisk", "ready": true, "restartCount": 0, "image": "c",
             "imageID": "", "state": {"running": {}}},
            {"name": "compute", "ready": false, "restartCount": 0, "image": "l", "imageID": "",
             "state": {"terminated": {"exitCode": code}}}]}),
            Some("node01"),
        );
        let status = plan(&vmi(Some(VmiPhase::Running)), &[launcher_ended], now())
            .status
            .unwrap();
        assert_eq!(status.phase, Some(phase), "exit code {code}");
    }
}

#[test]
fn deletion_removes_pods_then_the_finalizer() {
    let running = pod(json!({"phase": "Running"}), Some("node01"));
    let mut deleting = vmi(Some(VmiPhase::Running));
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(
        plan(&deleting, std::slice::from_ref(&running), now()).action,
        VmiAction::DeletePods(vec!["virt-launcher-v-abcde".into()])
    );
    let mut terminating = running;
    terminating.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(
        plan(&deleting, &[terminating], now()).action,
        VmiAction::Nothing
    );
    assert_eq!(
        plan(&deleting, &[], now()).action,
        VmiAction::RemoveFinalizer
    );
}

#[test]
fn final_vmis_stay_final() {
    let running = pod(json!({"phase": "Running"}), Some("node01"));
    let p = plan(&vmi(Some(VmiPhase::Succeeded)), &[running], now());
    assert_eq!(
        p.action,
        VmiAction::DeletePods(vec!["virt-launcher-v-abcde".into()])
    );
    assert_eq!(p.status.and_then(|s| s.phase), Some(VmiPhase::Succeeded));
}
