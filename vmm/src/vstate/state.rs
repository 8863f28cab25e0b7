//! Saving and restoring the KVM state of the vCPUs and of the VM, as records a migration's
//! STATE section carries and a reset in place goes back to (the power-on state).
//!
//! A vCPU is a list of records `(kind u16, bytes)`: the KVM structs as KVM returns them (plain
//! integer structs copied byte for byte), MSRs as `(index, value)` pairs. Restore sets them in
//! the order KVM needs: MP state, registers, special registers, xsave, XCRs, debug registers,
//! LAPIC, MSRs, pending events. The VM part is the PIC pair, the IOAPIC, the PIT and the KVM
//! clock. The records are encoded with [`crate::wire`].
//!
//! Every ioctl that fails is reported by name with KVM's errno; nothing is skipped silently.

use kvm_bindings::{
    kvm_clock_data, kvm_debugregs, kvm_fpu, kvm_irqchip, kvm_lapic_state, kvm_mp_state,
    kvm_msr_entry, kvm_pit_state2, kvm_regs, kvm_sregs, kvm_vcpu_events, kvm_xcrs, kvm_xsave, Msrs,
    KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE,
};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};

use crate::wire::{Decoder, Encoder, WireError};

/// A KVM ioctl that saves or restores state (for a migration or a reset) failed.
#[derive(Debug, thiserror::Error)]
#[error("{ioctl} on {on}: errno {errno} ({source})")]
pub struct KvmStateError {
    pub ioctl: &'static str,
    pub on: String,
    pub errno: i32,
    #[source]
    pub source: kvm_ioctls::Error,
}

fn kvm_err(
    ioctl: &'static str,
    on: impl Into<String>,
) -> impl FnOnce(kvm_ioctls::Error) -> KvmStateError {
    let on = on.into();
    move |source| KvmStateError {
        ioctl,
        on,
        errno: source.errno(),
        source,
    }
}

/// KVM structs that are plain integers (arrays and unions of integers included) with explicit
/// padding fields only.
///
/// # Safety
/// Implementors must have no implicit padding and accept every bit pattern.
unsafe trait Pod: Sized {
    fn zeroed() -> Self;
}

macro_rules! pod {
    ($($t:ty),*) => {$(
        // SAFETY: bindgen-generated KVM UAPI struct of integers with explicit padding fields.
        unsafe impl Pod for $t {
            fn zeroed() -> Self {
                // SAFETY: every bit pattern, all zeroes included, is a valid value (see Pod).
                unsafe { std::mem::zeroed() }
            }
        }
    )*};
}
pod!(
    kvm_regs,
    kvm_sregs,
    kvm_fpu,
    kvm_xsave,
    kvm_xcrs,
    kvm_lapic_state,
    kvm_vcpu_events,
    kvm_mp_state,
    kvm_debugregs,
    kvm_clock_data,
    kvm_irqchip,
    kvm_pit_state2
);

