//! A running VM: pause, resume, graceful shutdown, forced stop, and why it stopped.
//!
//! * [`Vmm::pause`] parks every vCPU (kicking them out of `KVM_RUN`) and returns once all are
//!   parked; device workers keep serving requests already queued. [`Vmm::resume`] lets them run.
//! * [`Vmm::request_shutdown`] asks the guest to shut down: it presses the ACPI power button
//!   when the guest listens to it (its ACPI driver enabled the power button event: a systemd
//!   guest powers off), else ctrl-alt-del through the i8042 (the ACPI-free path: guests without
//!   ACPI, such as the test guests); [`Vmm::shutdown`] waits a grace period for it, then stops
//!   the VM.
//! * [`Vmm::stop`] stops the vCPUs at once; [`Vmm::wait`] waits for the guest to stop by itself.
//!   Both return the [`VmExit`]: the first reason recorded (guest power-off, reset, triple
//!   fault, error, or [`VmExit::Stopped`] when the host stopped it).
//! * [`Vmm::reset`] is a hardware reset in place (KubeVirt's `reset`): devices, interrupt
//!   controllers and vCPUs back to their power-on state, the kernel reloaded, the same process
//!   (the `reset` module does it, on a thread of its own). [`Vmm::set_reset_policy`] says
//!   whether the guest's own reset requests and triple faults do the same or end the VM.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::guest_memory::GuestMemoryMmap;
use log::warn;
use vmm_sys_util::signal::Killable;

use crate::devices::irq::Resampler;
use crate::devices::legacy::acpi_pm::AcpiPm;
use crate::devices::legacy::i8042::I8042;
use crate::devices::legacy::serial::SerialDevice;
use crate::devices::pci::bus::PciRoot;
use crate::devices::virtio::block::DiskHandle;
use crate::devices::virtio::transport::VirtioTransport;
use crate::devices::worker::WorkerHandle;
use crate::lifecycle::{Requested, ResetPolicy, RunControl, VmExit};
use crate::vstate::vcpu::{kick_signal, SharedVcpuFd};
use crate::vstate::vm::Vm;

/// How often a pending pause, reset or stop re-kicks vCPUs that have not acknowledged it yet.
pub(crate) const KICK_INTERVAL: Duration = Duration::from_millis(5);

/// The VM's state as the host sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmState {
    Running,
    Paused,
    Stopped(VmExit),
}

/// A lifecycle request that does not apply.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LifecycleError {
    #[error("the VM has stopped: {0}")]
    NotRunning(VmExit),
    #[error("the VM is being migrated: pause and resume wait until the migration ends")]
    Migrating,
}

/// The devices whose state a migration carries (and a reset puts back).
#[derive(Clone)]
pub(crate) struct Devices {
    pub serial: Arc<Mutex<SerialDevice>>,
    pub i8042: Arc<Mutex<I8042>>,
    pub virtio: Vec<Arc<Mutex<dyn VirtioTransport>>>,
    /// The PCI root bus, ACPI PM and interrupt routing (PCI machine only).
    pub pci: Option<Arc<PciMachine>>,
}

/// What the PCI machine has beyond its virtio transports (built by `builder::pci`); shared by
/// the VMM, its reset thread and a migration.
pub(crate) struct PciMachine {
    pub root: Arc<Mutex<PciRoot>>,
    pub acpi_pm: Arc<Mutex<AcpiPm>>,
    pub resampler: Resampler,
    /// Ends the resampler thread when the machine goes.
    _resampler_thread: Option<WorkerHandle>,
}

impl PciMachine {
    /// The machine's root bus, ACPI PM registers and INTx resampler; `resampler_thread` ends
    /// with it.
    pub(crate) fn new(
        root: Arc<Mutex<PciRoot>>,
        acpi_pm: Arc<Mutex<AcpiPm>>,
        resampler: Resampler,
        resampler_thread: Option<WorkerHandle>,
    ) -> Self {
        PciMachine {
            root,
            acpi_pm,
            resampler,
            _resampler_thread: resampler_thread,
        }
    }

    pub fn root(&self) -> std::sync::MutexGuard<'_, PciRoot> {
        self.root.lock().unwrap_or_else(crate::poison::fatal)
    }

    pub fn acpi_pm(&self) -> std::sync::MutexGuard<'_, AcpiPm> {
        self.acpi_pm.lock().unwrap_or_else(crate::poison::fatal)
    }
}

/// How [`Vmm::request_shutdown`] asked the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownRequest {
    /// The ACPI power button (the guest enabled its event).
    PowerButton,
    /// Ctrl-alt-del on the i8042.
    CtrlAltDel,
}

