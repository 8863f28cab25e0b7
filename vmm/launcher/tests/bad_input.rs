//! Bad input never takes the launcher down: malformed VMI JSON, a VMI validation refuses, a
//! missing disk file, a kernel that does not exist, QEMU missing from PATH, socket paths that
//! are too long: each is a clear gRPC error (INVALID_ARGUMENT or FAILED_PRECONDITION, with the
//! reason), and the launcher answers Ping afterwards with no VM created. A QEMU that dies is
//! reported by GetDomain with the reason; a handler that is gone does not stop the VM.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use contract::proto::v1;
use serde_json::json;
use tonic::Code;

fn vmi(volumes: serde_json::Value, disks: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "bad", "namespace": "default" },
        "spec": {
            "domain": {
                "devices": { "disks": disks, "autoattachPodInterface": false },
                "memory": { "guest": "128Mi" }
            },
            "volumes": volumes
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_the_launcher_stays_up() {
    require_qemu();
    let dirs = TestDirs::new("bad");
    // A kernel file that exists (the errors below come before it is read).
    let kernel = dirs.root.join("vmlinux");
    std::fs::write(&kernel, b"not really a kernel").expect("write kernel");
    let mut process = LauncherProcess::start(&dirs, &kernel, None, &[]);
    let mut client = client(&dirs).await;

    let empty_disk = json!([{ "name": "scratch", "emptyDisk": { "capacity": "64Mi" } }]);
    let long_socket = format!("/tmp/{}/notify.sock", "x".repeat(120));
    let mut kernel_boot = vmi(json!([]), json!([]));
    kernel_boot["spec"]["domain"]["firmware"] = json!({
        "kernelBoot": { "container": { "image": "k", "kernelPath": "/boot/does-not-exist" } }
    });
    let cases: Vec<(&str, Vec<u8>, String, Code, &str)> = vec![
        (
            "malformed JSON",
            b"{\"kind\": \"VirtualMachineInstance\", ".to_vec(),
            String::new(),
            Code::InvalidArgument,
            "malformed VMI JSON",
        ),
        (
            "refused by validation",
            serde_json::to_vec(&vmi(
                json!([{ "name": "dv", "dataVolume": { "name": "x" } }]),
                json!([]),
            ))
            .unwrap(),
            String::new(),
            Code::InvalidArgument,
            "spec.volumes[0]",
        ),
        (
            "missing containerDisk",
            serde_json::to_vec(&vmi(
                json!([{ "name": "root", "containerDisk": { "image": "img" } }]),
                json!([]),
            ))
            .unwrap(),
            String::new(),
            Code::FailedPrecondition,
            "no disk image under",
        ),
        (
            "missing PVC disk.img",
            serde_json::to_vec(&vmi(
                json!([{ "name": "data", "persistentVolumeClaim": { "claimName": "c" } }]),
                json!([]),
            ))
            .unwrap(),
            String::new(),
            Code::FailedPrecondition,
            "disk.img does not exist",
        ),
        (
            "kernel that does not exist",
            serde_json::to_vec(&kernel_boot).unwrap(),
            String::new(),
            Code::FailedPrecondition,
            "does-not-exist does not exist",
        ),
        (
            "notify socket path too long",
            serde_json::to_vec(&vmi(empty_disk.clone(), json!([]))).unwrap(),
            long_socket,
            Code::InvalidArgument,
            "longer than the 107",
        ),
    ];
    for (what, json, notify, code, message) in cases {
        let status = sync_emulated(&mut client, json, &notify)
            .await
            .expect_err(what);
        assert_eq!(status.code(), code, "{what}: {status}");
        assert!(
            status.message().contains(message),
            "{what}: {}",
            status.message()
        );
        client
            .ping(v1::PingRequest {})
            .await
            .unwrap_or_else(|e| panic!("Ping after {what}: {e}"));
        let domain = client
            .get_domain(v1::GetDomainRequest {})
            .await
            .expect("GetDomain")
            .into_inner();
        assert_eq!(domain.domain, None, "{what} created a VM");
    }
    // Operations before any VM.
    let status = client
        .pause(v1::VmiRequest { vmi: String::new() })
        .await
        .expect_err("Pause without VM");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(process.alive(), "{}", process.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_missing_from_path() {
    let dirs = TestDirs::new("noqemu");
    let kernel = dirs.root.join("vmlinux");
    std::fs::write(&kernel, b"k").expect("write kernel");
    let empty_path = dirs.root.join("empty-path");
    std::fs::create_dir_all(&empty_path).expect("mkdir");
    let path = empty_path.display().to_string();
    let mut process =
        LauncherProcess::start_with_env(&dirs, &kernel, None, &[], &[("PATH", &path)]);
    let mut client = client(&dirs).await;
    let vmi = vmi(
        json!([{ "name": "scratch", "emptyDisk": { "capacity": "64Mi" } }]),
        json!([]),
    );
    let status = sync_emulated(&mut client, serde_json::to_vec(&vmi).unwrap(), "")
        .await
        .expect_err("no QEMU");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status}");
    assert!(
        status
            .message()
            .contains("qemu-system-x86_64 is not in PATH"),
        "{}",
        status.message()
    );
    client.ping(v1::PingRequest {}).await.expect("Ping");
    assert!(process.alive());
}

#[test]
fn socket_dir_too_long_is_refused_at_start() {
    let dir = format!("/tmp/{}", "d".repeat(110));
    let output = Command::new(LAUNCHER)
        .args(["--socket-dir", &dir])
        .output()
        .expect("run virt-launcher");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("longer than the 107"), "{stderr}");
    assert!(!Path::new(&dir).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_death_is_reported_and_a_gone_handler_does_not_stop_the_vm() {
    require_qemu();
    let artifacts = artifacts();
    let dirs = TestDirs::new("death");
    let mut process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;
    // The handler's notify socket does not exist (the handler is gone).
    let gone = dirs.root.join("gone.sock").display().to_string();
    let vmi = vmi(json!([]), json!([]));
    let domain = sync_emulated(&mut client, serde_json::to_vec(&vmi).unwrap(), &gone)
        .await
        .unwrap_or_else(|e| panic!("SyncVMI: {e}\n{}", process.log_text()))
        .domain
        .expect("domain");
    let console = ConsoleReader::connect(&dirs);
    console
        .wait_for(guest_images::READY_MARKER, Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}"));
    client
        .pause(v1::VmiRequest::default())
        .await
        .expect("Pause with the handler gone");
    client
        .unpause(v1::VmiRequest::default())
        .await
        .expect("Unpause with the handler gone");
    wait_state(
        &mut client,
        v1::DomainState::Running,
        Duration::from_secs(5),
    )
    .await;

    // QEMU dies.
    let pid = domain.stats.map(|s| s.vmm_pid).expect("stats");
    assert!(pid > 0);
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let crashed = wait_state(
        &mut client,
        v1::DomainState::Crashed,
        Duration::from_secs(10),
    )
    .await;
    assert!(
        crashed.reason.contains("QEMU exited unexpectedly"),
        "{}",
        crashed.reason
    );
    assert!(crashed.reason.contains("signal: 9"), "{}", crashed.reason);
    let status = client
        .pause(v1::VmiRequest::default())
        .await
        .expect_err("Pause of a dead VM");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(process.alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_does_not_shut_down_in_time_is_stopped_by_force() {
    require_qemu();
    let artifacts = artifacts();
    let dirs = TestDirs::new("force");
    let mut process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;
    let vmi = vmi(json!([]), json!([]));
    sync_emulated(&mut client, serde_json::to_vec(&vmi).unwrap(), "")
        .await
        .unwrap_or_else(|e| panic!("SyncVMI: {e}\n{}", process.log_text()));
    wait_state(
        &mut client,
        v1::DomainState::Running,
        Duration::from_secs(10),
    )
    .await;
    // A grace period of 0 leaves the guest no time at all.
    let off = client
        .shutdown(v1::ShutdownRequest {
            vmi: "bad".into(),
            grace_period_seconds: Some(0),
        })
        .await
        .expect("Shutdown")
        .into_inner()
        .domain
        .expect("domain");
    assert_eq!(off.state, v1::DomainState::Shutoff as i32);
    assert!(off.reason.contains("stopped by force"), "{}", off.reason);
    assert_eq!(off.stats.map(|s| s.vmm_pid), Some(0), "QEMU is gone");
    assert!(process.alive());
}
