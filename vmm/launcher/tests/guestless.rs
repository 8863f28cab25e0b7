//! A "guestless" VMI on the QEMU TCG fallback, driven over gRPC as virt-handler drives it: the
//! VMI of KubeVirt's functional suite's `libvmifact.NewGuestless()` (no disks, no volumes, a
//! 1Mi memory request), run by a launcher as its Pod starts it (no bundled initramfs). SyncVMI
//! starts QEMU without a kernel; the domain is Running and stays so (microvm's firmware finds
//! nothing to boot and halts); Pause and Unpause work; Shutdown, which nothing in the guest
//! answers, stops it when its grace period ends. Needs QEMU (`qemu-system-x86_64`), not the
//! guest images: `cargo test -p launcher --features qemu --test guestless`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use contract::proto::v1;
use v1::DomainState;

const GRACE_SECONDS: i64 = 3;

fn guestless_vmi() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "testvmi-guestless", "namespace": "default", "uid": "guestless-1" },
        "spec": {
            "domain": {
                "resources": { "requests": { "memory": "1Mi" } },
                // The pod network needs a network namespace of its own: tests/network.rs.
                "devices": { "autoattachPodInterface": false }
            },
            "terminationGracePeriodSeconds": GRACE_SECONDS
        }
    })
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guestless_vmi_runs_idle_pauses_and_stops_within_its_grace_period() {
    require_qemu();
    let dirs = TestDirs::new("guestless");
    // The launcher Pod's flags: the bundled kernel (never loaded here), no initramfs.
    let process = LauncherProcess::start(
        &dirs,
        Path::new("/nonexistent/ferrovirt/vmlinux"),
        None,
        &[],
    );
    let mut client = client(&dirs).await;
    let notify_socket = dirs.root.join("notify.sock");
    let (mut events, _notify_task) = notify_server(&notify_socket);
    let console = ConsoleReader::connect(&dirs);

    let started = Instant::now();
    let domain = sync_emulated(
        &mut client,
        serde_json::to_vec(&guestless_vmi()).expect("json"),
        &notify_socket.display().to_string(),
    )
    .await
    .unwrap_or_else(|status| panic!("SyncVMI: {status}\nlauncher log:\n{}", process.log_text()))
    .domain
    .expect("domain");
    println!("SyncVMI of the guestless VMI took {:?}", started.elapsed());
    assert_eq!(
        domain.state,
        DomainState::Running as i32,
        "{}",
        domain.reason
    );
    assert_eq!(domain.backend, v1::Backend::QemuTcg as i32);
    assert_eq!(domain.boot_origin, v1::BootOrigin::Guestless as i32);
    assert_eq!(
        domain.boot,
        "guestless: the VMI has no disk, so nothing boots (no kernel; the vCPUs idle)"
    );
    let stats = domain.stats.expect("stats");
    // 1Mi asked, the backends' minimum given.
    assert_eq!(stats.memory_bytes, vmm::config::MIN_MEMORY_BYTES);
    let pid = stats.vmm_pid;
    assert!(pid > 0 && alive(pid), "no QEMU process: {stats:?}");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("QEMU's cmdline");
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert!(!args.iter().any(|a| a == "-kernel"), "{args:?}");
    assert!(
        args.windows(2).any(|w| w[0] == "-m" && w[1] == "16M"),
        "{args:?}"
    );

    // It stays Running, idle.
    let cpu_before = stats.vmm_cpu_ms;
    for second in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = common::domain(&mut client).await;
        assert_eq!(
            now.state,
            DomainState::Running as i32,
            "after {second} s: {}\nlauncher log:\n{}",
            now.reason,
            process.log_text()
        );
        assert!(alive(pid), "QEMU exited after {second} s");
    }
    let idle = common::domain(&mut client).await.stats.expect("stats");
    println!(
        "guestless on QEMU TCG: {} ms of QEMU CPU time in 5 s idle, RSS {} MiB",
        idle.vmm_cpu_ms - cpu_before,
        idle.vmm_rss_bytes >> 20
    );

    // Pause and unpause.
    let paused = client
        .pause(v1::VmiRequest::default())
        .await
        .expect("Pause")
        .into_inner()
        .domain
        .expect("domain");
    assert_eq!(
        paused.state,
        DomainState::Paused as i32,
        "{}",
        paused.reason
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        common::domain(&mut client).await.state,
        DomainState::Paused as i32
    );
    let unpaused = client
        .unpause(v1::VmiRequest::default())
        .await
        .expect("Unpause")
        .into_inner()
        .domain
        .expect("domain");
    assert_eq!(
        unpaused.state,
        DomainState::Running as i32,
        "{}",
        unpaused.reason
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        common::domain(&mut client).await.state,
        DomainState::Running as i32
    );

    // Shutdown with the VMI's grace period: nothing in the guest powers it off, so it is
    // stopped when the grace period ends.
    let shutdown_started = Instant::now();
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
    let took = shutdown_started.elapsed();
    println!("Shutdown took {took:?}: {}", off.reason);
    assert_eq!(off.state, DomainState::Shutoff as i32, "{}", off.reason);
    assert!(
        off.reason
            .contains(&format!("grace period of {GRACE_SECONDS} s")),
        "{}",
        off.reason
    );
    let grace = Duration::from_secs(GRACE_SECONDS.unsigned_abs());
    assert!(
        took >= grace && took < grace + Duration::from_secs(5),
        "stopped after {took:?}, grace period {grace:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        assert!(Instant::now() < deadline, "QEMU still runs after Shutdown");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The handler heard every state (events are pushed asynchronously: the last may still be
    // on its way).
    let mut states = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !states.contains(&(DomainState::Shutoff as i32)) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(200), events.recv()).await {
            Ok(Some(event)) => states.push(event.state),
            Ok(None) => break,
            Err(_) => {}
        }
    }
    for state in [
        DomainState::Running,
        DomainState::Paused,
        DomainState::ShuttingDown,
        DomainState::Shutoff,
    ] {
        assert!(
            states.contains(&(state as i32)),
            "no {state:?} event among {states:?}"
        );
    }
    println!("console output of the guestless VM: {:?}", console.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guestless_vmi_is_killed_at_once() {
    require_qemu();
    let dirs = TestDirs::new("guestless-kill");
    let process = LauncherProcess::start(
        &dirs,
        Path::new("/nonexistent/ferrovirt/vmlinux"),
        None,
        &[],
    );
    let mut client = client(&dirs).await;
    let domain = sync_emulated(
        &mut client,
        serde_json::to_vec(&guestless_vmi()).expect("json"),
        "",
    )
    .await
    .unwrap_or_else(|status| panic!("SyncVMI: {status}\nlauncher log:\n{}", process.log_text()))
    .domain
    .expect("domain");
    assert_eq!(
        domain.state,
        DomainState::Running as i32,
        "{}\nlauncher log:\n{}",
        domain.reason,
        process.log_text()
    );
    let pid = domain.stats.expect("stats").vmm_pid;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let off = client
        .kill(v1::VmiRequest::default())
        .await
        .unwrap_or_else(|status| panic!("Kill: {status}\nlauncher log:\n{}", process.log_text()))
        .into_inner()
        .domain
        .expect("domain");
    println!("Kill took {:?}", started.elapsed());
    let log = process.log_text();
    assert_eq!(
        off.state,
        DomainState::Shutoff as i32,
        "{}\nlauncher log:\n{log}",
        off.reason
    );
    assert_eq!(off.reason, "killed by the handler", "launcher log:\n{log}");
    assert!(
        !alive(pid),
        "QEMU {pid} still runs after Kill; launcher log:\n{log}"
    );
}