fn pod_bytes<T: Pod>(v: &T) -> Vec<u8> {
    // SAFETY: `T: Pod` has no implicit padding, so its `size_of::<T>()` bytes are initialized;
    // the slice lives only for this copy.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

fn pod_from<T: Pod>(bytes: &[u8], what: &str) -> Result<T, WireError> {
    let size = std::mem::size_of::<T>();
    if bytes.len() != size {
        return Err(WireError::Malformed {
            what: what.into(),
            why: format!("{} bytes where KVM's struct has {size}", bytes.len()),
        });
    }
    let mut v = T::zeroed();
    // SAFETY: `bytes` has exactly `size_of::<T>()` bytes, `v` is a distinct local of that size,
    // and any bit pattern is a valid `T` (Pod).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut v as *mut T).cast::<u8>(), size) };
    Ok(v)
}

const REC_REGS: u16 = 1;
const REC_SREGS: u16 = 2;
const REC_XSAVE: u16 = 4;
const REC_XCRS: u16 = 5;
const REC_LAPIC: u16 = 6;
const REC_MSRS: u16 = 7;
const REC_EVENTS: u16 = 8;
const REC_MP_STATE: u16 = 9;
const REC_DEBUGREGS: u16 = 10;
const REC_FPU: u16 = 11;

/// A `KVM_GET_MSRS` buffer asking for `indices`; `on` names it in the error when there are more
/// than a buffer holds.
fn msrs_to_read(indices: &[u32], on: String) -> Result<Msrs, KvmStateError> {
    let entries: Vec<kvm_msr_entry> = indices
        .iter()
        .map(|&index| kvm_msr_entry {
            index,
            ..Default::default()
        })
        .collect();
    Msrs::from_entries(&entries).map_err(|_| KvmStateError {
        ioctl: "KVM_GET_MSRS",
        on,
        errno: libc::E2BIG,
        source: kvm_ioctls::Error::new(libc::E2BIG),
    })
}

/// The MSRs a vCPU's state carries: KVM's list of saved MSRs, minus those this KVM will not
/// read back (probed on `fd`, one refused index at a time).
pub fn migratable_msrs(kvm: &Kvm, fd: &VcpuFd) -> Result<Vec<u32>, KvmStateError> {
    let list = kvm
        .get_msr_index_list()
        .map_err(kvm_err("KVM_GET_MSR_INDEX_LIST", "/dev/kvm"))?;
    let mut indices: Vec<u32> = list.as_slice().to_vec();
    loop {
        let mut msrs = msrs_to_read(&indices, format!("{} MSRs", indices.len()))?;
        let read = fd
            .get_msrs(&mut msrs)
            .map_err(kvm_err("KVM_GET_MSRS", "vCPU 0"))?;
        if read >= indices.len() {
            return Ok(indices);
        }
        // KVM stops at the first MSR it refuses: leave that one out and try again.
        log::info!(
            "migration: KVM does not read MSR {:#x}: left out",
            indices[read]
        );
        indices.remove(read);
    }
}

fn record(e: &mut Encoder, kind: u16, bytes: &[u8]) {
    e.u16(kind).bytes(bytes);
}

/// Saves vCPU `id`'s state (the vCPU must not be running).
pub fn save_vcpu(fd: &VcpuFd, id: usize, msr_indices: &[u32]) -> Result<Vec<u8>, KvmStateError> {
    let on = format!("vCPU {id}");
    let mut e = Encoder::default();
    let mp = fd
        .get_mp_state()
        .map_err(kvm_err("KVM_GET_MP_STATE", &on))?;
    record(&mut e, REC_MP_STATE, &pod_bytes(&mp));
    let regs = fd.get_regs().map_err(kvm_err("KVM_GET_REGS", &on))?;
    record(&mut e, REC_REGS, &pod_bytes(&regs));
    let sregs = fd.get_sregs().map_err(kvm_err("KVM_GET_SREGS", &on))?;
    record(&mut e, REC_SREGS, &pod_bytes(&sregs));
    let xsave = fd.get_xsave().map_err(kvm_err("KVM_GET_XSAVE", &on))?;
    record(&mut e, REC_XSAVE, &pod_bytes(&xsave));
    let xcrs = fd.get_xcrs().map_err(kvm_err("KVM_GET_XCRS", &on))?;
    record(&mut e, REC_XCRS, &pod_bytes(&xcrs));
    let dregs = fd
        .get_debug_regs()
        .map_err(kvm_err("KVM_GET_DEBUGREGS", &on))?;
    record(&mut e, REC_DEBUGREGS, &pod_bytes(&dregs));
    let lapic = fd.get_lapic().map_err(kvm_err("KVM_GET_LAPIC", &on))?;
    record(&mut e, REC_LAPIC, &pod_bytes(&lapic));
    let mut msrs = msrs_to_read(msr_indices, on.clone())?;
    let read = fd
        .get_msrs(&mut msrs)
        .map_err(kvm_err("KVM_GET_MSRS", &on))?;
    let mut m = Encoder::default();
    m.u32(read as u32);
    for entry in &msrs.as_slice()[..read] {
        m.u32(entry.index).u64(entry.data);
    }
    record(&mut e, REC_MSRS, &m.0);
    let events = fd
        .get_vcpu_events()
        .map_err(kvm_err("KVM_GET_VCPU_EVENTS", &on))?;
    record(&mut e, REC_EVENTS, &pod_bytes(&events));
    Ok(e.0)
}

/// Restoring a vCPU or the VM failed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreStateError {
    #[error("state")]
    Wire(#[from] WireError),
    #[error("KVM refused the state")]
    Kvm(#[from] KvmStateError),
    #[error("vCPU {id}: KVM set only {set} of {expected} MSRs (refused MSR {refused:#x})")]
    MsrsPartial {
        id: usize,
        set: usize,
        expected: usize,
        refused: u32,
    },
    #[error("vCPU {id}: record {kind} missing")]
    MissingRecord { id: usize, kind: &'static str },
}

/// Sets vCPU `id` to a state [`save_vcpu`] wrote.
pub fn restore_vcpu(fd: &VcpuFd, id: usize, bytes: &[u8]) -> Result<(), RestoreStateError> {
    let on = format!("vCPU {id}");
    let what = format!("state of vCPU {id}");
    let mut d = Decoder::new(bytes, what.clone());
    let mut records = std::collections::BTreeMap::new();
    while !d.is_empty() {
        let kind = d.u16()?;
        let data = d.bytes()?;
        records.insert(kind, data);
    }
    let get = |kind: u16, name: &'static str| {
        records
            .get(&kind)
            .copied()
            .ok_or(RestoreStateError::MissingRecord { id, kind: name })
    };
    let mp: kvm_mp_state = pod_from(get(REC_MP_STATE, "mp_state")?, &what)?;
    fd.set_mp_state(mp)
        .map_err(kvm_err("KVM_SET_MP_STATE", &on))?;
    let regs: kvm_regs = pod_from(get(REC_REGS, "regs")?, &what)?;
    fd.set_regs(&regs).map_err(kvm_err("KVM_SET_REGS", &on))?;
    let sregs: kvm_sregs = pod_from(get(REC_SREGS, "sregs")?, &what)?;
    fd.set_sregs(&sregs)
        .map_err(kvm_err("KVM_SET_SREGS", &on))?;
    if let Some(bytes) = records.get(&REC_XSAVE) {
        let xsave: kvm_xsave = pod_from(bytes, &what)?;
        // SAFETY: `xsave` is a legacy-size (4 KiB) region as KVM_GET_XSAVE returned it on a vCPU
        // with the same CPUID; KVM_SET_XSAVE reads exactly that many bytes.
        unsafe { fd.set_xsave(&xsave) }.map_err(kvm_err("KVM_SET_XSAVE", &on))?;
    } else if let Some(bytes) = records.get(&REC_FPU) {
        let fpu: kvm_fpu = pod_from(bytes, &what)?;
        fd.set_fpu(&fpu).map_err(kvm_err("KVM_SET_FPU", &on))?;
    }
    if let Some(bytes) = records.get(&REC_XCRS) {
        let xcrs: kvm_xcrs = pod_from(bytes, &what)?;
        fd.set_xcrs(&xcrs).map_err(kvm_err("KVM_SET_XCRS", &on))?;
    }
    if let Some(bytes) = records.get(&REC_DEBUGREGS) {
        let dregs: kvm_debugregs = pod_from(bytes, &what)?;
        fd.set_debug_regs(&dregs)
            .map_err(kvm_err("KVM_SET_DEBUGREGS", &on))?;
    }
    let lapic: kvm_lapic_state = pod_from(get(REC_LAPIC, "lapic")?, &what)?;
    fd.set_lapic(&lapic)
        .map_err(kvm_err("KVM_SET_LAPIC", &on))?;
    let mut m = Decoder::new(get(REC_MSRS, "msrs")?, format!("MSRs of vCPU {id}"));
    let count = m.u32()? as usize;
    let mut entries = Vec::with_capacity(count.min(4096));
    for _ in 0..count {
        let index = m.u32()?;
        let data = m.u64()?;
        entries.push(kvm_msr_entry {
            index,
            data,
            ..Default::default()
        });
    }
    m.finish()?;
    let msrs = Msrs::from_entries(&entries).map_err(|_| m.malformed("too many MSRs"))?;
    let set = fd.set_msrs(&msrs).map_err(kvm_err("KVM_SET_MSRS", &on))?;
    if set != entries.len() {
        return Err(RestoreStateError::MsrsPartial {
            id,
            set,
            expected: entries.len(),
            refused: entries[set].index,
        });
    }
    let events: kvm_vcpu_events = pod_from(get(REC_EVENTS, "vcpu_events")?, &what)?;
    fd.set_vcpu_events(&events)
        .map_err(kvm_err("KVM_SET_VCPU_EVENTS", &on))?;
    Ok(())
}

const CHIPS: [u32; 3] = [
    KVM_IRQCHIP_PIC_MASTER,
    KVM_IRQCHIP_PIC_SLAVE,
    KVM_IRQCHIP_IOAPIC,
];

/// Saves the in-kernel PICs and IOAPIC, the PIT and the KVM clock.
pub fn save_vm(vm: &VmFd) -> Result<Vec<u8>, KvmStateError> {
    let mut e = Encoder::default();
    for chip_id in CHIPS {
        let mut chip = kvm_irqchip {
            chip_id,
            ..kvm_irqchip::zeroed()
        };
        vm.get_irqchip(&mut chip)
            .map_err(kvm_err("KVM_GET_IRQCHIP", format!("chip {chip_id}")))?;
        e.bytes(&pod_bytes(&chip));
    }
    let pit = vm.get_pit2().map_err(kvm_err("KVM_GET_PIT2", "VM"))?;
    e.bytes(&pod_bytes(&pit));
    let clock = vm.get_clock().map_err(kvm_err("KVM_GET_CLOCK", "VM"))?;
    e.bytes(&pod_bytes(&clock));
    Ok(e.0)
}

/// Sets the VM's interrupt controllers, PIT and clock to what [`save_vm`] wrote.
pub fn restore_vm(vm: &VmFd, bytes: &[u8]) -> Result<(), RestoreStateError> {
    let what = "VM state";
    let mut d = Decoder::new(bytes, what);
    for chip_id in CHIPS {
        let chip: kvm_irqchip = pod_from(d.bytes()?, what)?;
        if chip.chip_id != chip_id {
            return Err(d
                .malformed(format!("chip {} where {chip_id} belongs", chip.chip_id))
                .into());
        }
        vm.set_irqchip(&chip)
            .map_err(kvm_err("KVM_SET_IRQCHIP", format!("chip {chip_id}")))?;
    }
    let pit: kvm_pit_state2 = pod_from(d.bytes()?, what)?;
    vm.set_pit2(&pit).map_err(kvm_err("KVM_SET_PIT2", "VM"))?;
    let mut clock: kvm_clock_data = pod_from(d.bytes()?, what)?;
    d.finish()?;
    // Only the clock value moves; the source's flags (TSC stable, host TSC) describe its host.
    clock.flags = 0;
    vm.set_clock(&clock)
        .map_err(kvm_err("KVM_SET_CLOCK", "VM"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_length_is_checked() {
        let regs = kvm_regs {
            rip: 0x1234,
            ..Default::default()
        };
        let bytes = pod_bytes(&regs);
        let back: kvm_regs = pod_from(&bytes, "regs").unwrap();
        assert_eq!(back.rip, 0x1234);
        assert!(pod_from::<kvm_regs>(&bytes[1..], "regs").is_err());
    }
}
