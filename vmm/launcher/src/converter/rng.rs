//! Entropy: `spec.domain.devices.rng` becomes a virtio-rng device fed from `/dev/urandom`.

use api::VirtualMachineInstanceSpec;
use vmm::config::RngConfig;

/// The virtio-rng device, if the VMI asks for one.
pub fn rng(spec: &VirtualMachineInstanceSpec) -> Option<RngConfig> {
    spec.domain
        .devices
        .rng
        .as_ref()
        .map(|_| RngConfig::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_only_when_asked_for() {
        let mut spec = VirtualMachineInstanceSpec::default();
        assert_eq!(rng(&spec), None);
        spec.domain.devices.rng = Some(Default::default());
        assert_eq!(
            rng(&spec),
            Some(RngConfig {
                src: "/dev/urandom".into()
            })
        );
    }
}
