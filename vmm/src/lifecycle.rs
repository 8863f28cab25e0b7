//! VM run state shared by the vCPU threads, the devices that can end the VM and the `Vmm`
//! handle (`vmm::Vmm`): whether vCPUs should run, park (pause) or stop, and why the VM stopped.
//!
//! Protocol: whoever wants a change sets the requested state and notifies; vCPU threads check
//! it before every `KVM_RUN`. A vCPU blocked inside `KVM_RUN` is kicked with a signal (see
//! `vstate::vcpu`), and the requester repeats the kick until every vCPU has acknowledged
//! (parked for a pause, exited for a stop), so a kick that lands just before `KVM_RUN` is not
//! lost. The first exit reason recorded wins.
//!
//! A guest reset request (the i8042 reset line, a KVM reset event) and a triple fault either
//! end the VM or restart it in place, as the [`ResetPolicy`] says. A restart sets
//! `reset_pending`: every vCPU parks as for a pause, and the VMM's reset thread (the `reset`
//! module) puts devices, interrupt controllers and vCPUs back to their power-on state, reloads
//! the kernel and lets the vCPUs go (counting the reset in `resets`).
//!
//! This module is at the bottom of the crate: the devices and vCPUs that end a VM use it, and
//! it names none of the modules above it.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Why a VM stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmExit {
    /// The guest wrote `code` to the power-off port (0xf4), or KVM reported a shutdown event.
    PowerOff { code: u32 },
    /// The guest reset the machine (i8042 command 0xfe; Linux's `reboot`).
    Reset,
    /// A vCPU triple-faulted (`KVM_EXIT_SHUTDOWN`).
    TripleFault,
    /// The host stopped the VM.
    Stopped,
    /// The VM could not go on; the text says why.
    Error(String),
}

impl std::fmt::Display for VmExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmExit::PowerOff { code } => write!(f, "guest powered off (code {code})"),
            VmExit::Reset => write!(f, "guest reset"),
            VmExit::TripleFault => write!(f, "triple fault"),
            VmExit::Stopped => write!(f, "stopped by the host"),
            VmExit::Error(e) => write!(f, "error: {e}"),
        }
    }
}

/// What a guest reset request or a triple fault does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResetAction {
    /// The VM stops with [`VmExit::Reset`] or [`VmExit::TripleFault`].
    #[default]
    Exit,
    /// The VM restarts in place: power-on state, kernel reloaded, same process.
    Restart,
}

/// What the guest's reset requests do. The default ends the VM on both; KubeVirt's behaviour
/// (libvirt's `on_reboot=restart`: the VMI stays and its guest reboots) is [`ResetPolicy::RESTART`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResetPolicy {
    /// The i8042 reset line (command 0xfe; Linux's `reboot`) or a KVM reset event.
    pub guest_reset: ResetAction,
    /// A vCPU triple-faulted.
    pub triple_fault: ResetAction,
}

impl ResetPolicy {
    /// Both restart the VM in place.
    pub const RESTART: ResetPolicy = ResetPolicy {
        guest_reset: ResetAction::Restart,
        triple_fault: ResetAction::Restart,
    };

    /// Whether `exit` restarts the VM instead of ending it.
    pub fn restarts(&self, exit: &VmExit) -> bool {
        match exit {
            VmExit::Reset => self.guest_reset == ResetAction::Restart,
            VmExit::TripleFault => self.triple_fault == ResetAction::Restart,
            _ => false,
        }
    }
}

/// What vCPUs are asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requested {
    Run,
    Pause,
    Stop,
}

/// The state behind [`RunControl`]'s lock.
#[derive(Debug)]
pub struct RunState {
    pub requested: Requested,
    /// vCPU threads that have not returned yet.
    pub live_vcpus: usize,
    /// vCPU threads parked because of a pause.
    pub parked_vcpus: usize,
    pub exit: Option<VmExit>,
    /// A reset in place was asked for: vCPUs park until the reset thread has done it.
    pub reset_pending: bool,
    /// The reset thread is doing a reset (a migration waits for it to end).
    pub resetting: bool,
    /// Resets in place done so far.
    pub resets: u64,
    pub policy: ResetPolicy,
}

/// Shared run state with its condition variable.
#[derive(Debug)]
pub struct RunControl {
    state: Mutex<RunState>,
    changed: Condvar,
}

