//! `vmm`: runs one VM from a JSON `VmConfig` and/or flags, until it stops.
//!
//! ```text
//! vmm --config vm.json
//! vmm --kernel guest.elf --memory 64 --serial file:/tmp/serial.log --disk disk.img
//! ```
//! Flags override or extend the config file. `--transport pci` (the default: virtio-pci, ACPI)
//! or `--transport mmio` (virtio-mmio on the command line, no ACPI: the project's own kernel and
//! test guests) says how the virtio devices reach the guest. SIGTERM asks the guest to shut
//! down (the ACPI power button when the guest listens to it, else ctrl-alt-del through the
//! i8042) and stops it after `--shutdown-grace` seconds; SIGINT stops it at once;
//! SIGHUP resets the VM in place. `--on-reset restart` makes the guest's own resets and triple
//! faults restart the VM in place too (the default, `exit`, ends it).
//! The exit status says why the VM stopped: 0 guest power-off with code 0 or reset, the guest's
//! code (mod 256) for a non-zero power-off code, 2 triple fault, 3 stopped by the host, 1 an
//! error.
//!
//! Live migration between two `vmm` processes with the same config (see `vmm::migration`):
//!
//! ```text
//! vmm ... --incoming /run/m.sock        # target: waits for the source on the socket
//! vmm ... --migrate-to /run/m.sock      # source: on SIGUSR1 migrates there
//! ```
//! The source exits with status 0 once the target runs; a failed migration is printed and the
//! VM goes on running on the source.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use vmm::capability::{self, KvmCapability, NEEDS_HARDWARE_VIRT};
use vmm::config::{
    AgentChannelConfig, ConsoleConfig, DiskConfig, NetConfig, RngConfig, SmbiosConfig, Transport,
    VmConfig, VsockConfig,
};
use vmm::error::error_chain;
use vmm::lifecycle::{ResetPolicy, VmExit};
use vmm::migration::{MigrationOptions, MigrationStats};

#[derive(Parser, Debug)]
#[command(name = "vmm", about = "Ferrovirt microVM VMM on KVM")]
struct Args {
    /// VmConfig as JSON.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Kernel: ELF (64-bit entry) or bzImage.
    #[arg(long)]
    kernel: Option<PathBuf>,
    #[arg(long)]
    initramfs: Option<PathBuf>,
    #[arg(long)]
    cmdline: Option<String>,
    /// Guest memory in MiB.
    #[arg(long)]
    memory: Option<u64>,
    #[arg(long)]
    cpus: Option<u8>,
    /// A raw disk: PATH or PATH,ro (repeatable). Its id is disk0, disk1, ...
    #[arg(long)]
    disk: Vec<String>,
    /// A tap-backed NIC: TAP,MAC (repeatable).
    #[arg(long)]
    net: Vec<String>,
    /// A vsock device: CID,SOCKET (host side is the unix socket SOCKET).
    #[arg(long)]
    vsock: Option<String>,
    /// Add a virtio-rng fed from /dev/urandom.
    #[arg(long)]
    rng: bool,
    /// The guest agent channel: a virtio-console port `org.qemu.guest_agent.0` whose host side
    /// is this unix socket (the VMM listens on it).
    #[arg(long)]
    agent_socket: Option<PathBuf>,
    /// An SMBIOS System Information field: KEY=VALUE, KEY one of uuid, serial, manufacturer,
    /// product, version, sku and family (repeatable); the guest reads them in
    /// /sys/class/dmi/id/.
    #[arg(long)]
    smbios: Vec<String>,
    /// Serial console: off, null, tty, file:PATH or socket:PATH.
    #[arg(long)]
    serial: Option<String>,
    /// How the virtio devices reach the guest: pci (virtio-pci and ACPI, what stock distro
    /// kernels expect; the default) or mmio (virtio-mmio on the command line, no ACPI).
    #[arg(long)]
    transport: Option<Transport>,
    /// Refuse to start unless this host has hardware virtualization (for standard guests such
    /// as Linux, which cannot boot on a PVM /dev/kvm).
    #[arg(long)]
    require_hardware_virt: bool,
    /// Print the host's KVM capability and exit.
    #[arg(long)]
    probe: bool,
    /// Seconds SIGTERM waits for the guest to shut down before stopping it.
    #[arg(long, default_value_t = 10)]
    shutdown_grace: u64,
    /// At exit, print how much guest memory was touched (for benchmarks).
    #[arg(long)]
    stats: bool,
    /// Run without seccomp: neither the vCPU threads and device workers' filters nor the
    /// process-wide one (to find out whether a filter is what stops a guest; see
    /// vmm/src/seccomp.rs).
    #[arg(long)]
    no_seccomp: bool,
    /// Migration target: listen on this unix socket and restore the VM from the first
    /// connection instead of booting it.
    #[arg(long)]
    incoming: Option<PathBuf>,
    /// Migration source: on SIGUSR1, migrate the VM to the target listening on this socket.
    #[arg(long)]
    migrate_to: Option<PathBuf>,
    /// What the guest's reset requests and triple faults do: exit (end the VM) or restart (a
    /// reset in place).
    #[arg(long, value_parser = ["exit", "restart"], default_value = "exit")]
    on_reset: String,
}

