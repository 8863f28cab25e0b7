//! The nested-KVM tier: real Linux guests on the VMM, with Linux's own virtio drivers against
//! our devices.
//!
//! This host's `/dev/kvm` is PVM, on which a stock Linux kernel cannot run. Each test here is
//! run twice over: on this host it boots an L1 VM (QEMU TCG `-cpu max`, Debian's cloud kernel
//! with `kvm_amd`; `hack/kvm-host.sh`) carrying this test binary, the `vmm` binary and the guest
//! images, and runs itself inside it (`guest_images::l1::nested_test`); inside the L1 its body
//! boots our guest kernel and the tiny busybox guest on the VMM with the L1's real `/dev/kvm`.
//! What the guest does is driven by a NoCloud user-data script (the tiny guest runs one at
//! every boot from its initramfs) that prints `NESTED-...` lines on the serial console. The
//! outer run prepares the disks the body needs (mkfs and genisoimage are not in the L1) in
//! [`work_dir`], which is copied into the L1 at the same path.
//!
//! Everything nested is slow (TCG below): the tests prove behaviour; `bench/` compares speed
//! with QEMU-KVM on the same L1.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{serial_log, wait_for_serial};
use guest_images::l1::{in_l1, nested_test};
use guest_images::{NoCloudSeed, SeedFormat, READY_MARKER};
use vmm::capability::{self, KvmCapability};
use vmm::config::{
    ConsoleConfig, CpusConfig, DiskConfig, MemoryConfig, NetConfig, PayloadConfig, RngConfig,
    Transport, VmConfig,
};
use vmm::lifecycle::VmExit;
use vmm::vmm::Vmm;

/// A whole nested test (the L1's boot, the guest's, the checks) must end within this.
const L1_DEADLINE: Duration = Duration::from_secs(600);

/// The guest image set of `guest-images/build.sh`.
fn images() -> PathBuf {
    std::env::var_os("FERROVIRT_GUEST_IMAGES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(guest_images::artifacts::DEFAULT_CACHE_DIR))
        .join("current")
}

fn image(name: &str) -> PathBuf {
    let path = images().join(name);
    assert!(
        path.exists(),
        "guest image {} is missing: build the guest images with `guest-images/build.sh`",
        path.display()
    );
    path
}

/// The files every nested test needs in the L1: our kernel and the tiny initramfs.
fn guest_files() -> Vec<PathBuf> {
    vec![image("vmlinux"), image("initramfs.cpio.gz")]
}

/// A directory for what the outer run prepares for test `name`; the same path inside the L1.
fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new("/var/tmp/ferrovirt-nested").join(name);
    if !in_l1() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir).expect("create the nested test's work directory");
    dir
}

/// Writes a NoCloud seed whose user-data is `script` (run by the tiny guest at every boot from
/// its initramfs) into `dir`.
fn seed(dir: &Path, script: &str) -> PathBuf {
    NoCloudSeed {
        user_data: format!("#!/bin/sh\n{script}"),
        meta_data: "instance-id: nested\nlocal-hostname: nested\n".into(),
        network_config: None,
    }
    .write(dir, SeedFormat::Iso9660)
    .expect("write the NoCloud seed")
}

