//! vCPUs: configuration for the 64-bit boot entry and one thread per vCPU running `KVM_RUN`.
//!
//! The run loop only routes exits: port I/O to the PIO bus, MMIO to the MMIO bus; unknown ports
//! read as 0xff and unknown MMIO as 0. Exits that end the VM (triple fault, KVM system events,
//! entry failures, internal errors) are recorded in the shared [`RunControl`]. Before every
//! `KVM_RUN` the thread checks the requested state and parks (pause) or returns (stop); a
//! signal ([`kick_signal`]) interrupts a `KVM_RUN` in progress.
//!
//! The vCPU fd sits behind a mutex the thread holds only around `KVM_RUN`: once the VM is paused
//! (every vCPU parked), the VMM locks the fds to read or write the vCPUs' state (migration).

use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::thread::JoinHandle;

use kvm_bindings::{KVM_MAX_CPUID_ENTRIES, KVM_SYSTEM_EVENT_RESET, KVM_SYSTEM_EVENT_SHUTDOWN};
use kvm_ioctls::{VcpuExit, VcpuFd};
use log::{debug, warn};

use super::state::{save_vcpu, KvmStateError};
use super::vm::Vm;
use crate::arch::{cpuid, msr, regs};
use crate::devices::bus::Bus;
use crate::lifecycle::{Requested, RunControl, VmExit};

const APIC_LVT0: usize = 0x350;
const APIC_LVT1: usize = 0x360;
const APIC_MODE_EXTINT: u32 = 0x7 << 8;
const APIC_MODE_NMI: u32 = 0x4 << 8;