fn parse_console(spec: &str) -> Result<ConsoleConfig, String> {
    Ok(match spec.split_once(':') {
        None if spec == "off" => ConsoleConfig::Off,
        None if spec == "null" => ConsoleConfig::Null,
        None if spec == "tty" => ConsoleConfig::Tty,
        Some(("file", path)) => ConsoleConfig::File { path: path.into() },
        Some(("socket", path)) => ConsoleConfig::Socket { path: path.into() },
        _ => return Err(format!("bad --serial {spec:?}")),
    })
}

fn build_config(args: &Args) -> Result<VmConfig, String> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("read {}: {e}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))?
        }
        None => VmConfig::default(),
    };
    if let Some(kernel) = &args.kernel {
        config.payload.kernel = kernel.clone();
    }
    if let Some(initramfs) = &args.initramfs {
        config.payload.initramfs = Some(initramfs.clone());
    }
    if let Some(cmdline) = &args.cmdline {
        config.payload.cmdline = cmdline.clone();
    }
    if let Some(mib) = args.memory {
        config.memory.size = mib << 20;
    }
    if let Some(cpus) = args.cpus {
        config.cpus.boot_vcpus = cpus;
        config.cpus.max_vcpus = config.cpus.max_vcpus.max(cpus);
    }
    for spec in &args.disk {
        let (path, readonly) = match spec.strip_suffix(",ro") {
            Some(path) => (path, true),
            None => (spec.as_str(), false),
        };
        config.disks.push(DiskConfig {
            id: format!("disk{}", config.disks.len()),
            path: path.into(),
            readonly,
        });
    }
    for spec in &args.net {
        let (tap, mac) = spec
            .split_once(',')
            .ok_or_else(|| format!("bad --net {spec:?}: want TAP,MAC"))?;
        config.net.push(NetConfig {
            id: format!("net{}", config.net.len()),
            tap: tap.into(),
            mac: mac.into(),
        });
    }
    if let Some(spec) = &args.vsock {
        let (cid, socket) = spec
            .split_once(',')
            .ok_or_else(|| format!("bad --vsock {spec:?}: want CID,SOCKET"))?;
        let cid = cid.parse().map_err(|_| format!("bad vsock cid {cid:?}"))?;
        config.vsock = Some(VsockConfig {
            cid,
            socket: socket.into(),
        });
    }
    if args.rng {
        config.rng = Some(RngConfig::default());
    }
    if let Some(socket) = &args.agent_socket {
        config.agent = Some(AgentChannelConfig {
            socket: socket.clone(),
        });
    }
    for spec in &args.smbios {
        let (key, value) = spec
            .split_once('=')
            .ok_or_else(|| format!("bad --smbios {spec:?}: want KEY=VALUE"))?;
        let smbios = config.smbios.get_or_insert_with(SmbiosConfig::default);
        let field = match key {
            "uuid" => &mut smbios.uuid,
            "serial" => &mut smbios.serial,
            "manufacturer" => &mut smbios.manufacturer,
            "product" => &mut smbios.product,
            "version" => &mut smbios.version,
            "sku" => &mut smbios.sku,
            "family" => &mut smbios.family,
            _ => return Err(format!("bad --smbios {spec:?}: no SMBIOS field {key:?}")),
        };
        *field = Some(value.into());
    }
    if let Some(serial) = &args.serial {
        config.serial = parse_console(serial)?;
    }
    if let Some(transport) = args.transport {
        config.transport = transport;
    }
    Ok(config)
}

static TERMINATE: AtomicBool = AtomicBool::new(false);
static INTERRUPT: AtomicBool = AtomicBool::new(false);
static MIGRATE: AtomicBool = AtomicBool::new(false);
static RESET: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    match signal {
        libc::SIGTERM => TERMINATE.store(true, Ordering::SeqCst),
        libc::SIGUSR1 => MIGRATE.store(true, Ordering::SeqCst),
        libc::SIGHUP => RESET.store(true, Ordering::SeqCst),
        _ => INTERRUPT.store(true, Ordering::SeqCst),
    }
}

