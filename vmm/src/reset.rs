//! Hardware reset in place, as KubeVirt's `reset` and a rebooting guest expect: the VM restarts
//! in the same process with the same memory, devices and sockets.
//!
//! A reset is asked for by [`crate::vmm::Vmm::reset`] (the host), or by the guest (the i8042
//! reset line, a KVM reset event, a triple fault) when the [`ResetPolicy`] says so; either way
//! `reset_pending` is set in the [`RunControl`]. The VMM's reset thread then:
//!
//! 1. waits while a live migration is under way (it alone pauses and resumes the vCPUs), and a
//!    migration that starts during a reset waits for the reset to end;
//! 2. parks every vCPU (they park on `reset_pending` as for a pause; the thread kicks them out
//!    of `KVM_RUN`);
//! 3. resets the devices: each virtio transport as a driver reset does (workers stopped, queues
//!    and status cleared; on PCI also the configuration space, BARs back where the VMM put
//!    them, and MSI-X), COM1's registers (its console stays), the i8042, the ACPI PM registers;
//! 4. puts the in-kernel PICs, IOAPIC, PIT and KVM clock back to their state when the VM was
//!    created;
//! 5. reloads the kernel, initramfs and command line from the config's files and rewrites the
//!    ACPI tables, zero page and boot tables (guest RAM is otherwise left as it was, as on real
//!    hardware);
//! 6. puts every vCPU back to the state KVM created it in (registers, MSRs such as kvmclock's,
//!    LAPIC, FPU, events, MP state) and configures it for the boot entry again;
//! 7. clears `reset_pending` and counts the reset: the vCPUs run from the boot entry (or stay
//!    parked, if the VM is paused).
//!
//! A reset that fails (the kernel file is gone, KVM refuses a state) ends the VM with
//! [`VmExit::Error`] saying which step failed.
//!
//! [`ResetPolicy`]: crate::lifecycle::ResetPolicy

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use log::info;

use crate::config::PayloadConfig;
use crate::error::error_chain;
use crate::guest_memory::GuestMemoryMmap;
use crate::lifecycle::{Requested, RunControl, VmExit};
use crate::payload::{load_payload, PayloadError, Platform};
use crate::smbios::SmbiosTables;
use crate::vmm::{Devices, VcpuThreads, KICK_INTERVAL};
use crate::vstate::state::{restore_vcpu, restore_vm, RestoreStateError};
use crate::vstate::vcpu::{configure_boot, lock_vcpu, ConfigureVcpuError, SharedVcpuFd};
use crate::vstate::vm::Vm;

/// A reset in place failed at this step.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    #[error("reset COM1")]
    Serial(#[source] std::io::Error),
    #[error("restore the interrupt controllers, PIT and clock")]
    Vm(#[source] RestoreStateError),
    #[error("reload the kernel")]
    Payload(#[source] PayloadError),
    #[error("restore vCPU {0}'s power-on state")]
    VcpuState(usize, #[source] RestoreStateError),
    #[error("configure vCPU {0} for boot")]
    VcpuBoot(usize, #[source] ConfigureVcpuError),
}

/// What a reset goes back to, saved when the machine was built.
pub(crate) struct PowerOnState {
    /// PICs, IOAPIC, PIT and clock as the VM was created (`state::save_vm`).
    pub vm: Vec<u8>,
    /// Each vCPU as KVM created it (`state::save_vcpu`), by vCPU id.
    pub vcpus: Vec<Vec<u8>>,
    pub payload: PayloadConfig,
    pub memory_size: u64,
    /// The virtio-mmio windows announced on the command line, or the ACPI tables.
    pub platform: Platform,
    /// The SMBIOS tables, when the VM has them.
    pub smbios: Option<SmbiosTables>,
}

/// Everything the reset thread works on.
pub(crate) struct ResetWorker {
    pub control: Arc<RunControl>,
    pub threads: Arc<VcpuThreads>,
    pub vcpu_fds: Vec<SharedVcpuFd>,
    pub vm: Arc<Vm>,
    pub mem: GuestMemoryMmap,
    pub devices: Devices,
    pub power_on: PowerOnState,
    pub migrating: Arc<AtomicBool>,
}

impl ResetWorker {
    /// Starts the reset thread; it ends when the VM stops.
    pub fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("vm-reset".into())
            .spawn(move || self.run())
    }

    fn run(self) {
        while self.wait_for_request() {
            let result = if self.park_vcpus() {
                self.reset()
            } else {
                Ok(())
            };
            let mut state = self.control.lock();
            state.resetting = false;
            match result {
                Ok(()) if state.exit.is_none() => {
                    state.reset_pending = false;
                    state.resets += 1;
                    info!("VM reset in place (reset {})", state.resets);
                    drop(state);
                    self.control.notify();
                }
                Ok(()) => {
                    drop(state);
                    self.control.notify();
                }
                Err(e) => {
                    drop(state);
                    self.control
                        .request_exit(VmExit::Error(format!("reset: {}", error_chain(&e))));
                }
            }
        }
    }

    /// Waits for a reset request with no migration under way and marks the reset as begun
    /// (under the run-state lock, so that a migration starting now waits for it: see
    /// [`RunControl::wait_for_reset`]); false once the VM stops.
    fn wait_for_request(&self) -> bool {
        let mut state = self.control.lock();
        loop {
            if state.exit.is_some() || state.requested == Requested::Stop {
                return false;
            }
            if state.reset_pending && !self.migrating.load(Ordering::SeqCst) {
                state.resetting = true;
                return true;
            }
            // A migration does not notify when it ends: look again after a while.
            state = self.control.wait_timeout(state, KICK_INTERVAL * 20);
        }
    }

    /// Kicks the vCPUs until every live one is parked; false once the VM stops.
    fn park_vcpus(&self) -> bool {
        let mut state = self.control.lock();
        loop {
            if state.exit.is_some() || state.requested == Requested::Stop {
                return false;
            }
            if state.parked_vcpus >= state.live_vcpus {
                return true;
            }
            drop(state);
            self.threads.kick();
            state = self.control.lock();
            state = self.control.wait_timeout(state, KICK_INTERVAL);
        }
    }

    /// Steps 3 to 6 (every vCPU is parked).
    fn reset(&self) -> Result<(), ResetError> {
        for transport in &self.devices.virtio {
            transport
                .lock()
                .unwrap_or_else(crate::poison::fatal)
                .hardware_reset();
        }
        self.devices
            .serial
            .lock()
            .unwrap_or_else(crate::poison::fatal)
            .reset()
            .map_err(ResetError::Serial)?;
        self.devices
            .i8042
            .lock()
            .unwrap_or_else(crate::poison::fatal)
            .reset();
        if let Some(pci) = &self.devices.pci {
            pci.acpi_pm().reset();
            let mut root = pci.root();
            root.reset_host_bridge();
            root.sync_all();
        }
        restore_vm(&self.vm.fd, &self.power_on.vm).map_err(ResetError::Vm)?;
        let entry = load_payload(
            &self.mem,
            &self.power_on.payload,
            self.power_on.memory_size,
            &self.power_on.platform,
            self.power_on.smbios.as_ref(),
        )
        .map_err(ResetError::Payload)?;
        for (id, (fd, state)) in self.vcpu_fds.iter().zip(&self.power_on.vcpus).enumerate() {
            let fd = lock_vcpu(fd);
            restore_vcpu(&fd, id, state).map_err(|e| ResetError::VcpuState(id, e))?;
            configure_boot(&fd, entry).map_err(|e| ResetError::VcpuBoot(id, e))?;
        }
        Ok(())
    }
}
