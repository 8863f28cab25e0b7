//! `nested-boot`: Linux boot on Ferrovirt's VMM against QEMU with KVM, side by side on one host
//! with hardware KVM (run by `guest-images/bench-nested-boot.sh` inside the L1 of
//! `hack/kvm-host.sh`, whose timings are nested and so only comparable with each other).
//!
//! Two profiles:
//! - our kernel and initramfs: the VMM's microVM against `qemu -M microvm,acpi=off`, to the
//!   ready marker;
//! - `--disk`: a distribution's kernel, initramfs and disk (its root, `--cmdline`): the VMM's PCI
//!   machine against `qemu -M q35` with the same kernel, initramfs and disk (direct kernel boot),
//!   and with `--firmware` also `qemu -M q35` booting the disk through SeaBIOS and the disk's own
//!   grub, to the login prompt. Every boot gets a fresh copy of the disk.
//!
//! The backends boot alternately, `--runs` times each. For every run it measures the time from
//! spawning the process to the marker on the serial port (a file all write) and the process's
//! peak RSS (`VmHWM`) at that moment, then kills it. It prints every run, the medians with the
//! ratios against our VMM, and two per-phase tables (medians per backend), so a phase where the
//! guest waits on one backend's devices stands out: one from the guest kernel's own timestamps,
//! and one from the host's clock, when each milestone's line reached the serial port. The
//! guest's clock starts wherever its kernel starts it, differently on each backend; the host's
//! is one for all and also sees the process start and the firmware before the kernel's first
//! line.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use guest_images::median;

const READY_MARKER: &str = "FERROVIRT-GUEST-READY";
const DEADLINE: Duration = Duration::from_secs(600);

/// Kernel log lines that start a phase, in boot order, with the phase's name: our kernel and
/// initramfs on the microVMs.
const MICROVM_MILESTONES: [(&str, &str); 6] = [
    ("Console: colour", "early boot to console setup"),
    (
        "printk: console [ttyS0] enabled",
        "console setup (log replayed to ttyS0)",
    ),
    ("i8042:", "console to i8042 probe"),
    ("serio: i8042 KBD port", "i8042 probe"),
    ("Run /init as init process", "i8042 to /init"),
    (READY_MARKER, "/init to the ready marker"),
];

/// The same for a distribution's boot from a disk (`--disk`): kernel, initramfs, the root's
/// init (systemd's banner), the login prompt.
const OS_MILESTONES: [(&str, &str); 4] = [
    ("Linux version", "to the kernel's first line"),
    ("Run /init as init process", "kernel to its initramfs"),
    ("Welcome to", "initramfs to the root's init"),
    ("login:", "init to the login prompt"),
];

struct Args {
    vmm: PathBuf,
    qemu: PathBuf,
    kernel: PathBuf,
    initramfs: PathBuf,
    /// A distribution's disk: boot it on PCI machines to its login prompt (`OS_MILESTONES`).
    disk: Option<PathBuf>,
    /// With `--disk`: also boot the disk through QEMU's firmware (SeaBIOS) and its own grub.
    firmware: bool,
    cmdline: Option<String>,
    memory_mib: u32,
    runs: usize,
    work: PathBuf,
}

const USAGE: &str = "usage: nested-boot --kernel KERNEL --initramfs INITRAMFS [--disk IMAGE \
    [--firmware]] [--cmdline CMDLINE] [--vmm PATH] [--qemu PATH] [--memory MIB] [--runs N] \
    [--work DIR]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        vmm: PathBuf::from("vmm"),
        qemu: PathBuf::from("qemu-system-x86_64"),
        kernel: PathBuf::new(),
        initramfs: PathBuf::new(),
        disk: None,
        firmware: false,
        cmdline: None,
        memory_mib: 256,
        runs: 5,
        work: std::env::temp_dir().join("nested-boot"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--vmm" => args.vmm = value()?.into(),
            "--qemu" => args.qemu = value()?.into(),
            "--kernel" => args.kernel = value()?.into(),
            "--initramfs" => args.initramfs = value()?.into(),
            "--disk" => args.disk = Some(value()?.into()),
            "--firmware" => args.firmware = true,
            "--cmdline" => args.cmdline = Some(value()?),
            "--memory" => {
                args.memory_mib = value()?.parse().map_err(|e| format!("--memory: {e}"))?
            }
            "--runs" => args.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--work" => args.work = value()?.into(),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    if args.kernel.as_os_str().is_empty() || args.initramfs.as_os_str().is_empty() {
        return Err(USAGE.into());
    }
    if args.firmware && args.disk.is_none() {
        return Err(format!("--firmware boots a --disk\n{USAGE}"));
    }
    Ok(args)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// Our VMM's microVM (virtio-mmio, no ACPI), as for Ferrovirt's own kernel.
    Vmm,
    /// `qemu -M microvm,acpi=off`, its peer.
    QemuMicrovm,
    /// Our VMM's PCI machine (virtio-pci with MSI-X, ACPI), as for a kernel from the user's disk.
    VmmPci,
    /// `qemu -M q35`, the same kernel, initramfs and disk (direct kernel boot).
    QemuQ35,
    /// `qemu -M q35` booting the disk through SeaBIOS and the disk's own grub.
    QemuQ35Firmware,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Vmm => "ferrovirt vmm",
            Backend::QemuMicrovm => "qemu microvm -accel kvm",
            Backend::VmmPci => "ferrovirt vmm, PCI machine",
            Backend::QemuQ35 => "qemu q35 -accel kvm, -kernel",
            Backend::QemuQ35Firmware => "qemu q35 -accel kvm, SeaBIOS + grub",
        }
    }

    fn file_stem(self) -> &'static str {
        match self {
            Backend::Vmm => "vmm",
            Backend::QemuMicrovm => "qemu",
            Backend::VmmPci => "vmm-pci",
            Backend::QemuQ35 => "qemu-q35",
            Backend::QemuQ35Firmware => "qemu-q35-firmware",
        }
    }
}

