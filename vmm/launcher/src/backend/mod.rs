//! Backends: what runs the VM. Both take the same `VmConfig` and sit behind [`Backend`]:
//! - [`kvm`]: the in-process rust-vmm VMM (`vmm` crate) on `/dev/kvm`;
//! - [`qemu`]: `qemu-system-x86_64 -M microvm -accel tcg`, driven over QMP.
//!
//! [`choose`] picks one: QEMU TCG when the KubeVirt CR sets `useEmulation`, or when the KVM probe
//! says this host's `/dev/kvm` cannot run a standard guest; KVM otherwise. The choice and its
//! reason are reported in `GetDomain`.
//!
//! Every method is blocking with its own deadline; the gRPC server calls them from blocking
//! tasks. [`Backend::poll`] is cheap and never blocks for long: the server's monitor calls it
//! periodically to notice a VMM that died.

pub mod kvm;
pub mod qemu;
pub mod qmp;
mod throttle;

use std::path::PathBuf;
use std::time::Duration;

use vmm::capability::KvmCapability;
use vmm::config::VmConfig;

/// The guest agent channel's socket in the run directory, on both backends: the VMM (QEMU's
/// chardev, the KVM VMM's virtio-console port) listens, the launcher connects.
pub const AGENT_SOCKET: &str = "agent.sock";

/// Which backend runs the VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Kvm,
    QemuTcg,
}

/// The backend chosen for a VM and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendChoice {
    pub kind: BackendKind,
    pub reason: String,
}

/// Chooses the backend from `useEmulation` and the KVM probe.
pub fn choose(use_emulation: bool, kvm: &KvmCapability) -> BackendChoice {
    let (kind, reason) = match (use_emulation, kvm) {
        (true, _) => (
            BackendKind::QemuTcg,
            "useEmulation is set in the KubeVirt configuration".to_string(),
        ),
        (false, KvmCapability::Hardware) => (
            BackendKind::Kvm,
            "/dev/kvm has hardware virtualization".to_string(),
        ),
        (false, KvmCapability::PvmOnly) => (
            BackendKind::QemuTcg,
            "/dev/kvm is PVM (no vmx/svm): it cannot run a standard guest".to_string(),
        ),
        (false, KvmCapability::Unavailable(why)) => {
            (BackendKind::QemuTcg, format!("KVM is not usable: {why}"))
        }
    };
    BackendChoice { kind, reason }
}

/// The backend a migration's source runs, as virt-handler reported it in the VMI's
/// `SoftwareEmulation` condition (True: QEMU TCG, False: the KVM VMM); `None` before it did.
pub fn source_backend(vmi: &api::VirtualMachineInstance) -> Option<BackendKind> {
    api::vmi::software_emulation(vmi.status.as_ref()).map(|emulated| {
        if emulated {
            BackendKind::QemuTcg
        } else {
            BackendKind::Kvm
        }
    })
}

/// The backend of a migration target: the source's, since each backend reads only its own
/// migration stream. A target that would have chosen the KVM VMM runs QEMU TCG for a source on
/// QEMU TCG; a target that cannot run the KVM VMM (or whose `--backend` flag, `forced`, rules
/// out the source's) refuses, with the reason.
pub fn migration_target_backend(
    choice: BackendChoice,
    source: Option<BackendKind>,
    forced: Option<BackendKind>,
) -> Result<BackendChoice, String> {
    match (source, choice.kind, forced) {
        (None, ..) => Ok(choice),
        (Some(source), kind, _) if source == kind => Ok(choice),
        (Some(BackendKind::QemuTcg), BackendKind::Kvm, Some(BackendKind::Kvm)) => Err(
            "the migration source runs on QEMU TCG, and this launcher's --backend flag forces \
             the KVM VMM"
                .into(),
        ),
        (Some(BackendKind::QemuTcg), BackendKind::Kvm, _) => Ok(BackendChoice {
            kind: BackendKind::QemuTcg,
            reason: format!(
                "the migration source runs on QEMU TCG, whose stream only QEMU reads (this node \
                 alone would run the KVM VMM: {})",
                choice.reason
            ),
        }),
        (Some(_), _, _) => Err(format!(
            "the migration source runs on the KVM VMM, which this node cannot run: {}",
            choice.reason
        )),
    }
}

