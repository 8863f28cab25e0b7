//! Per-VM memory overhead of virt-launcher, outside the cluster so both backends can be measured
//! the same way (in the cluster this host's PVM `/dev/kvm` sends every Linux guest to QEMU TCG):
//! 1. a memory cgroup of its own, `ferrovirt-bench/<name>` in the host's memory hierarchy (v1
//!    `/sys/fs/cgroup/memory/...` or v2 `/sys/fs/cgroup/...`, as the host has it), stands for
//!    the launcher Pod's; virt-launcher is started inside it, as in the Pod's `compute`
//!    container, with the directories the Pod would mount;
//! 2. it is driven over gRPC as virt-handler drives it: SyncVMI of a 1 vCPU / 128 MiB VMI, on the
//!    in-process KVM VMM with the `counter` test guest, or on QEMU TCG with the project's guest
//!    kernel, initramfs and root disk (a containerDisk);
//! 3. once the guest has printed (counter lines; the ready marker), and a settle time, the cgroup's
//!    working set (usage - inactive page cache) and, from the processes' smaps, the guest RAM
//!    resident in them (the same functions virt-handler's metric uses);
//! 4. overhead = working set - guest resident; the median of `--runs` runs is printed, with the
//!    largest non-guest mappings of the last run as the profile of where the memory goes.
//!
//! Usage: launcher-overhead --backend kvm|qemu [--launcher PATH] [--runs N] [--memory-mib M]

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use contract::proto::v1;
use ferrovirt_bench::median;
use guest_images::{Artifacts, READY_MARKER};
use handler::cgroup::{self, MemoryHierarchy, Version};
use handler::metrics::guest_resident;

/// The bench's cgroups, under the host's memory hierarchy.
const CGROUP_PARENT: &str = "ferrovirt-bench";

/// The host's memory hierarchy and the bench's parent cgroup in it, made once. On cgroup v2 the
/// memory controller is enabled for the parent's children (and for the parent at the root).
fn bench_cgroups() -> anyhow::Result<(MemoryHierarchy, PathBuf)> {
    let memory = MemoryHierarchy::of(Path::new("/sys/fs/cgroup"))
        .context("no memory cgroup hierarchy in /sys/fs/cgroup (neither v1 nor v2)")?;
    let parent = memory.root.join(CGROUP_PARENT);
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("creating the memory cgroup {}", parent.display()))?;
    if memory.version == Version::V2 {
        for dir in [&memory.root, &parent] {
            let control = dir.join("cgroup.subtree_control");
            std::fs::write(&control, "+memory").with_context(|| {
                format!("enabling the memory controller in {}", control.display())
            })?;
        }
    }
    Ok((memory, parent))
}

struct Options {
    kvm: bool,
    launcher: PathBuf,
    runs: usize,
    memory_mib: u64,
    settle: Duration,
}

fn options() -> anyhow::Result<Options> {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let mut o = Options {
        kvm: true,
        launcher: Path::new(&target).join("release/virt-launcher"),
        runs: 3,
        memory_mib: 128,
        settle: Duration::from_secs(3),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--backend" => {
                o.kvm = match value.as_str() {
                    "kvm" => true,
                    "qemu" => false,
                    other => bail!("--backend kvm|qemu, not {other}"),
                }
            }
            "--launcher" => o.launcher = value.into(),
            "--runs" => o.runs = value.parse()?,
            "--memory-mib" => o.memory_mib = value.parse()?,
            "--settle-s" => o.settle = Duration::from_secs(value.parse()?),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(o)
}

/// One run's figures.
#[derive(Clone, Debug, Default)]
struct Measure {
    boot: Duration,
    usage: u64,
    working_set: u64,
    guest: u64,
    /// Per process: (command, Rss, Pss).
    processes: Vec<(String, u64, u64)>,
    /// Non-guest resident memory by mapping name, bytes.
    mappings: BTreeMap<String, u64>,
}

/// The launcher in its cgroup, killed with its children and the cgroup removed on drop.
struct Launcher {
    child: Child,
    cgroup: PathBuf,
    root: PathBuf,
}

