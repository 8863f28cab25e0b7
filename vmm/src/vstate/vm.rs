//! The KVM VM: memory slots, KVM's TSS, the in-kernel irqchip (PIC + IOAPIC + LAPICs) and PIT,
//! created in the order KVM requires (irqchip before vCPUs).

use crate::vstate::memory::GuestMemoryMmap;
use kvm_bindings::{kvm_pit_config, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use std::sync::Mutex;

use super::memory::{register_with_kvm, MemoryError};
use super::state::{migratable_msrs, KvmStateError};
use crate::arch::KVM_TSS_ADDRESS;

/// Creating the VM failed.
#[derive(Debug, thiserror::Error)]
pub enum CreateVmError {
    #[error("open /dev/kvm")]
    OpenKvm(#[source] kvm_ioctls::Error),
    #[error("create VM")]
    CreateVm(#[source] kvm_ioctls::Error),
    #[error("register guest memory")]
    Memory(#[source] MemoryError),
    #[error("set TSS address")]
    SetTssAddress(#[source] kvm_ioctls::Error),
    #[error("create in-kernel irqchip")]
    CreateIrqChip(#[source] kvm_ioctls::Error),
    #[error("create PIT")]
    CreatePit(#[source] kvm_ioctls::Error),
}

/// A KVM VM with its memory registered and interrupt controllers created.
pub struct Vm {
    pub kvm: Kvm,
    pub fd: VmFd,
    /// The MSRs a vCPU's saved state carries, probed on the first vCPU.
    msr_indices: Mutex<Option<Vec<u32>>>,
}

impl Vm {
    pub fn new(mem: &GuestMemoryMmap) -> Result<Vm, CreateVmError> {
        let kvm = Kvm::new().map_err(CreateVmError::OpenKvm)?;
        let fd = kvm.create_vm().map_err(CreateVmError::CreateVm)?;
        register_with_kvm(&fd, mem).map_err(CreateVmError::Memory)?;
        fd.set_tss_address(KVM_TSS_ADDRESS as usize)
            .map_err(CreateVmError::SetTssAddress)?;
        fd.create_irq_chip().map_err(CreateVmError::CreateIrqChip)?;
        let pit = kvm_pit_config {
            flags: KVM_PIT_SPEAKER_DUMMY,
            ..Default::default()
        };
        fd.create_pit2(pit).map_err(CreateVmError::CreatePit)?;
        Ok(Vm {
            kvm,
            fd,
            msr_indices: Mutex::new(None),
        })
    }

    /// The MSRs a vCPU's saved state carries ([`migratable_msrs`]), probed on `vcpu` the first
    /// time and the same for every vCPU of the VM.
    pub fn msr_indices(&self, vcpu: &VcpuFd) -> Result<Vec<u32>, KvmStateError> {
        let mut cached = self.msr_indices.lock().unwrap_or_else(crate::poison::fatal);
        if let Some(indices) = cached.as_ref() {
            return Ok(indices.clone());
        }
        let indices = migratable_msrs(&self.kvm, vcpu)?;
        *cached = Some(indices.clone());
        Ok(indices)
    }
}
