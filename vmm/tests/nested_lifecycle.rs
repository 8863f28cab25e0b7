//! The nested-KVM tier, the VM's lifecycle: our kernel and the tiny guest on the VMM with real
//! KVM (boot and graceful stop, pause and resume, live migration, save and restore, SIGTERM to
//! the `vmm` command), Debian's stock cloud kernel on the VMM's PCI machine, and a guestless VM
//! (no kernel: the VMM's idle code). How a nested test runs: `nested.rs`.

mod common;
mod nested_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{serial_log, wait_for_serial};
use guest_images::l1::{in_l1, nested_test};
use guest_images::{NoCloudSeed, SeedFormat, READY_MARKER};
use nested_support::*;
use vmm::capability::{self, KvmCapability};
use vmm::config::{ConsoleConfig, MemoryConfig, PayloadConfig, Transport, VmConfig};
use vmm::lifecycle::VmExit;
use vmm::vmm::VmState;

#[test]
fn linux_boots_to_the_ready_marker_and_stops_on_request() {
    let name = "linux_boots_to_the_ready_marker_and_stops_on_request";
    nested_test(name, &guest_files(), L1_DEADLINE, || {
        let dir = work_dir(name);
        let serial = dir.join("serial.log");
        let started = Instant::now();
        let mut vm = boot(&linux(&serial));
        wait_for_serial(&serial, READY_MARKER, |log| log.contains(READY_MARKER));
        println!(
            "nested: ready marker {:.2} s after boot",
            started.elapsed().as_secs_f64()
        );
        // A graceful stop: ctrl-alt-del, which the tiny guest's init answers with a reboot.
        let exit = vm.shutdown(Duration::from_secs(60));
        assert!(
            matches!(exit, VmExit::Reset | VmExit::PowerOff { code: 0 }),
            "graceful shutdown ended with {exit}; serial:\n{}",
            serial_log(&serial)
        );
    });
}

#[test]
fn pause_and_resume_keep_the_guest_counting() {
    let name = "pause_and_resume_keep_the_guest_counting";
    let (files, dir) = counting_test(name);
    nested_test(name, &files, L1_DEADLINE, || {
        let serial = dir.join("serial.log");
        let config = counting_linux(&dir, &serial);
        let mut vm = boot(&config);
        wait_line(&serial, "NESTED-COUNT 5", Duration::from_secs(120));
        vm.pause().expect("pause");
        // Lines already on their way settle, then nothing more comes while paused.
        std::thread::sleep(Duration::from_millis(500));
        let paused_at = last_count(&serial);
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(
            last_count(&serial),
            paused_at,
            "the guest went on counting while paused"
        );
        vm.resume().expect("resume");
        let next = format!("NESTED-COUNT {}", paused_at + 3);
        wait_line(&serial, &next, Duration::from_secs(60));
        vm.stop();
    });
}

#[test]
fn live_migration_of_a_counting_linux_guest_loses_no_count() {
    let name = "live_migration_of_a_counting_linux_guest_loses_no_count";
    let (files, dir) = counting_test(name);
    nested_test(name, &files, L1_DEADLINE, || {
        let (source_serial, target_serial) = (dir.join("source.log"), dir.join("target.log"));
        let source = boot(&counting_linux(&dir, &source_serial));
        wait_line(&source_serial, "NESTED-COUNT 10", Duration::from_secs(120));
        let (stats, mut target) = migrate(&source, counting_linux(&dir, &target_serial));
        println!(
            "nested: live migration of a Linux guest (256 MiB): {} pre-copy rounds, {} pages, \
             downtime {:?}, total {:?}",
            stats.precopy_rounds(),
            stats.pages_sent,
            stats.downtime,
            stats.total
        );
        let next = format!("NESTED-COUNT {}", last_count(&source_serial) + 10);
        wait_line(&target_serial, &next, Duration::from_secs(60));
        assert_no_gap(&serial_log(&source_serial), &serial_log(&target_serial));
        target.stop();
    });
}