/// A seed with a static network configuration for eth0.
fn seed_with_network(dir: &Path, script: &str, address: &str, gateway: &str) -> PathBuf {
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
fn ext4(dir: &Path, label: &str, size_mib: u64) -> PathBuf {
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

fn disk(path: &Path, readonly: bool) -> DiskConfig {
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
fn linux(serial: &Path) -> VmConfig {
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
fn wait_line(serial: &Path, prefix: &str, timeout: Duration) -> String {
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

fn boot(config: &VmConfig) -> Vmm {
    vmm::builder::build_and_boot(config).expect("build and boot the VM")
}

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
fn virtio_blk_data_survives_a_reset_and_a_readonly_disk_refuses_writes() {
    let name = "virtio_blk_data_survives_a_reset_and_a_readonly_disk_refuses_writes";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        ext4(&dir, "nested-data", 32);
        ext4(&dir, "nested-ro", 8);
        seed(
            &dir,
            r#"data=$(findfs LABEL=nested-data); ro=$(findfs LABEL=nested-ro)
mkdir -p /mnt/data
mount "$data" /mnt/data || echo "NESTED-ERROR mount $data"
if [ -f /mnt/data/blob ]; then
    echo "NESTED-FOUND $(crc32 </mnt/data/blob)"
else
    dd if=/dev/urandom of=/mnt/data/blob bs=1M count=8 2>/dev/null
    sync /mnt/data/blob
    echo "NESTED-WROTE $(crc32 </mnt/data/blob)"
fi
umount /mnt/data
if dd if=/dev/zero of="$ro" bs=4096 count=1 conv=fsync 2>/dev/null; then
    echo "NESTED-RO writable"
else
    echo "NESTED-RO refused"
fi
"#,
        );
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        let serial = dir.join("serial.log");
        let mut config = linux(&serial);
        config.disks = vec![
            disk(&dir.join("cidata.iso"), true),
            disk(&dir.join("nested-data.img"), false),
            disk(&dir.join("nested-ro.img"), true),
        ];
        let mut vm = boot(&config);
        let wrote = wait_line(&serial, "NESTED-WROTE ", Duration::from_secs(120));
        assert_crc("the data written", &wrote);
        assert_eq!(
            wait_line(&serial, "NESTED-RO ", Duration::from_secs(30)),
            "refused",
            "the guest could write to the read-only disk"
        );
        wait_for_serial(&serial, READY_MARKER, |log| log.contains(READY_MARKER));
        vm.reset().expect("reset the VM in place");
        let found = wait_line(&serial, "NESTED-FOUND ", Duration::from_secs(120));
        assert_eq!(
            found, wrote,
            "the data written before the reset read back otherwise after it"
        );
        assert_eq!(vm.resets(), 1);
        let exit = vm.stop();
        assert!(matches!(exit, VmExit::Stopped), "stop ended with {exit}");
    });
}

#[test]
fn virtio_rng_feeds_the_guest() {
    let name = "virtio_rng_feeds_the_guest";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        seed(
            &dir,
            r#"echo "NESTED-RNG-CURRENT $(cat /sys/class/misc/hw_random/rng_current)"
if dd if=/dev/hwrng of=/tmp/r bs=1024 count=64 2>/dev/null; then
    echo "NESTED-RNG-BYTES $(wc -c </tmp/r) $(od -An -tx1 -N16 /tmp/r | tr -d ' \n')"
else
    echo "NESTED-RNG-BYTES 0 unreadable"
fi
"#,
        );
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        let serial = dir.join("serial.log");
        let mut config = linux(&serial);
        config.disks = vec![disk(&dir.join("cidata.iso"), true)];
        config.rng = Some(RngConfig::default());
        let mut vm = boot(&config);
        let current = wait_line(&serial, "NESTED-RNG-CURRENT ", Duration::from_secs(120));
        assert!(
            current.starts_with("virtio_rng"),
            "the guest's hwrng is {current:?}, not virtio_rng"
        );
        let bytes = wait_line(&serial, "NESTED-RNG-BYTES ", Duration::from_secs(60));
        let mut parts = bytes.split_whitespace();
        assert_eq!(parts.next(), Some("65536"), "read from /dev/hwrng: {bytes}");
        let head = parts.next().unwrap_or_default();
        assert_ne!(
            head, "00000000000000000000000000000000",
            "virtio-rng gave zeros"
        );
        vm.stop();
    });
}

/// CRC-32 (IEEE 802.3, reflected, as zlib), as busybox's `crc32` prints it: 8 hex digits.
fn crc32(data: &[u8]) -> String {
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
fn assert_crc(what: &str, value: &str) {
    assert!(
        value.len() == 8 && value.chars().all(|c| c.is_ascii_hexdigit()),
        "{what}: the guest printed {value:?}, not a CRC-32"
    );
}

/// `ip ARGS...` in the L1; fails the test with its output.
fn ip(args: &[&str]) {
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
fn l1_tap(name: &str, cidr: &str) {
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

#[test]
fn virtio_net_pings_both_ways_and_carries_100_mib_intact() {
    let name = "virtio_net_pings_both_ways_and_carries_100_mib_intact";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        seed_with_network(
            &dir,
            r#"if ping -c 3 -W 5 10.77.0.1 >/tmp/ping 2>&1; then echo "NESTED-PING ok"; else echo "NESTED-PING failed: $(tail -n 2 /tmp/ping | tr '\n' ' ')"; fi
dd if=/dev/urandom of=/tmp/blob bs=1M count=4 2>/dev/null
echo "NESTED-BLOB $(crc32 </tmp/blob)"
if (i=0; while [ $i -lt 25 ]; do cat /tmp/blob; i=$((i+1)); done) | nc 10.77.0.1 5000; then echo "NESTED-SENT ok"; else echo "NESTED-SENT failed"; fi
rm -f /tmp/blob
"#,
            "10.77.0.2/24",
            "10.77.0.1",
        );
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        let serial = dir.join("serial.log");
        l1_tap("fvtap0", "10.77.0.1/24");
        let listener = TcpListener::bind("10.77.0.1:5000").expect("listen on the tap's address");
        let mut config = linux(&serial);
        config.disks = vec![disk(&dir.join("cidata.iso"), true)];
        config.net = vec![NetConfig {
            id: "net0".into(),
            tap: "fvtap0".into(),
            mac: "52:54:00:12:34:56".into(),
        }];
        let mut vm = boot(&config);
        assert_eq!(
            wait_line(&serial, "NESTED-PING ", Duration::from_secs(120)),
            "ok",
            "the guest could not ping the L1"
        );
        let out = Command::new("ping")
            .args(["-c", "3", "-W", "5", "10.77.0.2"])
            .output()
            .expect("run ping (busybox in the L1)");
        assert!(
            out.status.success(),
            "the L1 could not ping the guest: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let blob = wait_line(&serial, "NESTED-BLOB ", Duration::from_secs(180));
        assert_crc("the guest's blob", &blob);
        let (mut conn, _) = listener.accept().expect("accept the guest's connection");
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        let started = Instant::now();
        let mut received = Vec::with_capacity(100 << 20);
        conn.read_to_end(&mut received)
            .expect("receive the guest's 100 MiB");
        let took = started.elapsed();
        // busybox nc ends once this side closes too.
        drop(conn);
        println!(
            "nested: received {} MiB from the guest in {:.2} s",
            received.len() >> 20,
            took.as_secs_f64()
        );
        // 25 times the guest's 4 MiB random blob (whose checksum it printed): computing 100
        // MiB of random bytes and their checksum in the guest would take minutes under TCG.
        assert_eq!(received.len(), 100 << 20, "bytes received");
        for (i, chunk) in received.chunks(4 << 20).enumerate() {
            assert_eq!(
                crc32(chunk),
                blob,
                "MiB {} to {} received differ from what the guest sent",
                i * 4,
                i * 4 + 4
            );
        }
        assert_eq!(
            wait_line(&serial, "NESTED-SENT ", Duration::from_secs(30)),
            "ok"
        );
        vm.stop();
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
fn crc32_matches_busybox() {
    // The checksum the net test compares with the guest's `crc32` (busybox's output).
    assert_eq!(crc32(b""), "00000000");
    assert_eq!(crc32(b"123456789"), "cbf43926");
}

/// The guest's `NESTED-COUNT n` values in `log`, complete lines only (a login prompt may
/// share a line with one).
fn guest_counts(log: &str) -> Vec<u64> {
    let complete = &log[..log.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').split("NESTED-COUNT ").nth(1))
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// Fails unless the counts of the source's log and then the target's go up by one each time
/// (no count lost, none repeated).
fn assert_no_gap(source: &str, target: &str) {
    let (on_source, on_target) = (guest_counts(source), guest_counts(target));
    let all: Vec<u64> = on_source.iter().chain(&on_target).copied().collect();
    assert!(!on_target.is_empty(), "no counts on the target");
    assert!(
        all.windows(2).all(|w| w[1] == w[0] + 1),
        "the guest's counter jumped: source {on_source:?}, target {on_target:?}"
    );
}

/// A seed whose user-data counts on the console every 0.2 s, in the background.
fn counter_seed(dir: &Path) -> PathBuf {
    seed(
        dir,
        "(i=0; while :; do i=$((i+1)); echo \"NESTED-COUNT $i\"; sleep 0.2; done) &\n",
    )
}

/// The counting guest of `dir`'s seed, its serial port logged to `serial`.
fn counting_linux(dir: &Path, serial: &Path) -> VmConfig {
    let mut c = linux(serial);
    c.disks = vec![disk(&dir.join("cidata.iso"), true)];
    c.rng = Some(RngConfig::default());
    c
}

/// Migrates `source` to a VM restored from `target_config` over a socket pair (a save and
/// restore when `source` is paused); fails the test with the error chain on either side.
fn migrate(source: &Vmm, target_config: VmConfig) -> (vmm::migration::MigrationStats, Vmm) {
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
fn last_count(serial: &Path) -> u64 {
    guest_counts(&serial_log(serial))
        .last()
        .copied()
        .expect("the guest counted")
}

/// A counting guest under `name`'s work directory: the files the L1 needs, and the directory.
fn counting_test(name: &str) -> (Vec<PathBuf>, PathBuf) {
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        counter_seed(&dir);
    }
    files.push(dir.clone());
    (files, dir)
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

#[test]
fn vsock_carries_checksummed_data_both_ways() {
    let name = "vsock_carries_checksummed_data_both_ways";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        seed(
            &dir,
            r#"(fv-vsock listen 5002 >/tmp/from-host; echo "NESTED-VSOCK-GOT $(crc32 </tmp/from-host) $(wc -c </tmp/from-host)") &
dd if=/dev/urandom of=/tmp/to-host bs=1M count=4 2>/dev/null
echo "NESTED-VSOCK-SENDING $(crc32 </tmp/to-host)"
if fv-vsock connect 2 5001 </tmp/to-host >/tmp/reply; then echo "NESTED-VSOCK-REPLY $(cat /tmp/reply)"; else echo "NESTED-VSOCK-REPLY failed"; fi
"#,
        );
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        use std::io::{BufRead, BufReader, Write};
        use std::os::unix::net::{UnixListener, UnixStream};
        let serial = dir.join("serial.log");
        let socket = dir.join("vsock.sock");
        // Guest-initiated connections to port 5001 arrive on `<socket>_5001`.
        let guest_listener = UnixListener::bind(dir.join("vsock.sock_5001"))
            .expect("listen for the guest's connection");
        let mut config = linux(&serial);
        config.disks = vec![disk(&dir.join("cidata.iso"), true)];
        config.vsock = Some(vmm::config::VsockConfig {
            cid: 3,
            socket: socket.clone(),
        });
        let mut vm = boot(&config);

        // Guest -> host: 4 MiB, checked, and a reply on the same connection.
        let sending = wait_line(&serial, "NESTED-VSOCK-SENDING ", Duration::from_secs(120));
        assert_crc("what the guest sends", &sending);
        let (mut conn, _) = guest_listener
            .accept()
            .expect("accept the guest's connection");
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        let mut got = Vec::new();
        conn.read_to_end(&mut got).expect("read the guest's bytes");
        assert_eq!(got.len(), 4 << 20, "bytes from the guest");
        assert_eq!(crc32(&got), sending, "the guest's bytes arrived otherwise");
        conn.write_all(b"thanks\n").expect("reply to the guest");
        drop(conn);
        assert_eq!(
            wait_line(&serial, "NESTED-VSOCK-REPLY ", Duration::from_secs(60)),
            "thanks"
        );

        // Host -> guest: connect to the guest's port 5002 through the VMM's socket.
        let mut host = UnixStream::connect(&socket).expect("connect to the VMM's vsock socket");
        host.write_all(b"CONNECT 5002\n")
            .expect("ask for port 5002");
        let mut ok = String::new();
        BufReader::new(host.try_clone().expect("clone the stream"))
            .read_line(&mut ok)
            .expect("the VMM's answer");
        assert!(ok.starts_with("OK "), "the VMM answered {ok:?}");
        let payload: Vec<u8> = (0..(4u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        host.write_all(&payload).expect("send to the guest");
        host.shutdown(std::net::Shutdown::Both).expect("close");
        let got = wait_line(&serial, "NESTED-VSOCK-GOT ", Duration::from_secs(120));
        assert_eq!(
            got,
            format!("{} {}", crc32(&payload), payload.len()),
            "the guest received otherwise"
        );
        vm.stop();
    });
}

/// The tiny root disk's filesystem UUID (fixed by `guest-images/tiny/build-tiny.sh`).
const ROOTDISK_UUID: &str = "3c4c5cf2-47b6-4c1f-8e0a-6f3c0d1e2a01";

/// Boots Debian's stock cloud kernel and its initramfs (`stock/`) on the PCI machine with the
/// `vmm` command: a copy of the tiny root disk found by `root=UUID=`, a seed disk, a NIC on
/// tap `fvtap0` and virtio-rng; returns the child and its serial log's path.
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
        .arg("--serial")
        .arg(format!("file:{}", serial.display()))
        .args(["--shutdown-grace", "90"])
        .spawn()
        .expect("run vmm");
    (child, serial)
}

/// Waits for `child` to exit; fails with the serial log after `timeout`.
fn wait_exit(child: &mut std::process::Child, serial: &Path, timeout: Duration) -> i32 {
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
if ping -c 2 -W 5 10.78.0.1 >/dev/null 2>&1; then echo "NESTED-NET ok"; else echo "NESTED-NET failed"; fi
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
        assert_eq!(
            wait_line(&serial, "NESTED-NET ", Duration::from_secs(60)),
            "ok"
        );
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
