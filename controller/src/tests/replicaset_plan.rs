use api::{VirtualMachineInstance, VirtualMachineInstanceReplicaSet, VmiPhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::replicaset::plan::*;

const RS_UID: &str = "rs-uid-1";

fn rs(replicas: i32) -> VirtualMachineInstanceReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceReplicaSet",
        "metadata": {"name": "web", "namespace": "default", "uid": RS_UID},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"note": "n"}},
                "spec": {"domain": {"devices": {}, "memory": {"guest": "16Mi"}}}
            }
        }
    }))
    .unwrap()
}

/// A VMI the replica set controls (`owned`) or an orphan, in `phase`, created at `created` s.
fn vmi(name: &str, owned: bool, phase: VmiPhase, created: i64) -> VirtualMachineInstance {
    let mut vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"domain": {"devices": {}}}
    }))
    .unwrap();
    if owned {
        vmi.metadata.owner_references = Some(vec![owner_reference(&rs(1)).unwrap()]);
    }
    vmi.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
    let mut status = api::VirtualMachineInstanceStatus {
        phase: Some(phase),
        ..Default::default()
    };
    if phase == VmiPhase::Running {
        status
            .conditions
            .push(api::Condition::new("Ready", true, "", ""));
    }
    vmi.status = Some(status);
    vmi
}

#[test]
fn too_few_vmis_are_created_and_an_orphan_that_matches_is_adopted() {
    let vmis = [
        vmi("web-a", true, VmiPhase::Running, 1),
        vmi("stray", false, VmiPhase::Running, 2),
    ];
    let plan = plan(&rs(4), &vmis).unwrap();
    assert_eq!(plan.adopt, ["stray"]);
    // Two active (one owned, one adopted) of four.
    assert_eq!(plan.create, 2);
    assert!(plan.delete.is_empty());
}

#[test]
fn the_excess_goes_not_yet_running_first_then_newest() {
    let vmis = [
        vmi("old-running", true, VmiPhase::Running, 1),
        vmi("new-running", true, VmiPhase::Running, 5),
        vmi("scheduling", true, VmiPhase::Scheduling, 2),
        vmi("pending", true, VmiPhase::Pending, 3),
    ];
    let plan = plan(&rs(1), &vmis).unwrap();
    assert_eq!(plan.create, 0);
    assert_eq!(plan.delete, ["pending", "scheduling", "new-running"]);
}

#[test]
fn finished_vmis_are_deleted_and_replaced_and_others_left_alone() {
    let mut deleting = vmi("going", true, VmiPhase::Running, 1);
    deleting.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(9).unwrap()));
    let mut foreign = vmi("foreign", false, VmiPhase::Running, 1);
    foreign.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    let vmis = [
        vmi("failed", true, VmiPhase::Failed, 1),
        vmi("running", true, VmiPhase::Running, 2),
        deleting,
        foreign,
    ];
    // One active of two: a new one replaces the failed one, which goes.
    let first = plan(&rs(2), &vmis).unwrap();
    assert_eq!(first.create, 1);
    assert_eq!(first.delete_finished, ["failed"]);
    assert!(first.adopt.is_empty(), "{:?}", first.adopt);
    let second = plan(&rs(1), &vmis).unwrap();
    assert_eq!(second.create, 0);
    assert!(second.delete.is_empty());
    assert_eq!(second.delete_finished, ["failed"]);
}

#[test]
fn paused_creates_and_deletes_nothing_and_says_so() {
    let mut paused = rs(3);
    paused.spec.paused = Some(true);
    let vmis = [vmi("web-a", true, VmiPhase::Failed, 1)];
    let p = plan(&paused, &vmis).unwrap();
    assert_eq!(
        (p.create, p.delete.len(), p.delete_finished.len()),
        (0, 0, 0)
    );
    let now = Timestamp::from_second(100).unwrap();
    let s = status(&paused, &vmis, None, now);
    let condition = api::condition::find(&s.conditions, "ReplicaPaused").unwrap();
    assert!(condition.is_true());
    assert_eq!(condition.reason.as_deref(), Some("Paused"));
    // The condition keeps its transition time across passes.
    paused.status = Some(s.clone());
    let later = status(&paused, &vmis, None, Timestamp::from_second(200).unwrap());
    assert_eq!(later.conditions, s.conditions);
}

#[test]
fn status_counts_active_and_ready_vmis_and_gives_the_selector_string() {
    let vmis = [
        vmi("running", true, VmiPhase::Running, 1),
        vmi("scheduled", true, VmiPhase::Scheduled, 2),
        vmi("failed", true, VmiPhase::Failed, 3),
        vmi("orphan", false, VmiPhase::Running, 4),
    ];
    let now = Timestamp::from_second(100).unwrap();
    let s = status(&rs(2), &vmis, None, now);
    assert_eq!(s.replicas, Some(2));
    assert_eq!(s.ready_replicas, Some(1));
    assert_eq!(s.label_selector.as_deref(), Some("app=web"));
    assert!(s.conditions.is_empty());
    let failed = status(&rs(2), &vmis, Some(("FailedCreate", "quota exceeded")), now);
    let condition = api::condition::find(&failed.conditions, "ReplicaFailure").unwrap();
    assert_eq!(condition.reason.as_deref(), Some("FailedCreate"));
    assert_eq!(condition.message.as_deref(), Some("quota exceeded"));
}

#[test]
fn a_created_vmi_is_the_template_with_generate_name_and_the_replica_set_as_controller() {
    let new = vmi_from_template(&rs(1)).unwrap();
    assert_eq!(new.metadata.name, None);
    assert_eq!(new.metadata.generate_name.as_deref(), Some("web"));
    assert_eq!(new.metadata.labels.unwrap()["app"], "web");
    assert_eq!(new.metadata.annotations.unwrap()["note"], "n");
    let owner = &new.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("VirtualMachineInstanceReplicaSet", RS_UID, Some(true))
    );
    let mut named = rs(1);
    named.spec.template.metadata.as_mut().unwrap().generate_name = Some("vmi-".into());
    assert_eq!(
        vmi_from_template(&named)
            .unwrap()
            .metadata
            .generate_name
            .as_deref(),
        Some("vmi-")
    );
}

#[test]
fn a_selector_that_misses_the_template_is_left_alone() {
    let mut bad = rs(1);
    bad.spec.selector.match_labels = Some([("app".to_string(), "db".to_string())].into());
    assert_eq!(plan(&bad, &[]), Err(Invalid::TemplateNotSelected));
}
