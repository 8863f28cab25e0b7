//! The pod network of the masquerade binding, and who sets up which part, as KubeVirt splits it:
//!
//! - virt-handler (privileged, on the node) prepares the launcher Pod's network namespace
//!   before it asks the launcher to run the VM: the tap device [`TAP_DEVICE`] owned by the
//!   launcher's user (so the launcher and QEMU open it without `CAP_NET_ADMIN`), the gateway
//!   address on it, IPv4 forwarding, and NAT ([`MasqueradePlan::setup_commands`]);
//! - virt-launcher (no `CAP_NET_ADMIN`, no sysctl of its Pod) finds the tap there, opens it for
//!   the VM and answers the guest's DHCP on it.
//!
//! A launcher started outside a cluster (its tests, benchmarks) finds no tap and sets up the
//! same itself, which takes `CAP_NET_ADMIN` in its network namespace.

use std::net::Ipv4Addr;

/// The tap device of the pod interface in the launcher Pod's network namespace.
pub const TAP_DEVICE: &str = "tap0";
/// The guest side of masquerade when `vmNetworkCIDR` is not set.
pub const DEFAULT_CIDR: &str = "10.0.2.0/24";
/// The sysctl of IPv4 forwarding, per network namespace.
pub const IP_FORWARD_SYSCTL: &str = "net.ipv4.ip_forward";
/// The sysctl of the lowest port a user other than root may bind, per network namespace.
pub const UNPRIVILEGED_PORT_SYSCTL: &str = "net.ipv4.ip_unprivileged_port_start";
/// The sysctl that lets the tap carry packets from 127.0.0.1 (DNATed to the guest from the Pod's
/// localhost), per interface.
pub fn route_localnet_sysctl(tap: &str) -> String {
    format!("net.ipv4.conf.{tap}.route_localnet")
}
/// The port the launcher's DHCP responder binds.
pub const DHCP_SERVER_PORT: u16 = 67;

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("vmNetworkCIDR {0:?} is not an IPv4 CIDR with room for a gateway and a guest")]
    Cidr(String),
    #[error("the VMI has no masquerade interface on the pod network")]
    NoInterface,
}

/// Why a setup command did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Failed { command: String, stderr: String },
}

impl CommandError {
    /// Whether the program itself is missing (the host's fault, not the command's).
    pub fn is_spawn(&self) -> bool {
        matches!(self, CommandError::Spawn { .. })
    }
}

/// A command line and what it reads on its standard input (nothing when `stdin` is empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandLine {
    pub argv: Vec<String>,
    pub stdin: String,
}

impl CommandLine {
    /// `words` with nothing on stdin.
    pub fn new<S: Into<String>>(words: impl IntoIterator<Item = S>) -> Self {
        Self {
            argv: words.into_iter().map(Into::into).collect(),
            stdin: String::new(),
        }
    }

    /// The same command run by `prefix` (such as `nsenter -t PID -n --`), with the same stdin.
    pub fn run_by(&self, prefix: Vec<String>) -> Self {
        let mut argv = prefix;
        argv.extend(self.argv.iter().cloned());
        Self {
            argv,
            stdin: self.stdin.clone(),
        }
    }
}

impl std::fmt::Display for CommandLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.argv.join(" "))?;
        if !self.stdin.is_empty() {
            write!(f, " <<< {:?}", self.stdin)?;
        }
        Ok(())
    }
}

