//! `virt-launcher`: parses its flags and runs the launcher's gRPC server until SIGTERM/SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use contract::layout;
use launcher::backend::BackendKind;
use launcher::server::launcher::Settings;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendFlag {
    /// Choose from useEmulation and the KVM probe.
    Auto,
    Kvm,
    Qemu,
}

/// virt-launcher: runs one VMI's VM, driven by virt-handler over gRPC.
#[derive(Debug, Parser)]
#[command(version)]
struct Flags {
    /// Directory shared with virt-handler: launcher-sock and console-sock.
    #[arg(long, default_value = layout::LAUNCHER_SOCKET_DIR)]
    socket_dir: PathBuf,
    /// Private directory for the VMM's own sockets (QMP, serial).
    #[arg(long, default_value = layout::LAUNCHER_RUN_DIR)]
    run_dir: PathBuf,
    /// Where containerDisk volume NAME is mounted: DIR/NAME/.
    #[arg(long, default_value = layout::CONTAINER_DISK_DIR)]
    container_disk_dir: PathBuf,
    /// Where the kernelBoot container image is mounted.
    #[arg(long, default_value = layout::KERNEL_BOOT_DIR)]
    kernel_boot_dir: PathBuf,
    /// Where persistentVolumeClaim volume NAME is mounted: DIR/NAME/disk.img.
    #[arg(long, default_value = layout::PVC_DISK_DIR)]
    pvc_dir: PathBuf,
    /// Where the launcher writes containerDisk copies, emptyDisks and cloud-init seeds.
    #[arg(long, default_value = layout::EPHEMERAL_DISK_DIR)]
    disk_dir: PathBuf,
    /// Ferrovirt's own guest kernel: booted when the boot disk is a bare filesystem (as its
    /// root) or the VMI has no OS disk; a disk's own kernel and kernelBoot come first.
    #[arg(long, default_value = "/usr/share/ferrovirt/vmlinux")]
    kernel: PathBuf,
    /// The initramfs of --kernel.
    #[arg(long)]
    initramfs: Option<PathBuf>,
    /// A VMI without an OS disk boots --kernel even without --initramfs (the project's test
    /// guests are kernels of their own) instead of running guestless.
    #[arg(long)]
    no_os_disk_boots_kernel: bool,
    /// The tap device of the pod interface.
    #[arg(long, default_value = "tap0")]
    tap: String,
    /// Set up the tap, NAT and DHCP for the pod interface in this network namespace.
    #[arg(long)]
    pod_network: bool,
    /// Name of the VMI this launcher runs (for logs and process listings).
    #[arg(long)]
    name: Option<String>,
    /// Namespace of the VMI.
    #[arg(long)]
    namespace: Option<String>,
    /// UID of the VMI (virt-handler finds this launcher's socket directory by it).
    #[arg(long)]
    uid: Option<String>,
    /// Where OVMF's firmware files are (Debian's package ovmf), for firmware.bootloader.efi.
    #[arg(long, default_value = "/usr/share/OVMF")]
    ovmf_dir: PathBuf,
    /// Force a backend instead of choosing it.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendFlag,
    /// Run without seccomp: neither the KVM backend's vCPU threads and device workers' filters
    /// nor the launcher's process-wide one (to find out whether a filter is what stops a
    /// guest).
    #[arg(long)]
    no_seccomp: bool,
    /// Keep the launcher's capabilities once the VM runs (by default every thread gives up all
    /// but CAP_NET_ADMIN for the VM's tap).
    #[arg(long)]
    keep_capabilities: bool,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let flags = Flags::parse();
    vmm::seccomp::set_enabled(!flags.no_seccomp);
    // First, while this is the only thread: every thread and program to come inherits it.
    if !flags.no_seccomp {
        if let Err(e) = vmm::seccomp::deny_in_process() {
            eprintln!(
                "virt-launcher: {} (--no-seccomp runs without it)",
                launcher::server::error::chain(&e)
            );
            return ExitCode::FAILURE;
        }
    }
    if let (Some(name), Some(uid)) = (&flags.name, &flags.uid) {
        let namespace = flags.namespace.as_deref().unwrap_or("default");
        log::info!("virt-launcher for VMI {namespace}/{name} ({uid})");
    }
    let settings = Settings {
        socket_dir: flags.socket_dir,
        run_dir: flags.run_dir,
        container_disk_dir: flags.container_disk_dir,
        kernel_boot_dir: flags.kernel_boot_dir,
        pvc_dir: flags.pvc_dir,
        generated_disk_dir: flags.disk_dir,
        default_kernel: flags.kernel,
        default_initramfs: flags.initramfs,
        no_os_disk_boots_kernel: flags.no_os_disk_boots_kernel,
        tap_device: flags.tap,
        pod_network: flags.pod_network,
        ovmf_dir: flags.ovmf_dir,
        drop_capabilities: !flags.keep_capabilities,
        force_backend: match flags.backend {
            BackendFlag::Auto => None,
            BackendFlag::Kvm => Some(BackendKind::Kvm),
            BackendFlag::Qemu => Some(BackendKind::QemuTcg),
        },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("virt-launcher: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(launcher::server::serve(settings, async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        log::info!("signal received: stopping");
    }));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("virt-launcher: {}", launcher::server::error::chain(&e));
            ExitCode::FAILURE
        }
    }
}
