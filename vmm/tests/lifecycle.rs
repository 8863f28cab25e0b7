//! VM lifecycle on this host's /dev/kvm: power-off exit status, pause/resume (the counter guest
//! stops printing while paused and continues after), graceful shutdown through the i8042, forced
//! stop, and the standalone `vmm` command.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use vmm::capability::{self, KvmCapability, NEEDS_HARDWARE_VIRT};
use vmm::lifecycle::VmExit;
use vmm::vmm::{LifecycleError, VmState};

fn last_count(log: &str) -> Option<u64> {
    counts(log).last().copied()
}

#[test]
fn pause_stops_the_counter_and_resume_continues_it() {
    let scratch = Scratch::new("pause");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot(&config("counter", &serial)).expect("boot");
    wait_for_serial(&serial, "COUNT 00000003", |log| {
        last_count(log).is_some_and(|n| n >= 3)
    });

    vm.pause().expect("pause");
    assert_eq!(vm.state(), VmState::Paused);
    let paused_log = serial_log(&serial);
    let paused_at = last_count(&paused_log).expect("a count before the pause");
    // The counter prints about 20 lines a second when running; paused, nothing may appear.
    std::thread::sleep(Duration::from_millis(1500));
    let still = serial_log(&serial);
    assert_eq!(
        still, paused_log,
        "the guest printed while paused (paused at COUNT {paused_at:x})"
    );

    vm.resume().expect("resume");
    assert_eq!(vm.state(), VmState::Running);
    let log = wait_for_serial(&serial, "a count after the resume", |log| {
        last_count(log).is_some_and(|n| n >= paused_at + 3)
    });
    // Counting continued from where it stopped: no gap, no restart.
    for pair in counts(&log).windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "counter jumped: {pair:?}");
    }

    // Graceful shutdown: ctrl-alt-del through the i8042, the guest powers off.
    let exit = vm.shutdown(GUEST_DEADLINE);
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
    assert_lines(&serial_log(&serial), &["TEST counter shutdown requested"]);
}

#[test]
fn forced_stop_reports_stopped() {
    let scratch = Scratch::new("stop");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot(&config("counter", &serial)).expect("boot");
    wait_for_serial(&serial, "COUNT 00000001", |log| {
        last_count(log).is_some_and(|n| n >= 1)
    });
    assert_eq!(vm.stop(), VmExit::Stopped);
    assert_eq!(vm.state(), VmState::Stopped(VmExit::Stopped));
    assert_eq!(vm.pause(), Err(LifecycleError::NotRunning(VmExit::Stopped)));
    assert_eq!(
        vm.resume(),
        Err(LifecycleError::NotRunning(VmExit::Stopped))
    );
}

#[test]
fn pause_while_paused_and_stop_while_paused() {
    let scratch = Scratch::new("pause-stop");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot(&config("counter", &serial)).expect("boot");
    wait_for_serial(&serial, "COUNT 00000000", |log| last_count(log).is_some());
    vm.pause().expect("pause");
    vm.pause().expect("pause again");
    assert_eq!(vm.stop(), VmExit::Stopped);
}

#[test]
fn power_off_exit_status_of_every_guest() {
    // The serial guest powers off with code 0 and nothing else configured.
    let scratch = Scratch::new("poweroff");
    let serial = scratch.path("serial.log");
    let (exit, _) = run_to_exit(&config("serial", &serial), &serial);
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
    // A device guest without its device reports the failure, then still powers off.
    let serial = scratch.path("serial-rng.log");
    let (exit, log) = run_to_exit(&config("rng", &serial), &serial);
    assert_lines(&log, &["TEST rng FAIL no virtio-rng device found"]);
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
}

#[test]
fn build_errors_name_the_failing_step() {
    let scratch = Scratch::new("build-errors");
    let serial = scratch.path("serial.log");
    let mut cfg = config("serial", &serial);
    cfg.payload.kernel = scratch.path("no-such-kernel");
    let err = vmm::builder::build_and_boot(&cfg)
        .err()
        .expect("missing kernel");
    assert!(
        matches!(
            err,
            vmm::builder::StartVmError::Payload(vmm::payload::PayloadError::LoadKernel(_))
        ),
        "{err:?}"
    );
    let mut cfg = config("serial", &serial);
    cfg.cpus.boot_vcpus = 0;
    let err = vmm::builder::build_and_boot(&cfg).err().expect("no vcpus");
    assert!(
        matches!(err, vmm::builder::StartVmError::Validate(_)),
        "{err:?}"
    );
}

#[test]
fn two_vcpus_boot_and_power_off() {
    let scratch = Scratch::new("smp");
    let serial = scratch.path("serial.log");
    let mut cfg = config("serial", &serial);
    cfg.cpus.boot_vcpus = 2;
    cfg.cpus.max_vcpus = 2;
    let (exit, log) = run_to_exit(&cfg, &serial);
    assert_lines(&log, &["TEST serial ok"]);
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
}

#[test]
fn standalone_command_runs_a_json_config() {
    let scratch = Scratch::new("binary");
    let serial = scratch.path("serial.log");
    let json = scratch.path("vm.json");
    let cfg = config("serial", &serial);
    std::fs::write(&json, serde_json::to_string(&cfg).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vmm"))
        .arg("--config")
        .arg(&json)
        .output()
        .expect("run vmm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "vmm failed: {stderr}");
    assert!(stderr.contains("guest powered off (code 0)"), "{stderr}");
    assert_lines(&serial_log(&serial), &["TEST serial ok"]);

    // Flags alone, serial on stdout.
    let out = Command::new(env!("CARGO_BIN_EXE_vmm"))
        .arg("--kernel")
        .arg(guest("serial"))
        .args(["--memory", "32", "--serial", "tty"])
        .output()
        .expect("run vmm");
    assert!(out.status.success());
    assert_lines(&String::from_utf8_lossy(&out.stdout), &["TEST serial ok"]);
}

#[test]
fn hardware_virt_requirement_matches_the_probe() {
    let out = Command::new(env!("CARGO_BIN_EXE_vmm"))
        .arg("--require-hardware-virt")
        .arg("--kernel")
        .arg(guest("serial"))
        .args(["--memory", "32", "--serial", "null"])
        .output()
        .expect("run vmm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match capability::probe() {
        KvmCapability::Hardware => assert!(out.status.success(), "{stderr}"),
        KvmCapability::PvmOnly => {
            assert_eq!(out.status.code(), Some(2), "{stderr}");
            assert!(stderr.contains(NEEDS_HARDWARE_VIRT), "{stderr}");
        }
        KvmCapability::Unavailable(why) => panic!("KVM unavailable: {why}"),
    }
}

#[test]
fn standalone_command_shuts_down_gracefully_on_sigterm() {
    let scratch = Scratch::new("sigterm");
    let serial = scratch.path("serial.log");
    let child = spawn_vmm("counter", &serial, &[]);
    wait_for_serial(&serial, "COUNT 00000001", |log| {
        last_count(log).is_some_and(|n| n >= 1)
    });
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().expect("wait for vmm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("guest powered off (code 0)"), "{stderr}");
    assert_lines(&serial_log(&serial), &["TEST counter shutdown requested"]);
}

#[test]
fn triple_fault_is_reported() {
    let scratch = Scratch::new("fault");
    let serial = scratch.path("serial.log");
    let (exit, log) = run_to_exit(&config("fault", &serial), &serial);
    assert_lines(&log, &["TEST fault start"]);
    assert_eq!(exit, VmExit::TripleFault);
}
