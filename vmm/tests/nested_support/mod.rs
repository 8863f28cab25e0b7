//! What the nested-KVM tests share (`nested.rs`, the devices; `nested_lifecycle.rs`, the VM's
//! lifecycle and the stock kernel): the guest images, the disks and seeds the outer run
//! prepares, the VM configs, waits on the serial console, checksums and the L1's network.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use guest_images::l1::in_l1;
use guest_images::{NoCloudSeed, SeedFormat};
use vmm::capability::{self, KvmCapability};
use vmm::config::{
    ConsoleConfig, CpusConfig, DiskConfig, MemoryConfig, PayloadConfig, RngConfig, Transport,
    VmConfig,
};
use vmm::vmm::Vmm;

use crate::common::serial_log;

/// A whole nested test (the L1's boot, the guest's, the checks) must end within this.
pub const L1_DEADLINE: Duration = Duration::from_secs(600);

/// The guest image set of `guest-images/build.sh`.
pub fn images() -> PathBuf {
    std::env::var_os("FERROVIRT_GUEST_IMAGES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(guest_images::artifacts::DEFAULT_CACHE_DIR))
        .join("current")
}

pub fn image(name: &str) -> PathBuf {
    let path = images().join(name);
    assert!(
        path.exists(),
        "guest image {} is missing: build the guest images with `guest-images/build.sh`",
        path.display()
    );
    path
}

/// The files every nested test needs in the L1: our kernel and the tiny initramfs.
pub fn guest_files() -> Vec<PathBuf> {
    vec![image("vmlinux"), image("initramfs.cpio.gz")]
}

/// A directory for what the outer run prepares for test `name`; the same path inside the L1.
pub fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new("/var/tmp/ferrovirt-nested").join(name);
    if !in_l1() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir).expect("create the nested test's work directory");
    dir
}

/// Writes a NoCloud seed whose user-data is `script` (run by the tiny guest at every boot from
/// its initramfs) into `dir`.
pub fn seed(dir: &Path, script: &str) -> PathBuf {
    NoCloudSeed {
        user_data: format!("#!/bin/sh\n{script}"),
        meta_data: "instance-id: nested\nlocal-hostname: nested\n".into(),
        network_config: None,
    }
    .write(dir, SeedFormat::Iso9660)
    .expect("write the NoCloud seed")
}

/// A seed with a static network configuration for eth0.
pub fn seed_with_network(dir: &Path, script: &str, address: &str, gateway: &str) -> PathBuf {
    NoCloudSeed {
        user_data: format!("#!/bin/sh\n{script}"),
        meta_data: "instance-id: nested\nlocal-hostname: nested\n".into(),
        network_config: Some(format!(
            "version: 2\nethernets:\n  eth0:\n    addresses: [{address}]\n    gateway4: {gateway}\n"
        )),
    }
    .write(dir, SeedFormat::Iso9660)
    .expect("write the NoCloud seed")
}

