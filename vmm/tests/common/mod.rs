//! Shared setup for the integration tests: locating `/dev/kvm` and the test guests (failing with
//! what is missing and how to get it), a VM builder around the library, the standalone `vmm`
//! command, and serial-log helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vmm::config::{ConsoleConfig, MemoryConfig, PayloadConfig, Transport, VmConfig};
use vmm::lifecycle::VmExit;
use vmm::vmm::Vmm;

/// Where `guest-images/build.sh` puts the test guests unless
/// `FERROVIRT_TEST_GUESTS` says otherwise.
pub const DEFAULT_GUEST_DIR: &str = "/var/cache/ferrovirt/guest-images/current/test-guests";
/// How long a guest may take before a test gives up and reports its serial log.
pub const GUEST_DEADLINE: Duration = Duration::from_secs(60);

pub fn guest_dir() -> PathBuf {
    std::env::var_os("FERROVIRT_TEST_GUESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_GUEST_DIR))
}

/// The test guest `name`.elf; fails the test when it or /dev/kvm is missing.
pub fn guest(name: &str) -> PathBuf {
    assert!(
        Path::new("/dev/kvm").exists(),
        "/dev/kvm is missing: these tests run the test guests on KVM (load the kvm module, \
         or run them in a container with /dev/kvm passed through)"
    );
    let path = guest_dir().join(format!("{name}.elf"));
    assert!(
        path.exists(),
        "test guest {} is missing: build the guest images with `guest-images/build.sh`",
        path.display()
    );
    path
}

/// A scratch directory for one test, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("ferrovirt-vmm-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A config for guest `name` with 64 MiB and the serial port logged to `serial`, its virtio
/// devices on virtio-mmio (the test guests drive virtio-mmio, and have no ACPI).
pub fn config(name: &str, serial: &Path) -> VmConfig {
    VmConfig {
        payload: PayloadConfig {
            kernel: guest(name),
            initramfs: None,
            cmdline: String::new(),
            guestless: false,
        },
        memory: MemoryConfig { size: 64 << 20 },
        serial: ConsoleConfig::File {
            path: serial.to_path_buf(),
        },
        transport: Transport::Mmio,
        ..VmConfig::default()
    }
}

pub fn serial_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits for the VM to stop by itself; on the deadline stops it and fails with the log.
pub fn wait_for_exit(vm: &mut Vmm, serial: &Path) -> VmExit {
    match vm.wait_timeout(GUEST_DEADLINE) {
        Some(exit) => exit,
        None => {
            let exit = vm.stop();
            panic!(
                "guest did not stop within {GUEST_DEADLINE:?} (then: {exit}); serial log:\n{}",
                serial_log(serial)
            );
        }
    }
}

/// Boots `config`, waits for the guest to stop, returns the exit and the serial log.
pub fn run_to_exit(config: &VmConfig, serial: &Path) -> (VmExit, String) {
    let mut vm = vmm::builder::build_and_boot(config).expect("build and boot the VM");
    let exit = wait_for_exit(&mut vm, serial);
    (exit, serial_log(serial))
}

/// Waits until `predicate` holds for the serial log; fails with the log on the deadline.
pub fn wait_for_serial<F: Fn(&str) -> bool>(serial: &Path, what: &str, predicate: F) -> String {
    let deadline = Instant::now() + GUEST_DEADLINE;
    loop {
        let log = serial_log(serial);
        if predicate(&log) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "serial log never showed {what}; log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts every `TEST` line in `expected` is in the log.
pub fn assert_lines(log: &str, expected: &[&str]) {
    for line in expected {
        assert!(
            log.lines().any(|l| l == *line),
            "missing serial line {line:?}; log:\n{log}"
        );
    }
}

/// The counter guest's counts in `log`, from complete lines only (8 hex digits).
pub fn counts(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.strip_prefix("COUNT "))
        .filter(|n| n.len() == 8)
        .filter_map(|n| u64::from_str_radix(n, 16).ok())
        .collect()
}

/// Starts the standalone `vmm` command on guest `name` with 32 MiB, its serial port logged to
/// `serial`, virtio-mmio, `extra` arguments, and stderr captured.
pub fn spawn_vmm(name: &str, serial: &Path, extra: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_vmm"))
        .arg("--kernel")
        .arg(guest(name))
        .arg("--serial")
        .arg(format!("file:{}", serial.display()))
        .args(["--memory", "32", "--transport", "mmio"])
        .args(extra)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run vmm")
}

/// Sends `signal` to the `vmm` command `child`.
pub fn signal(child: &std::process::Child, signal: libc::c_int) {
    // SAFETY: kill(2) on the child's pid, which has not been waited for yet.
    let ret = unsafe { libc::kill(child.id() as i32, signal) };
    assert_eq!(ret, 0, "kill: {}", std::io::Error::last_os_error());
}
