//! The PCI machine (virtio-pci devices, ACPI tables and PM registers) on this host's /dev/kvm
//! with the test guests, which know neither PCI nor ACPI: they run on it unchanged, the
//! graceful shutdown falls back to ctrl-alt-del because the guest never enabled the ACPI power
//! button, and the machine resets in place and migrates with its PCI state.
//!
//! (Booting a stock Linux kernel on it needs hardware virtualization: see the README.)

mod common;

use std::os::unix::net::UnixStream;

use common::*;
use vmm::config::{DiskConfig, RngConfig, Transport, VmConfig};
use vmm::lifecycle::VmExit;
use vmm::migration::{error_chain, MigrationOptions};
use vmm::vmm::{ShutdownRequest, VmState, Vmm};

/// The counter guest on the PCI machine with virtio-rng and a disk (idle: the guest does not
/// drive them).
fn pci_counter(serial: &std::path::Path, scratch: &Scratch) -> VmConfig {
    let stem = serial.file_stem().and_then(|s| s.to_str()).unwrap_or("vm");
    let disk = scratch.path(&format!("{stem}-disk.img"));
    std::fs::write(&disk, vec![0u8; 1 << 20]).expect("write the disk image");
    VmConfig {
        transport: Transport::Pci,
        rng: Some(RngConfig::default()),
        disks: vec![DiskConfig {
            id: "disk0".into(),
            path: disk,
            readonly: false,
        }],
        ..config("counter", serial)
    }
}

fn wait_for_count(serial: &std::path::Path, n: u64) -> String {
    wait_for_serial(serial, &format!("COUNT >= {n}"), |log| {
        counts(log).last().is_some_and(|c| *c >= n)
    })
}

#[test]
fn a_guest_without_acpi_runs_on_the_pci_machine_and_shuts_down_with_ctrl_alt_del() {
    let scratch = Scratch::new("pci-shutdown");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot(&pci_counter(&serial, &scratch)).expect("boot");
    wait_for_count(&serial, 3);
    assert_eq!(
        vm.request_shutdown(),
        ShutdownRequest::CtrlAltDel,
        "the guest never enabled the ACPI power button"
    );
    assert_eq!(
        wait_for_exit(&mut vm, &serial),
        VmExit::PowerOff { code: 0 }
    );
}

#[test]
fn the_pci_machine_resets_in_place() {
    let scratch = Scratch::new("pci-reset");
    let serial = scratch.path("serial.log");
    let mut vm = vmm::builder::build_and_boot(&pci_counter(&serial, &scratch)).expect("boot");
    wait_for_count(&serial, 2);
    vm.reset().expect("reset");
    assert_eq!(vm.resets(), 1);
    wait_for_serial(&serial, "a second start", |log| {
        log.matches("TEST counter start").count() == 2
    });
    assert_eq!(vm.shutdown(GUEST_DEADLINE), VmExit::PowerOff { code: 0 });
}

#[test]
fn the_pci_machine_migrates_with_its_pci_state() {
    let scratch = Scratch::new("pci-migrate");
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let source =
        vmm::builder::build_and_boot(&pci_counter(&source_serial, &scratch)).expect("boot");
    wait_for_count(&source_serial, 3);
    let (mut a, b) = UnixStream::pair().expect("socketpair");
    let target_config = pci_counter(&target_serial, &scratch);
    let target = std::thread::spawn(move || {
        let mut b = b;
        Vmm::restore_from(&target_config, &mut b)
    });
    let stats = source
        .send_migration(&mut a, &MigrationOptions::default())
        .expect("migrate");
    let mut target = target.join().expect("target thread").expect("restore");
    println!(
        "PCI machine migrated: pages per round {:?}, downtime {:?}",
        stats.pages_per_round, stats.downtime
    );
    assert_eq!(source.state(), VmState::Stopped(VmExit::Stopped));
    let last = counts(&serial_log(&source_serial))
        .last()
        .copied()
        .expect("a count");
    let log = wait_for_serial(&target_serial, "counts on the target", |log| {
        counts(log).last().is_some_and(|n| *n >= last + 2)
    });
    assert!(
        !log.contains("TEST counter start"),
        "the guest restarted:\n{log}"
    );
    assert_eq!(
        target.shutdown(GUEST_DEADLINE),
        VmExit::PowerOff { code: 0 }
    );
}

#[test]
fn a_target_on_the_other_transport_is_refused_and_the_source_keeps_running() {
    let scratch = Scratch::new("pci-mismatch");
    let source_serial = scratch.path("source.log");
    let target_serial = scratch.path("target.log");
    let mut source =
        vmm::builder::build_and_boot(&pci_counter(&source_serial, &scratch)).expect("boot");
    wait_for_count(&source_serial, 1);
    let (mut a, b) = UnixStream::pair().expect("socketpair");
    let target_config = VmConfig {
        transport: Transport::Mmio,
        ..pci_counter(&target_serial, &scratch)
    };
    let target = std::thread::spawn(move || {
        let mut b = b;
        Vmm::restore_from(&target_config, &mut b).map(|_| ())
    });
    let send = source
        .send_migration(&mut a, &MigrationOptions::default())
        .expect_err("a target on virtio-mmio must refuse");
    let receive = target.join().expect("target thread").expect_err("refused");
    let expected = "transport mismatch: the source's virtio devices are on pci, this VM's on mmio";
    assert!(
        error_chain(&receive).contains(expected),
        "{}",
        error_chain(&receive)
    );
    assert!(
        error_chain(&send).contains(expected),
        "{}",
        error_chain(&send)
    );
    let before = counts(&serial_log(&source_serial))
        .last()
        .copied()
        .expect("a count");
    wait_for_count(&source_serial, before + 2);
    source.stop();
}