impl Drop for Launcher {
    fn drop(&mut self) {
        // The launcher leads its own process group (QEMU and its helpers are in it).
        if let Some(group) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for _ in 0..50 {
            if std::fs::remove_dir(&self.cgroup).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Resident bytes by mapping name (path, `[heap]`, `[anon]`...) of one smaps text, leaving out
/// the guest RAM mapping (the anonymous one of the guest's size).
fn mappings_by_name(smaps: &str, guest_bytes: u64, into: &mut BTreeMap<String, u64>) {
    let mut name = String::new();
    let mut is_guest = false;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some((start, end)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
            {
                let rest: Vec<&str> = fields.collect();
                // Anonymous mappings by permissions: QEMU's TCG translation cache is rwx.
                let perms = rest.first().copied().unwrap_or_default();
                name = rest
                    .get(4)
                    .map(|s| s.to_string())
                    .unwrap_or(format!("[anon {perms}]"));
                let size = end - start;
                is_guest = name.starts_with("[anon rw-")
                    && size >= guest_bytes
                    && size <= guest_bytes + handler::metrics::GUEST_MAPPING_SLACK;
                continue;
            }
        }
        if let Some(kib) = line.strip_prefix("Rss:") {
            if !is_guest {
                let kib: u64 = kib
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(0);
                *into.entry(name.clone()).or_default() += kib * 1024;
            }
        }
    }
}

fn rollup(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or(0)
}

async fn run_once(o: &Options, artifacts: &Artifacts, run: usize) -> anyhow::Result<Measure> {
    let name = format!(
        "{}-{}-{run}",
        if o.kvm { "kvm" } else { "qemu" },
        std::process::id()
    );
    let (memory, parent) = bench_cgroups()?;
    let cgroup = parent.join(&name);
    std::fs::create_dir_all(&cgroup)
        .with_context(|| format!("creating the memory cgroup {}", cgroup.display()))?;
    let root = PathBuf::from(format!("/tmp/fvb-{name}"));
    let _ = std::fs::remove_dir_all(&root);
    for sub in ["sockets", "run", "cd", "kb", "pvc", "disks"] {
        std::fs::create_dir_all(root.join(sub))?;
    }
    let (kernel, initramfs) = if o.kvm {
        (artifacts.require("test-guests/counter.elf")?, None)
    } else {
        let disk = root.join("cd/containerdisk/disk");
        std::fs::create_dir_all(&disk)?;
        std::os::unix::fs::symlink(artifacts.rootdisk(), disk.join("disk.img"))?;
        (artifacts.vmlinux(), Some(artifacts.initramfs()))
    };
    let log = std::fs::File::create(root.join("launcher.log"))?;
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
        .arg(&cgroup)
        .arg(&o.launcher)
        .arg("--socket-dir")
        .arg(root.join("sockets"))
        .arg("--run-dir")
        .arg(root.join("run"))
        .arg("--container-disk-dir")
        .arg(root.join("cd"))
        .arg("--kernel-boot-dir")
        .arg(root.join("kb"))
        .arg("--pvc-dir")
        .arg(root.join("pvc"))
        .arg("--disk-dir")
        .arg(root.join("disks"))
        .arg("--kernel")
        .arg(&kernel)
        .args(["--backend", if o.kvm { "kvm" } else { "qemu" }]);
    if o.kvm {
        // The counter guest is a kernel of its own; the VMI has no disk to boot.
        command.arg("--no-os-disk-boots-kernel");
    }
    if let Some(initramfs) = &initramfs {
        command.arg("--initramfs").arg(initramfs);
    }
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    let child = command
        .spawn()
        .with_context(|| format!("starting {}", o.launcher.display()))?;
    let launcher = Launcher {
        child,
        cgroup: cgroup.clone(),
        root: root.clone(),
    };
    let socket = root
        .join("sockets")
        .join(contract::sockets::LAUNCHER_SOCKET);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        if Instant::now() > deadline {
            bail!(
                "no launcher-sock after 30 s: {}",
                std::fs::read_to_string(root.join("launcher.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut client = contract::client::launcher_client(&socket)?;
    let mut disks = Vec::new();
    let mut volumes = Vec::new();
    if !o.kvm {
        disks.push(serde_json::json!({"name": "containerdisk", "disk": {"bus": "virtio"}}));
        volumes.push(serde_json::json!({"name": "containerdisk",
            "containerDisk": {"image": "bench/rootdisk"}}));
    }
    let vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "domain": {
                "devices": {"autoattachPodInterface": false, "disks": disks},
                "memory": {"guest": format!("{}Mi", o.memory_mib)},
            },
            "volumes": volumes,
            "terminationGracePeriodSeconds": 0,
        },
    });
    let started = Instant::now();
    client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&vmi)?,
            options: Some(v1::SyncOptions {
                use_emulation: !o.kvm,
                notify_socket: String::new(),
                smbios: None,
            }),
        })
        .await
        .map_err(|status| {
            anyhow::anyhow!(
                "SyncVMI: {status}\n{}",
                std::fs::read_to_string(root.join("launcher.log")).unwrap_or_default()
            )
        })?;