/// What the backend sees of the VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmStatus {
    Running,
    Paused,
    /// The VMM paused the guest because a disk write failed for want of room on the host; the
    /// write waits and is retried on resume (why, in the VMM's words).
    PausedOnIoError(String),
    /// The VM is gone; `crashed` when it did not end by a power-off or a host request.
    Exited {
        reason: String,
        crashed: bool,
    },
}

/// Where a migration stands, as the VMM reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrationProgress {
    pub phase: MigrationPhase,
    /// Why it failed (VMM's words).
    pub error: String,
    pub transferred_bytes: u64,
    pub remaining_bytes: u64,
    pub total_bytes: u64,
    /// The VMM's own figures, once completed (source side).
    pub total_ms: Option<u64>,
    pub downtime_ms: Option<u64>,
}

/// Phases of a migration as the launcher reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MigrationPhase {
    #[default]
    Active,
    Completed,
    Failed,
    Cancelled,
}

impl MigrationPhase {
    pub fn is_final(self) -> bool {
        self != MigrationPhase::Active
    }
}

/// How an outgoing migration runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrationParams {
    /// Bytes per second; 0: unlimited.
    pub bandwidth_bytes_per_second: u64,
    /// Longest switch-over pause; 0: the VMM's default.
    pub max_downtime_ms: u64,
    /// Send the writable disks with the stream.
    pub block: bool,
}

/// Resource use of the VMM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmmStats {
    /// PID of the VMM process (0: in-process).
    pub pid: u32,
    pub cpu_ms: u64,
    pub rss_bytes: u64,
}

/// Why a backend operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("QMP")]
    Qmp(#[from] qmp::QmpError),
    #[error("the VM has already exited: {0}")]
    Exited(String),
    #[error("{0}")]
    Vmm(String),
    #[error("{0} is not supported by this backend")]
    Unsupported(&'static str),
    #[error("cannot stop the VMM process")]
    Kill(#[source] std::io::Error),
}

/// A running VM.
pub trait Backend: Send {
    fn kind(&self) -> BackendKind;
    /// Stops the vCPUs.
    fn pause(&mut self) -> Result<(), BackendError>;
    /// Starts the vCPUs again (also the first start of a VM created paused).
    fn resume(&mut self) -> Result<(), BackendError>;
    /// Asks the guest to power off; returns at once.
    fn request_shutdown(&mut self) -> Result<(), BackendError>;
    /// Stops the VM at once; the reason is recorded as the exit reason.
    fn kill(&mut self, reason: &str) -> Result<(), BackendError>;
    /// Hardware reset.
    fn reset(&mut self) -> Result<(), BackendError>;
    /// The VM's screen as a PNG, when it has a graphics device.
    fn screenshot(&mut self) -> Result<Vec<u8>, BackendError> {
        Err(BackendError::Unsupported("a screenshot"))
    }
    /// Asks the guest's OS to reboot, without the guest agent; the VM keeps running. Returns
    /// at once.
    fn request_reboot(&mut self) -> Result<(), BackendError> {
        Err(BackendError::Unsupported(
            "a soft reboot without the guest agent",
        ))
    }
    /// The current status; notices a VMM that died.
    fn poll(&mut self) -> VmStatus;
    fn stats(&mut self) -> VmmStats;
    /// The unix socket of the host end of the guest agent channel (`org.qemu.guest_agent.0`),
    /// when the VM has one; the launcher connects to it and speaks the guest agent protocol
    /// (`crate::agent`).
    fn guest_agent_socket(&self) -> Option<PathBuf>;
    /// Receiving side: accepts the migration stream on the unix socket `socket` (the VMM was
    /// started waiting for one).
    fn listen_incoming(&mut self, _socket: &std::path::Path) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("live migration"))
    }
    /// Sending side: starts sending the VM to the unix socket `socket`; returns at once.
    fn start_migration(
        &mut self,
        _socket: &std::path::Path,
        _params: &MigrationParams,
    ) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("live migration"))
    }
    /// Where the current migration stands (either side); `None` when there is none.
    fn migration(&mut self) -> Option<MigrationProgress> {
        None
    }
    /// Aborts the outgoing migration.
    fn cancel_migration(&mut self) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("live migration"))
    }
}

/// Reads the CPU time (utime + stime, in ms) and RSS of a process from `/proc`.
pub fn process_stats(pid: u32) -> VmmStats {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let number = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After ')': state is index 0, utime 11, stime 12, rss (pages) 21.
    let ticks = number(11) + number(12);
    let clock_ticks = 100; // USER_HZ on Linux x86_64.
    VmmStats {
        pid,
        cpu_ms: ticks * 1000 / clock_ticks,
        rss_bytes: number(21) * 4096,
    }
}