#[test]
fn a_paused_linux_guest_is_saved_and_restored_where_it_was() {
    let name = "a_paused_linux_guest_is_saved_and_restored_where_it_was";
    let (files, dir) = counting_test(name);
    nested_test(name, &files, L1_DEADLINE, || {
        let (source_serial, target_serial) = (dir.join("source.log"), dir.join("target.log"));
        let source = boot(&counting_linux(&dir, &source_serial));
        wait_line(&source_serial, "NESTED-COUNT 5", Duration::from_secs(120));
        source.pause().expect("pause");
        // Save/restore is a migration of the paused VM: the target keeps the pause.
        let (stats, mut target) = migrate(&source, counting_linux(&dir, &target_serial));
        println!(
            "nested: saved and restored a paused Linux guest: {} bytes in {:?}",
            stats.bytes_sent, stats.total
        );
        assert_eq!(
            target.state(),
            vmm::vmm::VmState::Paused,
            "the target keeps the pause"
        );
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            guest_counts(&serial_log(&target_serial)),
            Vec::<u64>::new(),
            "the restored guest ran before it was resumed"
        );
        target.resume().expect("resume the restored guest");
        let next = format!("NESTED-COUNT {}", last_count(&source_serial) + 5);
        wait_line(&target_serial, &next, Duration::from_secs(60));
        assert_no_gap(&serial_log(&source_serial), &serial_log(&target_serial));
        target.stop();
    });
}

#[test]
fn sigterm_to_the_vmm_command_shuts_the_linux_guest_down() {
    let name = "sigterm_to_the_vmm_command_shuts_the_linux_guest_down";
    let mut files = guest_files();
    let vmm_bin = PathBuf::from(env!("CARGO_BIN_EXE_vmm"));
    files.push(vmm_bin.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        let dir = work_dir(name);
        let serial = dir.join("serial.log");
        let mut child = Command::new(&vmm_bin)
            .arg("--require-hardware-virt")
            .arg("--kernel")
            .arg(image("vmlinux"))
            .arg("--initramfs")
            .arg(image("initramfs.cpio.gz"))
            .args([
                "--cmdline",
                "console=ttyS0 panic=-1 root=ram",
                "--memory",
                "256",
                "--transport",
                "mmio",
            ])
            .arg("--serial")
            .arg(format!("file:{}", serial.display()))
            .args(["--shutdown-grace", "60"])
            .spawn()
            .expect("run vmm");
        wait_for_serial(&serial, READY_MARKER, |log| log.contains(READY_MARKER));
        common::signal(&child, libc::SIGTERM);
        let started = Instant::now();
        let code = wait_exit(&mut child, &serial, Duration::from_secs(90));
        println!(
            "nested: SIGTERM -> vmm exit {code} after {:.2} s",
            started.elapsed().as_secs_f64()
        );
        // 0: the guest rebooted or powered off on ctrl-alt-del; 3 would be the grace expiring.
        assert_eq!(
            code,
            0,
            "the guest did not shut down on SIGTERM; serial:\n{}",
            serial_log(&serial)
        );
    });
}

/// The tiny root disk's filesystem UUID (fixed by `guest-images/tiny/build-tiny.sh`).
const ROOTDISK_UUID: &str = "3c4c5cf2-47b6-4c1f-8e0a-6f3c0d1e2a01";
/// The SMBIOS system UUID the VM is given (`--smbios uuid=`).
const SMBIOS_UUID: &str = "5d307ca9-b3ef-428c-8861-06e72d69f223";

/// Boots Debian's stock cloud kernel and its initramfs (`stock/`) on the PCI machine with the
/// `vmm` command: a copy of the tiny root disk found by `root=UUID=`, a seed disk, a NIC on
/// tap `fvtap0`, virtio-rng, the guest agent channel on `<run>-agent.sock` and SMBIOS tables
/// with [`SMBIOS_UUID`]; returns the child and its serial log's path.
fn spawn_stock_kernel(dir: &Path, vmm_bin: &Path, run: &str) -> (std::process::Child, PathBuf) {
    let serial = dir.join(format!("{run}.log"));
    let root = dir.join(format!("{run}-root.img"));
    std::fs::copy(image("rootdisk.img"), &root).expect("copy the root disk");
    let child = Command::new(vmm_bin)
        .arg("--require-hardware-virt")
        .arg("--kernel")
        .arg(image("stock/vmlinuz"))
        .arg("--initramfs")
        .arg(image("stock/initramfs.cpio.gz"))
        .arg("--cmdline")
        .arg(format!("console=ttyS0 panic=-1 root=UUID={ROOTDISK_UUID}"))
        .args(["--memory", "512", "--transport", "pci", "--rng"])
        .arg("--disk")
        .arg(&root)
        .arg("--disk")
        .arg(format!(
            "{},ro",
            dir.join(format!("{run}-seed/cidata.iso")).display()
        ))
        .args(["--net", "fvtap0,52:54:00:12:34:57"])
        .args([
            "--smbios",
            &format!("uuid={SMBIOS_UUID}"),
            "--smbios",
            "serial=fv-serial-stock",
        ])
        .args(["--smbios", "manufacturer=KubeVirt"])
        .arg("--agent-socket")
        .arg(dir.join(format!("{run}-agent.sock")))
        .arg("--serial")
        .arg(format!("file:{}", serial.display()))
        .args(["--shutdown-grace", "90"])
        .spawn()
        .expect("run vmm");
    (child, serial)
}

