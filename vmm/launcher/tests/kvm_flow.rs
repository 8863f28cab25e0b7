//! The launcher binary on the in-process KVM backend, driven over gRPC, with the counter test
//! guest of `guest-images/test-guests` as its kernel (a standard Linux guest cannot boot on this
//! host's PVM `/dev/kvm`, so the backend is forced with `--backend kvm`): SyncVMI, Running, the
//! guest's counter on `console-sock`, Pause (it stops), Unpause (it goes on), Shutdown (the guest
//! sees Ctrl-Alt-Del on its i8042 and powers off within the grace period); Reset (a hardware
//! reset in place: the guest starts over, its counter from 0, and the VMI stays running).

mod common;

use std::time::{Duration, Instant};

use common::*;
use contract::proto::v1;
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

/// The `COUNT` values printed after the first `skip` bytes of the console.
fn counts_after(console: &ConsoleReader, skip: usize) -> Vec<u64> {
    let text = console.text();
    // Complete lines only: the last one may still be arriving ("COUNT 1" of "COUNT 1a").
    text.get(skip..)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| l.trim().strip_prefix("COUNT "))
        .filter_map(|n| u64::from_str_radix(n.trim(), 16).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_restarts_the_counter_guest_in_place() {
    let counter = artifacts()
        .require("test-guests/counter.elf")
        .unwrap_or_else(|e| panic!("{e} (run `guest-images/build.sh` as root)"));
    assert!(
        std::path::Path::new("/dev/kvm").exists(),
        "/dev/kvm is missing: the KVM backend needs it"
    );
    let dirs = TestDirs::new("kvm-reset");
    let mut process = LauncherProcess::start(
        &dirs,
        &counter,
        None,
        &["--backend", "kvm", "--no-os-disk-boots-kernel"],
    );
    let mut client = client(&dirs).await;
    let console = ConsoleReader::connect(&dirs);
    let vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "vmi-reset", "namespace": "default" },
        "spec": {
            "domain": {
                "devices": { "autoattachPodInterface": false },
                "memory": { "guest": "64Mi" }
            }
        }
    });
    sync_native(&mut client, &vmi, &process).await;
    wait_state(&mut client, DomainState::Running, Duration::from_secs(10)).await;
    // The VMM keeps what the guest printed before the relay connected: the first line is there.
    console
        .wait_for("TEST counter start", Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = wait_count_above(&console, 5, Duration::from_secs(60)).await;
    let mark = console.text().len();

    let domain = match client.reset(v1::VmiRequest::default()).await {
        Ok(response) => response.into_inner().domain.expect("domain"),
        Err(status) => panic!("Reset: {status}\nlauncher log:\n{}", process.log_text()),
    };
    assert_eq!(
        domain.state,
        DomainState::Running as i32,
        "{}",
        domain.reason
    );

    // The guest starts over: a new start line, then its counter from 0 again.
    let start = Instant::now();
    let after = loop {
        let counts = counts_after(&console, mark);
        if counts.iter().any(|c| *c >= 3) {
            break counts;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the counter did not go on after Reset:\n{}",
            console.text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let restarted = console.text()[mark..].contains("TEST counter start");
    assert!(
        restarted,
        "no new start line after Reset:\n{}",
        console.text()
    );
    let first = after.iter().position(|c| *c == 0);
    assert!(
        first.is_some_and(|i| after[i..].windows(2).all(|w| w[1] == w[0] + 1)),
        "the counter did not restart from 0 after Reset (it was at {before}): {after:?}"
    );
    println!("KVM Reset: counter was at {before}, after the reset {after:?}");
    let domain = wait_state(&mut client, DomainState::Running, Duration::from_secs(1)).await;
    assert!(domain.reason.contains("reset"), "{}", domain.reason);
    assert!(process.alive(), "the launcher exited after Reset");
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
    let mut process = LauncherProcess::start(
        &dirs,
        &counter,
        None,
        &["--backend", "kvm", "--no-os-disk-boots-kernel"],
    );
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
    let domain = sync_native(&mut client, &vmi, &process).await;
    assert_eq!(domain.backend, v1::Backend::Kvm as i32);
    assert!(
        domain.backend_reason.contains("--backend"),
        "{}",
        domain.backend_reason
    );
    wait_state(&mut client, DomainState::Running, Duration::from_secs(10)).await;
    let first = wait_count_above(&console, 2, Duration::from_secs(60)).await;
    println!(
        "KVM counter guest: COUNT {first} on the console {:?} after SyncVMI",
        started.elapsed()
    );
    // The VM runs: the launcher's threads (and the VMM's vCPU threads among them) hold no
    // capability, this VMI having no NIC.
    process.assert_confined(0);

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
