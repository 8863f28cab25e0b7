//! The launcher binary on the in-process KVM backend, driven over gRPC, with the counter test
//! guest of `guest-images/test-guests` as its kernel (a standard Linux guest cannot boot on this
//! host's PVM `/dev/kvm`, so the backend is forced with `--backend kvm`): SyncVMI, Running, the
//! guest's counter on `console-sock`, Pause (it stops), Unpause (it goes on), Shutdown (the guest
//! sees Ctrl-Alt-Del on its i8042 and powers off within the grace period).

mod common;

use std::time::{Duration, Instant};

use common::*;
use launcher::proto::v1;
use v1::DomainState;

/// The highest `COUNT xxxxxxxx` value on the console.
fn last_count(console: &ConsoleReader) -> Option<u64> {
    console
        .text()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("COUNT "))
        .filter_map(|n| u64::from_str_radix(n.trim(), 16).ok())
        .max()
}

async fn wait_count_above(console: &ConsoleReader, above: u64, timeout: Duration) -> u64 {
    let start = Instant::now();
    loop {
        if let Some(count) = last_count(console).filter(|c| *c > above) {
            return count;
        }
        assert!(
            start.elapsed() < timeout,
            "no COUNT above {above} within {timeout:?}:\n{}",
            console.text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_guest_on_kvm() {
    let artifacts = artifacts();
    let counter = artifacts
        .require("test-guests/counter.elf")
        .unwrap_or_else(|e| panic!("{e} (run `guest-images/build.sh` as root)"));
    assert!(
        std::path::Path::new("/dev/kvm").exists(),
        "/dev/kvm is missing: the KVM backend needs it"
    );
    let dirs = TestDirs::new("kvm");
    let mut process = LauncherProcess::start(&dirs, &counter, None, &["--backend", "kvm"]);
    let mut client = client(&dirs).await;
    let console = ConsoleReader::connect(&dirs);

    let vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "vmi-counter", "namespace": "default" },
        "spec": {
            "domain": {
                "devices": { "autoattachPodInterface": false },
                "memory": { "guest": "64Mi" }
            },
            "terminationGracePeriodSeconds": 60
        }
    });
    let started = Instant::now();
    let domain = match client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&vmi).expect("json"),
            options: Some(v1::SyncOptions {
                use_emulation: false,
                notify_socket: String::new(),
            }),
        })
        .await
    {
        Ok(response) => response.into_inner().domain.expect("domain"),
        Err(status) => panic!("SyncVMI: {status}\nlauncher log:\n{}", process.log_text()),
    };
    assert_eq!(domain.backend, v1::Backend::Kvm as i32);
    assert!(
        domain.backend_reason.contains("--backend"),
        "{}",
        domain.backend_reason
    );
    wait_state(&mut client, DomainState::Running, Duration::from_secs(10)).await;
    let first = wait_count_above(&console, 2, Duration::from_secs(60)).await;
    // The relay connects the moment the VMM's serial socket appears, but the VMM runs its
    // vCPUs at once and drops output while no client is connected, so the very first bytes
    // ("TEST counter start") are not guaranteed; the counter is.
    println!(
        "KVM counter guest: COUNT {first} on the console {:?} after SyncVMI",
        started.elapsed()
    );

    client
        .pause(v1::VmiRequest::default())
        .await
        .expect("Pause");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at_pause = last_count(&console);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        last_count(&console),
        at_pause,
        "the guest kept counting while paused"
    );

    client
        .unpause(v1::VmiRequest::default())
        .await
        .expect("Unpause");
    wait_count_above(&console, at_pause.unwrap_or(0) + 2, Duration::from_secs(30)).await;

    let off = client
        .shutdown(v1::ShutdownRequest {
            vmi: String::new(),
            grace_period_seconds: None,
        })
        .await
        .expect("Shutdown")
        .into_inner()
        .domain
        .expect("domain");
    assert_eq!(off.state, DomainState::Shutoff as i32, "{}", off.reason);
    assert_eq!(off.reason, "the guest powered off");
    console
        .wait_for("TEST counter shutdown requested", Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(process.alive());
}
