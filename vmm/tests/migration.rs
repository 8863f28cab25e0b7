//! Live migration and save/restore on this host's /dev/kvm, source and target VMs in this
//! process over Unix socket pairs: the memtest guest keeps rewriting and checking 4 MiB (and
//! reading virtio-rng) while it is migrated and goes on checking on the target; a paused counter guest is saved and restored
//! and counts on; a truncated stream, a wrong version and a target with another memory size each
//! fail with a clear error and leave the source running.

mod common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread::JoinHandle;

use common::*;
use vmm::lifecycle::VmExit;
use vmm::migration::{error_chain, MigrationOptions, ReceiveError, SendError};
use vmm::vmm::{VmState, Vmm};

/// Numbers after `prefix` on complete lines (8 hex digits) of `log`.
fn numbers(log: &str, prefix: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|rest| rest.get(..8))
        .filter_map(|n| u64::from_str_radix(n, 16).ok())
        .collect()
}

fn gens(log: &str) -> Vec<u64> {
    numbers(log, "GEN ")
}

fn counts(log: &str) -> Vec<u64> {
    numbers(log, "COUNT ")
}

fn assert_consecutive(values: &[u64], what: &str, log: &str) {
    for pair in values.windows(2) {
        assert_eq!(
            pair[1],
            pair[0] + 1,
            "{what} jumped from {:x} to {:x}; log:\n{log}",
            pair[0],
            pair[1]
        );
    }
}

/// Starts the target side in a thread: builds a VM from `config` and restores into it.
fn spawn_target(
    config: vmm::config::VmConfig,
    mut stream: UnixStream,
) -> JoinHandle<Result<Vmm, ReceiveError>> {
    std::thread::spawn(move || Vmm::restore_from(&config, &mut stream))
}

