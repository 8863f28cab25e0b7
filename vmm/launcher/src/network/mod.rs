//! The pod network with the masquerade binding, as KubeVirt's masquerade does it, inside the
//! launcher Pod's network namespace:
//!
//! 1. a tap device (`tap0`) for the VM's virtio-net, with the gateway address on it
//!    (`10.0.2.1/24`; the guest gets `10.0.2.2`; `vmNetworkCIDR` changes both);
//! 2. IPv4 forwarding on, and NAT: traffic from the guest leaving through any other interface is
//!    masqueraded to the Pod's address; TCP/UDP arriving at the Pod (all ports, or the
//!    interface's `ports`) is DNATed to the guest;
//! 3. a small DHCP responder on the tap ([`dhcp`]) that gives the guest its address, the
//!    gateway and the Pod's DNS servers.
//!
//! [`MasqueradePlan`] and [`setup_commands`] are pure (tested without privileges); [`setup`]
//! runs the commands (`ip`, `iptables`; Debian packages iproute2 and iptables) and starts the
//! DHCP thread.

pub mod dhcp;

use std::net::Ipv4Addr;
use std::process::Command;

use api::domain::parse_mac_address;
use api::VirtualMachineInstance;

use crate::converter::network::derived_mac;

/// The guest side of masquerade when `vmNetworkCIDR` is not set.
pub const DEFAULT_CIDR: &str = "10.0.2.0/24";

/// Why the pod network could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("vmNetworkCIDR {0:?} is not an IPv4 CIDR with room for a gateway and a guest")]
    Cidr(String),
    #[error("the VMI has no masquerade interface on the pod network")]
    NoInterface,
    #[error("cannot run {0} (Debian packages iproute2 and iptables)")]
    Spawn(String, #[source] std::io::Error),
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("cannot enable IPv4 forwarding")]
    Forwarding(#[source] std::io::Error),
    #[error("DHCP responder")]
    Dhcp(#[source] std::io::Error),
}

impl NetworkError {
    /// Whether the error is the host's (missing tools) rather than the launcher's.
    pub fn is_precondition(&self) -> bool {
        matches!(self, NetworkError::Spawn(..) | NetworkError::Cidr(_))
    }
}

/// What masquerade sets up for one VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasqueradePlan {
    pub tap: String,
    pub gateway: Ipv4Addr,
    pub guest: Ipv4Addr,
    pub prefix: u8,
    pub guest_mac: [u8; 6],
    /// `(protocol, port)` forwarded to the guest; empty: every port.
    pub ports: Vec<(String, u16)>,
    pub hostname: String,
}

/// Parses `a.b.c.d/n`.
pub fn parse_cidr(cidr: &str) -> Option<(Ipv4Addr, u8)> {
    let (addr, prefix) = cidr.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    (prefix <= 30).then_some((addr, prefix))
}

impl MasqueradePlan {
    /// The plan for the VMI's pod interface.
    pub fn for_vmi(
        vmi: &VirtualMachineInstance,
        tap: &str,
    ) -> Result<MasqueradePlan, NetworkError> {
        let interface = vmi
            .spec
            .domain
            .devices
            .interfaces
            .iter()
            .find(|i| i.masquerade.is_some())
            .ok_or(NetworkError::NoInterface)?;
        let network = vmi.spec.networks.iter().find(|n| n.name == interface.name);
        let cidr = network
            .and_then(|n| n.pod.as_ref())
            .and_then(|p| p.vm_network_cidr.clone())
            .unwrap_or_else(|| DEFAULT_CIDR.to_string());
        let (base, prefix) = parse_cidr(&cidr).ok_or_else(|| NetworkError::Cidr(cidr.clone()))?;
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        let network_addr = u32::from(base) & mask;
        let mac_text = interface
            .mac_address
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| derived_mac(vmi, &interface.name));
        let guest_mac = parse_mac_address(&mac_text).ok_or(NetworkError::NoInterface)?;
        let ports = interface
            .ports
            .iter()
            .filter_map(|p| {
                let port = u16::try_from(p.port).ok()?;
                let protocol = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
                Some((protocol, port))
            })
            .collect();
        Ok(MasqueradePlan {
            tap: tap.to_string(),
            gateway: Ipv4Addr::from(network_addr + 1),
            guest: Ipv4Addr::from(network_addr + 2),
            prefix,
            guest_mac,
            ports,
            hostname: vmi
                .spec
                .hostname
                .clone()
                .or_else(|| vmi.metadata.name.clone())
                .unwrap_or_default(),
        })
    }

    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(
            u32::MAX
                .checked_shl(32 - u32::from(self.prefix))
                .unwrap_or(0),
        )
    }
}

