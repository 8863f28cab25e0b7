use api::vm::{StateChangeRequest, VirtualMachine};
use api::{Condition, VirtualMachineInstance, VmiPhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;

use crate::vm::plan::{legacy_firmware_uuid, plan, vmi_for, VmiAction, VM_GENERATION_ANNOTATION};

fn now() -> Timestamp {
    "2026-11-29T12:00:00Z".parse().unwrap()
}

fn vm(strategy: &str) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "default", "uid": "vm-uid", "generation": 3},
        "spec": {"runStrategy": strategy,
                 "template": {"metadata": {"labels": {"kubevirt.io/vm": "vm1"}},
                              "spec": {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}}}
    }))
    .unwrap()
}

fn vmi(phase: Option<VmiPhase>, uid: &str) -> VirtualMachineInstance {
    let mut vmi = vmi_for(&vm("Always")).unwrap();
    vmi.metadata.uid = Some(uid.into());
    vmi.status = Some(api::VirtualMachineInstanceStatus {
        phase,
        ..Default::default()
    });
    vmi
}

fn with_condition(mut vmi: VirtualMachineInstance, condition: Condition) -> VirtualMachineInstance {
    vmi.status.as_mut().unwrap().conditions.push(condition);
    vmi
}

fn delete(uid: &str) -> VmiAction {
    VmiAction::Delete { uid: uid.into() }
}

