//! The KVM backend: the in-process rust-vmm VMM of the `vmm` crate.
//!
//! `vmm::builder::build_and_boot_with` builds the VM and starts its vCPUs at once; the returned
//! `vmm::vmm::Vmm` pauses, resumes, resets in place, asks the guest to shut down (Ctrl-Alt-Del on
//! its i8042) and stops it, and records why the VM stopped (`VmExit`). The VM is booted with
//! `ResetPolicy::RESTART`, KubeVirt's behaviour: a guest that reboots (or triple-faults) restarts
//! in place and the VMI stays running; the Reset RPC does the same from the host.
//! The VMM serves the serial port on the socket of the config and keeps what the guest printed
//! while no client was connected, so the launcher's console relay sees the guest's first bytes.

use vmm::builder::{build_and_boot_with, StartVmError};
use vmm::config::VmConfig;
use vmm::lifecycle::{ResetPolicy, VmExit};
use vmm::vmm::{VmState, Vmm};

use super::{process_stats, Backend, BackendError, BackendKind, VmStatus, VmmStats};

/// A VM on the in-process KVM VMM.
pub struct KvmVm {
    vmm: Vmm,
    host_stop: Option<String>,
    exited: Option<(String, bool)>,
}

impl KvmVm {
    /// Builds and boots the VM; guest reboots restart it in place.
    pub fn start(config: &VmConfig) -> Result<KvmVm, StartVmError> {
        let vmm = build_and_boot_with(config, ResetPolicy::RESTART)?;
        Ok(KvmVm {
            vmm,
            host_stop: None,
            exited: None,
        })
    }

    fn exit_status(&self, exit: &VmExit) -> (String, bool) {
        match exit {
            VmExit::PowerOff { .. } => ("the guest powered off".to_string(), false),
            VmExit::Reset => ("the guest reset the machine".to_string(), false),
            VmExit::Stopped => (
                self.host_stop
                    .clone()
                    .unwrap_or_else(|| "stopped by the launcher".to_string()),
                false,
            ),
            VmExit::TripleFault => ("a vCPU triple-faulted".to_string(), true),
            VmExit::Error(e) => (format!("the VMM failed: {e}"), true),
        }
    }

    fn lifecycle(result: Result<(), vmm::vmm::LifecycleError>) -> Result<(), BackendError> {
        result.map_err(|e| BackendError::Vmm(e.to_string()))
    }
}

impl Backend for KvmVm {
    fn kind(&self) -> BackendKind {
        BackendKind::Kvm
    }

    fn pause(&mut self) -> Result<(), BackendError> {
        Self::lifecycle(self.vmm.pause())
    }

    fn resume(&mut self) -> Result<(), BackendError> {
        if self.vmm.state() == VmState::Running {
            return Ok(());
        }
        Self::lifecycle(self.vmm.resume())
    }

    fn request_shutdown(&mut self) -> Result<(), BackendError> {
        if self.vmm.state() == VmState::Paused {
            Self::lifecycle(self.vmm.resume())?;
        }
        // A guest that answers Ctrl-Alt-Del by rebooting is done shutting down: its reset
        // ends the VM instead of restarting it (as the QEMU backend does).
        self.vmm.set_reset_policy(ResetPolicy::default());
        self.vmm.request_shutdown();
        Ok(())
    }

    fn kill(&mut self, reason: &str) -> Result<(), BackendError> {
        if self.exited.is_none() {
            self.host_stop = Some(reason.to_string());
            let exit = self.vmm.stop();
            self.exited = Some(self.exit_status(&exit));
        }
        Ok(())
    }

    fn reset(&mut self) -> Result<(), BackendError> {
        Self::lifecycle(self.vmm.reset())
    }

    fn poll(&mut self) -> VmStatus {
        if let Some((reason, crashed)) = &self.exited {
            return VmStatus::Exited {
                reason: reason.clone(),
                crashed: *crashed,
            };
        }
        match self.vmm.state() {
            VmState::Running => VmStatus::Running,
            VmState::Paused => VmStatus::Paused,
            VmState::Stopped(exit) => {
                // Join the vCPU threads; they have all left already.
                let exit = self
                    .vmm
                    .wait_timeout(std::time::Duration::ZERO)
                    .unwrap_or(exit);
                let (reason, crashed) = self.exit_status(&exit);
                self.exited = Some((reason.clone(), crashed));
                VmStatus::Exited { reason, crashed }
            }
        }
    }

    fn stats(&mut self) -> VmmStats {
        VmmStats {
            pid: 0,
            ..process_stats(std::process::id())
        }
    }
}