/// The commands that set up the tap and NAT, in order.
pub fn setup_commands(plan: &MasqueradePlan) -> Vec<Vec<String>> {
    let tap = plan.tap.as_str();
    let guest = plan.guest.to_string();
    let gateway = format!("{}/{}", plan.gateway, plan.prefix);
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["ip", "tuntap", "add", "dev", tap, "mode", "tap"],
        vec!["ip", "addr", "add", &gateway, "dev", tap],
        vec!["ip", "link", "set", tap, "up"],
        vec![
            "iptables",
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-s",
            &guest,
            "!",
            "-o",
            tap,
            "-j",
            "MASQUERADE",
        ],
    ];
    let dnat: Vec<Vec<String>> = if plan.ports.is_empty() {
        ["tcp", "udp"]
            .iter()
            .map(|proto| {
                [
                    "iptables",
                    "-t",
                    "nat",
                    "-A",
                    "PREROUTING",
                    "!",
                    "-i",
                    tap,
                    "-p",
                    proto,
                    "-j",
                    "DNAT",
                    "--to-destination",
                    &guest,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect()
            })
            .collect()
    } else {
        plan.ports
            .iter()
            .map(|(proto, port)| {
                [
                    "iptables",
                    "-t",
                    "nat",
                    "-A",
                    "PREROUTING",
                    "!",
                    "-i",
                    tap,
                    "-p",
                    proto,
                    "--dport",
                    &port.to_string(),
                    "-j",
                    "DNAT",
                    "--to-destination",
                    &guest,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect()
            })
            .collect()
    };
    let mut out: Vec<Vec<String>> = commands
        .drain(..)
        .map(|c| c.into_iter().map(String::from).collect())
        .collect();
    out.extend(dnat);
    out
}

/// The running pod network: the DHCP responder lives as long as this.
pub struct PodNetwork {
    pub plan: MasqueradePlan,
    _dhcp: dhcp::DhcpServer,
}

/// Turns IPv4 forwarding on in this network namespace. In a Pod `/proc/sys` is read-only and the
/// Pod's `net.ipv4.ip_forward` sysctl has already done it: that is fine too.
fn enable_forwarding() -> Result<(), NetworkError> {
    const PATH: &str = "/proc/sys/net/ipv4/ip_forward";
    match std::fs::write(PATH, "1") {
        Ok(()) => Ok(()),
        Err(e) => match std::fs::read_to_string(PATH) {
            Ok(value) if value.trim() == "1" => Ok(()),
            _ => Err(NetworkError::Forwarding(e)),
        },
    }
}

/// Sets up masquerade for the VMI in the current network namespace.
pub fn setup(vmi: &VirtualMachineInstance, tap: &str) -> Result<PodNetwork, NetworkError> {
    let plan = MasqueradePlan::for_vmi(vmi, tap)?;
    enable_forwarding()?;
    for command in setup_commands(&plan) {
        run(&command)?;
    }
    let dns =
        dhcp::pod_dns_servers(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    let server = dhcp::DhcpServer::start(dhcp::Lease {
        interface: plan.tap.clone(),
        client_mac: plan.guest_mac,
        address: plan.guest,
        netmask: plan.netmask(),
        router: plan.gateway,
        dns,
        hostname: plan.hostname.clone(),
    })
    .map_err(NetworkError::Dhcp)?;
    Ok(PodNetwork {
        plan,
        _dhcp: server,
    })
}

fn run(command: &[String]) -> Result<(), NetworkError> {
    let text = command.join(" ");
    let (program, args) = command.split_first().ok_or_else(|| NetworkError::Command {
        command: text.clone(),
        stderr: "empty command".into(),
    })?;
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| NetworkError::Spawn(program.clone(), e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(NetworkError::Command {
            command: text,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use api::domain::{Interface, InterfaceMasquerade, Port};
    use api::volume::{Network, PodNetwork as PodNet};

    use super::*;

    fn vmi(cidr: Option<&str>, ports: Vec<Port>) -> VirtualMachineInstance {
        let mut vmi = VirtualMachineInstance::new("vm1", Default::default());
        vmi.spec.domain.devices.interfaces = vec![Interface {
            name: "default".into(),
            masquerade: Some(InterfaceMasquerade::default()),
            mac_address: Some("02:00:00:00:00:09".into()),
            ports,
            ..Default::default()
        }];
        vmi.spec.networks = vec![Network {
            name: "default".into(),
            pod: Some(PodNet {
                vm_network_cidr: cidr.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }];
        vmi
    }

    #[test]
    fn addresses_from_the_cidr() {
        let cases = [
            (None, "10.0.2.1", "10.0.2.2", 24, "255.255.255.0"),
            (
                Some("192.168.7.0/24"),
                "192.168.7.1",
                "192.168.7.2",
                24,
                "255.255.255.0",
            ),
            (
                Some("172.16.0.64/26"),
                "172.16.0.65",
                "172.16.0.66",
                26,
                "255.255.255.192",
            ),
        ];
        for (cidr, gateway, guest, prefix, mask) in cases {
            let plan = MasqueradePlan::for_vmi(&vmi(cidr, vec![]), "tap0").unwrap();
            assert_eq!(plan.gateway.to_string(), gateway);
            assert_eq!(plan.guest.to_string(), guest);
            assert_eq!(plan.prefix, prefix);
            assert_eq!(plan.netmask().to_string(), mask);
            assert_eq!(plan.guest_mac, [2, 0, 0, 0, 0, 9]);
        }
        for bad in ["10.0.2.0", "10.0.2.0/31", "nonsense/24"] {
            assert!(
                MasqueradePlan::for_vmi(&vmi(Some(bad), vec![]), "tap0").is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn nat_rules() {
        let all = setup_commands(&MasqueradePlan::for_vmi(&vmi(None, vec![]), "tap0").unwrap());
        let text: Vec<String> = all.iter().map(|c| c.join(" ")).collect();
        assert!(text.contains(&"ip tuntap add dev tap0 mode tap".to_string()));
        assert!(text.contains(&"ip addr add 10.0.2.1/24 dev tap0".to_string()));
        assert!(text.contains(
            &"iptables -t nat -A POSTROUTING -s 10.0.2.2 ! -o tap0 -j MASQUERADE".to_string()
        ));
        assert!(text.contains(
            &"iptables -t nat -A PREROUTING ! -i tap0 -p tcp -j DNAT --to-destination 10.0.2.2"
                .to_string()
        ));
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
        let some = setup_commands(&MasqueradePlan::for_vmi(&vmi(None, ports), "tap0").unwrap());
        let text: Vec<String> = some.iter().map(|c| c.join(" ")).collect();
        assert!(text.contains(&"iptables -t nat -A PREROUTING ! -i tap0 -p tcp --dport 8080 -j DNAT --to-destination 10.0.2.2".to_string()));
        assert!(text.contains(&"iptables -t nat -A PREROUTING ! -i tap0 -p udp --dport 53 -j DNAT --to-destination 10.0.2.2".to_string()));
        assert!(!text.iter().any(|t| t.contains("-p tcp -j DNAT")));
    }
}
