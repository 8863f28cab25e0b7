//! Live migration on QEMU TCG between two launchers on this host, with the test playing
//! virt-handler's part: it relays the stream from the source launcher's socket to the target
//! launcher's `migration-target-sock` (the handlers put TLS over TCP in the middle).
//!
//! The guest (the `vmi-nocloud.yaml` VMI: containerDisk + cloudInitNoCloud + emptyDisk) prints
//! a counter with its uptime and a token it keeps in RAM, and writes a marker to its emptyDisk.
//! After the migration the target's console shows the counter going on from where it was, with
//! the same token and a growing uptime (no reboot), and the target's emptyDisk file holds the
//! marker (block migration). A second test kills the target mid-migration: the migration fails
//! and the VM keeps running on the source. A third gives the target a stream it cannot load:
//! the migration fails on the source too, and the VM keeps running there.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use contract::proto::v1;
use v1::{DomainState, MigrationStatus};

const DISK_MARKER: &str = "ferrovirt-emptydisk-marker-5c1e";

/// [`nocloud_vmi`] whose user-data prints `fv-count N UPTIME TOKEN` lines and writes
/// [`DISK_MARKER`] at the start of the emptyDisk (`/dev/vdc`).
fn counting_vmi() -> serde_json::Value {
    let user_data = format!(
        "#!/bin/sh\n\
         head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /tmp/fv-token\n\
         echo {DISK_MARKER} > /dev/vdc; sync\n\
         ( i=0; while true; do i=$((i+1)); echo \"fv-count $i $(cut -d' ' -f1 /proc/uptime) $(cat /tmp/fv-token)\" >/dev/console; sleep 0.3; done ) </dev/null >/dev/null 2>&1 &\n"
    );
    nocloud_vmi("7d2a1f3c-migration-test", &user_data)
}

/// One `fv-count` line: counter, guest uptime in seconds, RAM token.
#[derive(Clone, Debug, PartialEq)]
struct Count {
    n: u64,
    uptime: f64,
    token: String,
}

fn counts(text: &str) -> Vec<Count> {
    // Complete lines only: the source's last line can be cut where the migration stopped it
    // (a token of "47a" was once read for "47aa0eff9d09955c").
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| {
            let mut parts = l.trim().strip_prefix("fv-count ")?.split_whitespace();
            Some(Count {
                n: parts.next()?.parse().ok()?,
                uptime: parts.next()?.parse().ok()?,
                token: parts.next()?.to_string(),
            })
        })
        .collect()
}

async fn wait_counts(console: &ConsoleReader, at_least: usize, timeout: Duration) -> Vec<Count> {
    let start = Instant::now();
    loop {
        let found = counts(&console.text());
        if found.len() >= at_least {
            return found;
        }
        assert!(
            start.elapsed() < timeout,
            "fewer than {at_least} fv-count lines within {timeout:?}; console:\n{}",
            console.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A launcher with the containerDisk in place.
fn launcher(name: &str) -> (TestDirs, LauncherProcess) {
    let artifacts = artifacts();
    let dirs = TestDirs::new(name);
    dirs.container_disk("containerdisk", &artifacts.rootdisk());
    let process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    (dirs, process)
}

fn options() -> Option<v1::SyncOptions> {
    Some(v1::SyncOptions {
        use_emulation: true,
        notify_socket: String::new(),
        smbios: None,
    })
}

/// Plays the handlers: accepts the source QEMU's connection on `listen` and copies it to and
/// from the target's socket. Returns the bytes relayed each way.
fn relay(listen: &Path, target: PathBuf) -> tokio::task::JoinHandle<std::io::Result<(u64, u64)>> {
    let _ = std::fs::remove_file(listen);
    let listener = tokio::net::UnixListener::bind(listen).expect("bind the relay socket");
    tokio::spawn(async move {
        let (mut from_source, _) = listener.accept().await?;
        let mut to_target = tokio::net::UnixStream::connect(target).await?;
        tokio::io::copy_bidirectional(&mut from_source, &mut to_target).await
    })
}

/// Starts the counting VMI on `dirs`'s launcher and waits for its first counts.
async fn start_source(
    dirs: &TestDirs,
    process: &LauncherProcess,
) -> (ConsoleReader, serde_json::Value) {
    let mut client = client(dirs).await;
    let console = ConsoleReader::connect(dirs);
    let vmi = counting_vmi();
    if let Err(status) = client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&vmi).expect("json"),
            options: options(),
        })
        .await
    {
        panic!("SyncVMI: {status}\n{}", process.log_text());
    }
    wait_counts(&console, 3, Duration::from_secs(180)).await;
    (console, vmi)
}

async fn prepare_target(
    dirs: &TestDirs,
    process: &LauncherProcess,
    vmi: &serde_json::Value,
) -> v1::Domain {
    let mut client = client(dirs).await;
    match client
        .prepare_migration_target(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(vmi).expect("json"),
            options: options(),
        })
        .await
    {
        Ok(response) => response.into_inner().domain.expect("domain"),
        Err(status) => panic!("PrepareMigrationTarget: {status}\n{}", process.log_text()),
    }
}