/// The vCPU threads, shared by the [`Vmm`] and its reset thread (which kicks them).
#[derive(Default)]
pub(crate) struct VcpuThreads(Mutex<Vec<JoinHandle<()>>>);

impl VcpuThreads {
    pub(crate) fn push(&self, thread: JoinHandle<()>) {
        self.lock().push(thread);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.0.lock().unwrap_or_else(crate::poison::fatal)
    }

    /// Interrupts every running vCPU's `KVM_RUN`.
    pub(crate) fn kick(&self) {
        for vcpu in self.lock().iter() {
            if !vcpu.is_finished() {
                if let Err(e) = vcpu.kill(kick_signal()) {
                    warn!("kick vCPU thread: {e}");
                }
            }
        }
    }

    fn all_finished(&self) -> bool {
        self.lock().iter().all(|v| v.is_finished())
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn take(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.lock())
    }
}

/// A built, running VM.
pub struct Vmm {
    pub(crate) control: Arc<RunControl>,
    vcpus: Arc<VcpuThreads>,
    pub(crate) vcpu_fds: Vec<SharedVcpuFd>,
    pub(crate) devices: Devices,
    /// The thread that does resets in place; joined before the vCPU threads.
    reset_thread: Option<JoinHandle<()>>,
    // Dropped after the vCPU threads have been joined (see Drop).
    pub(crate) vm: Arc<Vm>,
    mem: GuestMemoryMmap,
    /// A migration is under way: it alone pauses and resumes the vCPUs (and a reset waits).
    pub(crate) migrating: Arc<AtomicBool>,
}

