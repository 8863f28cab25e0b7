//! Consoles: the 16550 serial port (ttyS0) is served by the VMM on a private unix socket that the
//! launcher relays to `console-sock` (unless `autoattachSerialConsole: false`); the virtio console
//! stays off; `autoattachVSOCK: true` adds a vsock device whose host side is a unix socket.

use api::{VirtualMachineInstance, VirtualMachineInstanceSpec};
use vmm::config::{ConsoleConfig, VsockConfig};

use super::HostFacts;

/// The first guest context id that is not reserved.
pub const FIRST_GUEST_CID: u64 = 3;

/// The serial port.
pub fn serial(spec: &VirtualMachineInstanceSpec, facts: &HostFacts) -> ConsoleConfig {
    if spec.domain.devices.autoattach_serial_console == Some(false) {
        ConsoleConfig::Null
    } else {
        ConsoleConfig::Socket {
            path: facts.serial_socket(),
        }
    }
}

/// The virtio console (hvc0): Ferrovirt's console is the serial port.
pub fn virtio_console(_spec: &VirtualMachineInstanceSpec) -> ConsoleConfig {
    ConsoleConfig::Off
}

/// The vsock device: the context id virt-controller assigned (`status.VSOCKCID`), else 3.
pub fn vsock(vmi: &VirtualMachineInstance, facts: &HostFacts) -> Option<VsockConfig> {
    if vmi.spec.domain.devices.autoattach_vsock != Some(true) {
        return None;
    }
    let cid = vmi
        .status
        .as_ref()
        .and_then(|s| s.vsock_cid)
        .map_or(FIRST_GUEST_CID, u64::from);
    Some(VsockConfig {
        cid,
        socket: facts.vsock_socket(),
    })
}

#[cfg(test)]
mod tests {
    use api::VirtualMachineInstanceStatus;

    use super::*;
    use crate::converter::host::test_facts;

    #[test]
    fn serial_is_relayed_unless_disabled() {
        let facts = test_facts();
        let mut spec = VirtualMachineInstanceSpec::default();
        let cases = [
            (
                None,
                ConsoleConfig::Socket {
                    path: facts.serial_socket(),
                },
            ),
            (
                Some(true),
                ConsoleConfig::Socket {
                    path: facts.serial_socket(),
                },
            ),
            (Some(false), ConsoleConfig::Null),
        ];
        for (autoattach, want) in cases {
            spec.domain.devices.autoattach_serial_console = autoattach;
            assert_eq!(serial(&spec, &facts), want);
        }
        assert_eq!(virtio_console(&spec), ConsoleConfig::Off);
    }

    #[test]
    fn vsock_when_asked_for() {
        let facts = test_facts();
        let mut vmi = VirtualMachineInstance::new("v", Default::default());
        assert_eq!(vsock(&vmi, &facts), None);
        vmi.spec.domain.devices.autoattach_vsock = Some(true);
        assert_eq!(vsock(&vmi, &facts).map(|v| v.cid), Some(FIRST_GUEST_CID));
        vmi.status = Some(VirtualMachineInstanceStatus {
            vsock_cid: Some(42),
            ..Default::default()
        });
        assert_eq!(
            vsock(&vmi, &facts),
            Some(VsockConfig {
                cid: 42,
                socket: facts.vsock_socket()
            })
        );
    }
}