/// Runs one command line of [`MasqueradePlan::setup_commands`] (or a wrapper of it) and waits;
/// a failure carries what the program wrote to stderr.
pub fn run_command(command: &CommandLine) -> Result<(), CommandError> {
    use std::io::Write;
    use std::process::Stdio;

    let Some((program, args)) = command.argv.split_first() else {
        return Err(CommandError::Failed {
            command: String::new(),
            stderr: "empty command".into(),
        });
    };
    let spawn_error = |source| CommandError::Spawn {
        program: program.clone(),
        source,
    };
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    // A program that exits without reading its input closes the pipe: its status says why.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(command.stdin.as_bytes());
    }
    let output = child.wait_with_output().map_err(spawn_error)?;
    if output.status.success() {
        Ok(())
    } else {
        Err(CommandError::Failed {
            command: command.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
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

/// Parses `a.b.c.d/n` with room for a network, a gateway, a guest and a broadcast address.
pub fn parse_cidr(cidr: &str) -> Option<(Ipv4Addr, u8)> {
    let (addr, prefix) = cidr.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    (prefix <= 30).then_some((addr, prefix))
}

impl MasqueradePlan {
    /// The plan for a guest with `guest_mac` behind `tap` on `cidr` (the gateway is the CIDR's
    /// first address, the guest its second).
    pub fn new(
        tap: &str,
        cidr: &str,
        guest_mac: [u8; 6],
        ports: Vec<(String, u16)>,
        hostname: String,
    ) -> Result<MasqueradePlan, PlanError> {
        let (base, prefix) = parse_cidr(cidr).ok_or_else(|| PlanError::Cidr(cidr.to_string()))?;
        let network = u32::from(base) & mask(prefix);
        Ok(MasqueradePlan {
            tap: tap.to_string(),
            gateway: Ipv4Addr::from(network + 1),
            guest: guest_address(Ipv4Addr::from(network)),
            prefix,
            guest_mac,
            ports,
            hostname,
        })
    }

    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(mask(self.prefix))
    }

    /// The two command lines that make the tap (owned by `tap_owner` when given), put the
    /// gateway on it and bring it up (one `ip -batch`), then set up NAT (one
    /// `iptables-restore --noflush`, which adds the rules at once), in the order to run them.
    /// IPv4 forwarding ([`IP_FORWARD_SYSCTL`]) and, once the tap exists, 127.0.0.1 on it
    /// ([`route_localnet_sysctl`]) are the caller's.
    pub fn setup_commands(&self, tap_owner: Option<u32>) -> Vec<CommandLine> {
        let tap = self.tap.as_str();
        let guest = self.guest;
        let owner = tap_owner
            .map(|uid| format!(" user {uid}"))
            .unwrap_or_default();
        let links = CommandLine {
            stdin: format!(
                "tuntap add dev {tap} mode tap{owner}\naddr add {}/{} dev {tap}\nlink set {tap} up\n",
                self.gateway, self.prefix
            ),
            ..CommandLine::new(["ip", "-batch", "-"])
        };
        let gateway = self.gateway;
        let mut rules = format!("*nat\n-A POSTROUTING -s {guest} ! -o {tap} -j MASQUERADE\n");
        // Each forwarded port: from outside the Pod, and from the Pod's own localhost (what
        // `kubectl port-forward` dials), SNATed to the gateway so that the guest's answer
        // comes back through the tap (which takes 127.0.0.1 with ROUTE_LOCALNET_SYSCTL).
        let dnat = |proto: &str, port: Option<u16>| {
            let port = port.map(|p| format!(" --dport {p}")).unwrap_or_default();
            format!(
                "-A PREROUTING ! -i {tap} -p {proto}{port} -j DNAT --to-destination {guest}\n\
                 -A OUTPUT -d 127.0.0.1 -p {proto}{port} -j DNAT --to-destination {guest}\n\
                 -A POSTROUTING -o {tap} -s 127.0.0.1 -p {proto}{port} -j SNAT --to-source {gateway}\n"
            )
        };
        if self.ports.is_empty() {
            rules.extend(["tcp", "udp"].map(|proto| dnat(proto, None)));
        } else {
            rules.extend(
                self.ports
                    .iter()
                    .map(|(proto, port)| dnat(proto, Some(*port))),
            );
        }
        rules.push_str("COMMIT\n");
        let nat = CommandLine {
            stdin: rules,
            ..CommandLine::new(["iptables-restore", "--noflush"])
        };
        vec![links, nat]
    }
}

/// The guest's address on the masquerade network `network` (its second address).
pub fn guest_address(network: Ipv4Addr) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(network).wrapping_add(2))
}

fn mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