impl Vmm {
    pub(crate) fn new(
        control: Arc<RunControl>,
        vcpus: Arc<VcpuThreads>,
        vcpu_fds: Vec<SharedVcpuFd>,
        devices: Devices,
        vm: Arc<Vm>,
        mem: GuestMemoryMmap,
    ) -> Self {
        Vmm {
            control,
            vcpus,
            vcpu_fds,
            devices,
            reset_thread: None,
            vm,
            mem,
            migrating: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Hands the reset thread to the VMM (it joins it when the VM stops).
    pub(crate) fn set_reset_thread(&mut self, thread: JoinHandle<()>) {
        self.reset_thread = Some(thread);
    }

    /// Guest memory (for inspection by tests and tools).
    pub fn guest_memory(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    pub fn state(&self) -> VmState {
        let state = self.control.lock();
        match (&state.exit, state.requested) {
            (Some(exit), _) => VmState::Stopped(exit.clone()),
            (None, Requested::Pause) => VmState::Paused,
            _ => VmState::Running,
        }
    }

    fn kick(&self) {
        self.vcpus.kick();
    }

    /// Parks every vCPU; returns when all are parked.
    pub fn pause(&self) -> Result<(), LifecycleError> {
        if self.migrating.load(Ordering::SeqCst) {
            return Err(LifecycleError::Migrating);
        }
        self.pause_vcpus()
    }

    /// [`Vmm::pause`] without the migration check (for the migration itself).
    pub(crate) fn pause_vcpus(&self) -> Result<(), LifecycleError> {
        let mut state = self.control.lock();
        if let Some(exit) = &state.exit {
            return Err(LifecycleError::NotRunning(exit.clone()));
        }
        state.requested = Requested::Pause;
        self.control.notify();
        loop {
            if let Some(exit) = &state.exit {
                return Err(LifecycleError::NotRunning(exit.clone()));
            }
            if state.parked_vcpus >= state.live_vcpus {
                return Ok(());
            }
            drop(state);
            self.kick();
            state = self.control.lock();
            state = self.control.wait_timeout(state, KICK_INTERVAL);
        }
    }

    /// Lets paused vCPUs run again.
    pub fn resume(&self) -> Result<(), LifecycleError> {
        if self.migrating.load(Ordering::SeqCst) {
            return Err(LifecycleError::Migrating);
        }
        self.resume_vcpus()
    }

    /// [`Vmm::resume`] without the migration check (for the migration itself).
    pub(crate) fn resume_vcpus(&self) -> Result<(), LifecycleError> {
        let mut state = self.control.lock();
        if let Some(exit) = &state.exit {
            return Err(LifecycleError::NotRunning(exit.clone()));
        }
        state.requested = Requested::Run;
        drop(state);
        self.control.notify();
        Ok(())
    }

    /// The first disk whose queue waits for room on the host (a write failed with ENOSPC), as
    /// `(disk id, why)`. The guest's request is kept: pause the VM, make room, then
    /// [`Vmm::retry_io`] and resume.
    pub fn stalled_disk(&self) -> Option<(String, String)> {
        self.disks()
            .find_map(|disk| disk.stalled().map(|why| (disk.id().to_string(), why)))
    }

    /// Runs the writes that waited for room again (they wait again if there is still none).
    pub fn retry_io(&self) {
        for disk in self.disks() {
            disk.retry();
        }
    }

    fn disks(&self) -> impl Iterator<Item = DiskHandle> + '_ {
        self.devices
            .virtio
            .iter()
            .filter_map(|t| t.lock().unwrap_or_else(crate::poison::fatal).disk())
    }

    /// Hardware reset in place: parks the vCPUs, puts devices, interrupt controllers and vCPUs
    /// back to their power-on state, reloads the kernel, and lets the vCPUs run from the boot
    /// entry (a paused VM stays paused). Returns once the reset is done.
    pub fn reset(&self) -> Result<(), LifecycleError> {
        if self.migrating.load(Ordering::SeqCst) {
            return Err(LifecycleError::Migrating);
        }
        let mut state = self.control.lock();
        if let Some(exit) = &state.exit {
            return Err(LifecycleError::NotRunning(exit.clone()));
        }
        let done = state.resets + 1;
        state.reset_pending = true;
        self.control.notify();
        loop {
            if let Some(exit) = &state.exit {
                return Err(LifecycleError::NotRunning(exit.clone()));
            }
            if state.resets >= done {
                return Ok(());
            }
            state = self.control.wait(state);
        }
    }

    /// How many resets in place (host or guest asked) the VM has done.
    pub fn resets(&self) -> u64 {
        self.control.lock().resets
    }

    /// What the guest's reset requests and triple faults do from now on.
    pub fn set_reset_policy(&self, policy: ResetPolicy) {
        self.control.lock().policy = policy;
    }

    /// Asks the guest to shut down: the ACPI power button if the guest listens to it, else
    /// ctrl-alt-del on the i8042.
    pub fn request_shutdown(&self) -> ShutdownRequest {
        if let Some(pci) = &self.devices.pci {
            let pm = pci.acpi_pm();
            if pm.power_button_enabled() {
                pm.press_power_button();
                log::info!("shutdown: pressed the ACPI power button");
                return ShutdownRequest::PowerButton;
            }
        }
        self.devices
            .i8042
            .lock()
            .unwrap_or_else(crate::poison::fatal)
            .ctrl_alt_del();
        log::info!("shutdown: sent ctrl-alt-del");
        ShutdownRequest::CtrlAltDel
    }

    /// Graceful shutdown: asks the guest, waits up to `grace`, then stops the VM.
    pub fn shutdown(&mut self, grace: Duration) -> VmExit {
        if self.state() == VmState::Paused {
            let _ = self.resume();
        }
        self.request_shutdown();
        match self.wait_timeout(grace) {
            Some(exit) => exit,
            None => self.stop(),
        }
    }

    /// Stops the VM now; returns why it stopped.
    pub fn stop(&mut self) -> VmExit {
        self.control.request_exit(VmExit::Stopped);
        self.join_vcpus();
        self.control.exit().unwrap_or(VmExit::Stopped)
    }

    /// Waits until the VM stops by itself.
    pub fn wait(&mut self) -> VmExit {
        let mut state = self.control.lock();
        while state.exit.is_none() {
            state = self.control.wait(state);
        }
        drop(state);
        self.join_vcpus();
        self.control.exit().unwrap_or(VmExit::Stopped)
    }

    /// Waits at most `timeout` for the VM to stop by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<VmExit> {
        let deadline = Instant::now() + timeout;
        let mut state = self.control.lock();
        while state.exit.is_none() {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            state = self.control.wait_timeout(state, deadline - now);
        }
        drop(state);
        self.join_vcpus();
        self.control.exit()
    }

    fn join_vcpus(&mut self) {
        // The reset thread leaves once an exit is recorded (it only waits in bounded steps).
        if let Some(thread) = self.reset_thread.take() {
            if thread.join().is_err() {
                warn!("the reset thread panicked");
            }
        }
        loop {
            let state = self.control.lock();
            if state.live_vcpus == 0 || self.vcpus.all_finished() {
                break;
            }
            drop(state);
            self.kick();
            let state = self.control.lock();
            drop(self.control.wait_timeout(state, KICK_INTERVAL));
        }
        for vcpu in self.vcpus.take() {
            if vcpu.join().is_err() {
                warn!("a vCPU thread panicked");
            }
        }
    }
}

impl Drop for Vmm {
    fn drop(&mut self) {
        if !self.vcpus.is_empty() || self.reset_thread.is_some() {
            self.stop();
        }
    }
}
