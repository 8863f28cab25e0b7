//! CPUID for a vCPU: KVM's supported set, filtered for a microVM.
//!
//! Per vCPU: the initial APIC id (leaf 1 EBX[31:24], leaves 0xb/0x1f EDX), the logical processor
//! count and HTT flag, the hypervisor bit (leaf 1 ECX[31]); the PMU leaf (0xa) is zeroed since
//! no PMU is virtualized.

use kvm_bindings::CpuId;

const LEAF_FEATURES: u32 = 1;
const LEAF_PMU: u32 = 0xa;
const LEAF_TOPOLOGY: u32 = 0xb;
const LEAF_TOPOLOGY_V2: u32 = 0x1f;
const ECX_HYPERVISOR: u32 = 1 << 31;
const EDX_HTT: u32 = 1 << 28;

/// Filters `cpuid` (KVM's supported set) for vCPU `id` of `count`.
pub fn filter(cpuid: &mut CpuId, id: u8, count: u8) {
    for entry in cpuid.as_mut_slice() {
        match entry.function {
            LEAF_FEATURES => {
                entry.ebx = (entry.ebx & 0x0000_ffff) | (u32::from(id) << 24);
                entry.ebx |= u32::from(count) << 16;
                entry.ecx |= ECX_HYPERVISOR;
                if count > 1 {
                    entry.edx |= EDX_HTT;
                } else {
                    entry.edx &= !EDX_HTT;
                }
            }
            LEAF_PMU => {
                entry.eax = 0;
                entry.ebx = 0;
                entry.ecx = 0;
                entry.edx = 0;
            }
            LEAF_TOPOLOGY | LEAF_TOPOLOGY_V2 => entry.edx = u32::from(id),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::kvm_cpuid_entry2;

    #[test]
    fn apic_id_and_hypervisor_bit() {
        let mut cpuid = CpuId::from_entries(&[
            kvm_cpuid_entry2 {
                function: 1,
                ebx: 0xff00_0800,
                edx: EDX_HTT,
                ..Default::default()
            },
            kvm_cpuid_entry2 {
                function: 0xa,
                eax: 7,
                ..Default::default()
            },
            kvm_cpuid_entry2 {
                function: 0xb,
                edx: 9,
                ..Default::default()
            },
        ])
        .unwrap();
        filter(&mut cpuid, 3, 1);
        let e = cpuid.as_slice();
        assert_eq!(e[0].ebx >> 24, 3);
        assert_eq!((e[0].ebx >> 16) & 0xff, 1);
        assert_eq!(e[0].ebx & 0xffff, 0x0800);
        assert_ne!(e[0].ecx & ECX_HYPERVISOR, 0);
        assert_eq!(e[0].edx & EDX_HTT, 0);
        assert_eq!(e[1].eax, 0);
        assert_eq!(e[2].edx, 3);
    }
}
