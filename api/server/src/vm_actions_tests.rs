use serde_json::json;

use super::*;

fn vm(strategy: &str, requests: serde_json::Value) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "testvm", "namespace": "default", "resourceVersion": "7"},
        "spec": {"runStrategy": strategy, "template": {"spec": {"domain": {"devices": {}}}}},
        "status": {"stateChangeRequests": requests}
    }))
    .unwrap()
}

fn vmi(phase: &str) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvm", "namespace": "default", "uid": "u-1"},
        "spec": {"domain": {"devices": {}}},
        "status": {"phase": phase}
    }))
    .unwrap()
}

fn stop_u1() -> StateChangeRequest {
    StateChangeRequest {
        action: "Stop".into(),
        data: None,
        uid: Some("u-1".into()),
    }
}

fn start() -> StateChangeRequest {
    StateChangeRequest {
        action: "Start".into(),
        data: None,
        uid: None,
    }
}

#[test]
fn start_halted_sets_always() {
    let change = plan_start(&vm("Halted", json!([])), None, &Default::default()).unwrap();
    assert_eq!(change.run_strategy, Some(RunStrategy::Always));
    assert!(change.requests.is_empty());
}

#[test]
fn start_refusals() {
    let running = vmi("Running");
    let e = plan_start(
        &vm("Manual", json!([])),
        Some(&running),
        &Default::default(),
    );
    assert_eq!(e.unwrap_err().message, "VM is already running");
    let e = plan_start(&vm("Always", json!([])), None, &Default::default()).unwrap_err();
    assert_eq!(e.message, "Always does not support manual start requests");
    assert_eq!(e.code, http::StatusCode::CONFLICT);
}

#[test]
fn start_manual_adds_requests() {
    let change = plan_start(&vm("Manual", json!([])), None, &Default::default()).unwrap();
    assert_eq!(change.requests, vec![start()]);
    let done = vmi("Succeeded");
    let change = plan_start(&vm("Manual", json!([])), Some(&done), &Default::default()).unwrap();
    assert_eq!(change.requests, vec![stop_u1(), start()]);
    let paused = StartOptions {
        paused: true,
        ..Default::default()
    };
    let change = plan_start(&vm("Manual", json!([])), None, &paused).unwrap();
    assert_eq!(
        change.requests[0].data.as_ref().unwrap()["startPaused"],
        "true"
    );
}

#[test]
fn stop_by_strategy() {
    let running = vmi("Running");
    let change = plan_stop(
        &vm("Always", json!([])),
        Some(&running),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(change.run_strategy, Some(RunStrategy::Halted));
    let change = plan_stop(
        &vm("Manual", json!([])),
        Some(&running),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(change.requests, vec![stop_u1()]);
    let e = plan_stop(&vm("Halted", json!([])), None, &Default::default()).unwrap_err();
    assert_eq!(e.message, "VM is not running");
}

#[test]
fn rerun_on_failure_stops_and_starts_by_requests_and_keeps_its_strategy() {
    let running = vmi("Running");
    let rerun = vm("RerunOnFailure", json!([]));
    let stop = plan_stop(&rerun, Some(&running), &Default::default()).unwrap();
    assert_eq!(stop.run_strategy, None);
    assert_eq!(stop.requests, vec![stop_u1()]);
    let e = plan_stop(&rerun, None, &Default::default()).unwrap_err();
    assert_eq!(e.message, "VM is not running");
    // Stopped (no VMI): a Start request; after Succeeded: Stop(uid) then Start.
    let start_none = plan_start(&rerun, None, &Default::default()).unwrap();
    assert_eq!(start_none.requests, vec![start()]);
    assert_eq!(start_none.run_strategy, None);
    let done = vmi("Succeeded");
    let start_done = plan_start(&rerun, Some(&done), &Default::default()).unwrap();
    assert_eq!(start_done.requests, vec![stop_u1(), start()]);
    let failed = vmi("Failed");
    let e = plan_start(&rerun, Some(&failed), &Default::default()).unwrap_err();
    assert_eq!(
        e.message,
        "RerunOnFailure does not support starting VM from failed state"
    );
    assert_eq!(e.code, http::StatusCode::CONFLICT);
}

#[test]
fn stop_with_grace_period_patches_the_vmi() {
    let running = vmi("Running");
    let force = StopOptions {
        grace_period: Some(0),
        ..Default::default()
    };
    let change = plan_stop(&vm("Always", json!([])), Some(&running), &force).unwrap();
    assert_eq!(change.vmi_grace_period, Some(0));
    // Forcing a VM that is already stopping only shortens the grace period.
    let change = plan_stop(&vm("Halted", json!([])), Some(&running), &force).unwrap();
    assert_eq!(
        change,
        VmChange {
            vmi_grace_period: Some(0),
            ..Default::default()
        }
    );
}

#[test]
fn restart_adds_stop_then_start() {
    let running = vmi("Running");
    let change = plan_restart(
        &vm("Always", json!([])),
        Some(&running),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(change.requests, vec![stop_u1(), start()]);
    assert!(plan_restart(&vm("Always", json!([])), None, &Default::default()).is_err());
    let e = plan_restart(
        &vm("Halted", json!([])),
        Some(&running),
        &Default::default(),
    )
    .unwrap_err();
    assert!(e.message.contains("Halted does not support manual restart"));
    let pending = vm("Always", json!([{"action": "Start"}]));
    assert!(plan_restart(&pending, Some(&running), &Default::default()).is_err());
}

#[test]
fn migrate_creates_a_migration_for_a_running_vmi() {
    let running = vmi("Running");
    let options = MigrateOptions {
        added_node_selector: Some([("zone".into(), "a".into())].into()),
        ..Default::default()
    };
    let m = plan_migration(&vm("Always", json!([])), Some(&running), &options).unwrap();
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(v["metadata"]["generateName"], "kubevirt-migrate-vm-");
    assert_eq!(v["metadata"]["namespace"], "default");
    assert_eq!(v["spec"]["vmiName"], "testvm");
    assert_eq!(v["spec"]["addedNodeSelector"]["zone"], "a");
    let pending = vmi("Pending");
    assert!(plan_migration(&vm("Always", json!([])), Some(&pending), &options).is_err());
}