/// Whether `/proc/net/dev` text (of some network namespace) lists interface `name`.
pub fn lists_interface(proc_net_dev: &str, name: &str) -> bool {
    proc_net_dev
        .lines()
        .filter_map(|l| l.split_once(':'))
        .any(|(interface, _)| interface.trim() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(cidr: &str, ports: Vec<(String, u16)>) -> Result<MasqueradePlan, PlanError> {
        MasqueradePlan::new("tap0", cidr, [2, 0, 0, 0, 0, 9], ports, "vm1".into())
    }

    #[test]
    fn addresses_come_from_the_cidr() {
        let cases = [
            ("10.0.2.0/24", "10.0.2.1", "10.0.2.2", "255.255.255.0"),
            (
                "192.168.7.9/24",
                "192.168.7.1",
                "192.168.7.2",
                "255.255.255.0",
            ),
            (
                "172.16.0.64/26",
                "172.16.0.65",
                "172.16.0.66",
                "255.255.255.192",
            ),
            ("10.9.0.4/30", "10.9.0.5", "10.9.0.6", "255.255.255.252"),
        ];
        for (cidr, gateway, guest, netmask) in cases {
            let plan = plan(cidr, vec![]).unwrap();
            assert_eq!(plan.gateway.to_string(), gateway, "{cidr}");
            assert_eq!(plan.guest.to_string(), guest, "{cidr}");
            assert_eq!(plan.netmask().to_string(), netmask, "{cidr}");
        }
        for bad in ["10.0.2.0/31", "10.0.2.0", "fd00::/64", "10.0.2.0/x", ""] {
            assert_eq!(plan(bad, vec![]), Err(PlanError::Cidr(bad.into())), "{bad}");
        }
    }

    #[test]
    fn commands_make_an_owned_tap_and_nat_every_port_or_the_listed_ones() {
        let every = plan(DEFAULT_CIDR, vec![])
            .unwrap()
            .setup_commands(Some(107));
        assert_eq!(
            every,
            [
                CommandLine {
                    argv: vec!["ip".into(), "-batch".into(), "-".into()],
                    stdin: "tuntap add dev tap0 mode tap user 107\n\
                            addr add 10.0.2.1/24 dev tap0\n\
                            link set tap0 up\n"
                        .into(),
                },
                CommandLine {
                    argv: vec!["iptables-restore".into(), "--noflush".into()],
                    stdin: "*nat\n\
                            -A POSTROUTING -s 10.0.2.2 ! -o tap0 -j MASQUERADE\n\
                            -A PREROUTING ! -i tap0 -p tcp -j DNAT --to-destination 10.0.2.2\n\
                            -A OUTPUT -d 127.0.0.1 -p tcp -j DNAT --to-destination 10.0.2.2\n\
                            -A POSTROUTING -o tap0 -s 127.0.0.1 -p tcp -j SNAT --to-source 10.0.2.1\n\
                            -A PREROUTING ! -i tap0 -p udp -j DNAT --to-destination 10.0.2.2\n\
                            -A OUTPUT -d 127.0.0.1 -p udp -j DNAT --to-destination 10.0.2.2\n\
                            -A POSTROUTING -o tap0 -s 127.0.0.1 -p udp -j SNAT --to-source 10.0.2.1\n\
                            COMMIT\n"
                        .into(),
                },
            ]
        );
        let listed = plan(DEFAULT_CIDR, vec![("tcp".into(), 80), ("udp".into(), 53)])
            .unwrap()
            .setup_commands(None);
        assert!(listed[0]
            .stdin
            .starts_with("tuntap add dev tap0 mode tap\n"));
        assert_eq!(
            listed[1].stdin,
            "*nat\n\
             -A POSTROUTING -s 10.0.2.2 ! -o tap0 -j MASQUERADE\n\
             -A PREROUTING ! -i tap0 -p tcp --dport 80 -j DNAT --to-destination 10.0.2.2\n\
             -A OUTPUT -d 127.0.0.1 -p tcp --dport 80 -j DNAT --to-destination 10.0.2.2\n\
             -A POSTROUTING -o tap0 -s 127.0.0.1 -p tcp --dport 80 -j SNAT --to-source 10.0.2.1\n\
             -A PREROUTING ! -i tap0 -p udp --dport 53 -j DNAT --to-destination 10.0.2.2\n\
             -A OUTPUT -d 127.0.0.1 -p udp --dport 53 -j DNAT --to-destination 10.0.2.2\n\
             -A POSTROUTING -o tap0 -s 127.0.0.1 -p udp --dport 53 -j SNAT --to-source 10.0.2.1\n\
             COMMIT\n"
        );
    }

    #[test]
    fn commands_read_their_input_and_succeed_or_say_why() {
        run_command(&CommandLine::new(["true"])).unwrap();
        let read = CommandLine {
            stdin: "expected\n".into(),
            ..CommandLine::new(["sh", "-c", "read line && test \"$line\" = expected"])
        };
        run_command(&read).unwrap();
        let failed =
            run_command(&CommandLine::new(["sh", "-c", "echo nope >&2; exit 3"])).unwrap_err();
        assert!(!failed.is_spawn());
        assert_eq!(
            failed.to_string(),
            "`sh -c echo nope >&2; exit 3` failed: nope"
        );
        let wrong = CommandLine {
            stdin: "other\n".into(),
            ..read.clone()
        };
        assert!(run_command(&wrong)
            .unwrap_err()
            .to_string()
            .ends_with("<<< \"other\\n\"` failed: "));
        let missing = run_command(&CommandLine::new(["/nonexistent/ip", "link"])).unwrap_err();
        assert!(missing.is_spawn(), "{missing}");
        assert!(run_command(&CommandLine::default()).is_err());
        let wrapped = read.run_by(vec!["env".into()]);
        assert_eq!(wrapped.argv[0], "env");
        run_command(&wrapped).unwrap();
    }

    #[test]
    fn interfaces_are_found_in_proc_net_dev() {
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets\n    lo: 0 0 0\n  eth0: 1 2 3\n  tap0: 0 0\n";
        assert!(lists_interface(dev, "tap0"));
        assert!(lists_interface(dev, "eth0"));
        assert!(!lists_interface(dev, "tap1"));
        assert!(!lists_interface(dev, "face"));
    }
}