impl RunControl {
    pub fn new(vcpus: usize) -> Self {
        RunControl {
            state: Mutex::new(RunState {
                requested: Requested::Run,
                live_vcpus: vcpus,
                parked_vcpus: 0,
                exit: None,
                reset_pending: false,
                resetting: false,
                resets: 0,
                policy: ResetPolicy::default(),
            }),
            changed: Condvar::new(),
        }
    }

    /// Locks the state; a poisoned lock ends the process ([`crate::poison`]).
    pub fn lock(&self) -> MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(crate::poison::fatal)
    }

    /// Waits for a change, at most `timeout`.
    pub fn wait_timeout<'a>(
        &self,
        guard: MutexGuard<'a, RunState>,
        timeout: Duration,
    ) -> MutexGuard<'a, RunState> {
        match self.changed.wait_timeout(guard, timeout) {
            Ok((guard, _)) => guard,
            Err(e) => crate::poison::fatal(e).0,
        }
    }

    /// Waits for a change.
    pub fn wait<'a>(&self, guard: MutexGuard<'a, RunState>) -> MutexGuard<'a, RunState> {
        self.changed
            .wait(guard)
            .unwrap_or_else(crate::poison::fatal)
    }

    pub fn notify(&self) {
        self.changed.notify_all();
    }

    /// Records why the VM stops (the first reason wins) and asks every vCPU to stop; a guest
    /// reset or triple fault that the policy restarts asks for a reset in place instead.
    pub fn request_exit(&self, exit: VmExit) {
        let mut state = self.lock();
        if state.exit.is_none() && state.policy.restarts(&exit) {
            state.reset_pending = true;
            drop(state);
            self.notify();
            return;
        }
        if state.exit.is_none() {
            state.exit = Some(exit);
        }
        state.requested = Requested::Stop;
        drop(state);
        self.notify();
    }

    /// Asks for a reset in place (nothing once the VM has stopped).
    pub fn request_reset(&self) {
        let mut state = self.lock();
        if state.exit.is_none() {
            state.reset_pending = true;
        }
        drop(state);
        self.notify();
    }

    /// Waits until no reset in place is being done (for a migration that has just begun: the
    /// reset thread starts no new one while a migration is under way).
    pub fn wait_for_reset(&self) {
        let mut state = self.lock();
        while state.resetting && state.exit.is_none() {
            state = self.wait(state);
        }
    }

    /// The exit reason, once there is one.
    pub fn exit(&self) -> Option<VmExit> {
        self.lock().exit.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_exit_reason_wins() {
        let control = RunControl::new(1);
        control.request_exit(VmExit::PowerOff { code: 0 });
        control.request_exit(VmExit::Stopped);
        assert_eq!(control.exit(), Some(VmExit::PowerOff { code: 0 }));
        assert_eq!(control.lock().requested, Requested::Stop);
    }

    #[test]
    fn the_policy_turns_resets_and_triple_faults_into_resets_in_place() {
        let control = RunControl::new(1);
        control.lock().policy = ResetPolicy {
            guest_reset: ResetAction::Restart,
            triple_fault: ResetAction::Exit,
        };
        control.request_exit(VmExit::Reset);
        assert_eq!(control.exit(), None);
        assert!(control.lock().reset_pending);
        assert_eq!(control.lock().requested, Requested::Run);
        control.request_exit(VmExit::TripleFault);
        assert_eq!(control.exit(), Some(VmExit::TripleFault));

        let control = RunControl::new(1);
        control.lock().policy = ResetPolicy::RESTART;
        control.request_exit(VmExit::TripleFault);
        assert_eq!(control.exit(), None);
        assert!(control.lock().reset_pending);
        control.request_exit(VmExit::PowerOff { code: 0 });
        assert_eq!(control.exit(), Some(VmExit::PowerOff { code: 0 }));
        // Once stopped, nothing restarts it.
        control.request_exit(VmExit::Reset);
        control.lock().reset_pending = false;
        control.request_reset();
        assert!(!control.lock().reset_pending);
    }

    #[test]
    fn the_default_policy_ends_the_vm() {
        let control = RunControl::new(1);
        control.request_exit(VmExit::Reset);
        assert_eq!(control.exit(), Some(VmExit::Reset));
        assert!(!control.lock().reset_pending);
    }
}
