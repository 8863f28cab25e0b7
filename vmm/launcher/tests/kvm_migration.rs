//! Live migration on the in-process KVM backend between two launchers on this host's
//! `/dev/kvm`, with the test playing virt-handler's part: it relays the stream from the source
//! launcher's socket to the target launcher's `migration-target-sock`.
//!
//! The guest is the `memtest` test guest (a standard Linux guest cannot boot on this PVM host):
//! it rewrites and checks 4 MiB of RAM per generation, reads virtio-rng each time, and prints
//! `GEN <g> ok`; the generation lives in a vCPU register. After the migration the target's
//! console goes on with the next generations, with no `FAIL` and no new start line, and the
//! target's emptyDisk file holds what the source's held (block migration). A second test kills
//! the target mid-stream (the relay is slowed down so that the kill lands mid-way): the
//! migration fails and the guest keeps running on the source; then CancelMigration stops a
//! second attempt the same way. Total time and downtime are printed, not asserted.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use contract::proto::v1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use v1::{DomainState, MigrationStatus};

const DISK_MARKER: &[u8] = b"ferrovirt-kvm-block-migration-marker";

fn memtest_vmi() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "vmi-memtest", "namespace": "default", "uid": "kvm-migration-test" },
        "spec": {
            "domain": {
                "devices": {
                    "autoattachPodInterface": false,
                    "rng": {},
                    "disks": [{ "name": "scratch", "disk": { "bus": "virtio" } }]
                },
                "memory": { "guest": "64Mi" }
            },
            "volumes": [{ "name": "scratch", "emptyDisk": { "capacity": "16Mi" } }]
        }
    })
}

fn memtest() -> PathBuf {
    assert!(
        Path::new("/dev/kvm").exists(),
        "/dev/kvm is missing: the KVM backend needs it"
    );
    artifacts()
        .require("test-guests/memtest.elf")
        .unwrap_or_else(|e| panic!("{e} (run `guest-images/build.sh` as root)"))
}

fn launcher(name: &str, kernel: &Path) -> (TestDirs, LauncherProcess) {
    let dirs = TestDirs::new(name);
    let process = LauncherProcess::start(
        &dirs,
        kernel,
        None,
        &["--backend", "kvm", "--no-os-disk-boots-kernel"],
    );
    (dirs, process)
}

fn options() -> Option<v1::SyncOptions> {
    Some(v1::SyncOptions {
        use_emulation: false,
        notify_socket: String::new(),
        smbios: None,
    })
}

/// The generations the console shows, in order.
fn generations(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("GEN "))
        .filter_map(|rest| u64::from_str_radix(rest.split_whitespace().next()?, 16).ok())
        .collect()
}

fn assert_no_fail(console: &ConsoleReader, side: &str) {
    let text = console.text();
    assert!(!text.contains("FAIL"), "{side} console:\n{text}");
}

async fn wait_generation(console: &ConsoleReader, at_least: u64, timeout: Duration) -> u64 {
    let start = Instant::now();
    loop {
        if let Some(g) = generations(&console.text())
            .last()
            .copied()
            .filter(|g| *g >= at_least)
        {
            return g;
        }
        assert!(
            start.elapsed() < timeout,
            "no GEN {at_least} within {timeout:?}; console:\n{}",
            console.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Plays the handlers: accepts the source's connection on `listen` and copies it to and from
/// the target's socket; source-to-target at about `bytes_per_second` when given.
fn relay(listen: &Path, target: PathBuf, bytes_per_second: Option<u64>) {
    let _ = std::fs::remove_file(listen);
    let listener = tokio::net::UnixListener::bind(listen).expect("bind the relay socket");
    tokio::spawn(async move {
        let (from_source, _) = listener.accept().await?;
        let to_target = tokio::net::UnixStream::connect(target).await?;
        let (mut source_read, mut source_write) = from_source.into_split();
        let (mut target_read, mut target_write) = to_target.into_split();
        let back =
            tokio::spawn(async move { tokio::io::copy(&mut target_read, &mut source_write).await });
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = source_read.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            target_write.write_all(&buf[..n]).await?;
            if let Some(rate) = bytes_per_second {
                tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
            }
        }
        target_write.shutdown().await?;
        let _ = back.await;
        std::io::Result::Ok(())
    });
}

/// Starts the memtest VMI and waits for its third generation.
async fn start_source(dirs: &TestDirs, process: &LauncherProcess) -> ConsoleReader {
    let mut client = client(dirs).await;
    let console = ConsoleReader::connect(dirs);
    if let Err(status) = client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&memtest_vmi()).expect("json"),
            options: options(),
        })
        .await
    {
        panic!("SyncVMI: {status}\n{}", process.log_text());
    }
    wait_generation(&console, 3, Duration::from_secs(60)).await;
    console
}

