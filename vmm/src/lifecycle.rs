//! VM run state shared by the vCPU threads, the devices that can end the VM and the [`Vmm`]
//! handle: whether vCPUs should run, park (pause) or stop, and why the VM stopped.
//!
//! Protocol: whoever wants a change sets the requested state and notifies; vCPU threads check
//! it before every `KVM_RUN`. A vCPU blocked inside `KVM_RUN` is kicked with a signal (see
//! `vstate::vcpu`), and the requester repeats the kick until every vCPU has acknowledged
//! (parked for a pause, exited for a stop), so a kick that lands just before `KVM_RUN` is not
//! lost. The first exit reason recorded wins.
//!
//! [`Vmm`]: crate::vmm::Vmm

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
            }),
            changed: Condvar::new(),
        }
    }

    /// Locks the state. A poisoned lock (a panicking holder) still yields the state: it only
    /// holds plain values.
    pub fn lock(&self) -> MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a change, at most `timeout`.
    pub fn wait_timeout<'a>(
        &self,
        guard: MutexGuard<'a, RunState>,
        timeout: Duration,
    ) -> MutexGuard<'a, RunState> {
        match self.changed.wait_timeout(guard, timeout) {
            Ok((guard, _)) => guard,
            Err(e) => e.into_inner().0,
        }
    }

    /// Waits for a change.
    pub fn wait<'a>(&self, guard: MutexGuard<'a, RunState>) -> MutexGuard<'a, RunState> {
        self.changed.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    pub fn notify(&self) {
        self.changed.notify_all();
    }

    /// Records why the VM stops (the first reason wins) and asks every vCPU to stop.
    pub fn request_exit(&self, exit: VmExit) {
        let mut state = self.lock();
        if state.exit.is_none() {
            state.exit = Some(exit);
        }
        state.requested = Requested::Stop;
        drop(state);
        self.notify();
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
}