const MICROVM_CMDLINE: &str = "console=ttyS0 panic=-1 root=ram";

/// The QEMU options every QEMU backend shares.
fn qemu_common(c: &mut Command, args: &Args, serial: &Path) {
    c.args(["-accel", "kvm", "-cpu", "host"])
        .args(["-m", &args.memory_mib.to_string(), "-smp", "1"])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .arg("-serial")
        .arg(format!("file:{}", serial.display()));
}

fn spawn(
    backend: Backend,
    args: &Args,
    serial: &Path,
    disk: Option<&Path>,
) -> std::io::Result<Child> {
    let cmdline = args.cmdline.as_deref().unwrap_or(MICROVM_CMDLINE);
    let mut cmd = match backend {
        Backend::Vmm | Backend::VmmPci => {
            let mut c = Command::new(&args.vmm);
            c.arg("--kernel")
                .arg(&args.kernel)
                .arg("--initramfs")
                .arg(&args.initramfs)
                .args(["--cmdline", cmdline])
                .args(["--memory", &args.memory_mib.to_string()])
                .arg("--serial")
                .arg(format!("file:{}", serial.display()));
            if backend == Backend::Vmm {
                // Our kernel has virtio-mmio and no virtio-pci driver.
                c.args(["--transport", "mmio"]);
            } else {
                c.args(["--transport", "pci"]);
            }
            if let Some(disk) = disk {
                c.arg("--disk").arg(disk);
            }
            c
        }
        Backend::QemuMicrovm | Backend::QemuQ35 | Backend::QemuQ35Firmware => {
            let mut c = Command::new(&args.qemu);
            if backend == Backend::QemuMicrovm {
                c.args(["-M", "microvm,acpi=off"]);
            } else {
                c.args(["-M", "q35"]);
            }
            qemu_common(&mut c, args, serial);
            if backend != Backend::QemuQ35Firmware {
                c.arg("-kernel")
                    .arg(&args.kernel)
                    .arg("-initrd")
                    .arg(&args.initramfs)
                    .args(["-append", cmdline]);
            }
            if let Some(disk) = disk {
                c.arg("-drive")
                    .arg(format!("file={},format=raw,if=none,id=d0", disk.display()))
                    .args(["-device", "virtio-blk-pci,drive=d0"]);
            }
            c
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
}

/// Peak RSS of `pid` in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

struct Run {
    to_marker: Duration,
    log: String,
    peak_rss_kib: u64,
    /// Guest kernel timestamp (s) of each milestone, when it was seen.
    milestones: Vec<Option<f64>>,
    /// Host time from the spawn to the first serial byte, then to each milestone's arrival on
    /// the serial port (the file is polled every 5 ms): one clock for both backends, unlike the
    /// guest's timestamps, whose zero is wherever each guest kernel's clock started.
    arrivals: Vec<Option<Duration>>,
}

/// The kernel timestamp of a line `[  1.234567] ...`.
fn stamp(line: &str) -> Option<f64> {
    line.strip_prefix('[')
        .and_then(|l| l.split_once(']'))
        .and_then(|(t, _)| t.trim().parse::<f64>().ok())
}

/// The kernel timestamp of the first stamped line containing `needle` (the marker also goes
/// to the kernel log, so it has one).
fn timestamp_of(log: &str, needle: &str) -> Option<f64> {
    log.lines().filter(|l| l.contains(needle)).find_map(stamp)
}

/// The `n` longest waits between consecutive kernel log lines: (seconds, line before, line
/// after), longest first.
fn longest_gaps(log: &str, n: usize) -> Vec<(f64, String, String)> {
    let stamped: Vec<(f64, &str)> = log.lines().filter_map(|l| Some((stamp(l)?, l))).collect();
    let mut gaps: Vec<(f64, String, String)> = stamped
        .windows(2)
        .map(|w| (w[1].0 - w[0].0, w[0].1.to_string(), w[1].1.to_string()))
        .collect();
    gaps.sort_by(|a, b| b.0.total_cmp(&a.0));
    gaps.truncate(n);
    gaps
}

/// Boots once on `backend` up to the last of `milestones` (the marker) and kills it.
fn run_once(
    backend: Backend,
    args: &Args,
    milestones: &[(&str, &str)],
    n: usize,
) -> Result<Run, String> {
    let serial = args.work.join(format!("{}-{n}.log", backend.file_stem()));
    let _ = std::fs::remove_file(&serial);
    // The guest writes its disk (a journal, a random seed): every boot gets a fresh copy.
    let disk = match &args.disk {
        Some(source) => {
            let copy = args.work.join(format!("{}-{n}.img", backend.file_stem()));
            std::fs::copy(source, &copy)
                .map_err(|e| format!("copy {} to {}: {e}", source.display(), copy.display()))?;
            Some(copy)
        }
        None => None,
    };
    let marker = milestones.last().map_or(READY_MARKER, |m| m.0);
    let started = Instant::now();
    let mut child =
        spawn(backend, args, &serial, disk.as_deref()).map_err(|e| format!("spawn: {e}"))?;
    let mut arrivals: Vec<Option<Duration>> = vec![None; milestones.len() + 1];
    let result = loop {
        let log = std::fs::read_to_string(&serial).unwrap_or_default();
        let now = started.elapsed();
        if !log.is_empty() {
            arrivals[0].get_or_insert(now);
        }
        for (k, (needle, _)) in milestones.iter().enumerate() {
            if arrivals[k + 1].is_none() && log.contains(needle) {
                arrivals[k + 1] = Some(now);
            }
        }
        if log.contains(marker) {
            let to_marker = started.elapsed();
            let peak_rss_kib = peak_rss_kib(child.id()).unwrap_or(0);
            break Ok((to_marker, peak_rss_kib));
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            break Err(format!(
                "exited with {status} before {marker:?}: {err}\nserial tail:\n{}",
                tail(&log)
            ));
        }
        if started.elapsed() > DEADLINE {
            break Err(format!(
                "no {marker:?} within {DEADLINE:?}; serial tail:\n{}",
                tail(&log)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = child.kill();
    let _ = child.wait();
    if let Some(disk) = &disk {
        let _ = std::fs::remove_file(disk);
    }
    let (to_marker, peak_rss_kib) = result?;
    let log = std::fs::read_to_string(&serial).unwrap_or_default();
    let milestones = milestones
        .iter()
        .map(|(needle, _)| timestamp_of(&log, needle))
        .collect();
    Ok(Run {
        to_marker,
        log,
        peak_rss_kib,
        milestones,
        arrivals,
    })
}

/// The first row of the host-clock table: from the spawn to the first byte on the serial port.
const FIRST_BYTE: (&str, &str) = ("", "process start to the first serial byte");

/// Prints a table with one row per phase and one column per backend: the median over the
/// backend's runs of the time from the last earlier milestone that run saw (or zero) to the
/// row's milestone. `times` gives a run's time of each row's milestone, in seconds.
fn print_phases(
    title: &str,
    rows: &[(&str, &str)],
    backends: &[Backend],
    runs: &[Vec<Run>],
    times: impl Fn(&Run) -> Vec<Option<f64>>,
) {
    println!();
    println!("{title}");
    let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
    println!("| phase (ends at) | {} |", names.join(" | "));
    println!("|---|{}", "---|".repeat(backends.len()));
    let times: Vec<Vec<Vec<Option<f64>>>> = runs
        .iter()
        .map(|runs| runs.iter().map(&times).collect())
        .collect();
    for (k, (needle, phase)) in rows.iter().enumerate() {
        let cells: Vec<String> = times
            .iter()
            .map(|runs| {
                let lens: Vec<f64> = runs
                    .iter()
                    .filter_map(|t| {
                        let end = t[k]?;
                        let start = t[..k].iter().rev().find_map(|m| *m).unwrap_or(0.0);
                        Some(end - start)
                    })
                    .collect();
                median(&lens).map_or("-".to_string(), |v| format!("{v:.3}"))
            })
            .collect();
        let label = if needle.is_empty() {
            (*phase).to_string()
        } else {
            format!("{phase} (`{needle}`)")
        };
        println!("| {label} | {} |", cells.join(" | "));
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nested-boot: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.work) {
        eprintln!("nested-boot: create {}: {e}", args.work.display());
        return std::process::ExitCode::FAILURE;
    }
    let (backends, milestones): (Vec<Backend>, &[(&str, &str)]) = match (&args.disk, args.firmware)
    {
        (None, _) => (
            vec![Backend::Vmm, Backend::QemuMicrovm],
            &MICROVM_MILESTONES,
        ),
        (Some(_), false) => (vec![Backend::VmmPci, Backend::QemuQ35], &OS_MILESTONES),
        (Some(_), true) => (
            vec![Backend::VmmPci, Backend::QemuQ35, Backend::QemuQ35Firmware],
            &OS_MILESTONES,
        ),
    };
    let marker = milestones.last().map_or(READY_MARKER, |m| m.0);
    let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
    println!(
        "nested-boot: {}; kernel {}, initramfs {}{}, {} MiB, 1 vCPU, {} runs each, alternately, \
         to {marker:?}",
        names.join(", "),
        args.kernel.display(),
        args.initramfs.display(),
        args.disk
            .as_ref()
            .map_or(String::new(), |d| format!(", disk {}", d.display())),
        args.memory_mib,
        args.runs
    );
    let mut runs: Vec<Vec<Run>> = backends.iter().map(|_| Vec::new()).collect();
    for n in 0..args.runs {
        for (i, &backend) in backends.iter().enumerate() {
            match run_once(backend, &args, milestones, n) {
                Ok(run) => {
                    println!(
                        "  run {n} {:<36} start -> marker {:>7.3} s   peak RSS {:>7} KiB",
                        backend.name(),
                        run.to_marker.as_secs_f64(),
                        run.peak_rss_kib
                    );
                    runs[i].push(run);
                }
                Err(e) => {
                    eprintln!("nested-boot: {} run {n}: {e}", backend.name());
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    let med = |i: usize, f: &dyn Fn(&Run) -> f64| {
        median(&runs[i].iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
    };
    // Every peer against our VMM, the first column.
    println!();
    println!(
        "| median of {} runs | {} | ratios |",
        args.runs,
        names.join(" | ")
    );
    println!("|---|{}---|", "---|".repeat(backends.len()));
    type Metric<'a> = (&'a str, &'a str, &'a dyn Fn(&Run) -> f64);
    let metrics: [Metric; 2] = [
        ("start -> marker", "s", &|r| r.to_marker.as_secs_f64()),
        ("peak RSS at the marker", "KiB", &|r| r.peak_rss_kib as f64),
    ];
    for (metric, unit, f) in metrics {
        let values: Vec<f64> = (0..backends.len()).map(|i| med(i, f)).collect();
        let cells: Vec<String> = values
            .iter()
            .map(|v| {
                if unit == "s" {
                    format!("{v:.3} s")
                } else {
                    format!("{v:.0} {unit}")
                }
            })
            .collect();
        let ratios: Vec<String> = values[1..]
            .iter()
            .zip(&backends[1..])
            .map(|(v, b)| format!("{} / VMM = {:.2}x", b.name(), v / values[0]))
            .collect();
        println!(
            "| {metric} | {} | {} |",
            cells.join(" | "),
            ratios.join(", ")
        );
    }
    print_phases(
        "per phase, guest kernel timestamps (median of the runs, seconds):",
        milestones,
        &backends,
        &runs,
        |r| r.milestones.clone(),
    );
    // The host's clock is one for all backends, and it sees what comes before the kernel's
    // first line (process start, firmware).
    let rows: Vec<(&str, &str)> = std::iter::once(FIRST_BYTE)
        .chain(milestones.iter().copied())
        .collect();
    print_phases(
        "per phase, host clock: when each line reached the serial port (median of the runs, seconds):",
        &rows,
        &backends,
        &runs,
        |r| r.arrivals.iter().map(|a| a.map(|d| d.as_secs_f64())).collect(),
    );
    for (i, backend) in backends.iter().enumerate() {
        // The run whose time to the marker is the median one.
        let mut order: Vec<&Run> = runs[i].iter().collect();
        order.sort_by_key(|r| r.to_marker);
        if let Some(run) = order.get(order.len() / 2) {
            println!();
            println!(
                "longest waits in the guest's log, {} (median run):",
                backend.name()
            );
            for (gap, before, after) in longest_gaps(&run.log, 6) {
                println!("  {gap:>6.3} s  {before}\n            -> {after}");
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
