//! The launcher binary driven over gRPC as virt-handler drives it, on QEMU TCG, with the VMI of
//! `vmi-nocloud.yaml` (containerDisk from guest-images + cloudInitNoCloud + emptyDisk): SyncVMI,
//! Running, the guest's ready marker and its cloud-init user-data output on `console-sock`,
//! Pause (the guest's counter stops) and Unpause (it goes on), Shutdown within the grace period,
//! and the domain events pushed to the handler's notify socket. The guest runs no guest agent:
//! SoftReboot presses Ctrl-Alt-Del, and the guest reboots itself.

mod common;

use std::time::{Duration, Instant};

use common::*;
use contract::proto::v1;
use v1::DomainState;

const USER_DATA_LINE: &str = "printed from cloud-init userdata";
/// What Linux prints when the guest itself reboots (`kernel/reboot.c`).
const KERNEL_RESTARTS: &str = "reboot: Restarting system";

/// [`nocloud_vmi`] with a user-data script that also starts a console counter.
pub fn counting_nocloud_vmi() -> serde_json::Value {
    let user_data = format!(
        "#!/bin/sh\necho '{USER_DATA_LINE}'\n\
         ( i=0; while true; do i=$((i+1)); echo \"ferrovirt-tick $i\" >/dev/console; sleep 0.3; done ) </dev/null >/dev/null 2>&1 &\n"
    );
    nocloud_vmi("6f0ac2d4-launcher-test", &user_data)
}

