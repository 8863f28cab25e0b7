//! Boot benchmark: boots the tiny initramfs under `qemu-system-x86_64 -M microvm -accel tcg`
//! with our kernel (PVH vmlinux) and with Debian's stock cloud kernel, alternating, N times each
//! (default 5), and prints the median time from starting QEMU to the ready marker on the
//! console, and the ratio.
//!
//!     cargo run --release -p guest-images --bin bench-boot -- [--runs N]

use std::process::ExitCode;
use std::time::Duration;

use guest_images::{Artifacts, GuestSpec, READY_MARKER};

/// Deadline for one boot (a hang, not a slow boot, ends up here).
const BOOT_DEADLINE: Duration = Duration::from_secs(120);

struct Contender {
    name: &'static str,
    spec: GuestSpec,
    times: Vec<Duration>,
}

fn median(times: &[Duration]) -> Duration {
    let secs: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(guest_images::median(&secs).unwrap_or(0.0))
}

fn parse_runs() -> Result<usize, String> {
    let mut args = std::env::args().skip(1);
    let mut runs = 5;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" | "-n" => {
                let value = args.next().ok_or("--runs needs a number")?;
                runs = value.parse().map_err(|e| format!("--runs {value}: {e}"))?;
            }
            other => {
                return Err(format!(
                    "unknown argument {other} (usage: bench-boot [--runs N])"
                ))
            }
        }
    }
    if runs == 0 {
        return Err("--runs must be at least 1".to_string());
    }
    Ok(runs)
}

fn run() -> Result<(), String> {
    let runs = parse_runs()?;
    let artifacts = Artifacts::locate().map_err(|e| e.to_string())?;
    let mut contenders = [
        Contender {
            name: "ferrovirt kernel (vmlinux, PVH)",
            spec: GuestSpec::new(artifacts.vmlinux()).initrd(artifacts.initramfs()),
            times: Vec::new(),
        },
        Contender {
            name: "debian stock cloud kernel",
            spec: GuestSpec::new(artifacts.stock_kernel()).initrd(artifacts.stock_initramfs()),
            times: Vec::new(),
        },
    ];
    println!("boot to {READY_MARKER}: qemu-system-x86_64 -M microvm -accel tcg, 256 MiB, 1 vCPU, tiny initramfs, no disk, no NIC");
    for run in 1..=runs {
        for contender in contenders.iter_mut() {
            let mut guest = contender.spec.spawn().map_err(|e| e.to_string())?;
            let time = guest
                .wait_for(READY_MARKER, BOOT_DEADLINE)
                .map_err(|e| format!("{}: {e}", contender.name))?;
            guest.kill();
            println!(
                "run {run}/{runs}  {:<34} {:>7.3} s",
                contender.name,
                time.as_secs_f64()
            );
            contender.times.push(time);
        }
    }
    println!();
    for contender in &contenders {
        println!(
            "median {:<34} {:>7.3} s",
            contender.name,
            median(&contender.times).as_secs_f64()
        );
    }
    let ours = median(&contenders[0].times).as_secs_f64();
    let stock = median(&contenders[1].times).as_secs_f64();
    println!("ratio stock / ferrovirt: {:.2}x", stock / ours);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench-boot: {message}");
            ExitCode::FAILURE
        }
    }
}
