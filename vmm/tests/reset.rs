//! Hardware reset in place on this host's /dev/kvm: the host's reset (KubeVirt's `reset`)
//! restarts the guest from its kernel's entry in the same process, with the kernel reloaded
//! from its file; a triple fault restarts the VM under the restart policy; a reset that cannot
//! reload the kernel ends the VM with the reason; a migrated VM can be reset too.

mod common;

use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::*;
use vm_memory::{Bytes, GuestAddress};
use vmm::lifecycle::{ResetPolicy, VmExit};
use vmm::migration::MigrationOptions;
use vmm::vmm::{LifecycleError, VmState, Vmm};

/// The log after the `n`th (1-based) `TEST counter start` line, if there is one.
fn after_start(log: &str, n: usize) -> Option<&str> {
    log.match_indices("TEST counter start\n")
        .nth(n - 1)
        .map(|(at, line)| &log[at + line.len()..])
}

/// Where the test guests are loaded (their link address).
const GUEST_KERNEL: u64 = 0x10_0000;

#[test]
fn host_reset_restarts_the_guest_from_a_reloaded_kernel() {
    let scratch = Scratch::new("reset-host");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot(&config("counter", &serial)).expect("boot");
    wait_for_serial(&serial, "COUNT 00000005", |log| {
        counts(log).last().is_some_and(|n| *n >= 5)
    });

    // Paused, the guest's code is wiped: only a kernel reloaded from its file can run again.
    vm.pause().expect("pause");
    let before = counts(&serial_log(&serial)).len();
    vm.guest_memory()
        .write_slice(&[0xffu8; 0x2000], GuestAddress(GUEST_KERNEL))
        .expect("overwrite the guest kernel");
    vm.reset().expect("reset");
    assert_eq!(vm.resets(), 1);
    // A paused VM stays paused through a reset and prints nothing.
    assert_eq!(vm.state(), VmState::Paused);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counts(&serial_log(&serial)).len(), before);

    vm.resume().expect("resume");
    let log = wait_for_serial(&serial, "a second start counting to 3", |log| {
        after_start(log, 2).is_some_and(|rest| counts(rest).last().is_some_and(|n| *n >= 3))
    });
    let again = counts(after_start(&log, 2).expect("a second start"));
    assert_eq!(again[0], 0, "counting did not start over; log:\n{log}");
    for pair in again.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "counter jumped {pair:?}; log:\n{log}");
    }
    assert_eq!(vm.state(), VmState::Running);

    // A running VM resets too, and the guest still shuts down gracefully afterwards.
    vm.reset().expect("second reset");
    assert_eq!(vm.resets(), 2);
    wait_for_serial(&serial, "a third start", |log| {
        after_start(log, 3).is_some()
    });
    assert_eq!(vm.shutdown(GUEST_DEADLINE), VmExit::PowerOff { code: 0 });
    assert_lines(&serial_log(&serial), &["TEST counter shutdown requested"]);
    assert_eq!(
        vm.reset(),
        Err(LifecycleError::NotRunning(VmExit::PowerOff { code: 0 }))
    );
}

#[test]
fn a_triple_fault_restarts_the_vm_under_the_restart_policy() {
    let scratch = Scratch::new("reset-fault");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot_with(&config("fault", &serial), ResetPolicy::RESTART)
        .expect("boot");
    // Each boot prints its start line and triple-faults; each fault is a reset in place.
    let log = wait_for_serial(&serial, "three boots", |log| {
        log.matches("TEST fault start\n").count() >= 3
    });
    assert!(vm.resets() >= 2, "resets: {}; log:\n{log}", vm.resets());
    assert_ne!(
        vm.state(),
        VmState::Stopped(VmExit::TripleFault),
        "the triple fault ended the VM"
    );

    // Back to the default: the next triple fault ends the VM, as before.
    vm.set_reset_policy(ResetPolicy::default());
    let exit = wait_for_exit(&mut vm, &serial);
    assert_eq!(exit, VmExit::TripleFault);
}

#[test]
fn a_reset_that_cannot_reload_the_kernel_ends_the_vm_with_the_reason() {
    let scratch = Scratch::new("reset-nokernel");
    let serial = scratch.path("serial.log");
    let kernel = scratch.path("counter.elf");
    std::fs::copy(guest("counter"), &kernel).expect("copy the counter guest");
    let mut cfg = config("counter", &serial);
    cfg.payload.kernel = kernel.clone();
    let mut vm = vmm::builder::build_and_boot(&cfg).expect("boot");
    wait_for_serial(&serial, "COUNT 00000001", |log| {
        counts(log).last().is_some_and(|n| *n >= 1)
    });
    std::fs::remove_file(&kernel).expect("remove the kernel");
    let err = vm.reset().expect_err("a reset without its kernel");
    let LifecycleError::NotRunning(VmExit::Error(reason)) = &err else {
        panic!("unexpected: {err:?}");
    };
    assert!(
        reason.starts_with("reset: reload the kernel: ")
            && reason.contains(&kernel.display().to_string()),
        "{reason}"
    );
    assert_eq!(vm.wait(), VmExit::Error(reason.clone()));
}