/// An ext4 image of `size_mib` labelled `label`.
pub fn ext4(dir: &Path, label: &str, size_mib: u64) -> PathBuf {
    let path = dir.join(format!("{label}.img"));
    let file = std::fs::File::create(&path).expect("create the disk image");
    file.set_len(size_mib << 20).expect("size the disk image");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", label])
        .arg(&path)
        .output()
        .expect("run mkfs.ext4 (e2fsprogs; hack/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "mkfs.ext4: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

pub fn disk(path: &Path, readonly: bool) -> DiskConfig {
    DiskConfig {
        id: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        path: path.to_path_buf(),
        readonly,
    }
}

/// Our kernel and the tiny initramfs (root stays in RAM), 1 vCPU, 256 MiB, the serial port
/// logged to `serial`.
pub fn linux(serial: &Path) -> VmConfig {
    assert_eq!(
        capability::probe(),
        KvmCapability::Hardware,
        "inside the L1, /dev/kvm should be hardware virtualization (nested SVM)"
    );
    VmConfig {
        payload: PayloadConfig {
            kernel: image("vmlinux"),
            initramfs: Some(image("initramfs.cpio.gz")),
            cmdline: "console=ttyS0 panic=-1 root=ram".into(),
            guestless: false,
        },
        cpus: CpusConfig::default(),
        memory: MemoryConfig { size: 256 << 20 },
        serial: ConsoleConfig::File {
            path: serial.to_path_buf(),
        },
        // Our kernel has virtio-mmio and no virtio-pci driver.
        transport: Transport::Mmio,
        ..VmConfig::default()
    }
}

/// Waits up to `timeout` for a serial line with `prefix` in it; returns the rest of it.
pub fn wait_line(serial: &Path, prefix: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let log = serial_log(serial);
        // Complete lines only: the guest may be halfway through the one we wait for.
        let complete = &log[..log.rfind('\n').map_or(0, |i| i + 1)];
        if let Some(rest) = complete
            .lines()
            // A login prompt may share the line.
            .filter_map(|l| {
                l.trim_end_matches('\r')
                    .split_once(prefix)
                    .map(|(_, rest)| rest)
            })
            .next()
        {
            return rest.trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the guest never printed {prefix:?} within {timeout:?}; serial log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn boot(config: &VmConfig) -> Vmm {
    vmm::builder::build_and_boot(config).expect("build and boot the VM")
}

/// CRC-32 (IEEE 802.3, reflected, as zlib), as busybox's `crc32` prints it: 8 hex digits.
pub fn crc32(data: &[u8]) -> String {
    let crc = data.iter().fold(0xffff_ffffu32, |crc, &b| {
        (0..8).fold(crc ^ u32::from(b), |crc, _| {
            if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            }
        })
    });
    format!("{:08x}", !crc)
}

/// A busybox `crc32` result the guest printed: 8 hex digits (an empty or odd line means the
/// command failed in the guest, which must not pass as a match).
pub fn assert_crc(what: &str, value: &str) {
    assert!(
        value.len() == 8 && value.chars().all(|c| c.is_ascii_hexdigit()),
        "{what}: the guest printed {value:?}, not a CRC-32"
    );
}

/// `ip ARGS...` in the L1; fails the test with its output.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (busybox in the L1)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A persistent tap `name` in the L1 with address `cidr`, up (busybox has no `ip tuntap`).
pub fn l1_tap(name: &str, cidr: &str) {
    let out = Command::new("tunctl")
        .args(["-t", name])
        .output()
        .expect("run tunctl (busybox in the L1)");
    assert!(
        out.status.success(),
        "tunctl -t {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ip(&["addr", "add", cidr, "dev", name]);
    ip(&["link", "set", name, "up"]);
}

/// The guest's `NESTED-COUNT n` values in `log`, complete lines only (a login prompt may
/// share a line with one).
pub fn guest_counts(log: &str) -> Vec<u64> {
    let complete = &log[..log.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').split("NESTED-COUNT ").nth(1))
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// Fails unless the counts of the source's log and then the target's go up by one each time
/// (no count lost, none repeated).
pub fn assert_no_gap(source: &str, target: &str) {
    let (on_source, on_target) = (guest_counts(source), guest_counts(target));
    let all: Vec<u64> = on_source.iter().chain(&on_target).copied().collect();
    assert!(!on_target.is_empty(), "no counts on the target");
    assert!(
        all.windows(2).all(|w| w[1] == w[0] + 1),
        "the guest's counter jumped: source {on_source:?}, target {on_target:?}"
    );
}

/// A seed whose user-data counts on the console every 0.2 s, in the background.
pub fn counter_seed(dir: &Path) -> PathBuf {
    seed(
        dir,
        "(i=0; while :; do i=$((i+1)); echo \"NESTED-COUNT $i\"; sleep 0.2; done) &\n",
    )
}

/// The counting guest of `dir`'s seed, its serial port logged to `serial`.
pub fn counting_linux(dir: &Path, serial: &Path) -> VmConfig {
    let mut c = linux(serial);
    c.disks = vec![disk(&dir.join("cidata.iso"), true)];
    c.rng = Some(RngConfig::default());
    c
}

/// Migrates `source` to a VM restored from `target_config` over a socket pair (a save and
/// restore when `source` is paused); fails the test with the error chain on either side.
pub fn migrate(source: &Vmm, target_config: VmConfig) -> (vmm::migration::MigrationStats, Vmm) {
    let (mut source_end, mut target_end) =
        std::os::unix::net::UnixStream::pair().expect("socketpair");
    let target = std::thread::spawn(move || Vmm::restore_from(&target_config, &mut target_end));
    let stats = source
        .send_migration(
            &mut source_end,
            &vmm::migration::MigrationOptions::default(),
        )
        .unwrap_or_else(|e| panic!("send: {}", vmm::migration::error_chain(&e)));
    let target = target
        .join()
        .expect("the target thread")
        .unwrap_or_else(|e| panic!("restore: {}", vmm::migration::error_chain(&e)));
    (stats, target)
}

/// The last count the guest printed on `serial`.
pub fn last_count(serial: &Path) -> u64 {
    guest_counts(&serial_log(serial))
        .last()
        .copied()
        .expect("the guest counted")
}

/// A counting guest under `name`'s work directory: the files the L1 needs, and the directory.
pub fn counting_test(name: &str) -> (Vec<PathBuf>, PathBuf) {
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        counter_seed(&dir);
    }
    files.push(dir.clone());
    (files, dir)
}

/// Waits for `child` to exit; fails with the serial log after `timeout`.
pub fn wait_exit(child: &mut std::process::Child, serial: &Path, timeout: Duration) -> i32 {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for vmm") {
            return status.code().unwrap_or(-1);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            panic!(
                "vmm did not end within {timeout:?}; serial:\n{}",
                serial_log(serial)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