/// The files under `dir` (recursively) that start with `marker`.
fn files_starting_with(dir: &Path, marker: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_starting_with(&path, marker));
        } else if let Ok(mut file) = std::fs::File::open(&path) {
            let mut head = vec![0u8; marker.len()];
            if std::io::Read::read_exact(&mut file, &mut head).is_ok() && head == marker {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrates_a_running_guest_with_its_disks() {
    require_qemu();
    let (source_dirs, source) = launcher("migsrc");
    let (target_dirs, target) = launcher("migdst");
    let (source_console, vmi) = start_source(&source_dirs, &source).await;
    // The marker is written before the counter starts.
    assert!(
        !files_starting_with(&source_dirs.root.join("disks"), DISK_MARKER.as_bytes()).is_empty(),
        "the guest did not write the marker to its emptyDisk in {}",
        source_dirs.root.display()
    );

    let prepared = prepare_target(&target_dirs, &target, &vmi).await;
    assert_eq!(
        prepared.state,
        DomainState::Paused as i32,
        "{}",
        prepared.reason
    );
    assert!(migration_of(&prepared).target);
    let target_console = ConsoleReader::connect(&target_dirs);

    let relay_socket = source_dirs.sockets().join("migration-out");
    let relayed = relay(
        &relay_socket,
        target_dirs
            .sockets()
            .join(contract::sockets::MIGRATION_TARGET_SOCKET),
    );
    let before = counts(&source_console.text());
    let last_before = before.last().cloned().expect("counts before");
    let started = Instant::now();
    let mut source_client = client(&source_dirs).await;
    let migrating = migrate(&mut source_client, &source, &relay_socket, 0)
        .await
        .expect("domain");
    assert!(
        migration_of(&migrating).block,
        "the writable disks must go with the stream"
    );

    let ended = wait_migration_end(&mut source_client, Duration::from_secs(300)).await;
    let total = started.elapsed();
    let info = migration_of(&ended);
    assert_eq!(
        info.status,
        MigrationStatus::Completed as i32,
        "source: {info:?}\nsource log:\n{}\ntarget log:\n{}",
        source.log_text(),
        target.log_text()
    );
    assert_eq!(ended.state, DomainState::Shutoff as i32, "{}", ended.reason);
    println!(
        "migration: total {:?} (QEMU: {} ms), downtime {} ms, {} bytes sent",
        total, info.total_ms, info.downtime_ms, info.transferred_bytes
    );
    let (up, down) = relayed.await.expect("relay task").expect("relay");
    println!("relay: {up} bytes source->target, {down} bytes back");
    assert!(up > 128 << 10, "too little was sent: {up} bytes");

    let mut target_client = client(&target_dirs).await;
    let running = wait_state(
        &mut target_client,
        DomainState::Running,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(running.reason, "migrated in");
    assert_eq!(
        migration_of(&running).status,
        MigrationStatus::Completed as i32
    );

    // The counter goes on on the target: same token, growing uptime, no reboot.
    let start = Instant::now();
    let after = loop {
        let after = counts(&target_console.text());
        if after.len() >= 3 {
            break after;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no counter on the target's console:\n{}\ntarget log:\n{}",
            target_console.text(),
            target.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let first = &after[0];
    println!("last count on the source: {last_before:?}; first on the target: {first:?}");
    assert_eq!(
        first.token,
        last_before.token,
        "the RAM token changed: the guest rebooted; the target's console:\n{}\ntarget log:\n{}",
        target_console.text(),
        target.log_text()
    );
    assert!(
        first.n > last_before.n,
        "the counter restarted: {first:?} after {last_before:?}"
    );
    assert!(
        first.uptime > last_before.uptime,
        "the uptime went back: {first:?}"
    );
    assert!(
        !target_console.text().contains(guest_images::READY_MARKER),
        "the target's guest booted again"
    );
    assert!(after
        .windows(2)
        .all(|w| w[1].n == w[0].n + 1 && w[1].uptime >= w[0].uptime));

    // The migrated VM can move on: from the target to a third launcher.
    let (third_dirs, third) = launcher("migthird");
    prepare_target(&third_dirs, &third, &vmi).await;
    let third_console = ConsoleReader::connect(&third_dirs);
    let onward = target_dirs.sockets().join("migration-out");
    let relayed = relay(
        &onward,
        third_dirs
            .sockets()
            .join(contract::sockets::MIGRATION_TARGET_SOCKET),
    );
    let last_on_target = counts(&target_console.text())
        .last()
        .cloned()
        .expect("counts");
    migrate(&mut target_client, &target, &onward, 0).await;
    let ended = wait_migration_end(&mut target_client, Duration::from_secs(300)).await;
    assert_eq!(
        migration_of(&ended).status,
        MigrationStatus::Completed as i32,
        "{ended:?}\n{}",
        third.log_text()
    );
    relayed.await.expect("relay task").expect("relay");
    let onward_counts = wait_counts(&third_console, 2, Duration::from_secs(60)).await;
    assert_eq!(onward_counts[0].token, last_before.token);
    assert!(onward_counts[0].n > last_on_target.n);

    // What the guest wrote to its emptyDisk reached the target's copy.
    let marked = files_starting_with(&target_dirs.root.join("disks"), DISK_MARKER.as_bytes());
    assert!(
        !marked.is_empty(),
        "no disk under {} holds the guest's marker: block migration lost it",
        target_dirs.root.join("disks").display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_target_leaves_the_guest_running_on_the_source() {
    require_qemu();
    let (source_dirs, source) = launcher("migkill-src");
    let (target_dirs, target) = launcher("migkill-dst");
    let (source_console, vmi) = start_source(&source_dirs, &source).await;
    prepare_target(&target_dirs, &target, &vmi).await;
    let relay_socket = source_dirs.sockets().join("migration-out");
    let _relayed = relay(
        &relay_socket,
        target_dirs
            .sockets()
            .join(contract::sockets::MIGRATION_TARGET_SOCKET),
    );
    let mut source_client = client(&source_dirs).await;
    // Slow enough that the kill lands mid-stream.
    migrate(&mut source_client, &source, &relay_socket, 4 << 20).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = domain(&mut source_client).await;
    assert_eq!(
        migration_of(&during).status,
        MigrationStatus::Active as i32,
        "the migration ended before the kill: {during:?}"
    );
    drop(target);

    let ended = wait_migration_end(&mut source_client, Duration::from_secs(60)).await;
    let info = migration_of(&ended);
    assert_eq!(info.status, MigrationStatus::Failed as i32, "{info:?}");
    println!("failed migration: {}; source: {}", info.error, ended.reason);
    assert_eq!(ended.state, DomainState::Running as i32, "{}", ended.reason);
    let seen = counts(&source_console.text()).len();
    wait_counts(&source_console, seen + 3, Duration::from_secs(30)).await;

    // Cancelling when nothing runs is refused with its reason.
    let status = source_client
        .cancel_migration(v1::VmiRequest::default())
        .await
        .expect_err("nothing to cancel");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
}

/// The target cannot load what the source sends: the source's VMI has a virtio-rng device the
/// target's lacks, so the target's QEMU meets a device section it does not know in the stream's
/// last part, after all of RAM and the disks went. The source must not report the migration
/// completed (it would stop its guest, and the VM would be lost); it reports it failed and its
/// guest runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_failing_to_load_the_stream_fails_the_migration() {
    require_qemu();
    let (source_dirs, source) = launcher("migbad-src");
    let (target_dirs, target) = launcher("migbad-dst");
    let mut source_vmi = counting_vmi();
    source_vmi["spec"]["domain"]["devices"]["rng"] = serde_json::json!({});
    let mut source_client = client(&source_dirs).await;
    let source_console = ConsoleReader::connect(&source_dirs);
    source_client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&source_vmi).expect("json"),
            options: options(),
        })
        .await
        .unwrap_or_else(|s| panic!("SyncVMI: {s}\n{}", source.log_text()));
    wait_counts(&source_console, 3, Duration::from_secs(180)).await;
    prepare_target(&target_dirs, &target, &counting_vmi()).await;
    let relay_socket = source_dirs.sockets().join("migration-out");
    let _relayed = relay(
        &relay_socket,
        target_dirs
            .sockets()
            .join(contract::sockets::MIGRATION_TARGET_SOCKET),
    );
    migrate(&mut source_client, &source, &relay_socket, 0).await;
    let ended = wait_migration_end(&mut source_client, Duration::from_secs(300)).await;
    let info = migration_of(&ended);
    assert_eq!(
        info.status,
        MigrationStatus::Failed as i32,
        "the source reported {info:?} although its target could not load the stream\n\
         target log:\n{}",
        target.log_text()
    );
    println!("failed migration: {}; source: {}", info.error, ended.reason);
    // The target failed in the stream's device state, after RAM and the disks.
    let target_log = target.log_text();
    assert!(
        target_log.contains("Unknown savevm section") && target_log.contains("virtio-rng"),
        "the target did not fail on the source's virtio-rng section:\n{target_log}"
    );
    let running = wait_state(
        &mut source_client,
        DomainState::Running,
        Duration::from_secs(30),
    )
    .await;
    let seen = counts(&source_console.text());
    let more = wait_counts(&source_console, seen.len() + 3, Duration::from_secs(60)).await;
    assert_eq!(
        more.last().map(|c| &c.token),
        seen.first().map(|c| &c.token),
        "the source's guest rebooted: {running:?}"
    );
}