#[test]
fn run_strategies() {
    use VmiPhase::*;
    let cases: Vec<(&str, Option<VmiPhase>, VmiAction, &str)> = vec![
        // strategy, VMI phase (None: no VMI), action, printableStatus
        ("Always", None, VmiAction::Create, "Starting"),
        ("Always", Some(Scheduling), VmiAction::Nothing, "Starting"),
        ("Always", Some(Running), VmiAction::Nothing, "Running"),
        ("Always", Some(Succeeded), delete("vmi-uid"), "Stopped"),
        (
            "Always",
            Some(Failed),
            delete("vmi-uid"),
            "CrashLoopBackOff",
        ),
        ("Halted", None, VmiAction::Nothing, "Stopped"),
        ("Halted", Some(Running), delete("vmi-uid"), "Running"),
        ("RerunOnFailure", None, VmiAction::Create, "Starting"),
        (
            "RerunOnFailure",
            Some(Failed),
            delete("vmi-uid"),
            "CrashLoopBackOff",
        ),
        (
            "RerunOnFailure",
            Some(Succeeded),
            delete("vmi-uid"),
            "Stopped",
        ),
        ("Once", None, VmiAction::Create, "Starting"),
        ("Once", Some(Failed), VmiAction::Nothing, "CrashLoopBackOff"),
        ("Once", Some(Succeeded), VmiAction::Nothing, "Stopped"),
        ("Manual", None, VmiAction::Nothing, "Stopped"),
        ("Manual", Some(Running), VmiAction::Nothing, "Running"),
    ];
    let mut failures = Vec::new();
    for (strategy, phase, want_action, want_status) in cases {
        let vmi = phase.map(|p| vmi(Some(p), "vmi-uid"));
        let plan = plan(&vm(strategy), vmi.as_ref(), now());
        let got_status = plan.status.printable_status.as_deref().unwrap();
        if plan.action != want_action || got_status != want_status {
            failures.push(format!(
                "{strategy} with {phase:?}: want {want_action:?}/{want_status}, got {:?}/{got_status}",
                plan.action
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn rerun_on_failure_replaces_a_failed_vmi_through_a_start_request_and_stays_stopped_after_a_stop() {
    // A failed VMI is deleted with a Start request left for its replacement.
    let failed = vmi(Some(VmiPhase::Failed), "a");
    let first = plan(&vm("RerunOnFailure"), Some(&failed), now());
    assert_eq!(first.action, delete("a"));
    let actions: Vec<&str> = first
        .status
        .state_change_requests
        .iter()
        .map(|r| r.action.as_str())
        .collect();
    assert_eq!(actions, ["Start"]);
    // Once it is gone, the request creates the replacement after the back-off, and is served.
    let mut gone = vm("RerunOnFailure");
    gone.status = Some(first.status.clone());
    assert_eq!(plan(&gone, None, now()).action, VmiAction::Nothing);
    let later = plan(&gone, None, now() + SignedDuration::from_secs(11));
    assert_eq!(later.action, VmiAction::Create);
    assert!(later.status.state_change_requests.is_empty());

    // Stopped by a Stop request (virtctl stop): no VMI, the strategy kept, nothing created.
    let mut stopped = vm("RerunOnFailure");
    stopped.status = Some(api::vm::VirtualMachineStatus {
        run_strategy: Some("RerunOnFailure".into()),
        ..Default::default()
    });
    let plan_stopped = plan(&stopped, None, now());
    assert_eq!(plan_stopped.action, VmiAction::Nothing);
    assert_eq!(
        plan_stopped.status.printable_status.as_deref(),
        Some("Stopped")
    );
    // Switched from another strategy, it starts.
    stopped.status.as_mut().unwrap().run_strategy = Some("Halted".into());
    assert_eq!(plan(&stopped, None, now()).action, VmiAction::Create);
}

#[test]
fn failures_back_off_and_running_resets() {
    let failed = vmi(Some(VmiPhase::Failed), "a");
    let first = plan(&vm("Always"), Some(&failed), now());
    let failure = first.status.start_failure.clone().unwrap();
    assert_eq!(failure.consecutive_fail_count, Some(1));
    assert_eq!(
        failure.retry_after_timestamp,
        Some(Time(now() + SignedDuration::from_secs(10)))
    );

    // The failed VMI is deleted; while backing off no new VMI is created.
    let mut backing_off = vm("Always");
    backing_off.status = Some(first.status.clone());
    let second = plan(&backing_off, None, now() + SignedDuration::from_secs(5));
    assert_eq!(second.action, VmiAction::Nothing);
    assert_eq!(
        second.status.printable_status.as_deref(),
        Some("CrashLoopBackOff")
    );
    let third = plan(&backing_off, None, now() + SignedDuration::from_secs(11));
    assert_eq!(third.action, VmiAction::Create);

    // The same failed VMI is not counted twice; the next one doubles the back-off.
    let again = plan(&backing_off, Some(&failed), now());
    assert_eq!(
        again
            .status
            .start_failure
            .as_ref()
            .unwrap()
            .consecutive_fail_count,
        Some(1)
    );
    let next = plan(&backing_off, Some(&vmi(Some(VmiPhase::Failed), "b")), now());
    let failure = next.status.start_failure.unwrap();
    assert_eq!(failure.consecutive_fail_count, Some(2));
    assert_eq!(
        failure.retry_after_timestamp,
        Some(Time(now() + SignedDuration::from_secs(20)))
    );

    let running = plan(
        &backing_off,
        Some(&vmi(Some(VmiPhase::Running), "c")),
        now(),
    );
    assert_eq!(running.status.start_failure, None);
}

fn with_requests(mut vm: VirtualMachine, requests: &[(&str, Option<&str>)]) -> VirtualMachine {
    let status = vm.status.get_or_insert_with(Default::default);
    status.state_change_requests = requests
        .iter()
        .map(|(action, uid)| StateChangeRequest {
            action: action.to_string(),
            data: None,
            uid: uid.map(str::to_string),
        })
        .collect();
    vm
}

#[test]
fn state_change_requests_drive_manual_vms() {
    let start = with_requests(vm("Manual"), &[("Start", None)]);
    let p = plan(&start, None, now());
    assert_eq!(p.action, VmiAction::Create);
    assert!(
        p.status.state_change_requests.is_empty(),
        "served Start is dropped"
    );
    assert!(!p.start_paused);

    // `virtctl start --paused`: the Start request carries startPaused.
    let mut paused = start.clone();
    paused.status.as_mut().unwrap().state_change_requests[0].data =
        Some([("startPaused".to_string(), "true".to_string())].into());
    let p = plan(&paused, None, now());
    assert_eq!(p.action, VmiAction::Create);
    assert!(p.start_paused);

    let running = vmi(Some(VmiPhase::Running), "r1");
    let stop = with_requests(vm("Manual"), &[("Stop", Some("r1"))]);
    let p = plan(&stop, Some(&running), now());
    assert_eq!(p.action, delete("r1"));
    assert_eq!(
        p.status.state_change_requests.len(),
        1,
        "kept until the VMI is gone"
    );
    let p = plan(&stop, None, now());
    assert_eq!(p.action, VmiAction::Nothing);
    assert!(p.status.state_change_requests.is_empty());

    // restart: Stop the old VMI, then Start a new one.
    let restart = with_requests(vm("Always"), &[("Stop", Some("r1")), ("Start", None)]);
    assert_eq!(plan(&restart, Some(&running), now()).action, delete("r1"));
    let p = plan(&restart, None, now());
    assert_eq!(p.action, VmiAction::Create);
    assert!(p.status.state_change_requests.is_empty());
    // A Stop for an older VMI does not touch the new one.
    let stale = with_requests(vm("Always"), &[("Stop", Some("old"))]);
    let p = plan(&stale, Some(&running), now());
    assert_eq!(p.action, VmiAction::Nothing);
    assert!(p.status.state_change_requests.is_empty());
}

#[test]
fn statuses_from_vmi_conditions() {
    let unschedulable = with_condition(
        vmi(Some(VmiPhase::Scheduling), "u"),
        Condition::new(
            "PodScheduled",
            false,
            "Unschedulable",
            "0/1 nodes are available: 1 Insufficient memory.",
        ),
    );
    let p = plan(&vm("Always"), Some(&unschedulable), now());
    assert_eq!(
        p.status.printable_status.as_deref(),
        Some("ErrorUnschedulable")
    );
    let copied = p
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap();
    assert!(copied
        .message
        .as_ref()
        .unwrap()
        .contains("Insufficient memory"));

    let paused = with_condition(
        vmi(Some(VmiPhase::Running), "p"),
        Condition::new("Paused", true, "PausedByUser", ""),
    );
    assert_eq!(
        plan(&vm("Always"), Some(&paused), now())
            .status
            .printable_status
            .as_deref(),
        Some("Paused")
    );

    let ready = with_condition(
        vmi(Some(VmiPhase::Running), "r"),
        Condition::new("Ready", true, "", ""),
    );
    let p = plan(&vm("Always"), Some(&ready), now());
    assert_eq!(p.status.ready, Some(true));
    assert_eq!(p.status.created, Some(true));
    assert_eq!(p.status.observed_generation, Some(3));

    // The VMI carries the generation it was made from; a later template change shows as
    // desired ahead of observed until the VMI is made again.
    let mut template_changed = vm("Always");
    let made = vmi_for(&template_changed).unwrap();
    assert_eq!(
        made.metadata.annotations.as_ref().unwrap()[VM_GENERATION_ANNOTATION],
        "3"
    );
    template_changed.metadata.generation = Some(4);
    let mut running = made.clone();
    running.status = ready.status.clone();
    let p = plan(&template_changed, Some(&running), now());
    assert_eq!(p.status.desired_generation, Some(4));
    assert_eq!(p.status.observed_generation, Some(3));

    let mut stopping = vmi(Some(VmiPhase::Running), "s");
    stopping.metadata.deletion_timestamp = Some(Time(now()));
    let p = plan(&vm("Halted"), Some(&stopping), now());
    assert_eq!(p.action, VmiAction::Nothing, "already being deleted");
    assert_eq!(p.status.printable_status.as_deref(), Some("Stopping"));
}

#[test]
fn deleting_the_vm_deletes_its_vmi() {
    let mut deleting = vm("Always");
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let running = vmi(Some(VmiPhase::Running), "d");
    let p = plan(&deleting, Some(&running), now());
    assert_eq!(p.action, delete("d"));
    assert_eq!(p.status.printable_status.as_deref(), Some("Terminating"));
    assert_eq!(plan(&deleting, None, now()).action, VmiAction::Nothing);
}

#[test]
fn an_orphan_deletion_of_the_vm_leaves_its_vmi() {
    let mut orphaning = vm("Always");
    orphaning.metadata.deletion_timestamp = Some(Time(now()));
    orphaning.metadata.finalizers = Some(vec!["orphan".into()]);
    let running = vmi(Some(VmiPhase::Running), "o");
    let p = plan(&orphaning, Some(&running), now());
    assert_eq!(p.action, VmiAction::Nothing);
    assert_eq!(p.status.printable_status.as_deref(), Some("Terminating"));
}

#[test]
fn running_is_an_alias() {
    let mut legacy = vm("Always");
    legacy.spec.run_strategy = None;
    legacy.spec.running = Some(true);
    assert_eq!(plan(&legacy, None, now()).action, VmiAction::Create);
    legacy.spec.running = Some(false);
    assert_eq!(plan(&legacy, None, now()).action, VmiAction::Nothing);
}

#[test]
fn vmi_is_the_template_owned_by_the_vm() {
    let vmi = vmi_for(&vm("Always")).unwrap();
    assert_eq!(vmi.metadata.name.as_deref(), Some("vm1"));
    assert_eq!(vmi.metadata.namespace.as_deref(), Some("default"));
    let labels = vmi.metadata.labels.unwrap();
    assert_eq!(labels["kubevirt.io/vm"], "vm1");
    assert_eq!(labels["vm.kubevirt.io/name"], "vm1");
    let owner = &vmi.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("VirtualMachine", "vm-uid")
    );
}

/// The firmware UUID: KubeVirt's legacy one, the version 5 UUID of the VM's name (the values
/// are Python's `uuid.uuid5(UUID("6a1a24a1-4061-4607-8bf4-a3963d0c5895"), name)`), unless the
/// template sets one; a clone's empty UUID counts as none.
#[test]
fn the_vmi_gets_the_vms_legacy_firmware_uuid_unless_the_template_has_one() {
    assert_eq!(
        legacy_firmware_uuid("vm-cirros"),
        "0d2a2043-41c0-59c3-9b17-025022203668"
    );
    let derived = legacy_firmware_uuid("vm1");
    assert_eq!(derived, "133bf63e-9459-5126-9b21-b56e9b3d17b3");
    let firmware_of = |vm: &VirtualMachine| {
        let vmi = vmi_for(vm).unwrap();
        vmi.spec.domain.firmware.unwrap()
    };
    assert_eq!(firmware_of(&vm("Always")).uuid, Some(derived.clone()));
    let mut cleared = vm("Always");
    let template = cleared.spec.template.spec.as_mut().unwrap();
    template.domain.firmware = Some(api::domain::Firmware {
        uuid: Some(String::new()),
        serial: Some("s-1".into()),
        ..Default::default()
    });
    let firmware = firmware_of(&cleared);
    assert_eq!(firmware.uuid, Some(derived));
    assert_eq!(firmware.serial.as_deref(), Some("s-1"));
    let own = "5d307ca9-b3ef-428c-8861-06e72d69f223";
    let template = cleared.spec.template.spec.as_mut().unwrap();
    template.domain.firmware.as_mut().unwrap().uuid = Some(own.into());
    assert_eq!(firmware_of(&cleared).uuid.as_deref(), Some(own));
    // The VM itself is left as it is.
    assert!(vm("Always")
        .spec
        .template
        .spec
        .unwrap()
        .domain
        .firmware
        .is_none());
}

#[test]
fn a_vm_locked_by_a_snapshot_or_restore_waits_to_start_and_keeps_its_start_request() {
    for lock in ["snapshotInProgress", "restoreInProgress"] {
        let mut locked = vm("Halted");
        locked.status = serde_json::from_value(json!({
            lock: "held",
            "stateChangeRequests": [{"action": "Start"}],
        }))
        .unwrap();
        let held = plan(&locked, None, now());
        assert_eq!(held.action, VmiAction::Nothing, "{lock}");
        assert_eq!(held.status.state_change_requests.len(), 1, "{lock}");
        let mut always = vm("Always");
        always.status = serde_json::from_value(json!({lock: "held"})).unwrap();
        assert_eq!(
            plan(&always, None, now()).action,
            VmiAction::Nothing,
            "{lock}"
        );
        // A running VM is not stopped by the lock.
        let running = vmi(Some(VmiPhase::Running), "vmi-uid");
        assert_eq!(
            plan(&always, Some(&running), now()).action,
            VmiAction::Nothing
        );
        always.status = None;
        assert_eq!(
            plan(&always, None, now()).action,
            VmiAction::Create,
            "{lock}"
        );
    }
}