/// Configuring a vCPU failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigureVcpuError {
    #[error("create vCPU {0}")]
    Create(u8, #[source] kvm_ioctls::Error),
    #[error("get KVM's supported CPUID")]
    GetSupportedCpuid(#[source] kvm_ioctls::Error),
    #[error("set CPUID")]
    SetCpuid(#[source] kvm_ioctls::Error),
    #[error("build MSR list")]
    BuildMsrs(#[source] vmm_sys_util::fam::Error),
    #[error("set MSRs")]
    SetMsrs(#[source] kvm_ioctls::Error),
    #[error("KVM set only {set} of {expected} boot MSRs")]
    SetMsrsPartial { set: usize, expected: usize },
    #[error("get special registers")]
    GetSregs(#[source] kvm_ioctls::Error),
    #[error("set special registers")]
    SetSregs(#[source] kvm_ioctls::Error),
    #[error("set registers")]
    SetRegs(#[source] kvm_ioctls::Error),
    #[error("set FPU")]
    SetFpu(#[source] kvm_ioctls::Error),
    #[error("get local APIC")]
    GetLapic(#[source] kvm_ioctls::Error),
    #[error("set local APIC")]
    SetLapic(#[source] kvm_ioctls::Error),
    #[error("save the power-on state")]
    PowerOnState(#[source] KvmStateError),
}

/// A vCPU fd shared between its thread and the VMM.
pub type SharedVcpuFd = Arc<Mutex<VcpuFd>>;

/// Locks a vCPU fd; a poisoned lock (a thread panicked holding it) ends the process
/// ([`crate::poison`]).
pub fn lock_vcpu(fd: &SharedVcpuFd) -> MutexGuard<'_, VcpuFd> {
    fd.lock().unwrap_or_else(crate::poison::fatal)
}

/// One configured vCPU and what its run loop routes exits to.
pub struct Vcpu {
    pub id: u8,
    fd: SharedVcpuFd,
    /// The vCPU's state as KVM created it (CPUID set, nothing else), for a reset in place.
    power_on: Vec<u8>,
    pio: Arc<Bus>,
    mmio: Arc<Bus>,
    control: Arc<RunControl>,
}

impl Vcpu {
    /// Creates vCPU `id` of `count` and sets it up to start at the 64-bit `entry`.
    pub fn new(
        vm: &Vm,
        id: u8,
        count: u8,
        entry: u64,
        buses: (Arc<Bus>, Arc<Bus>),
        control: Arc<RunControl>,
    ) -> Result<Vcpu, ConfigureVcpuError> {
        let vcpu = Vcpu::create(vm, id, count, buses, control)?;
        vcpu.configure_boot(entry)?;
        Ok(vcpu)
    }

    /// Creates vCPU `id` of `count` with its CPUID set and nothing else (a migration target then
    /// sets the source's state), and saves that power-on state for a reset in place.
    pub fn create(
        vm: &Vm,
        id: u8,
        count: u8,
        buses: (Arc<Bus>, Arc<Bus>),
        control: Arc<RunControl>,
    ) -> Result<Vcpu, ConfigureVcpuError> {
        let fd = vm
            .fd
            .create_vcpu(u64::from(id))
            .map_err(|e| ConfigureVcpuError::Create(id, e))?;
        let mut cpuid = vm
            .kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(ConfigureVcpuError::GetSupportedCpuid)?;
        cpuid::filter(&mut cpuid, id, count);
        fd.set_cpuid2(&cpuid)
            .map_err(ConfigureVcpuError::SetCpuid)?;
        let power_on = vm
            .msr_indices(&fd)
            .and_then(|msrs| save_vcpu(&fd, usize::from(id), &msrs))
            .map_err(ConfigureVcpuError::PowerOnState)?;
        Ok(Vcpu {
            id,
            fd: Arc::new(Mutex::new(fd)),
            power_on,
            pio: buses.0,
            mmio: buses.1,
            control,
        })
    }

    /// The fd, shared with the VMM.
    pub fn fd(&self) -> SharedVcpuFd {
        self.fd.clone()
    }

    /// The state [`Vcpu::create`] saved (as [`save_vcpu`] writes it).
    pub fn power_on_state(&self) -> &[u8] {
        &self.power_on
    }

    fn configure_boot(&self, entry: u64) -> Result<(), ConfigureVcpuError> {
        configure_boot(&lock_vcpu(&self.fd), entry)
    }

    /// Starts the vCPU thread; it installs the vCPU seccomp filter ([`crate::seccomp`]) before
    /// its first `KVM_RUN` unless the filters are off.
    pub fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        register_kick_handler();
        let filter = crate::seccomp::enabled();
        std::thread::Builder::new()
            .name(format!("vcpu{}", self.id))
            .spawn(move || self.run(filter))
    }

    fn run(mut self, filter: bool) {
        if filter {
            if let Err(e) = crate::seccomp::install(crate::seccomp::ThreadKind::Vcpu) {
                let e = crate::error::error_chain(&e);
                self.control
                    .request_exit(VmExit::Error(format!("vcpu{}: {e}", self.id)));
            }
        }
        while self.wait_until_runnable() {
            if let Some(exit) = self.run_once() {
                self.control.request_exit(exit);
            }
        }
        self.control.lock().live_vcpus -= 1;
        self.control.notify();
    }

    /// Parks while paused or while a reset in place is pending; returns false once the VM is
    /// to stop.
    fn wait_until_runnable(&self) -> bool {
        let mut state = self.control.lock();
        loop {
            match state.requested {
                Requested::Run if !state.reset_pending => return true,
                Requested::Stop => return false,
                Requested::Run | Requested::Pause => {
                    state.parked_vcpus += 1;
                    self.control.notify();
                    state = self.control.wait(state);
                    state.parked_vcpus -= 1;
                }
            }
        }
    }

    /// One `KVM_RUN`; returns why the VM must stop, if it must.
    fn run_once(&mut self) -> Option<VmExit> {
        let shared = self.fd.clone();
        let mut fd = lock_vcpu(&shared);
        match fd.run() {
            Ok(VcpuExit::IoIn(port, data)) => {
                if !self.pio.read(u64::from(port), data) {
                    data.fill(0xff);
                }
                None
            }
            Ok(VcpuExit::IoOut(port, data)) => {
                if !self.pio.write(u64::from(port), data) {
                    debug!("vcpu{}: write to unhandled port {port:#x}", self.id);
                }
                None
            }
            Ok(VcpuExit::MmioRead(addr, data)) => {
                if !self.mmio.read(addr, data) {
                    data.fill(0);
                }
                None
            }
            Ok(VcpuExit::MmioWrite(addr, data)) => {
                if !self.mmio.write(addr, data) {
                    debug!("vcpu{}: write to unhandled MMIO {addr:#x}", self.id);
                }
                None
            }
            Ok(VcpuExit::Hlt) => None,
            Ok(VcpuExit::Shutdown) => Some(VmExit::TripleFault),
            Ok(VcpuExit::SystemEvent(kind, _)) => Some(match kind {
                KVM_SYSTEM_EVENT_SHUTDOWN => VmExit::PowerOff { code: 0 },
                KVM_SYSTEM_EVENT_RESET => VmExit::Reset,
                other => VmExit::Error(format!("vcpu{}: system event {other}", self.id)),
            }),
            Ok(VcpuExit::FailEntry(reason, cpu)) => Some(VmExit::Error(format!(
                "vcpu{}: entry failed, hardware reason {reason:#x} on cpu {cpu}",
                self.id
            ))),
            Ok(VcpuExit::InternalError) => {
                let suberror = internal_error_suberror(&mut fd);
                Some(VmExit::Error(format!(
                    "vcpu{}: KVM internal error, suberror {suberror} (1: instruction emulation failed)",
                    self.id
                )))
            }
            Ok(other) => Some(VmExit::Error(format!(
                "vcpu{}: unexpected exit {other:?}",
                self.id
            ))),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => None,
            Err(e) => {
                warn!("vcpu{}: KVM_RUN failed: {e}", self.id);
                Some(VmExit::Error(format!("vcpu{}: KVM_RUN: {e}", self.id)))
            }
        }
    }
}

/// Sets a vCPU up for the 64-bit boot entry: boot MSRs, long mode, registers at `entry`, FPU,
/// LAPIC LINT0/LINT1 (at boot and after a reset in place).
pub fn configure_boot(fd: &VcpuFd, entry: u64) -> Result<(), ConfigureVcpuError> {
    let msrs = msr::boot_msrs().map_err(ConfigureVcpuError::BuildMsrs)?;
    let set = fd.set_msrs(&msrs).map_err(ConfigureVcpuError::SetMsrs)?;
    if set != msrs.as_slice().len() {
        return Err(ConfigureVcpuError::SetMsrsPartial {
            set,
            expected: msrs.as_slice().len(),
        });
    }

    let mut sregs = fd.get_sregs().map_err(ConfigureVcpuError::GetSregs)?;
    regs::long_mode_sregs(&mut sregs);
    fd.set_sregs(&sregs).map_err(ConfigureVcpuError::SetSregs)?;
    fd.set_regs(&regs::boot_regs(entry))
        .map_err(ConfigureVcpuError::SetRegs)?;
    fd.set_fpu(&regs::boot_fpu())
        .map_err(ConfigureVcpuError::SetFpu)?;

    let mut lapic = fd.get_lapic().map_err(ConfigureVcpuError::GetLapic)?;
    set_lapic_reg(&mut lapic.regs, APIC_LVT0, APIC_MODE_EXTINT);
    set_lapic_reg(&mut lapic.regs, APIC_LVT1, APIC_MODE_NMI);
    fd.set_lapic(&lapic).map_err(ConfigureVcpuError::SetLapic)?;
    Ok(())
}

fn internal_error_suberror(fd: &mut VcpuFd) -> u32 {
    let run = fd.get_kvm_run();
    // SAFETY: called right after KVM_RUN returned KVM_EXIT_INTERNAL_ERROR, so `internal` is
    // the member of the exit union KVM filled in; it is plain integers.
    unsafe { run.__bindgen_anon_1.internal.suberror }
}

fn set_lapic_reg(regs: &mut [libc::c_char; 1024], offset: usize, value: u32) {
    for (i, byte) in value.to_le_bytes().iter().enumerate() {
        regs[offset + i] = *byte as libc::c_char;
    }
}

/// The signal that interrupts a vCPU thread's `KVM_RUN`.
pub fn kick_signal() -> libc::c_int {
    vmm_sys_util::signal::SIGRTMIN() + 1
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

fn register_kick_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Err(e) = vmm_sys_util::signal::register_signal_handler(kick_signal(), on_kick) {
            warn!("cannot register the vCPU kick signal handler: {e}");
        }
    });
}