async fn prepare_target(dirs: &TestDirs, process: &LauncherProcess) -> v1::Domain {
    let mut client = client(dirs).await;
    match client
        .prepare_migration_target(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&memtest_vmi()).expect("json"),
            options: options(),
        })
        .await
    {
        Ok(response) => response.into_inner().domain.expect("domain"),
        Err(status) => panic!("PrepareMigrationTarget: {status}\n{}", process.log_text()),
    }
}

/// The emptyDisk file of the `scratch` volume under `dir`.
fn scratch_disk(dir: &Path) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = scratch_disk(&path) {
                return Some(found);
            }
        } else if path.to_string_lossy().contains("scratch") {
            return Some(path);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrates_the_memtest_guest_with_its_disk() {
    let kernel = memtest();
    let (source_dirs, source) = launcher("kvmmig-src", &kernel);
    let (target_dirs, target) = launcher("kvmmig-dst", &kernel);
    let source_console = start_source(&source_dirs, &source).await;

    // What the source's emptyDisk holds must reach the target's file.
    let source_disk = scratch_disk(&source_dirs.root).expect("the source's emptyDisk file");
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&source_disk)
            .expect("open the source's emptyDisk");
        file.write_all(DISK_MARKER).expect("write the marker");
        file.sync_all().expect("sync");
    }

    let prepared = prepare_target(&target_dirs, &target).await;
    assert_eq!(prepared.state, DomainState::Paused as i32, "{prepared:?}");
    let prepared_migration = migration_of(&prepared);
    assert!(prepared_migration.target, "{prepared_migration:?}");
    assert_eq!(prepared_migration.status, MigrationStatus::Active as i32);
    let target_console = ConsoleReader::connect(&target_dirs);

    let relay_socket = source_dirs.sockets().join("migration-out");
    relay(
        &relay_socket,
        target_dirs
            .sockets()
            .join(contract::sockets::MIGRATION_TARGET_SOCKET),
        None,
    );
    let mut source_client = client(&source_dirs).await;
    let before = generations(&source_console.text()).last().copied();
    migrate(&mut source_client, &source, &relay_socket, 0).await;

    let ended = wait_migration_end(&mut source_client, Duration::from_secs(60)).await;
    let info = migration_of(&ended);
    assert_eq!(
        info.status,
        MigrationStatus::Completed as i32,
        "{info:?}\nsource log:\n{}\ntarget log:\n{}",
        source.log_text(),
        target.log_text()
    );
    assert_eq!(ended.state, DomainState::Shutoff as i32, "{}", ended.reason);
    assert!(info.block, "the emptyDisk is writable: block migration");
    assert!(info.transferred_bytes > 0, "{info:?}");
    println!(
        "KVM live migration (memtest, 64 MiB, 16 MiB emptyDisk): total {} ms, downtime {} ms, {} bytes",
        info.total_ms, info.downtime_ms, info.transferred_bytes
    );

    let mut target_client = client(&target_dirs).await;
    let arrived = wait_state(
        &mut target_client,
        DomainState::Running,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(arrived.reason, "migrated in");
    assert_eq!(
        migration_of(&arrived).status,
        MigrationStatus::Completed as i32
    );
    let last_source = generations(&source_console.text())
        .last()
        .copied()
        .or(before)
        .expect("the source printed generations");
    // The count goes on from where it was on the source: no reboot, every page checked.
    wait_generation(&target_console, last_source + 2, Duration::from_secs(60)).await;
    let on_target = generations(&target_console.text());
    assert!(
        on_target
            .first()
            .is_some_and(|g| *g > last_source.saturating_sub(1)),
        "the target started over: {on_target:?} after GEN {last_source} on the source"
    );
    assert!(
        on_target.windows(2).all(|w| w[1] == w[0] + 1),
        "{on_target:?}"
    );
    assert!(
        !target_console.text().contains("TEST memtest start"),
        "the guest restarted on the target:\n{}",
        target_console.text()
    );
    assert!(
        target_console.text().contains("rng"),
        "virtio-rng does not serve the migrated guest:\n{}",
        target_console.text()
    );
    assert_no_fail(&source_console, "source");
    assert_no_fail(&target_console, "target");

    let target_disk = scratch_disk(&target_dirs.root).expect("the target's emptyDisk file");
    let head = std::fs::read(&target_disk).expect("read the target's emptyDisk");
    assert!(
        head.starts_with(DISK_MARKER),
        "the emptyDisk's blocks did not reach the target's file {}",
        target_disk.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_target_and_cancel_leave_the_guest_running_on_the_source() {
    let kernel = memtest();
    let (source_dirs, source) = launcher("kvmmigkill-src", &kernel);
    let (target_dirs, target) = launcher("kvmmigkill-dst", &kernel);
    let source_console = start_source(&source_dirs, &source).await;
    prepare_target(&target_dirs, &target).await;
    let relay_socket = source_dirs.sockets().join("migration-out");
    // Slow enough (the first pass is several MiB) that the kill lands mid-stream.
    relay(
        &relay_socket,
        target_dirs
            .sockets()
            .join(contract::sockets::MIGRATION_TARGET_SOCKET),
        Some(1 << 20),
    );
    let mut source_client = client(&source_dirs).await;
    migrate(&mut source_client, &source, &relay_socket, 0).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = domain(&mut source_client).await;
    let info = migration_of(&during);
    assert_eq!(
        info.status,
        MigrationStatus::Active as i32,
        "the migration ended before the kill: {during:?}"
    );
    assert!(info.transferred_bytes > 0, "no progress reported: {info:?}");
    drop(target);

    let ended = wait_migration_end(&mut source_client, Duration::from_secs(90)).await;
    let info = migration_of(&ended);
    assert_eq!(info.status, MigrationStatus::Failed as i32, "{info:?}");
    println!("failed migration: {}; source: {}", info.error, ended.reason);
    assert_eq!(ended.state, DomainState::Running as i32, "{}", ended.reason);
    let seen = generations(&source_console.text())
        .last()
        .copied()
        .unwrap_or(0);
    wait_generation(&source_console, seen + 2, Duration::from_secs(30)).await;
    assert_no_fail(&source_console, "source");

    // Cancelling when nothing runs is refused with its reason.
    let status = source_client
        .cancel_migration(v1::VmiRequest::default())
        .await
        .expect_err("nothing to cancel");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");

    // A second attempt to a new target, cancelled mid-stream.
    let (target_dirs, target) = launcher("kvmmigcancel-dst", &kernel);
    prepare_target(&target_dirs, &target).await;
    let relay_socket = source_dirs.sockets().join("migration-out-2");
    relay(
        &relay_socket,
        target_dirs
            .sockets()
            .join(contract::sockets::MIGRATION_TARGET_SOCKET),
        Some(1 << 20),
    );
    migrate(&mut source_client, &source, &relay_socket, 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    source_client
        .cancel_migration(v1::VmiRequest::default())
        .await
        .unwrap_or_else(|s| panic!("CancelMigration: {s}\n{}", source.log_text()));
    let ended = wait_migration_end(&mut source_client, Duration::from_secs(30)).await;
    let info = migration_of(&ended);
    assert_eq!(info.status, MigrationStatus::Cancelled as i32, "{info:?}");
    assert_eq!(ended.state, DomainState::Running as i32, "{}", ended.reason);
    let seen = generations(&source_console.text())
        .last()
        .copied()
        .unwrap_or(0);
    wait_generation(&source_console, seen + 2, Duration::from_secs(30)).await;
    assert_no_fail(&source_console, "source");
    // The target saw its stream break: its VM never ran.
    let mut target_client = client(&target_dirs).await;
    let target_end = wait_migration_end(&mut target_client, Duration::from_secs(30)).await;
    assert_ne!(
        target_end.state,
        DomainState::Running as i32,
        "{target_end:?}"
    );
}
