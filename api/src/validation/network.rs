//! Validation of the VMI's interfaces and networks: the bindings Ferrovirt has (masquerade and
//! bridge on the pod network), MAC addresses, and the pod network's CIDR.

use std::collections::BTreeSet;

use crate::domain::Interface;
use crate::other::reject_other;
use crate::vmi::VirtualMachineInstanceSpec;
use crate::volume::Network;

use super::{check_dns_label, FieldError, Path};

pub(super) fn validate_interface(interface: &Interface, at: &Path, errors: &mut Vec<FieldError>) {
    reject_other(&interface.other, "v1.Interface", at, errors);
    check_dns_label(&interface.name, at.child("name"), errors);
    match &interface.masquerade {
        Some(masquerade) => {
            reject_other(
                &masquerade.other,
                "v1.InterfaceMasquerade",
                &at.child("masquerade"),
                errors,
            );
        }
        None => {
            // A binding KubeVirt has (bridge, sriov, ...) is already reported as not supported.
            let other_binding = [
                "bridge",
                "sriov",
                "slirp",
                "macvtap",
                "passt",
                "passtBinding",
                "binding",
            ]
            .iter()
            .any(|b| interface.other.contains_key(*b));
            if !other_binding {
                errors.push(FieldError::required(
                    at.child("masquerade"),
                    "an interface needs a binding: masquerade",
                ));
            }
        }
    }
    if let Some(model) = &interface.model {
        if model != "virtio" {
            errors.push(FieldError::value_not_supported(
                at.child("model"),
                model,
                "a microVM has only virtio network devices",
            ));
        }
    }
    // An empty MAC address is none (a clone writes one to have a new address made).
    if let Some(mac) = interface.mac_address.as_ref().filter(|m| !m.is_empty()) {
        if !is_unicast_mac(mac) {
            errors.push(FieldError::invalid(
                at.child("macAddress"),
                format!("{mac:?} must be a unicast MAC address of the form 02:00:00:00:00:01 or 02-00-00-00-00-01"),
            ));
        }
    }
    for (j, port) in interface.ports.iter().enumerate() {
        let at = at.child("ports").index(j);
        reject_other(&port.other, "v1.Port", &at, errors);
        if !(1..=65535).contains(&port.port) {
            errors.push(FieldError::invalid(
                at.child("port"),
                format!("{} must be between 1 and 65535", port.port),
            ));
        }
        if let Some(protocol) = &port.protocol {
            if protocol != "TCP" && protocol != "UDP" {
                errors.push(FieldError::invalid(
                    at.child("protocol"),
                    format!("{protocol:?} must be TCP or UDP"),
                ));
            }
        }
    }
}

fn is_unicast_mac(mac: &str) -> bool {
    crate::domain::parse_mac_address(mac).is_some_and(|bytes| bytes[0] & 1 == 0)
}

pub(super) fn validate_networks(
    spec: &VirtualMachineInstanceSpec,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let networks_path = path.child("networks");
    let mut names = BTreeSet::new();
    let mut pod_networks = 0;
    for (i, network) in spec.networks.iter().enumerate() {
        let at = networks_path.index(i);
        validate_network(network, &at, errors);
        if network.pod.is_some() {
            pod_networks += 1;
            if pod_networks > 1 {
                errors.push(FieldError::invalid(
                    at.child("pod"),
                    "only one pod network is allowed",
                ));
            }
        }
        if !network.name.is_empty() && !names.insert(network.name.as_str()) {
            errors.push(FieldError::duplicate(at.child("name"), &network.name));
        }
    }
    let interfaces_path = path.child("domain").child("devices").child("interfaces");
    let interface_names: BTreeSet<_> = spec
        .domain
        .devices
        .interfaces
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    for (i, interface) in spec.domain.devices.interfaces.iter().enumerate() {
        if !interface.name.is_empty() && !names.contains(interface.name.as_str()) {
            errors.push(FieldError::invalid(
                interfaces_path.index(i).child("name"),
                format!(
                    "{:?} has no network of that name in spec.networks",
                    interface.name
                ),
            ));
        }
    }
    for (i, network) in spec.networks.iter().enumerate() {
        if !network.name.is_empty() && !interface_names.contains(network.name.as_str()) {
            errors.push(FieldError::invalid(
                networks_path.index(i).child("name"),
                format!(
                    "{:?} is not used by any interface in spec.domain.devices.interfaces",
                    network.name
                ),
            ));
        }
    }
}

fn validate_network(network: &Network, at: &Path, errors: &mut Vec<FieldError>) {
    reject_other(&network.other, "v1.Network", at, errors);
    check_dns_label(&network.name, at.child("name"), errors);
    match &network.pod {
        Some(pod) => {
            let at = at.child("pod");
            reject_other(&pod.other, "v1.PodNetwork", &at, errors);
            if let Some(cidr) = &pod.vm_network_cidr {
                if let Err(e) = parse_ipv4_cidr(cidr) {
                    errors.push(FieldError::invalid(at.child("vmNetworkCIDR"), e));
                }
            }
        }
        None if network.other.is_empty() => errors.push(FieldError::required(
            at.child("pod"),
            "a network source is required: pod",
        )),
        None => {}
    }
}

/// Parses `a.b.c.d/n` with a prefix that leaves room for a gateway and a guest (n <= 30).
fn parse_ipv4_cidr(cidr: &str) -> Result<(std::net::Ipv4Addr, u8), String> {
    let bad =
        || format!("{cidr:?} must be an IPv4 CIDR such as 10.0.2.0/24 with a prefix of at most 30");
    let (addr, prefix) = cidr.split_once('/').ok_or_else(bad)?;
    let addr: std::net::Ipv4Addr = addr.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    if prefix > 30 {
        return Err(bad());
    }
    Ok((addr, prefix))
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