/// Listens on `socket`, takes one connection and restores the VM from it.
fn receive(config: &VmConfig, socket: &std::path::Path) -> Result<vmm::vmm::Vmm, String> {
    let _ = std::fs::remove_file(socket);
    let listener =
        UnixListener::bind(socket).map_err(|e| format!("listen on {}: {e}", socket.display()))?;
    let (mut stream, _) = listener
        .accept()
        .map_err(|e| format!("accept on {}: {e}", socket.display()))?;
    let _ = std::fs::remove_file(socket);
    vmm::vmm::Vmm::restore_from(config, &mut stream).map_err(|e| error_chain(&e))
}

/// Migrates `vm` to the target listening on `socket`.
fn send(vm: &vmm::vmm::Vmm, socket: &std::path::Path) -> Result<MigrationStats, String> {
    let mut stream =
        UnixStream::connect(socket).map_err(|e| format!("connect to {}: {e}", socket.display()))?;
    vm.send_migration(&mut stream, &MigrationOptions::default())
        .map_err(|e| error_chain(&e))
}

fn exit_code(exit: &VmExit) -> u8 {
    match exit {
        VmExit::PowerOff { code } => (*code & 0xff) as u8,
        VmExit::Reset => 0,
        VmExit::TripleFault => 2,
        VmExit::Stopped => 3,
        VmExit::Error(_) => 1,
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    vmm::seccomp::set_enabled(!args.no_seccomp);
    // While this is the only thread: every thread to come inherits it (vmm/src/seccomp.rs).
    if !args.no_seccomp {
        if let Err(e) = vmm::seccomp::deny_in_process() {
            eprintln!("vmm: {} (--no-seccomp runs without it)", error_chain(&e));
            return ExitCode::FAILURE;
        }
    }
    let capability = capability::probe();
    if args.probe {
        println!("{capability:?}");
        return ExitCode::SUCCESS;
    }
    if args.require_hardware_virt && capability != KvmCapability::Hardware {
        match capability {
            KvmCapability::PvmOnly => eprintln!("vmm: {NEEDS_HARDWARE_VIRT}"),
            other => eprintln!("vmm: needs hardware virtualization: {other:?}"),
        }
        return ExitCode::from(2);
    }
    let config = match build_config(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("vmm: {e}");
            return ExitCode::from(1);
        }
    };
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGUSR1, libc::SIGHUP] {
        if let Err(e) = vmm_sys_util::signal::register_signal_handler(signal, on_signal) {
            eprintln!("vmm: cannot handle signal {signal}: {e}");
        }
    }
    let policy = match args.on_reset.as_str() {
        "restart" => ResetPolicy::RESTART,
        _ => ResetPolicy::default(),
    };
    let started = match &args.incoming {
        Some(socket) => receive(&config, socket).inspect(|_| {
            eprintln!("vmm: VM received from {}", socket.display());
        }),
        None => vmm::builder::build_and_boot_with(&config, policy).map_err(|e| error_chain(&e)),
    };
    let mut vm = match started {
        Ok(vm) => vm,
        Err(e) => {
            eprintln!("vmm: {e}");
            return ExitCode::from(1);
        }
    };
    vm.set_reset_policy(policy);
    let exit = loop {
        if let Some(exit) = vm.wait_timeout(Duration::from_millis(100)) {
            break exit;
        }
        if MIGRATE.swap(false, Ordering::SeqCst) {
            match &args.migrate_to {
                None => eprintln!("vmm: SIGUSR1 without --migrate-to: nothing to do"),
                Some(socket) => match send(&vm, socket) {
                    Ok(stats) => {
                        eprintln!(
                            "vmm: VM migrated to {}: pages per round {:?}, {} bytes, \
                             downtime {:?}, total {:?}",
                            socket.display(),
                            stats.pages_per_round,
                            stats.bytes_sent,
                            stats.downtime,
                            stats.total
                        );
                        vm.stop();
                        return ExitCode::SUCCESS;
                    }
                    Err(e) => eprintln!("vmm: migration failed, the VM runs on here: {e}"),
                },
            }
        }
        if INTERRUPT.load(Ordering::SeqCst) {
            break vm.stop();
        }
        if RESET.swap(false, Ordering::SeqCst) {
            match vm.reset() {
                Ok(()) => eprintln!("vmm: VM reset ({} so far)", vm.resets()),
                Err(e) => eprintln!("vmm: reset: {e}"),
            }
        }
        if TERMINATE.load(Ordering::SeqCst) {
            break vm.shutdown(Duration::from_secs(args.shutdown_grace));
        }
    };
    eprintln!("vmm: VM stopped: {exit}");
    if args.stats {
        match vmm::vstate::memory::resident_bytes(vm.guest_memory()) {
            Ok(bytes) => eprintln!("vmm: guest memory touched: {} KiB", bytes / 1024),
            Err(e) => eprintln!("vmm: guest memory touched: unknown ({e})"),
        }
    }
    ExitCode::from(exit_code(&exit))
}