#[test]
fn debians_stock_kernel_boots_on_the_pci_machine_and_powers_off() {
    let name = "debians_stock_kernel_boots_on_the_pci_machine_and_powers_off";
    let dir = work_dir(name);
    let vmm_bin = PathBuf::from(env!("CARGO_BIN_EXE_vmm"));
    let files = vec![
        image("stock/vmlinuz"),
        image("stock/initramfs.cpio.gz"),
        image("rootdisk.img"),
        vmm_bin.clone(),
        dir.clone(),
    ];
    let report = r#"echo "NESTED-ROOT $(awk '$2 == "/" {print $1}' /proc/mounts | tail -n 1)"
echo "NESTED-PCI $(for d in /sys/bus/pci/devices/*; do basename "$(readlink "$d/driver")"; done | sort | uniq -c | tr -s ' \n' '  ')"
echo "NESTED-MSIX $(grep -c PCI-MSI /proc/interrupts)"
echo "NESTED-DMI $(cd /sys/class/dmi/id && cat product_uuid product_serial sys_vendor | tr '\n' ' ')"
if ping -c 2 -W 5 10.78.0.1 >/dev/null 2>&1; then echo "NESTED-NET ok"; else echo "NESTED-NET failed"; fi
agent=$(for f in /sys/class/virtio-ports/*/name; do [ "$(cat "$f" 2>/dev/null)" = org.qemu.guest_agent.0 ] && basename "$(dirname "$f")"; done)
echo "NESTED-AGENT-PORT ${agent:-none}"
[ -n "$agent" ] && (timeout 120 sh -c "echo hello-over-pci >/dev/$agent" &)
"#;
    if !in_l1() {
        let net = |address: &str| NoCloudSeed {
            user_data: String::new(),
            meta_data: "instance-id: stock\nlocal-hostname: stock\n".into(),
            network_config: Some(format!(
                "version: 2\nethernets:\n  eth0:\n    addresses: [{address}]\n"
            )),
        };
        for (run, then) in [("sigterm", ""), ("poweroff", "poweroff\n")] {
            let seed_dir = dir.join(format!("{run}-seed"));
            std::fs::create_dir_all(&seed_dir).expect("create the seed directory");
            NoCloudSeed {
                user_data: format!("#!/bin/sh\n{report}{then}"),
                ..net("10.78.0.2/24")
            }
            .write(&seed_dir, SeedFormat::Iso9660)
            .expect("write the NoCloud seed");
        }
    }
    nested_test(name, &files, L1_DEADLINE, || {
        l1_tap("fvtap0", "10.78.0.1/24");

        // 1. Up to a login prompt, then SIGTERM: the ACPI power button, and the guest's S5.
        let started = Instant::now();
        let (mut child, serial) = spawn_stock_kernel(&dir, &vmm_bin, "sigterm");
        let root = wait_line(&serial, "NESTED-ROOT ", Duration::from_secs(240));
        assert!(
            root.starts_with("/dev/vda"),
            "the root is {root:?}, not the virtio-blk disk"
        );
        let pci = wait_line(&serial, "NESTED-PCI ", Duration::from_secs(30));
        assert!(
            pci.contains("virtio-pci"),
            "no PCI function is bound to virtio-pci: {pci:?}"
        );
        let msix: u32 = wait_line(&serial, "NESTED-MSIX ", Duration::from_secs(30))
            .parse()
            .unwrap_or(0);
        assert!(msix > 0, "no MSI-X interrupts in /proc/interrupts");
        // The SMBIOS tables the VMM wrote at 0xf0000, as the guest's DMI driver read them.
        assert_eq!(
            wait_line(&serial, "NESTED-DMI ", Duration::from_secs(30)).trim_end(),
            format!("{SMBIOS_UUID} fv-serial-stock KubeVirt")
        );
        assert_eq!(
            wait_line(&serial, "NESTED-NET ", Duration::from_secs(60)),
            "ok"
        );
        // Debian's virtio_console module found the guest agent's port over virtio-pci, and
        // what the guest writes into it reaches the socket.
        let agent = wait_line(&serial, "NESTED-AGENT-PORT ", Duration::from_secs(30));
        assert!(
            agent.starts_with("vport") && agent.ends_with("p1"),
            "no org.qemu.guest_agent.0 port in the guest: {agent:?}"
        );
        let client = std::os::unix::net::UnixStream::connect(dir.join("sigterm-agent.sock"))
            .expect("connect to the agent socket");
        client
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        let mut hello = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(client), &mut hello)
            .expect("read the guest's line");
        assert_eq!(hello, "hello-over-pci\n");
        wait_for_serial(&serial, "a login prompt", |log| log.contains("login:"));
        println!(
            "nested: Debian's stock kernel on the PCI machine: login prompt {:.1} s after start; \
             PCI drivers: {pci}; {msix} MSI-X interrupt lines",
            started.elapsed().as_secs_f64()
        );
        let kernel_log = serial_log(&serial);
        assert!(
            kernel_log.contains("Linux version 6.1.0"),
            "not Debian's kernel:\n{kernel_log}"
        );
        common::signal(&child, libc::SIGTERM);
        let code = wait_exit(&mut child, &serial, Duration::from_secs(120));
        assert_eq!(
            code,
            0,
            "SIGTERM did not power the guest off (exit {code}); serial:\n{}",
            serial_log(&serial)
        );
        assert!(
            serial_log(&serial).contains("reboot: Power down"),
            "the guest did not power down:\n{}",
            serial_log(&serial)
        );

        // 2. `poweroff` in the guest ends the VM with status 0.
        let (mut child, serial) = spawn_stock_kernel(&dir, &vmm_bin, "poweroff");
        let code = wait_exit(&mut child, &serial, Duration::from_secs(300));
        assert_eq!(code, 0, "the guest's poweroff: exit {code}");
        assert!(serial_log(&serial).contains("NESTED-NET ok"));
        assert!(serial_log(&serial).contains("reboot: Power down"));
    });
}

/// CPU time (user + system, in clock ticks of 10 ms) of this process's thread named `name`.
fn thread_cpu_ticks(name: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        // After "(comm)": state is field 0, utime 11, stime 12.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        return Some(field(11)? + field(12)?);
    }
    None
}

/// A guestless VM (KubeVirt's VMIs without disks): no kernel, the VMM's idle code. It runs and
/// stays running with its vCPU halted (no exit, its thread asleep in KVM), pauses and resumes,
/// and a graceful shutdown, which nothing in it answers, stops it when the grace period ends.
#[test]
fn a_guestless_vm_idles_in_hlt_pauses_resumes_and_stops() {
    let name = "a_guestless_vm_idles_in_hlt_pauses_resumes_and_stops";
    nested_test(name, &[], L1_DEADLINE, || {
        assert_eq!(
            capability::probe(),
            KvmCapability::Hardware,
            "inside the L1, /dev/kvm should be hardware virtualization (nested SVM)"
        );
        let config = VmConfig {
            payload: PayloadConfig::guestless(),
            memory: MemoryConfig {
                size: vmm::config::MIN_MEMORY_BYTES,
            },
            serial: ConsoleConfig::Null,
            transport: Transport::Mmio,
            ..VmConfig::default()
        };
        let mut vm = boot(&config);
        let idle_for = |vm: &mut vmm::vmm::Vmm, what: &str| {
            let before = thread_cpu_ticks("vcpu0").expect("the vcpu0 thread");
            let exit = vm.wait_timeout(Duration::from_secs(3));
            assert_eq!(exit, None, "the guestless VM stopped {what}");
            assert_eq!(vm.state(), VmState::Running, "{what}");
            let used = thread_cpu_ticks("vcpu0").expect("the vcpu0 thread") - before;
            println!(
                "nested: guestless vcpu0 used {} ms of CPU in 3 s {what}",
                used * 10
            );
            // A vCPU that spins (or exits to the VMM over and over) uses the whole 3 s.
            assert!(
                used <= 30,
                "vcpu0 used {} ms in 3 s {what}: not halted",
                used * 10
            );
        };
        idle_for(&mut vm, "after boot");
        vm.pause().expect("pause");
        assert_eq!(vm.state(), VmState::Paused);
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(vm.state(), VmState::Paused);
        vm.resume().expect("resume");
        idle_for(&mut vm, "after resume");
        let started = Instant::now();
        let exit = vm.shutdown(Duration::from_secs(2));
        let took = started.elapsed();
        println!(
            "nested: guestless graceful shutdown (grace 2 s) ended with {exit} after {:.2} s",
            took.as_secs_f64()
        );
        assert_eq!(exit, VmExit::Stopped, "nothing in the guest powers it off");
        assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    });
}
