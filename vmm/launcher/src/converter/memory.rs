//! Guest memory: `spec.domain.memory.guest` (defaulting fills it from the resource requests),
//! as the VM boots with it ([`contract::limits::boot_memory_bytes`]): rounded up to whole MiB
//! so that every backend can express it, and at least what the backends run a VM with
//! (`vmm::config::MIN_MEMORY_BYTES`): KubeVirt admits 1M, its guestless VMIs ask for 1Mi. The
//! VMI keeps what it asked; the domain's stats report what the guest got.

use api::VirtualMachineInstanceSpec;
use contract::limits::boot_memory_bytes;
use vmm::config::MemoryConfig;

use super::FieldProblem;

/// The guest memory of the VM.
pub fn memory(spec: &VirtualMachineInstanceSpec) -> Result<MemoryConfig, FieldProblem> {
    const PATH: &str = "spec.domain.memory.guest";
    let quantity = spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.guest.as_ref())
        .ok_or_else(|| {
            FieldProblem::new(
                PATH,
                "the guest memory is not set (nor resources.requests.memory)",
            )
        })?;
    let bytes =
        api::quantity::to_u64(quantity).map_err(|e| FieldProblem::new(PATH, e.to_string()))?;
    if bytes == 0 {
        return Err(FieldProblem::new(PATH, "0 bytes: the guest needs memory"));
    }
    let size = boot_memory_bytes(bytes)
        .ok_or_else(|| FieldProblem::new(PATH, format!("{} is too large", quantity.0)))?;
    Ok(MemoryConfig { size })
}

#[cfg(test)]
mod tests {
    use api::domain::Memory;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn spec(guest: Option<&str>) -> VirtualMachineInstanceSpec {
        let mut spec = VirtualMachineInstanceSpec::default();
        spec.domain.memory = Some(Memory {
            guest: guest.map(|g| Quantity(g.to_string())),
            ..Memory::default()
        });
        spec
    }

    #[test]
    fn sizes_round_up_to_mib() {
        let cases = [
            ("128Mi", 128 * MIB),
            ("1Gi", 1024 * MIB),
            ("64M", 62 * MIB),
            ("100000000", 96 * MIB),
        ];
        for (guest, want) in cases {
            assert_eq!(memory(&spec(Some(guest))).unwrap().size, want, "{guest}");
        }
    }

    #[test]
    fn less_than_the_backends_need_is_rounded_up_to_their_minimum() {
        use vmm::config::MIN_MEMORY_BYTES;
        for guest in ["1", "1M", "1Mi", "8Mi", "16000000", "16Mi"] {
            assert_eq!(
                memory(&spec(Some(guest))).unwrap().size,
                MIN_MEMORY_BYTES,
                "{guest}"
            );
        }
        assert_eq!(memory(&spec(Some("17M"))).unwrap().size, 17 * MIB);
    }

    #[test]
    fn missing_zero_or_bad_memory_names_the_field() {
        for guest in [None, Some("0"), Some("lots"), Some("-1Gi")] {
            let err = memory(&spec(guest)).unwrap_err();
            assert_eq!(err.path, "spec.domain.memory.guest", "{guest:?}");
        }
        let mut no_memory = VirtualMachineInstanceSpec::default();
        no_memory.domain.memory = None;
        assert!(memory(&no_memory).is_err());
    }
}