/// A file the VM needs that is not there.
#[derive(Debug, thiserror::Error)]
#[error("the {what} {path} does not exist")]
pub struct MissingFile {
    pub what: &'static str,
    pub path: PathBuf,
}

/// Checks that the kernel, initramfs and disk files of `config` exist (a guestless VM has no
/// kernel).
pub fn check_files(config: &VmConfig) -> Result<(), MissingFile> {
    let mut files = Vec::new();
    if !config.payload.guestless {
        files.push(("kernel", &config.payload.kernel));
    }
    if let Some(initramfs) = &config.payload.initramfs {
        files.push(("initramfs", initramfs));
    }
    for disk in &config.disks {
        files.push(("disk file", &disk.path));
    }
    for (what, path) in files {
        if !path.is_file() {
            return Err(MissingFile {
                what,
                path: path.clone(),
            });
        }
    }
    Ok(())
}

/// Default deadline of one control operation.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_and_reason() {
        let cases = [
            (
                true,
                KvmCapability::Hardware,
                BackendKind::QemuTcg,
                "useEmulation",
            ),
            (false, KvmCapability::Hardware, BackendKind::Kvm, "hardware"),
            (false, KvmCapability::PvmOnly, BackendKind::QemuTcg, "PVM"),
            (
                false,
                KvmCapability::Unavailable("/dev/kvm does not exist".into()),
                BackendKind::QemuTcg,
                "/dev/kvm does not exist",
            ),
        ];
        for (emulation, kvm, kind, reason) in cases {
            let choice = choose(emulation, &kvm);
            assert_eq!(choice.kind, kind);
            assert!(choice.reason.contains(reason), "{}", choice.reason);
        }
    }

    #[test]
    fn a_migration_target_runs_the_sources_backend() {
        let kvm = choose(false, &KvmCapability::Hardware);
        let tcg = choose(false, &KvmCapability::PvmOnly);
        let qemu = Some(BackendKind::QemuTcg);
        let vmm = Some(BackendKind::Kvm);
        assert_eq!(
            migration_target_backend(kvm.clone(), None, None),
            Ok(kvm.clone())
        );
        assert_eq!(
            migration_target_backend(kvm.clone(), vmm, None),
            Ok(kvm.clone())
        );
        assert_eq!(
            migration_target_backend(tcg.clone(), qemu, None),
            Ok(tcg.clone())
        );
        // A node with hardware KVM receives a QEMU TCG guest on QEMU TCG.
        let moved = migration_target_backend(kvm.clone(), qemu, None).unwrap();
        assert_eq!(moved.kind, BackendKind::QemuTcg);
        assert!(
            moved.reason.contains("source runs on QEMU TCG"),
            "{}",
            moved.reason
        );
        assert!(moved.reason.contains("hardware"), "{}", moved.reason);
        let forced = migration_target_backend(kvm, qemu, vmm).unwrap_err();
        assert!(forced.contains("--backend"), "{forced}");
        // A node without it cannot receive a guest of the KVM VMM.
        let refused = migration_target_backend(tcg, vmm, None).unwrap_err();
        assert!(refused.contains("KVM VMM"), "{refused}");
        assert!(refused.contains("PVM"), "{refused}");
    }

    #[test]
    fn the_source_backend_is_the_vmis_software_emulation_condition() {
        let vmi = |conditions: serde_json::Value| -> api::VirtualMachineInstance {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": "v"}, "spec": {"domain": {"devices": {}}},
                "status": {"conditions": conditions}
            }))
            .unwrap()
        };
        let condition = |status: &str| {
            serde_json::json!([{"type": "Ready", "status": "True"},
                               {"type": "SoftwareEmulation", "status": status}])
        };
        assert_eq!(
            source_backend(&vmi(condition("True"))),
            Some(BackendKind::QemuTcg)
        );
        assert_eq!(
            source_backend(&vmi(condition("False"))),
            Some(BackendKind::Kvm)
        );
        assert_eq!(source_backend(&vmi(serde_json::json!([]))), None);
    }

    #[test]
    fn own_process_stats() {
        let stats = process_stats(std::process::id());
        assert!(stats.rss_bytes > 0);
    }
}