fn sha_of(path: &std::path::Path) -> Vec<u8> {
    // A cheap fingerprint: length plus a few sampled blocks (enough to see a write).
    let data = std::fs::read(path).expect("read image");
    let mut out = data.len().to_le_bytes().to_vec();
    out.extend(data.iter().step_by(4093).copied());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nocloud_vmi_on_qemu_tcg() {
    require_qemu();
    let artifacts = artifacts();
    let dirs = TestDirs::new("qemu");
    let rootdisk = artifacts.rootdisk();
    dirs.container_disk("containerdisk", &rootdisk);
    let rootdisk_before = sha_of(&rootdisk);

    let mut process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;
    let info = client
        .info(v1::InfoRequest {})
        .await
        .expect("Info")
        .into_inner();
    assert!(info.supported_versions.contains(&"v1".to_string()));
    client.ping(v1::PingRequest {}).await.expect("Ping");

    let notify_socket = dirs.root.join("notify.sock");
    let (mut events, _notify_task) = notify_server(&notify_socket);

    let console = ConsoleReader::connect(&dirs);
    let started = Instant::now();
    let vmi = counting_nocloud_vmi();
    let synced = client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&vmi).expect("json"),
            options: Some(v1::SyncOptions {
                use_emulation: true,
                notify_socket: notify_socket.display().to_string(),
                smbios: None,
            }),
        })
        .await;
    let domain = match synced {
        Ok(response) => response.into_inner().domain.expect("domain"),
        Err(status) => panic!(
            "SyncVMI failed: {status}\nlauncher log:\n{}",
            process.log_text()
        ),
    };
    assert_eq!(domain.backend, v1::Backend::QemuTcg as i32);
    assert!(
        domain.backend_reason.contains("useEmulation"),
        "{}",
        domain.backend_reason
    );
    // The tiny guest's disk is a bare ext4 filesystem: the bundled kernel boots it as root.
    assert_eq!(domain.boot_origin, v1::BootOrigin::Bundled as i32);
    assert!(
        domain
            .boot
            .starts_with("the bundled kernel: disk containerdisk is a bare filesystem (ext4"),
        "{}",
        domain.boot
    );
    let running = wait_state(&mut client, DomainState::Running, Duration::from_secs(30)).await;
    assert_eq!(running.vmi_name, "vmi-nocloud");
    assert!(running
        .stats
        .as_ref()
        .is_some_and(|s| s.vmm_pid > 0 && s.memory_bytes == 128 << 20));
    // QEMU runs the guest with none of the launcher's capabilities (this VMI has no NIC, so
    // not even CAP_NET_ADMIN) and cannot gain any.
    let qemu_pid = running.stats.as_ref().map_or(0, |s| s.vmm_pid);
    let status =
        std::fs::read_to_string(format!("/proc/{qemu_pid}/status")).expect("QEMU's status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    println!(
        "QEMU (pid {qemu_pid}): CapEff {}, CapBnd {}, NoNewPrivs {}",
        field("CapEff:"),
        field("CapBnd:"),
        field("NoNewPrivs:")
    );
    for cap in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(field(cap), "0000000000000000", "QEMU's {cap}");
    }
    assert_eq!(field("NoNewPrivs:"), "1", "QEMU's NoNewPrivs");
    // The launcher itself gave up every capability once the VM ran (no NIC: not even
    // CAP_NET_ADMIN).
    process.assert_confined(0);

    // A second SyncVMI for the same VMI changes nothing.
    let again = client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&vmi).expect("json"),
            options: Some(v1::SyncOptions {
                use_emulation: true,
                notify_socket: String::new(),
                smbios: None,
            }),
        })
        .await
        .expect("second SyncVMI")
        .into_inner();
    assert_eq!(
        again.domain.map(|d| d.stats.map(|s| s.vmm_pid)),
        Some(running.stats.as_ref().map(|s| s.vmm_pid))
    );

    // QEMU gives the VM the guest agent channel, but the tiny guest runs no agent: the report
    // says it is not connected.
    let agent = running.guest_agent.clone().expect("a guest agent report");
    assert!(!agent.connected, "{agent:?}");

    let boot = Duration::from_secs(180);
    let ready = console.wait_for(guest_images::READY_MARKER, boot);
    let ready = ready.unwrap_or_else(|e| panic!("{e}\nlauncher log:\n{}", process.log_text()));
    println!(
        "guest ready marker {:?} after SyncVMI ({:?} after the console wait began)",
        started.elapsed(),
        ready
    );
    console
        .wait_for(USER_DATA_LINE, boot)
        .unwrap_or_else(|e| panic!("{e}"));
    let text = console.text();
    assert!(
        text.contains("switching to root disk /dev/vda"),
        "the guest did not boot from the containerDisk:\n{text}"
    );

    // Pause: the counter stops.
    console
        .wait_for("ferrovirt-tick 3", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    let paused = client
        .pause(v1::VmiRequest { vmi: String::new() })
        .await
        .expect("Pause")
        .into_inner();
    assert_eq!(
        paused.domain.map(|d| d.state),
        Some(DomainState::Paused as i32)
    );
    // Bytes already on their way may still arrive: let them settle, then watch.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tick_at_pause = console.last_tick();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        console.last_tick(),
        tick_at_pause,
        "the guest kept printing while paused"
    );
    let domain = wait_state(&mut client, DomainState::Paused, Duration::from_secs(5)).await;
    assert!(domain.reason.contains("paused"), "{}", domain.reason);

    // Unpause: it goes on.
    client
        .unpause(v1::VmiRequest {
            vmi: "vmi-nocloud".into(),
        })
        .await
        .expect("Unpause");
    let next = tick_at_pause.unwrap_or(0) + 2;
    console
        .wait_for(&format!("ferrovirt-tick {next}"), Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("the counter did not resume: {e}"));

    // Another VMI is refused while this one runs.
    let mut other = vmi.clone();
    other["metadata"]["name"] = "someone-else".into();
    let status = client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&other).expect("json"),
            options: Some(v1::SyncOptions {
                use_emulation: true,
                notify_socket: String::new(),
                smbios: None,
            }),
        })
        .await
        .expect_err("a second VMI");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");

    // Reset: the guest boots again (its ready marker shows up once more).
    let markers = console.text().matches(guest_images::READY_MARKER).count();
    client
        .reset(v1::VmiRequest::default())
        .await
        .expect("Reset");
    let deadline = Instant::now() + boot;
    while console.text().matches(guest_images::READY_MARKER).count() <= markers {
        assert!(
            Instant::now() < deadline,
            "no second boot after Reset:\n{}",
            console.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_state(&mut client, DomainState::Running, Duration::from_secs(5)).await;

    // SoftReboot without a guest agent, on a machine without ACPI: Ctrl-Alt-Del, which the
    // guest's init answers by rebooting. The kernel says it restarts the system (a hardware
    // reset would not), the guest boots again, the same QEMU runs on.
    let restarts = console.text().matches(KERNEL_RESTARTS).count();
    let markers = console.text().matches(guest_images::READY_MARKER).count();
    let asked = Instant::now();
    let rebooting = client
        .soft_reboot(v1::VmiRequest::default())
        .await
        .expect("SoftReboot without a guest agent")
        .into_inner()
        .domain
        .expect("domain");
    assert_eq!(
        rebooting.state,
        DomainState::Running as i32,
        "{}",
        rebooting.reason
    );
    let deadline = Instant::now() + boot;
    while console.text().matches(KERNEL_RESTARTS).count() <= restarts
        || console.text().matches(guest_images::READY_MARKER).count() <= markers
    {
        assert!(
            Instant::now() < deadline,
            "no reboot by the guest after SoftReboot:\n{}",
            console.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "the guest rebooted and was ready {:?} after SoftReboot",
        asked.elapsed()
    );
    let after = wait_state(&mut client, DomainState::Running, Duration::from_secs(5)).await;
    assert_eq!(
        after.stats.map(|s| s.vmm_pid),
        running.stats.as_ref().map(|s| s.vmm_pid),
        "the same QEMU"
    );

    // Shutdown: the guest shuts down well within the grace period.
    let grace = 120;
    let shutdown_started = Instant::now();
    let off = client
        .shutdown(v1::ShutdownRequest {
            vmi: String::new(),
            grace_period_seconds: Some(grace),
        })
        .await
        .expect("Shutdown")
        .into_inner()
        .domain
        .expect("domain");
    println!(
        "shutdown took {:?}: {}",
        shutdown_started.elapsed(),
        off.reason
    );
    assert_eq!(off.state, DomainState::Shutoff as i32, "{}", off.reason);
    assert!(
        !off.reason.contains("by force"),
        "the guest did not shut down by itself: {}",
        off.reason
    );
    assert!(shutdown_started.elapsed() < Duration::from_secs(grace as u64));

    // The handler was told each step, in order.
    let mut states = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !states.contains(&(DomainState::Shutoff as i32)) && Instant::now() < deadline {
        if let Ok(Some(domain)) =
            tokio::time::timeout(Duration::from_millis(200), events.recv()).await
        {
            states.push(domain.state);
        }
    }
    let want = [
        DomainState::Running,
        DomainState::Paused,
        DomainState::Running,
        DomainState::Running, // reset
        DomainState::ShuttingDown,
        DomainState::Shutoff,
    ];
    let want: Vec<i32> = want.iter().map(|s| *s as i32).collect();
    assert_eq!(states, want, "domain events");

    // The containerDisk image was never written, and the launcher is still up.
    assert_eq!(sha_of(&rootdisk), rootdisk_before);
    assert!(process.alive());
    client
        .ping(v1::PingRequest {})
        .await
        .expect("Ping after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_strategy_paused_waits_for_unpause() {
    require_qemu();
    let artifacts = artifacts();
    let dirs = TestDirs::new("paused");
    let process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;
    let console = ConsoleReader::connect(&dirs);
    let vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "vmi-paused", "namespace": "default" },
        "spec": {
            "startStrategy": "Paused",
            "domain": { "devices": { "autoattachPodInterface": false }, "memory": { "guest": "128Mi" } }
        }
    });
    let domain = match client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&vmi).expect("json"),
            options: Some(v1::SyncOptions {
                use_emulation: true,
                notify_socket: String::new(),
                smbios: None,
            }),
        })
        .await
    {
        Ok(response) => response.into_inner().domain.expect("domain"),
        Err(status) => panic!("SyncVMI: {status}\n{}", process.log_text()),
    };
    assert_eq!(domain.state, DomainState::Paused as i32);
    assert!(domain.reason.contains("startStrategy"), "{}", domain.reason);
    assert_eq!(
        domain.boot,
        "the bundled kernel and initramfs: the VMI has no disk"
    );
    // Nothing runs: not a byte on the console.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(console.text(), "", "the guest ran before Unpause");
    client
        .unpause(v1::VmiRequest::default())
        .await
        .expect("Unpause");
    console
        .wait_for(guest_images::READY_MARKER, Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}"));
    client.kill(v1::VmiRequest::default()).await.expect("Kill");
    let off = wait_state(&mut client, DomainState::Shutoff, Duration::from_secs(10)).await;
    assert_eq!(off.reason, "killed by the handler");
}