    // The console: wait for the guest's output.
    let console = Arc::new(Mutex::new(Vec::<u8>::new()));
    let mut stream =
        UnixStream::connect(root.join("sockets").join(contract::sockets::CONSOLE_SOCKET))
            .context("connecting to console-sock")?;
    {
        let console = console.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut c) = console.lock() {
                    c.extend_from_slice(&buf[..n]);
                }
            }
        });
    }
    let needle = if o.kvm { "COUNT " } else { READY_MARKER };
    let deadline = Instant::now() + Duration::from_secs(180);
    let boot = loop {
        let text = console
            .lock()
            .map(|c| String::from_utf8_lossy(&c).into_owned())
            .unwrap_or_default();
        if text.contains(needle) {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            bail!("no {needle:?} on the console after 180 s:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(o.settle).await;

    let guest_bytes = o.memory_mib << 20;
    let (usage, working_set) = memory
        .working_set(&cgroup)
        .with_context(|| format!("the memory files of {}", cgroup.display()))?;
    let mut m = Measure {
        boot,
        usage,
        working_set,
        ..Default::default()
    };
    for pid in cgroup::pids(&cgroup) {
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
        m.guest += guest_resident(&smaps, guest_bytes);
        mappings_by_name(&smaps, guest_bytes, &mut m.mappings);
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        m.processes.push((
            comm.trim().to_string(),
            rollup(pid, "Rss:"),
            rollup(pid, "Pss:"),
        ));
    }
    drop(launcher);
    Ok(m)
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1u64 << 20) as f64)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = options()?;
    if !o.launcher.exists() {
        bail!(
            "missing {}: build it with `cargo build --release -p launcher`",
            o.launcher.display()
        );
    }
    let artifacts = Artifacts::locate()
        .map_err(|e| anyhow::anyhow!("{e} (run `guest-images/build.sh` as root)"))?;
    let mut runs = Vec::new();
    for run in 0..o.runs {
        runs.push(run_once(&o, &artifacts, run).await?);
    }
    let med = |f: &dyn Fn(&Measure) -> f64| {
        median(&runs.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
    };
    let backend = if o.kvm {
        "KVM (in-process VMM), counter test guest"
    } else {
        "QEMU TCG, the project's kernel + initramfs + root disk"
    };
    println!(
        "launcher overhead, {backend}, 1 vCPU / {} MiB, median of {} runs:",
        o.memory_mib,
        runs.len()
    );
    let ws = med(&|m| m.working_set as f64);
    let guest = med(&|m| m.guest as f64);
    let overhead = med(&|m| m.working_set as f64 - m.guest as f64);
    let rss = med(&|m| m.processes.iter().map(|p| p.1).sum::<u64>() as f64);
    let rss_overhead =
        med(&|m| m.processes.iter().map(|p| p.1).sum::<u64>() as f64 - m.guest as f64);
    println!(
        "  SyncVMI -> first guest output {:.0} ms; cgroup usage {}, working set {}, guest RAM resident {}, overhead {}",
        med(&|m| m.boot.as_secs_f64() * 1000.0),
        mib(med(&|m| m.usage as f64)),
        mib(ws),
        mib(guest),
        mib(overhead)
    );
    println!(
        "  processes' Rss (shared library and binary pages included, whoever's cgroup they are \
         charged to) {}, minus guest RAM resident: overhead {}",
        mib(rss),
        mib(rss_overhead)
    );
    if let Some(last) = runs.last() {
        let processes: Vec<String> = last
            .processes
            .iter()
            .map(|(comm, rss, pss)| {
                format!("{comm} Rss {} Pss {}", mib(*rss as f64), mib(*pss as f64))
            })
            .collect();
        println!("  processes (last run): {}", processes.join("; "));
        let mut top: Vec<(&String, &u64)> = last.mappings.iter().collect();
        top.sort_by(|a, b| b.1.cmp(a.1));
        let top: Vec<String> = top
            .iter()
            .take(8)
            .map(|(name, bytes)| format!("{} {}", short(name), mib(**bytes as f64)))
            .collect();
        println!(
            "  largest non-guest resident mappings (last run): {}",
            top.join(", ")
        );
    }
    println!(
        "OVERHEAD_BYTES cgroup {} rss {}",
        overhead as i64, rss_overhead as i64
    );
    Ok(())
}

/// The file name of a mapping path, or the bracketed name.
fn short(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}
