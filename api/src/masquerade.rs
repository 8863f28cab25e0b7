//! The masquerade binding of a VMI's pod interface, as virt-handler and virt-launcher both
//! derive it from the VMI: the interface's MAC (its `macAddress`, or one derived from the
//! VMI's and the interface's names, stable across restarts) and the addresses of
//! `vmNetworkCIDR` ([`contract::podnet::MasqueradePlan`]).

use contract::podnet::{MasqueradePlan, PlanError, DEFAULT_CIDR};

use crate::domain::parse_mac_address;
use crate::VirtualMachineInstance;

/// The plan for the VMI's masquerade interface on the pod network, behind `tap`.
pub fn plan(vmi: &VirtualMachineInstance, tap: &str) -> Result<MasqueradePlan, PlanError> {
    let interface = vmi
        .spec
        .domain
        .devices
        .interfaces
        .iter()
        .find(|i| i.masquerade.is_some())
        .ok_or(PlanError::NoInterface)?;
    let network = vmi.spec.networks.iter().find(|n| n.name == interface.name);
    let pod = network
        .and_then(|n| n.pod.as_ref())
        .ok_or(PlanError::NoInterface)?;
    let cidr = pod.vm_network_cidr.as_deref().unwrap_or(DEFAULT_CIDR);
    let mac_text = interface
        .mac_address
        .clone()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| derived_mac(vmi, &interface.name));
    let guest_mac = parse_mac_address(&mac_text).ok_or(PlanError::NoInterface)?;
    let ports = interface
        .ports
        .iter()
        .filter_map(|p| {
            let port = u16::try_from(p.port).ok()?;
            let protocol = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
            Some((protocol, port))
        })
        .collect();
    let hostname = vmi
        .spec
        .hostname
        .clone()
        .or_else(|| vmi.metadata.name.clone())
        .unwrap_or_default();
    MasqueradePlan::new(tap, cidr, guest_mac, ports, hostname)
}

/// A locally administered unicast MAC (`02:...`) from an FNV-1a hash of namespace, VMI name and
/// interface name: stable across restarts of the same VMI.
pub fn derived_mac(vmi: &VirtualMachineInstance, interface: &str) -> String {
    let key = format!(
        "{}/{}/{}",
        vmi.metadata.namespace.as_deref().unwrap_or(""),
        vmi.metadata.name.as_deref().unwrap_or(""),
        interface
    );
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let h = hash.to_be_bytes();
    format_mac([0x02, h[0], h[1], h[2], h[3], h[4]])
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(bytes: [u8; 6]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use crate::domain::{Interface, InterfaceMasquerade, Port};
    use crate::volume::{Network, PodNetwork};

    use super::*;

    fn vmi(cidr: Option<&str>, mac: Option<&str>, ports: Vec<Port>) -> VirtualMachineInstance {
        let mut vmi = VirtualMachineInstance::new("vm1", Default::default());
        vmi.metadata.namespace = Some("ns".into());
        vmi.spec.domain.devices.interfaces = vec![Interface {
            name: "default".into(),
            masquerade: Some(InterfaceMasquerade::default()),
            mac_address: mac.map(Into::into),
            ports,
            ..Default::default()
        }];
        vmi.spec.networks = vec![Network {
            name: "default".into(),
            pod: Some(PodNetwork {
                vm_network_cidr: cidr.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }];
        vmi
    }

    #[test]
    fn the_plan_takes_the_interfaces_cidr_mac_ports_and_the_vmis_name() {
        let ports = vec![
            Port {
                port: 8080,
                ..Default::default()
            },
            Port {
                port: 53,
                protocol: Some("UDP".into()),
                ..Default::default()
            },
        ];
        let vmi = vmi(Some("192.168.7.0/24"), Some("02:00:00:00:00:09"), ports);
        let plan = plan(&vmi, "tap0").unwrap();
        assert_eq!(plan.gateway.to_string(), "192.168.7.1");
        assert_eq!(plan.guest.to_string(), "192.168.7.2");
        assert_eq!(plan.guest_mac, [2, 0, 0, 0, 0, 9]);
        assert_eq!(plan.ports, [("tcp".into(), 8080), ("udp".into(), 53)]);
        assert_eq!((plan.tap.as_str(), plan.hostname.as_str()), ("tap0", "vm1"));
    }

    #[test]
    fn without_a_cidr_or_mac_the_defaults_apply() {
        let vmi = vmi(None, None, vec![]);
        let plan = plan(&vmi, "tap0").unwrap();
        assert_eq!(plan.guest.to_string(), "10.0.2.2");
        assert_eq!(format_mac(plan.guest_mac), derived_mac(&vmi, "default"));
        assert!(plan.ports.is_empty());
    }

    #[test]
    fn a_bad_cidr_or_no_masquerade_interface_is_refused() {
        let bad = vmi(Some("10.0.2.0/31"), None, vec![]);
        assert_eq!(
            plan(&bad, "tap0"),
            Err(PlanError::Cidr("10.0.2.0/31".into()))
        );
        let mut none = vmi(None, None, vec![]);
        none.spec.domain.devices.interfaces[0].masquerade = None;
        assert_eq!(plan(&none, "tap0"), Err(PlanError::NoInterface));
        let mut no_pod = vmi(None, None, vec![]);
        no_pod.spec.networks[0].pod = None;
        assert_eq!(plan(&no_pod, "tap0"), Err(PlanError::NoInterface));
    }

    #[test]
    fn derived_macs_are_stable_local_unicast_and_differ_per_vmi() {
        let a = VirtualMachineInstance::new("a", Default::default());
        let b = VirtualMachineInstance::new("b", Default::default());
        assert_ne!(derived_mac(&a, "default"), derived_mac(&b, "default"));
        assert_eq!(derived_mac(&a, "default"), derived_mac(&a, "default"));
        let bytes = parse_mac_address(&derived_mac(&a, "default")).unwrap();
        assert_eq!(bytes[0], 0x02);
    }
}
