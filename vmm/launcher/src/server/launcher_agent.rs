//! The launcher's operations through the guest agent: soft reboot, freeze and thaw. Each takes
//! the VM's agent channel out of the VM mutex first and talks to the guest without holding it.

use std::sync::Arc;
use std::time::Duration;

use contract::proto::v1;

use super::{Launcher, OpError};
use crate::agent::AgentChannel;

impl Launcher {
    /// Asks the guest to reboot through its guest agent. The agent must be connected (KubeVirt's
    /// FAILED_PRECONDITION otherwise); the request goes out without the VM mutex held.
    pub fn soft_reboot(&self, vmi: &str) -> Result<v1::Domain, OpError> {
        let agent = self.connected_agent(vmi)?;
        match agent.reboot() {
            Ok(()) => log::info!("soft reboot: guest-shutdown (reboot) sent to the guest agent"),
            Err(e) if e.unreachable() => {
                log::warn!("soft reboot: {}", crate::server::error::chain(&e));
                return Err(OpError::GuestAgentNotConnected);
            }
            Err(e) => return Err(OpError::GuestAgent(e)),
        }
        self.with_vm(vmi, |this, vm| {
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
