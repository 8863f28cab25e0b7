//! Network: the interface on the pod network with the masquerade binding becomes one
//! virtio-net device on the Pod's tap device (virt-handler makes the tap and its NAT, see `contract::podnet`).
//! Ferrovirt has one pod interface per VM; its MAC is the interface's `macAddress` or a stable
//! locally administered address derived from the VMI and interface names.

use api::domain::parse_mac_address;
use api::masquerade::{derived_mac, format_mac};
use api::VirtualMachineInstance;
use vmm::config::NetConfig;

use super::{FieldProblem, HostFacts};

/// The virtio-net devices of the VM.
pub fn net(
    vmi: &VirtualMachineInstance,
    facts: &HostFacts,
) -> Result<Vec<NetConfig>, FieldProblem> {
    let interfaces = &vmi.spec.domain.devices.interfaces;
    let mut out = Vec::new();
    for (index, interface) in interfaces.iter().enumerate() {
        let path = format!("spec.domain.devices.interfaces[{index}]");
        if index > 0 {
            return Err(FieldProblem::new(
                path,
                "ferrovirt attaches one interface (on the pod network) per VM",
            ));
        }
        if interface.masquerade.is_none() {
            return Err(FieldProblem::new(
                path,
                "only the masquerade binding is supported by ferrovirt",
            ));
        }
        if let Some(model) = interface.model.as_deref() {
            if model != "virtio" {
                return Err(FieldProblem::new(
                    format!("{path}.model"),
                    format!("model {model:?} is not supported by ferrovirt (only virtio)"),
                ));
            }
        }
        let network = vmi
            .spec
            .networks
            .iter()
            .find(|n| n.name == interface.name)
            .ok_or_else(|| {
                FieldProblem::new(
                    format!("{path}.name"),
                    format!("no network named {:?}", interface.name),
                )
            })?;
        if network.pod.is_none() {
            return Err(FieldProblem::new(
                format!("{path}.name"),
                "the masquerade binding needs the pod network",
            ));
        }
        let mac = match interface.mac_address.as_deref().filter(|m| !m.is_empty()) {
            Some(mac) => {
                let bytes = parse_mac_address(mac).ok_or_else(|| {
                    FieldProblem::new(
                        format!("{path}.macAddress"),
                        format!("{mac:?} is not a MAC address"),
                    )
                })?;
                format_mac(bytes)
            }
            None => derived_mac(vmi, &interface.name),
        };
        out.push(NetConfig {
            id: interface.name.clone(),
            tap: facts.tap_device.clone(),
            mac,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use api::domain::{Interface, InterfaceMasquerade};
    use api::volume::{Network, PodNetwork};

    use super::*;
    use crate::converter::host::test_facts;

    fn masquerade(name: &str, mac: Option<&str>) -> Interface {
        Interface {
            name: name.into(),
            masquerade: Some(InterfaceMasquerade::default()),
            mac_address: mac.map(Into::into),
            ..Default::default()
        }
    }

    fn vmi(interfaces: Vec<Interface>, pod: bool) -> VirtualMachineInstance {
        let mut vmi = VirtualMachineInstance::new("v", Default::default());
        vmi.spec.domain.devices.interfaces = interfaces;
        vmi.spec.networks = vec![Network {
            name: "default".into(),
            pod: pod.then(PodNetwork::default),
            ..Default::default()
        }];
        vmi
    }

    #[test]
    fn masquerade_interface_on_the_tap() {
        let facts = test_facts();
        let v = vmi(vec![masquerade("default", Some("02:AB:00:00:00:01"))], true);
        assert_eq!(
            net(&v, &facts).unwrap(),
            vec![NetConfig {
                id: "default".into(),
                tap: "tap0".into(),
                mac: "02:ab:00:00:00:01".into()
            }]
        );
        let derived = net(&vmi(vec![masquerade("default", None)], true), &facts).unwrap();
        assert_eq!(derived[0].mac, derived_mac(&v, "default"));
        assert!(derived[0].mac.starts_with("02:"));
        assert!(parse_mac_address(&derived[0].mac).is_some());
        assert!(net(&vmi(vec![], true), &facts).unwrap().is_empty());
    }

    #[test]
    fn refused_interfaces_name_the_field() {
        let facts = test_facts();
        let bridge = Interface {
            name: "default".into(),
            ..Default::default()
        };
        let mut e1000 = masquerade("default", None);
        e1000.model = Some("e1000".into());
        let cases = [
            (vmi(vec![bridge], true), "spec.domain.devices.interfaces[0]"),
            (
                vmi(vec![e1000], true),
                "spec.domain.devices.interfaces[0].model",
            ),
            (
                vmi(vec![masquerade("other", None)], true),
                "spec.domain.devices.interfaces[0].name",
            ),
            (
                vmi(vec![masquerade("default", None)], false),
                "spec.domain.devices.interfaces[0].name",
            ),
            (
                vmi(vec![masquerade("default", Some("zz"))], true),
                "spec.domain.devices.interfaces[0].macAddress",
            ),
            (
                vmi(
                    vec![masquerade("default", None), masquerade("default", None)],
                    true,
                ),
                "spec.domain.devices.interfaces[1]",
            ),
        ];
        for (v, path) in cases {
            assert_eq!(net(&v, &facts).unwrap_err().path, path);
        }
    }
}
