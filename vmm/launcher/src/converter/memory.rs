//! Guest memory: `spec.domain.memory.guest` (defaulting fills it from the resource requests),
//! rounded up to whole MiB so that every backend can express it.

use api::VirtualMachineInstanceSpec;
use vmm::config::{MemoryConfig, MIN_MEMORY_BYTES};

use super::FieldProblem;

const MIB: u64 = 1 << 20;

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
    if bytes < MIN_MEMORY_BYTES {
        return Err(FieldProblem::new(
            PATH,
            format!(
                "{} is less than the {} MiB a guest needs",
                quantity.0,
                MIN_MEMORY_BYTES / MIB
            ),
        ));
    }
    let size = bytes
        .checked_next_multiple_of(MIB)
        .ok_or_else(|| FieldProblem::new(PATH, format!("{} is too large", quantity.0)))?;
    Ok(MemoryConfig { size })
}

#[cfg(test)]
mod tests {
    use api::domain::Memory;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

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
    fn missing_small_or_bad_memory_names_the_field() {
        for guest in [None, Some("1Mi"), Some("lots"), Some("-1Gi")] {
            let err = memory(&spec(guest)).unwrap_err();
            assert_eq!(err.path, "spec.domain.memory.guest", "{guest:?}");
        }
        let mut no_memory = VirtualMachineInstanceSpec::default();
        no_memory.domain.memory = None;
        assert!(memory(&no_memory).is_err());
    }
}
