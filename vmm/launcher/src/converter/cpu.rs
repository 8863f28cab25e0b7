//! vCPUs: `spec.domain.cpu` cores x sockets x threads, all booted (no CPU hotplug); a count of
//! 0 is an unset one, 1, as in KubeVirt.

use api::VirtualMachineInstanceSpec;
use vmm::config::{CpusConfig, MAX_VCPUS};

use super::FieldProblem;

/// The vCPUs of the VM.
pub fn cpus(spec: &VirtualMachineInstanceSpec) -> Result<CpusConfig, FieldProblem> {
    let count = spec.domain.cpu.as_ref().map_or(1, |cpu| cpu.vcpus());
    let count = u8::try_from(count)
        .ok()
        .filter(|n| *n <= MAX_VCPUS)
        .ok_or_else(|| {
            FieldProblem::new(
                "spec.domain.cpu",
                format!("{count} vCPUs (cores x sockets x threads) are more than the {MAX_VCPUS} a VM can have"),
            )
        })?;
    Ok(CpusConfig {
        boot_vcpus: count,
        max_vcpus: count,
    })
}

#[cfg(test)]
mod tests {
    use api::domain::Cpu;

    use super::*;

    fn spec(cpu: Option<Cpu>) -> VirtualMachineInstanceSpec {
        let mut spec = VirtualMachineInstanceSpec::default();
        spec.domain.cpu = cpu;
        spec
    }

    fn topology(cores: u32, sockets: u32, threads: u32) -> Option<Cpu> {
        Some(Cpu {
            cores: Some(cores),
            sockets: Some(sockets),
            threads: Some(threads),
            ..Cpu::default()
        })
    }

    #[test]
    fn topologies() {
        let cases = [
            (None, 1),
            (topology(1, 1, 1), 1),
            (topology(2, 2, 1), 4),
            (topology(4, 2, 2), 16),
            (topology(0, 2, 0), 2),
        ];
        for (cpu, want) in cases {
            let got = cpus(&spec(cpu.clone())).unwrap();
            assert_eq!(
                got,
                CpusConfig {
                    boot_vcpus: want,
                    max_vcpus: want
                },
                "{cpu:?}"
            );
        }
    }

    #[test]
    fn too_many_vcpus_name_the_field() {
        for cpu in [topology(8, 8, 1), topology(u32::MAX, 2, 2)] {
            let err = cpus(&spec(cpu.clone())).unwrap_err();
            assert_eq!(err.path, "spec.domain.cpu", "{cpu:?}");
        }
    }
}
