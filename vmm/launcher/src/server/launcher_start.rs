//! The steps of `sync_vmi` that start the VM: the backend a VMI with firmware runs on, the
//! check of the VMM's socket paths, the backend's start and its guest agent channel.

use std::sync::Arc;

use contract::sockets::check_socket_path;
use vmm::config::{ConsoleConfig, VmConfig};

use super::SyncError;
use crate::agent::{AgentChannel, Timings};
use crate::backend::kvm::KvmVm;
use crate::backend::qemu::{Machine, QemuVm};
use crate::backend::{Backend, BackendChoice, BackendKind};
use crate::converter::{self, HostFacts};

/// The guest agent channel of `backend`'s VM, polling once the VM runs; `None` when the backend
/// has no channel, or (logged) when the poller cannot start: the VM runs without a report.
pub(super) fn start_agent(backend: &dyn Backend) -> Option<Arc<AgentChannel>> {
    let socket = backend.guest_agent_socket()?;
    match AgentChannel::start(socket, Timings::default()) {
        Ok(agent) => Some(Arc::new(agent)),
        Err(e) => {
            log::warn!("no guest agent report: {}", crate::server::error::chain(&e));
            None
        }
    }
}

/// The VMM's own sockets must fit in a unix socket address: QMP's, the guest agent's, the
/// serial port's and vsock's.
pub(super) fn check_sockets(config: &VmConfig, facts: &HostFacts) -> Result<(), SyncError> {
    let mut sockets = vec![facts.run_dir.join("qmp.sock")];
    if let Some(agent) = &config.agent {
        sockets.push(agent.socket.clone());
    }
    if let ConsoleConfig::Socket { path } = &config.serial {
        sockets.push(path.clone());
    }
    if let Some(vsock) = &config.vsock {
        sockets.push(vsock.socket.clone());
    }
    for socket in sockets {
        check_socket_path(&socket).map_err(SyncError::SocketPath)?;
    }
    Ok(())
}

/// The backend of a VMI with firmware: the KVM VMM has none, so QEMU runs it (TCG: this backend
/// has no QEMU-KVM mode yet); a `--backend kvm` launcher cannot run it.
pub(super) fn firmware_backend(
    choice: BackendChoice,
    firmware: &converter::Firmware,
    forced: Option<BackendKind>,
) -> Result<BackendChoice, SyncError> {
    match (choice.kind, forced) {
        (BackendKind::QemuTcg, _) => Ok(choice),
        (BackendKind::Kvm, Some(BackendKind::Kvm)) => Err(SyncError::FirmwareNeedsQemu(
            firmware.name(),
            "this launcher's --backend flag forces the KVM VMM",
        )),
        (BackendKind::Kvm, _) => Ok(BackendChoice {
            kind: BackendKind::QemuTcg,
            reason: format!(
                "firmware.bootloader asks for {}, which only the QEMU backend runs (the KVM \
                 VMM has no firmware); {}",
                firmware.name(),
                choice.reason
            ),
        }),
    }
}

pub(super) fn start_backend(
    kind: BackendKind,
    config: &VmConfig,
    run_dir: &std::path::Path,
    incoming: bool,
    machine: &Machine,
) -> Result<Box<dyn Backend>, SyncError> {
    match kind {
        BackendKind::QemuTcg if incoming => {
            Ok(Box::new(QemuVm::start_incoming(config, run_dir, machine)?))
        }
        BackendKind::QemuTcg => Ok(Box::new(QemuVm::start(config, run_dir, machine)?)),
        BackendKind::Kvm => {
            std::fs::create_dir_all(run_dir)
                .map_err(|e| SyncError::RunDir(run_dir.to_path_buf(), e))?;
            crate::backend::check_files(config).map_err(SyncError::MissingFile)?;
            if incoming {
                return Ok(Box::new(KvmVm::start_incoming(config)));
            }
            Ok(Box::new(KvmVm::start(config)?))
        }
    }
}
