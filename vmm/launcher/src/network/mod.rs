//! The pod network with the masquerade binding, as KubeVirt's masquerade does it, inside the
//! launcher Pod's network namespace (the plan and the split are [`contract::podnet`]'s):
//!
//! 1. a tap device (`tap0`) for the VM's virtio-net, with the gateway address on it
//!    (`10.0.2.1/24`; the guest gets `10.0.2.2`; `vmNetworkCIDR` changes both);
//! 2. IPv4 forwarding on, and NAT: traffic from the guest leaving through any other interface is
//!    masqueraded to the Pod's address; TCP/UDP arriving at the Pod (all ports, or the
//!    interface's `ports`) is DNATed to the guest, and so is what the Pod sends to those ports
//!    of its own 127.0.0.1 (what `kubectl port-forward` to the Pod dials), SNATed to the
//!    gateway, which the tap carries with `route_localnet`;
//! 3. a small DHCP responder on the tap ([`dhcp`]) that gives the guest its address, the
//!    gateway and the Pod's DNS servers.
//!
//! In a cluster virt-handler has done 1 and 2 before the launcher is asked to run the VM, and
//! the launcher (without `CAP_NET_ADMIN`) does 3 only. A launcher that finds no tap (run outside
//! a cluster, in its tests and benchmarks) does all three itself: [`setup`] runs the commands
//! (`ip`, `iptables`; Debian packages iproute2 and iptables) and starts the DHCP thread.

pub mod dhcp;

use api::VirtualMachineInstance;
use contract::podnet::{self, CommandError, MasqueradePlan, PlanError};

/// Why the pod network could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("setting up the tap and NAT (ip, iptables: Debian packages iproute2 and iptables)")]
    Command(#[source] CommandError),
    #[error("cannot set {0} to 1")]
    Sysctl(String, #[source] std::io::Error),
    #[error("DHCP responder")]
    Dhcp(#[source] std::io::Error),
}

impl NetworkError {
    /// Whether the error is the host's (missing tools) or the VMI's rather than the launcher's.
    pub fn is_precondition(&self) -> bool {
        match self {
            NetworkError::Plan(PlanError::Cidr(_)) => true,
            NetworkError::Command(e) => e.is_spawn(),
            _ => false,
        }
    }
}

/// The pod network of the running VM; its DHCP responder stops when dropped.
pub struct PodNetwork {
    pub plan: MasqueradePlan,
    _dhcp: dhcp::DhcpServer,
}

/// Sets sysctl `name` of this network namespace to 1 (fine when it is 1 already, even if it
/// cannot be written).
fn enable(name: &str) -> Result<(), NetworkError> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    match std::fs::write(&path, "1") {
        Ok(()) => Ok(()),
        Err(e) => match std::fs::read_to_string(&path) {
            Ok(value) if value.trim() == "1" => Ok(()),
            _ => Err(NetworkError::Sysctl(name.to_string(), e)),
        },
    }
}

/// Whether this network namespace has the interface `name`.
fn has_interface(name: &str) -> bool {
    std::fs::read_to_string("/proc/net/dev").is_ok_and(|dev| podnet::lists_interface(&dev, name))
}

/// Sets up the VMI's pod network behind `tap` (see the module's text) and starts answering DHCP.
pub fn setup(vmi: &VirtualMachineInstance, tap: &str) -> Result<PodNetwork, NetworkError> {
    let plan = api::masquerade::plan(vmi, tap)?;
    if has_interface(tap) {
        log::info!("pod network: {tap} was prepared by virt-handler; answering DHCP on it");
    } else {
        log::info!("pod network: no {tap} yet; making it, its address and NAT");
        enable(podnet::IP_FORWARD_SYSCTL)?;
        for command in plan.setup_commands(None) {
            podnet::run_command(&command).map_err(NetworkError::Command)?;
        }
        enable(&podnet::route_localnet_sysctl(tap))?;
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