#[test]
fn a_migrated_vm_resets_on_its_target() {
    let scratch = Scratch::new("reset-migrated");
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let source = vmm::builder::build_and_boot(&config("counter", &source_serial)).expect("boot");
    wait_for_serial(&source_serial, "COUNT 00000003", |log| {
        counts(log).last().is_some_and(|n| *n >= 3)
    });
    let (mut source_end, mut target_end) = UnixStream::pair().expect("socket pair");
    let target_config = config("counter", &target_serial);
    let target = std::thread::spawn(move || Vmm::restore_from(&target_config, &mut target_end));
    source
        .send_migration(&mut source_end, &MigrationOptions::default())
        .expect("migrate");
    let mut target = target.join().expect("target thread").expect("restore");
    drop(source);
    wait_for_serial(&target_serial, "a count on the target", |log| {
        !counts(log).is_empty()
    });
    assert!(
        !serial_log(&target_serial).contains("TEST counter start"),
        "the target booted instead of continuing"
    );

    target.reset().expect("reset the target");
    let log = wait_for_serial(&target_serial, "the target counting from 0", |log| {
        after_start(log, 1).is_some_and(|rest| counts(rest).last().is_some_and(|n| *n >= 2))
    });
    assert_eq!(
        counts(after_start(&log, 1).expect("a start"))[0],
        0,
        "{log}"
    );
    assert_eq!(target.stop(), VmExit::Stopped);
}

#[test]
fn standalone_command_restarts_on_a_triple_fault_and_resets_on_sighup() {
    let scratch = Scratch::new("reset-command");
    let serial = scratch.path("serial.log");
    let child = spawn_vmm("fault", &serial, &["--on-reset", "restart"]);
    wait_for_serial(&serial, "two boots", |log| {
        log.matches("TEST fault start\n").count() >= 2
    });
    signal(&child, libc::SIGINT);
    let out = child.wait_with_output().expect("wait for vmm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("stopped by the host"), "{stderr}");

    let serial = scratch.path("counter.log");
    let child = spawn_vmm("counter", &serial, &[]);
    wait_for_serial(&serial, "COUNT 00000002", |log| {
        counts(log).last().is_some_and(|n| *n >= 2)
    });
    signal(&child, libc::SIGHUP);
    wait_for_serial(&serial, "a second start", |log| {
        after_start(log, 2).is_some()
    });
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().expect("wait for vmm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("vmm: VM reset (1 so far)"), "{stderr}");
}

/// The log after the `n`th (1-based) `TEST memtest start` line, if there is one.
fn after_memtest_start(log: &str, n: usize) -> Option<&str> {
    log.match_indices("TEST memtest start\n")
        .nth(n - 1)
        .map(|(at, line)| &log[at + line.len()..])
}

#[test]
fn a_reset_guest_sets_up_its_virtio_device_again() {
    let scratch = Scratch::new("reset-virtio");
    let serial = scratch.path("serial.log");
    let mut cfg = config("memtest", &serial);
    cfg.rng = Some(vmm::config::RngConfig {
        src: "/dev/urandom".into(),
    });
    let vm = vmm::builder::build_and_boot(&cfg).expect("boot");
    wait_for_serial(&serial, "GEN 00000001 ok rng", |log| {
        assert!(!log.contains("FAIL"), "memtest failed; log:\n{log}");
        log.contains("GEN 00000001 ok rng 10")
    });
    // Reset while the guest has the device active and requests in flight.
    vm.reset().expect("reset");
    let log = wait_for_serial(&serial, "a second boot using virtio-rng", |log| {
        assert!(!log.contains("FAIL"), "memtest failed; log:\n{log}");
        after_memtest_start(log, 2).is_some_and(|rest| rest.contains("GEN 00000001 ok rng 10"))
    });
    let rest = after_memtest_start(&log, 2).expect("a second start");
    assert!(
        rest.starts_with("TEST memtest uses virtio-rng\n"),
        "the rebooted guest did not find its rng again; log:\n{log}"
    );
}

#[test]
fn a_two_vcpu_vm_resets_with_its_second_vcpu_waiting_for_startup() {
    let scratch = Scratch::new("reset-smp");
    let serial = scratch.path("serial.log");
    let mut cfg = config("counter", &serial);
    cfg.cpus = vmm::config::CpusConfig {
        boot_vcpus: 2,
        max_vcpus: 2,
    };
    let mut vm = vmm::builder::build_and_boot(&cfg).expect("boot");
    wait_for_serial(&serial, "COUNT 00000002", |log| {
        counts(log).last().is_some_and(|n| *n >= 2)
    });
    // vCPU 1 never got a startup IPI: it sits in KVM_RUN until the reset kicks it out.
    vm.reset().expect("reset");
    wait_for_serial(&serial, "a second start counting to 2", |log| {
        after_start(log, 2).is_some_and(|rest| counts(rest).last().is_some_and(|n| *n >= 2))
    });
    assert_eq!(vm.stop(), VmExit::Stopped);
}
