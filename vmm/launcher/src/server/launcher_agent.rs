//! The launcher's operations through the guest agent: soft reboot (also without the agent,
//! as the backend can), freeze and thaw. Each takes the VM's agent channel out of the VM
//! mutex first and talks to the guest without holding it.

use std::sync::Arc;
use std::time::Duration;

use contract::proto::v1;

use super::{Launcher, OpError};
use crate::agent::AgentChannel;
use crate::backend::BackendError;

impl Launcher {
    /// Asks the guest to reboot: through its guest agent when it answers (the request goes out
    /// without the VM mutex held), else as the backend can without one (QEMU: ACPI's power
    /// button, or Ctrl-Alt-Del on a machine without ACPI; [`crate::backend::Backend::request_reboot`]).
    pub fn soft_reboot(&self, vmi: &str) -> Result<v1::Domain, OpError> {
        match self.connected_agent(vmi) {
            Ok(agent) => match agent.reboot() {
                Ok(()) => {
                    log::info!("soft reboot: guest-shutdown (reboot) sent to the guest agent");
                    return self.with_vm(vmi, |this, vm| {
                        this.poll_vm(vm);
                        Ok(this.domain(vm))
                    });
                }
                Err(e) if e.unreachable() => {
                    log::warn!("soft reboot: {}", crate::server::error::chain(&e));
                }
                Err(e) => return Err(OpError::GuestAgent(e)),
            },
            Err(OpError::GuestAgentNotConnected) => {}
            Err(e) => return Err(e),
        }
        self.with_vm(vmi, |this, vm| {
            Self::require_live(vm)?;
            match vm.backend.request_reboot() {
                Ok(()) => log::info!("soft reboot: asked the guest without its agent"),
                Err(BackendError::Unsupported(_)) => return Err(OpError::CannotSoftReboot),
                Err(e) => return Err(e.into()),
            }
            this.poll_vm(vm);
            Ok(this.domain(vm))
        })
    }

    /// The VM's guest agent channel, if the agent answers (KubeVirt's FAILED_PRECONDITION
    /// otherwise); taken out of the VM mutex, which is not held while the guest is asked.
    fn connected_agent(&self, vmi: &str) -> Result<Arc<AgentChannel>, OpError> {
        self.with_vm(vmi, |_, vm| {
            Self::require_live(vm)?;
            vm.agent
                .as_ref()
                .filter(|agent| agent.report().connected)
                .map(Arc::clone)
                .ok_or(OpError::GuestAgentNotConnected)
        })
    }

    /// [`Launcher::connected_agent`] for a freeze or thaw, refused in libvirt's words.
    fn freezing_agent(&self, vmi: &str) -> Result<Arc<AgentChannel>, OpError> {
        self.connected_agent(vmi).map_err(|e| match e {
            OpError::GuestAgentNotConnected => OpError::NoGuestAgentToFreeze,
            other => other,
        })
    }

    /// Freezes the guest's filesystems through the agent, thawed by itself after
    /// `unfreeze_after` (zero: only by [`Launcher::unfreeze`]).
    pub fn freeze(&self, vmi: &str, unfreeze_after: Duration) -> Result<v1::Domain, OpError> {
        let agent = self.freezing_agent(vmi)?;
        let frozen = agent.freeze(unfreeze_after).map_err(OpError::GuestAgent)?;
        log::info!(
            "froze {frozen} filesystem(s) of the guest (thawed by itself after {unfreeze_after:?})"
        );
        self.with_vm(vmi, |this, vm| Ok(this.domain(vm)))
    }

    /// Thaws the guest's filesystems through the agent.
    pub fn unfreeze(&self, vmi: &str) -> Result<v1::Domain, OpError> {
        let agent = self.freezing_agent(vmi)?;
        let thawed = agent.thaw().map_err(OpError::GuestAgent)?;
        log::info!("thawed {thawed} filesystem(s) of the guest");
        self.with_vm(vmi, |this, vm| Ok(this.domain(vm)))
    }
}