/// A relay between a source end and a target end that copies source-to-target bytes through
/// `mangle` (which may change them, or return false to cut the stream there) and
/// target-to-source bytes unchanged, up to `to_source_limit` bytes (then it hangs up on the
/// source).
fn relay<F>(mut mangle: F, to_source_limit: Option<usize>) -> (UnixStream, UnixStream)
where
    F: FnMut(usize, &mut [u8]) -> bool + Send + 'static,
{
    let (source_end, mut from_source) = UnixStream::pair().expect("socketpair");
    let (target_end, mut to_target) = UnixStream::pair().expect("socketpair");
    let mut to_source = from_source.try_clone().expect("clone");
    let mut from_target = to_target.try_clone().expect("clone");
    std::thread::spawn(move || {
        let mut offset = 0usize;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match from_source.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let keep = mangle(offset, &mut buf[..n]);
            offset += n;
            if !keep || to_target.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = from_source.shutdown(Shutdown::Both);
        let _ = to_target.shutdown(Shutdown::Both);
    });
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        let mut left = to_source_limit.unwrap_or(usize::MAX);
        loop {
            match from_target.read(&mut buf) {
                Ok(0) | Err(_) => break,
                // Past the limit, the next bytes from the target end the connection.
                Ok(_) if left == 0 => break,
                Ok(n) => {
                    let n = n.min(left);
                    left -= n;
                    if to_source.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to_source.shutdown(Shutdown::Both);
    });
    (source_end, target_end)
}

/// Migrates `source` to a VM built from `target_config` over a socket pair; fails the test with
/// the error chain when either side fails.
fn migrate(
    source: &Vmm,
    target_config: vmm::config::VmConfig,
    options: &MigrationOptions,
) -> (vmm::migration::MigrationStats, Vmm) {
    let (mut source_end, target_end) = UnixStream::pair().expect("socketpair");
    let target = spawn_target(target_config, target_end);
    let stats = source
        .send_migration(&mut source_end, options)
        .unwrap_or_else(|e| panic!("send: {}", error_chain(&e)));
    let target = target
        .join()
        .expect("target thread")
        .unwrap_or_else(|e| panic!("restore: {}", error_chain(&e)));
    (stats, target)
}

/// Runs a migration of `source` over `source_end` to a target restoring from `target_end` that
/// must fail on both sides (`why`); returns both errors.
fn migrate_expecting_failure(
    source: &Vmm,
    mut source_end: UnixStream,
    target: JoinHandle<Result<Vmm, ReceiveError>>,
    why: &str,
) -> (SendError, ReceiveError) {
    let send = source
        .send_migration(&mut source_end, &MigrationOptions::default())
        .map(|_| ())
        .expect_err(why);
    let receive = target
        .join()
        .expect("target thread")
        .map(|_| ())
        .expect_err(why);
    (send, receive)
}

/// Waits for the counter guest on `serial` to count to `n`.
fn wait_for_count(serial: &Path, n: u64) -> String {
    wait_for_serial(serial, &format!("COUNT {n:08x}"), |log| {
        counts(log).last().is_some_and(|c| *c >= n)
    })
}

/// Checks that `source` still runs and its counter guest counts on (two more); returns the log.
fn assert_counts_on(source: &Vmm, serial: &Path) -> String {
    assert_eq!(source.state(), VmState::Running);
    let before = counts(&serial_log(serial))
        .last()
        .copied()
        .expect("a count");
    wait_for_serial(serial, "counting on", |log| {
        counts(log).last().is_some_and(|n| *n >= before + 2)
    })
}

/// Waits for the memtest guest on `serial` to finish generation `gen`.
fn wait_for_gen(serial: &Path, gen: u64) -> String {
    wait_for_serial(serial, &format!("GEN {gen:08x} ok"), |log| {
        assert!(!log.contains("FAIL"), "memtest failed; log:\n{log}");
        gens(log).last().is_some_and(|g| *g >= gen)
    })
}

/// Waits for the migrated memtest guest to finish two more generations on the target and checks
/// that its output continues the source's (even mid-line): one consecutive run of generations,
/// each checked against the previous one, no restart, no failure.
fn assert_memtest_goes_on(source_serial: &Path, target_serial: &Path) {
    let source_log = serial_log(source_serial);
    let last_on_source = gens(&source_log).last().copied().expect("a generation");
    let target_log = wait_for_gen(target_serial, last_on_source + 2);
    let combined = format!("{source_log}{target_log}");
    assert_eq!(
        combined.matches("TEST memtest start").count(),
        1,
        "the guest restarted; log:\n{combined}"
    );
    assert!(!combined.contains("FAIL"), "log:\n{combined}");
    assert_consecutive(&gens(&combined), "generation", &combined);
}

#[test]
fn live_migration_keeps_the_memtest_guest_checking() {
    let stats = live_migration("migrate-live", &MigrationOptions::default());
    assert!(
        stats.pages_sent >= 1024,
        "the 4 MiB pattern alone is 1024 pages"
    );
}

/// Pre-copy that goes on while anything is dirty (for at most 3 rounds after the first pass):
/// the rounds sent while the guest runs must be enough with the stop-and-copy round.
#[test]
fn live_migration_over_several_precopy_rounds() {
    let options = MigrationOptions {
        max_rounds: 3,
        stop_copy_pages: 0,
        ..MigrationOptions::default()
    };
    let stats = live_migration("migrate-rounds", &options);
    assert!(
        stats.precopy_rounds() >= 2,
        "the guest dirtied pages during the first pass, so a second round ran: {:?}",
        stats.pages_per_round
    );
}

/// Migrates the running memtest guest (with virtio-rng) with `options` and checks that the
/// target goes on from where the source stopped; returns the stats.
fn live_migration(test: &str, options: &MigrationOptions) -> vmm::migration::MigrationStats {
    let scratch = Scratch::new(test);
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    // The guest also takes entropy from virtio-rng every generation: the device's rings must
    // go on where the source left them.
    let source = vmm::builder::build_and_boot(&with_rng(config("memtest", &source_serial)))
        .expect("boot source");
    wait_for_gen(&source_serial, 1);
    assert_lines(
        &serial_log(&source_serial),
        &["TEST memtest uses virtio-rng"],
    );

    let (stats, mut target) = migrate(
        &source,
        with_rng(config("memtest", &target_serial)),
        options,
    );
    println!(
        "live migration ({options:?}): {} pre-copy rounds, pages per round {:?} (last: stop-and-copy), \
         {} pages / {} bytes sent, downtime {:?}, total {:?}",
        stats.precopy_rounds(),
        stats.pages_per_round,
        stats.pages_sent,
        stats.bytes_sent,
        stats.downtime,
        stats.total
    );
    assert_eq!(source.state(), VmState::Stopped(VmExit::Stopped));

    assert_memtest_goes_on(&source_serial, &target_serial);
    wait_for_serial(
        &target_serial,
        "two virtio-rng answers on the target",
        |log| log.lines().filter(|l| l.ends_with(" ok rng 10")).count() >= 2,
    );

    assert_eq!(
        target.shutdown(GUEST_DEADLINE),
        VmExit::PowerOff { code: 0 }
    );
    assert_lines(
        &serial_log(&target_serial),
        &["TEST memtest shutdown requested"],
    );
    stats
}

#[test]
fn paused_counter_guest_is_saved_and_restored() {
    let scratch = Scratch::new("migrate-paused");
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    // With a virtio device (idle: the counter guest does not drive it), whose transport state
    // travels too.
    let source = vmm::builder::build_and_boot(&with_rng(config("counter", &source_serial)))
        .expect("boot source");
    wait_for_count(&source_serial, 3);
    source.pause().expect("pause");
    let paused_at = counts(&serial_log(&source_serial))
        .last()
        .copied()
        .expect("a count");

    let (stats, mut target) = migrate(
        &source,
        with_rng(config("counter", &target_serial)),
        &MigrationOptions::default(),
    );
    println!(
        "save/restore of a paused VM: pages per round {:?}, {} bytes, {:?}",
        stats.pages_per_round, stats.bytes_sent, stats.total
    );
    assert_eq!(source.state(), VmState::Stopped(VmExit::Stopped));
    assert_eq!(
        target.state(),
        VmState::Paused,
        "the target keeps the pause"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(serial_log(&target_serial), "", "the paused target printed");

    target.resume().expect("resume the target");
    let target_log = wait_for_serial(&target_serial, "counts after the restore", |log| {
        counts(&format!("{}{log}", serial_log(&source_serial)))
            .last()
            .is_some_and(|n| *n >= paused_at + 3)
    });
    let combined = format!("{}{target_log}", serial_log(&source_serial));
    assert_eq!(
        combined.matches("TEST counter start").count(),
        1,
        "log:\n{combined}"
    );
    assert_consecutive(&counts(&combined), "counter", &combined);
    assert_eq!(
        target.shutdown(GUEST_DEADLINE),
        VmExit::PowerOff { code: 0 }
    );
}

fn with_rng(mut config: vmm::config::VmConfig) -> vmm::config::VmConfig {
    config.rng = Some(vmm::config::RngConfig {
        src: "/dev/urandom".into(),
    });
    config
}

/// Runs a migration of a running `guest` that must fail; returns the source's and the
/// target's errors, after checking the source still runs and its guest makes progress.
fn failed_migration(
    test: &str,
    guest: &str,
    target_memory: u64,
    mangle: impl FnMut(usize, &mut [u8]) -> bool + Send + 'static,
) -> (String, String) {
    let scratch = Scratch::new(test);
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let mut source =
        vmm::builder::build_and_boot(&config(guest, &source_serial)).expect("boot source");
    let progress = |log: &str| match guest {
        "memtest" => gens(log).last().copied(),
        _ => counts(log).last().copied(),
    };
    wait_for_serial(&source_serial, "the guest running", |log| {
        progress(log).is_some_and(|n| n >= 1)
    });

    let (source_end, target_end) = relay(mangle, None);
    let mut target_config = config(guest, &target_serial);
    target_config.memory.size = target_memory;
    let target = spawn_target(target_config, target_end);
    let (send_error, target_error) =
        migrate_expecting_failure(&source, source_end, target, "the migration must fail");

    // A failed migration leaves the VM running on the source: it keeps making progress.
    assert_eq!(source.state(), VmState::Running, "source: {send_error}");
    let before = progress(&serial_log(&source_serial)).expect("progress");
    let log = wait_for_serial(
        &source_serial,
        "progress after the failed migration",
        |log| progress(log).is_some_and(|n| n >= before + 2),
    );
    assert!(!log.contains("FAIL"), "log:\n{log}");
    match guest {
        "memtest" => assert_consecutive(&gens(&log), "generation", &log),
        _ => assert_consecutive(&counts(&log), "counter", &log),
    }
    source.stop();
    (error_chain(&send_error), error_chain(&target_error))
}

#[test]
fn a_truncated_stream_fails_and_the_source_keeps_running() {
    // Cut the source-to-target direction after 1 MiB: inside round 0 of the 4 MiB pattern.
    let (send, receive) =
        failed_migration("migrate-truncated", "memtest", 64 << 20, |offset, _| {
            offset < 1 << 20
        });
    println!("truncated stream: source: {send}\n  target: {receive}");
    assert!(
        receive.contains("truncated stream"),
        "target error: {receive}"
    );
}

#[test]
fn a_wrong_version_is_refused_and_the_source_keeps_running() {
    // Bytes 8..12 of the stream are the version.
    let (send, receive) =
        failed_migration("migrate-version", "counter", 64 << 20, |offset, buf| {
            if offset == 0 && buf.len() >= 12 {
                buf[8..12].copy_from_slice(&7u32.to_le_bytes());
            }
            true
        });
    println!("wrong version: source: {send}\n  target: {receive}");
    let expected = "unsupported migration stream version 7: this VMM reads version 1";
    assert!(receive.contains(expected), "target error: {receive}");
    assert!(
        send.starts_with("the target refused the migration") && send.contains(expected),
        "source error: {send}"
    );
}

#[test]
fn a_target_with_another_memory_size_is_refused_and_the_source_keeps_running() {
    let (send, receive) = failed_migration("migrate-memsize", "counter", 128 << 20, |_, _| true);
    println!("memory size mismatch: source: {send}\n  target: {receive}");
    let expected = "memory size mismatch: the source has 64 MiB";
    assert!(
        receive.contains(expected) && receive.contains("this VM 128 MiB"),
        "target error: {receive}"
    );
    assert!(
        send.starts_with("the target refused the migration") && send.contains(expected),
        "source error: {send}"
    );
}

#[test]
fn a_target_with_other_devices_is_refused_and_the_source_keeps_running() {
    let scratch = Scratch::new("migrate-devices");
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let mut source = vmm::builder::build_and_boot(&with_rng(config("counter", &source_serial)))
        .expect("boot source");
    wait_for_count(&source_serial, 1);
    let (source_end, target_end) = UnixStream::pair().expect("socketpair");
    let target = spawn_target(config("counter", &target_serial), target_end);
    let (send, receive) =
        migrate_expecting_failure(&source, source_end, target, "the target has no rng device");
    let expected = "virtio device mismatch: the source has types [4], this VM []";
    assert!(receive.to_string().contains(expected), "target: {receive}");
    assert!(error_chain(&send).contains(expected), "source: {send}");
    assert_counts_on(&source, &source_serial);
    source.stop();
}

/// `config` with the guest agent channel listening on `socket`.
fn with_agent(mut config: vmm::config::VmConfig, socket: &Path) -> vmm::config::VmConfig {
    config.agent = Some(vmm::config::AgentChannelConfig {
        socket: socket.to_path_buf(),
    });
    config
}

/// The guest agent channel (a virtio-console) goes with the VM: a target without one is
/// refused; with one, the target listens on its own socket and the guest counts on. (The
/// counter guest has no console driver; the ports a Linux driver opens travel in the nested
/// tier and in the console's unit tests.)
#[test]
fn the_agent_channel_migrates_and_the_target_listens_on_its_own_socket() {
    let scratch = Scratch::new("migrate-agent");
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let (source_socket, target_socket) = (scratch.path("source.sock"), scratch.path("target.sock"));
    let source = vmm::builder::build_and_boot(&with_agent(
        with_rng(config("counter", &source_serial)),
        &source_socket,
    ))
    .expect("boot source");
    wait_for_count(&source_serial, 1);
    let _client = UnixStream::connect(&source_socket).expect("the source's agent socket");

    let (source_end, target_end) = UnixStream::pair().expect("socketpair");
    let target = spawn_target(with_rng(config("counter", &target_serial)), target_end);
    let (send, receive) = migrate_expecting_failure(
        &source,
        source_end,
        target,
        "the target has no agent channel",
    );
    let expected = "virtio device mismatch: the source has types [4, 3], this VM [4]";
    assert!(receive.to_string().contains(expected), "target: {receive}");
    assert!(error_chain(&send).contains(expected), "source: {send}");
    assert_counts_on(&source, &source_serial);

    let (_, mut target) = migrate(
        &source,
        with_agent(with_rng(config("counter", &target_serial)), &target_socket),
        &MigrationOptions::default(),
    );
    let last = counts(&serial_log(&source_serial))
        .last()
        .copied()
        .expect("a count");
    wait_for_serial(&target_serial, "counting on the target", |log| {
        counts(log).last().is_some_and(|n| *n >= last + 2)
    });
    UnixStream::connect(&target_socket).expect("the target's agent socket");
    target.stop();
}

#[test]
fn a_stopped_vm_cannot_be_migrated() {
    let scratch = Scratch::new("migrate-stopped");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot(&config("counter", &serial)).expect("boot");
    vm.stop();
    let (mut a, _b) = UnixStream::pair().expect("socketpair");
    let err = vm
        .send_migration(&mut a, &MigrationOptions::default())
        .expect_err("a stopped VM cannot migrate");
    assert!(
        matches!(err, SendError::NotRunning(VmExit::Stopped)),
        "{err}"
    );
}

/// The memtest guest notices a page that does not hold what it wrote (so a migration that lost
/// or staled a page would fail the live migration test above).
#[test]
fn memtest_detects_a_corrupted_qword() {
    use vm_memory::{Bytes, GuestAddress};
    let scratch = Scratch::new("memtest-corrupt");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot(&config("memtest", &serial)).expect("boot");
    wait_for_gen(&serial, 1);
    vm.pause().expect("pause");
    // Qword 0x1234 of the pattern at 16 MiB.
    let addr = GuestAddress(0x100_0000 + 0x1234 * 8);
    let value: u64 = vm.guest_memory().read_obj(addr).expect("read the pattern");
    assert_eq!(
        value & 0xffff_ffff,
        0x1234,
        "the pattern is (generation << 32) | index"
    );
    vm.guest_memory()
        .write_obj(value ^ 0x8000, addr)
        .expect("corrupt the pattern");
    vm.resume().expect("resume");
    let exit = wait_for_exit(&mut vm, &serial);
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
    let log = serial_log(&serial);
    assert!(
        log.contains("TEST memtest FAIL gen ") && log.contains(" qword 00001234 got "),
        "log:\n{log}"
    );
}

/// A disk image of `size` bytes: zeros, or (with `seed`) a few non-zero blocks, the last
/// one partial.
fn disk_image(path: &Path, size: u64, seed: Option<u8>) {
    let mut bytes = vec![0u8; size as usize];
    if let Some(seed) = seed {
        bytes[..17].copy_from_slice(b"FERROVIRT-DISK-0\n");
        for (i, b) in bytes[(1 << 20) + 7..(1 << 20) + 70_000]
            .iter_mut()
            .enumerate()
        {
            *b = seed.wrapping_add(i as u8) | 1;
        }
        let tail = bytes.len() - 100;
        bytes[tail..].fill(seed);
    }
    std::fs::write(path, bytes).expect("write the disk image");
}

/// The counter guest writing to `serial`, with the disks `side`'s images in `dir` hold.
fn with_disks(serial: &Path, dir: &Scratch, side: &str) -> vmm::config::VmConfig {
    let mut config = config("counter", serial);
    for (id, readonly) in [("emptydisk", false), ("shared", false), ("image", true)] {
        config.disks.push(vmm::config::DiskConfig {
            id: id.into(),
            path: dir.path(&format!("{side}-{id}.img")),
            readonly,
        });
    }
    config
}

/// Block migration: the writable disk's content reaches the target's own file; a disk named
/// as shared storage and a read-only disk are not copied.
#[test]
fn writable_disks_are_copied_to_the_target() {
    let scratch = Scratch::new("migrate-disks");
    let size = (4 << 20) + 512;
    for (id, seed) in [("emptydisk", 0x31), ("shared", 0x52), ("image", 0x73)] {
        disk_image(&scratch.path(&format!("source-{id}.img")), size, Some(seed));
        disk_image(&scratch.path(&format!("target-{id}.img")), size, None);
    }
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let source = vmm::builder::build_and_boot(&with_disks(&source_serial, &scratch, "source"))
        .expect("boot source");
    wait_for_count(&source_serial, 1);
    let options = MigrationOptions {
        shared_disks: vec!["shared".into()],
        ..MigrationOptions::default()
    };
    let (stats, mut target) = migrate(
        &source,
        with_disks(&target_serial, &scratch, "target"),
        &options,
    );
    println!(
        "block migration: {} disk blocks, {} bytes in all",
        stats.disk_blocks_sent, stats.bytes_sent
    );
    let read = |name: &str| std::fs::read(scratch.path(name)).expect("read a disk image");
    assert!(
        read("target-emptydisk.img") == read("source-emptydisk.img"),
        "the writable disk's content did not reach the target"
    );
    assert!(
        read("target-shared.img").iter().all(|b| *b == 0),
        "shared disk copied"
    );
    assert!(
        read("target-image.img").iter().all(|b| *b == 0),
        "read-only disk copied"
    );
    // Blocks 0, 16 and 17 (1 MiB + 7 .. + 70000) and the last, partial one: the zero blocks
    // are left out of the first pass.
    assert_eq!(stats.disk_blocks_sent, 4);
    wait_for_serial(&target_serial, "counting on the target", |log| {
        counts(&format!("{}{log}", serial_log(&source_serial)))
            .last()
            .is_some_and(|n| *n >= 3)
    });
    assert_eq!(target.stop(), VmExit::Stopped);
}

#[test]
fn a_target_with_a_smaller_disk_is_refused_and_the_source_keeps_running() {
    let scratch = Scratch::new("migrate-disksize");
    let size = 1 << 20;
    for (id, _) in [("emptydisk", 0), ("shared", 0), ("image", 0)] {
        disk_image(&scratch.path(&format!("source-{id}.img")), size, None);
        disk_image(&scratch.path(&format!("target-{id}.img")), size, None);
    }
    disk_image(&scratch.path("target-emptydisk.img"), size / 2, None);
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let source = vmm::builder::build_and_boot(&with_disks(&source_serial, &scratch, "source"))
        .expect("boot source");
    wait_for_count(&source_serial, 1);
    let (source_end, target_end) = UnixStream::pair().expect("socketpair");
    let target = spawn_target(with_disks(&target_serial, &scratch, "target"), target_end);
    let (send, receive) =
        migrate_expecting_failure(&source, source_end, target, "the target's disk is smaller");
    let expected = "disk mismatch in virtio slot 0: the source's disk has 1048576 bytes, \
                    disk \"emptydisk\" here 524288";
    assert!(receive.to_string().contains(expected), "target: {receive}");
    assert!(error_chain(&send).contains(expected), "source: {send}");
    assert_counts_on(&source, &source_serial);
}

/// Kills and reaps a child process when dropped (a failing test leaves no VM behind).
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl ChildGuard {
    /// Waits for the process to exit; fails the test after the deadline.
    fn wait(&mut self, what: &str) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + GUEST_DEADLINE;
        loop {
            if let Some(status) = self.0.try_wait().expect("wait for the child") {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "{what} did not exit");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        let ret = unsafe { libc::kill(self.0.id() as libc::pid_t, signal) };
        assert_eq!(ret, 0, "signal the child");
    }
}

/// The deployment shape: two `vmm` processes (two launchers), the target listening on a Unix
/// socket (`--incoming`), the source migrating on SIGUSR1 (`--migrate-to`).
#[test]
fn two_vmm_processes_migrate_over_a_unix_socket() {
    let scratch = Scratch::new("migrate-processes");
    let socket = scratch.path("migration.sock");
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let kernel = guest("memtest");
    let vmm = |serial: &Path, stderr: &str, extra: [&std::ffi::OsStr; 2]| {
        let stderr = std::fs::File::create(scratch.path(stderr)).expect("stderr file");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_vmm"))
            .arg("--kernel")
            .arg(&kernel)
            .args(["--memory", "64", "--rng", "--transport", "mmio", "--serial"])
            .arg(format!("file:{}", serial.display()))
            .args(extra)
            .stderr(stderr)
            .spawn()
            .expect("start vmm");
        ChildGuard(child)
    };
    let mut target = vmm(
        &target_serial,
        "target.err",
        ["--incoming".as_ref(), socket.as_os_str()],
    );
    wait_for_serial(&socket, "the target's socket", |_| socket.exists());
    let mut source = vmm(
        &source_serial,
        "source.err",
        ["--migrate-to".as_ref(), socket.as_os_str()],
    );
    wait_for_gen(&source_serial, 1);
    source.signal(libc::SIGUSR1);
    let status = source.wait("the source vmm");
    let source_err = std::fs::read_to_string(scratch.path("source.err")).unwrap_or_default();
    println!("source: {source_err}");
    assert!(
        status.success(),
        "source exit {status}; stderr:\n{source_err}"
    );
    assert!(source_err.contains("vmm: VM migrated to "), "{source_err}");

    assert_memtest_goes_on(&source_serial, &target_serial);

    // The target process runs the VM on: SIGTERM shuts its guest down gracefully.
    target.signal(libc::SIGTERM);
    let status = target.wait("the target vmm");
    let target_err = std::fs::read_to_string(scratch.path("target.err")).unwrap_or_default();
    assert!(
        status.success(),
        "target exit {status}; stderr:\n{target_err}"
    );
    assert!(target_err.contains("vmm: VM received from"), "{target_err}");
    assert_lines(
        &serial_log(&target_serial),
        &["TEST memtest shutdown requested"],
    );
}

/// While a migration is under way, pause, resume and a second migration are refused; once it
/// fails (here: the target hangs up without a word) the VM runs on and pause works again.
#[test]
fn lifecycle_requests_wait_for_a_migration_under_way() {
    use vmm::vmm::LifecycleError;
    let scratch = Scratch::new("migrate-busy");
    let serial = scratch.path("serial.log");
    let vm = vmm::builder::build_and_boot(&config("counter", &serial)).expect("boot");
    wait_for_serial(&serial, "COUNT 00000001", |log| {
        counts(log).last().is_some_and(|n| *n >= 1)
    });
    let (mut source_end, mut silent_target) = UnixStream::pair().expect("socketpair");
    std::thread::scope(|scope| {
        let migration =
            scope.spawn(|| vm.send_migration(&mut source_end, &MigrationOptions::default()));
        // The source has sent its HELLO and waits for the target's reply.
        let mut preamble = [0u8; 12];
        silent_target
            .read_exact(&mut preamble)
            .expect("the source's preamble");
        assert_eq!(&preamble[..8], b"FVMIGRAT");
        assert_eq!(vm.pause(), Err(LifecycleError::Migrating));
        assert_eq!(vm.resume(), Err(LifecycleError::Migrating));
        let (mut other, _peer) = UnixStream::pair().expect("socketpair");
        assert!(matches!(
            vm.send_migration(&mut other, &MigrationOptions::default()),
            Err(SendError::AlreadyMigrating)
        ));
        silent_target
            .shutdown(Shutdown::Write)
            .expect("hang up towards the source");
        let err = migration
            .join()
            .expect("migration thread")
            .expect_err("the target hung up");
        assert!(
            error_chain(&err).contains("truncated stream"),
            "{}",
            error_chain(&err)
        );
    });
    assert_eq!(vm.state(), VmState::Running);
    vm.pause().expect("pause after the failed migration");
    vm.resume().expect("resume");
}

/// The target restores and says it is ready, but that reply never reaches the source (the
/// connection breaks first): the source, paused for the stop-and-copy, resumes and runs on.
/// (The target ran too; telling which copy wins is the cluster's part: virt-handler and the
/// migration controller stop the other one.)
#[test]
fn a_lost_ready_reply_resumes_the_source() {
    let scratch = Scratch::new("migrate-lost-ready");
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let source =
        vmm::builder::build_and_boot(&config("counter", &source_serial)).expect("boot source");
    wait_for_count(&source_serial, 1);
    // Preamble (12 bytes) and the "accepted" REPLY (12-byte header, code, length-prefixed
    // text) reach the source; nothing after.
    let accepted = 12 + 12 + 1 + 4 + "accepted".len();
    let (mut source_end, target_end) = relay(|_, _| true, Some(accepted));
    let target = spawn_target(config("counter", &target_serial), target_end);
    let err = source
        .send_migration(&mut source_end, &MigrationOptions::default())
        .map(|_| ())
        .expect_err("the ready reply was lost");
    let err = error_chain(&err);
    println!("lost ready reply: source: {err}");
    assert!(err.contains("truncated stream"), "{err}");
    if let Ok(mut target) = target.join().expect("target thread") {
        target.stop();
    }
    let log = assert_counts_on(&source, &source_serial);
    assert_consecutive(&counts(&log), "counter", &log);
}
