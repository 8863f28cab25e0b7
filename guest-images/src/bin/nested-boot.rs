//! `nested-boot`: Linux boot on Ferrovirt's VMM against `qemu-system-x86_64 -M microvm -accel
//! kvm`, side by side on one host with hardware KVM (run by `bench/nested-boot.sh` inside the L1
//! of `hack/kvm-host.sh`, whose timings are nested and so only comparable with each other).
//!
//! Both boot the same kernel, initramfs, command line and memory, alternately, `--runs` times
//! each. For every run it measures the time from spawning the process to the ready marker on
//! the serial port (a file both write) and the process's peak RSS (`VmHWM`) at that moment,
//! then kills it. It prints every run, the medians with the ratio, and a per-phase table
//! from the guest kernel's own timestamps (medians per backend), so a phase where the guest
//! waits on one backend's devices stands out.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use guest_images::median;

const READY_MARKER: &str = "FERROVIRT-GUEST-READY";
const DEADLINE: Duration = Duration::from_secs(180);

/// Kernel log lines that start a phase, in boot order, with the phase's name.
const MILESTONES: [(&str, &str); 6] = [
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

struct Args {
    vmm: PathBuf,
    qemu: PathBuf,
    kernel: PathBuf,
    initramfs: PathBuf,
    memory_mib: u32,
    runs: usize,
    work: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        vmm: PathBuf::from("vmm"),
        qemu: PathBuf::from("qemu-system-x86_64"),
        kernel: PathBuf::new(),
        initramfs: PathBuf::new(),
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
            "--memory" => {
                args.memory_mib = value()?.parse().map_err(|e| format!("--memory: {e}"))?
            }
            "--runs" => args.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--work" => args.work = value()?.into(),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if args.kernel.as_os_str().is_empty() || args.initramfs.as_os_str().is_empty() {
        return Err(
            "usage: nested-boot --kernel VMLINUX --initramfs INITRAMFS [--vmm PATH] \
                    [--qemu PATH] [--memory MIB] [--runs N] [--work DIR]"
                .into(),
        );
    }
    Ok(args)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Vmm,
    Qemu,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Vmm => "ferrovirt vmm",
            Backend::Qemu => "qemu microvm -accel kvm",
        }
    }
}

const CMDLINE: &str = "console=ttyS0 panic=-1 root=ram";

fn spawn(backend: Backend, args: &Args, serial: &Path) -> std::io::Result<Child> {
    let mut cmd = match backend {
        Backend::Vmm => {
            let mut c = Command::new(&args.vmm);
            c.arg("--kernel")
                .arg(&args.kernel)
                .arg("--initramfs")
                .arg(&args.initramfs)
                .args(["--cmdline", CMDLINE])
                .args(["--memory", &args.memory_mib.to_string()])
                // Our kernel has virtio-mmio and no virtio-pci driver.
                .args(["--transport", "mmio"])
                .arg("--serial")
                .arg(format!("file:{}", serial.display()));
            c
        }
        Backend::Qemu => {
            let mut c = Command::new(&args.qemu);
            c.args(["-M", "microvm,acpi=off", "-accel", "kvm", "-cpu", "host"])
                .args(["-m", &args.memory_mib.to_string(), "-smp", "1"])
                .args([
                    "-nodefaults",
                    "-no-user-config",
                    "-display",
                    "none",
                    "-no-reboot",
                ])
                .arg("-kernel")
                .arg(&args.kernel)
                .arg("-initrd")
                .arg(&args.initramfs)
                .args(["-append", CMDLINE])
                .arg("-serial")
                .arg(format!("file:{}", serial.display()));
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

fn run_once(backend: Backend, args: &Args, n: usize) -> Result<Run, String> {
    let serial = args.work.join(format!(
        "{}-{n}.log",
        if backend == Backend::Vmm {
            "vmm"
        } else {
            "qemu"
        }
    ));
    let _ = std::fs::remove_file(&serial);
    let started = Instant::now();
    let mut child = spawn(backend, args, &serial).map_err(|e| format!("spawn: {e}"))?;
    let result = loop {
        let log = std::fs::read_to_string(&serial).unwrap_or_default();
        if log.contains(READY_MARKER) {
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
                "exited with {status} before the marker: {err}\nserial tail:\n{}",
                tail(&log)
            ));
        }
        if started.elapsed() > DEADLINE {
            break Err(format!(
                "no marker within {DEADLINE:?}; serial tail:\n{}",
                tail(&log)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = child.kill();
    let _ = child.wait();
    let (to_marker, peak_rss_kib) = result?;
    let log = std::fs::read_to_string(&serial).unwrap_or_default();
    let milestones = MILESTONES
        .iter()
        .map(|(needle, _)| timestamp_of(&log, needle))
        .collect();
    Ok(Run {
        to_marker,
        log,
        peak_rss_kib,
        milestones,
    })
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
    println!(
        "nested-boot: {} and {}, kernel {}, initramfs {}, {} MiB, 1 vCPU, {} runs each, alternately",
        Backend::Vmm.name(),
        Backend::Qemu.name(),
        args.kernel.display(),
        args.initramfs.display(),
        args.memory_mib,
        args.runs
    );
    let backends = [Backend::Vmm, Backend::Qemu];
    let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
    for n in 0..args.runs {
        for (i, &backend) in backends.iter().enumerate() {
            match run_once(backend, &args, n) {
                Ok(run) => {
                    println!(
                        "  run {n} {:<24} start -> marker {:>7.3} s   peak RSS {:>7} KiB",
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
    let marker = [
        med(0, &|r| r.to_marker.as_secs_f64()),
        med(1, &|r| r.to_marker.as_secs_f64()),
    ];
    let rss = [
        med(0, &|r| r.peak_rss_kib as f64),
        med(1, &|r| r.peak_rss_kib as f64),
    ];
    println!();
    println!(
        "| median of {} runs | {} | {} | ratio |",
        args.runs,
        Backend::Vmm.name(),
        Backend::Qemu.name()
    );
    println!("|---|---|---|---|");
    println!(
        "| start -> ready marker | {:.3} s | {:.3} s | QEMU / VMM = {:.2}x |",
        marker[0],
        marker[1],
        marker[1] / marker[0]
    );
    println!(
        "| peak RSS at the marker | {:.0} KiB | {:.0} KiB | QEMU / VMM = {:.2}x |",
        rss[0],
        rss[1],
        rss[1] / rss[0]
    );
    println!();
    println!("per phase, guest kernel timestamps (median of the runs, seconds):");
    println!(
        "| phase (ends at) | {} | {} |",
        Backend::Vmm.name(),
        Backend::Qemu.name()
    );
    println!("|---|---|---|");
    for (k, (needle, phase)) in MILESTONES.iter().enumerate() {
        let phase_len = |i: usize| {
            let lens: Vec<f64> = runs[i]
                .iter()
                .filter_map(|r| {
                    // From the last milestone before it that this backend's guest printed.
                    let end = r.milestones[k]?;
                    let start = r.milestones[..k]
                        .iter()
                        .rev()
                        .find_map(|m| *m)
                        .unwrap_or(0.0);
                    Some(end - start)
                })
                .collect();
            median(&lens).map_or("-".to_string(), |v| format!("{v:.3}"))
        };
        println!(
            "| {phase} (`{needle}`) | {} | {} |",
            phase_len(0),
            phase_len(1)
        );
    }
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
