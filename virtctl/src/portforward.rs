//! `virtctl port-forward`: local TCP ports (or stdin and stdout with `--stdio`) joined to ports
//! of a VMI's guest, each connection a WebSocket (`plain.kubevirt.io`) to the VMI's
//! `portforward/{port}/tcp` subresource through kube-apiserver, as KubeVirt's virtctl does.
//! UDP ports are forwarded by [`crate::portforward_udp`].
//!
//! Targets are KubeVirt's `TYPE/NAME[.NAMESPACE]` (`vmi/testvmi`, `vm/testvm.mynamespace`);
//! ports `[PROTOCOL/]LOCAL[:REMOTE]` (`8080:80`, `tcp/2222:22`, `22`). Each accepted local
//! connection opens its own WebSocket; bytes go out as masked binary frames, and frames from
//! the server are written back. The connection ends when either side closes.

use hyper_util::rt::TokioIo;
use kube::Client;
use tokio::net::{TcpListener, UdpSocket};
use virt_api::routes::{port_forward_path, Owner};

use crate::websocket::{open_websocket, relay};

/// A VMI or VM named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub owner: Owner,
    pub name: String,
    /// From `NAME.NAMESPACE`; else `-n` or the kubeconfig's.
    pub namespace: Option<String>,
}

impl Target {
    /// `TYPE/NAME[.NAMESPACE]` with KubeVirt's type names.
    pub fn parse(text: &str) -> Result<Target, String> {
        let (kind, rest) = text.split_once('/').ok_or_else(|| {
            format!("target must contain type and name separated by '/', got {text:?}")
        })?;
        let owner = match kind.to_ascii_lowercase().as_str() {
            "vmi" | "vmis" | "virtualmachineinstance" | "virtualmachineinstances" => {
                Owner::VirtualMachineInstance
            }
            "vm" | "vms" | "virtualmachine" | "virtualmachines" => Owner::VirtualMachine,
            _ => return Err(format!("unsupported resource type '{kind}'")),
        };
        let (name, namespace) = match rest.split_once('.') {
            Some((name, namespace)) => (name, Some(namespace.to_string())),
            None => (rest, None),
        };
        if name.is_empty() || namespace.as_deref() == Some("") {
            return Err(format!("invalid target {text:?}: it names no object"));
        }
        Ok(Target {
            owner,
            name: name.to_string(),
            namespace,
        })
    }

    /// `TYPE/NAME.NAMESPACE`, as the target is written again (for ssh's host name).
    pub fn display(&self, namespace: &str) -> String {
        let kind = match self.owner {
            Owner::VirtualMachineInstance => "vmi",
            Owner::VirtualMachine => "vm",
        };
        format!("{kind}/{}.{namespace}", self.name)
    }
}

/// One port to forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMapping {
    pub protocol: String,
    pub local: u16,
    pub remote: u16,
}

impl PortMapping {
    /// `[PROTOCOL/]LOCAL[:REMOTE]`.
    pub fn parse(text: &str) -> Result<PortMapping, String> {
        let (protocol, ports) = match text.split_once('/') {
            Some((protocol, ports)) => (protocol.to_ascii_lowercase(), ports),
            None => ("tcp".to_string(), text),
        };
        if protocol != "tcp" && protocol != "udp" {
            return Err(format!("unknown protocol '{protocol}' in {text:?}"));
        }
        let port = |p: &str| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("invalid port {p:?} in {text:?}"))
        };
        let (local, remote) = match ports.split_once(':') {
            Some((local, remote)) => (port(local)?, port(remote)?),
            None => (port(ports)?, port(ports)?),
        };
        Ok(PortMapping {
            protocol,
            local,
            remote,
        })
    }
}

/// Opens the WebSocket to `port` of the target's guest.
async fn connect(
    client: &Client,
    namespace: &str,
    target: &Target,
    port: u16,
    protocol: &str,
) -> Result<hyper::upgrade::Upgraded, String> {
    let path = port_forward_path(namespace, target.owner, &target.name, port, protocol);
    open_websocket(client, &path)
        .await
        .map_err(|e| format!("can't access {}: {e}", target.display(namespace)))
}

/// `--stdio`: stdin and stdout are the connection to `port` (ssh's ProxyCommand).
pub async fn stdio(
    client: &Client,
    namespace: &str,
    target: &Target,
    port: &PortMapping,
) -> Result<(), String> {
    let stream = connect(client, namespace, target, port.remote, &port.protocol).await?;
    relay(
        TokioIo::new(stream),
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .await;
    Ok(())
}

/// Listens on `address` for each local port and forwards every connection; runs until killed.
pub async fn listen(
    client: &Client,
    namespace: &str,
    target: &Target,
    ports: &[PortMapping],
    address: &str,
) -> Result<(), String> {
    let mut listeners = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    for port in ports {
        if port.protocol == "udp" {
            let socket = UdpSocket::bind((address, port.local))
                .await
                .map_err(|e| format!("can't listen on {address}:{}/udp: {e}", port.local))?;
            let local = socket
                .local_addr()
                .map_err(|e| format!("can't listen on {address}:{}/udp: {e}", port.local))?;
            println!("Forwarding from {local} -> {}", port.remote);
            let path = port_forward_path(namespace, target.owner, &target.name, port.remote, "udp");
            tasks.spawn(crate::portforward_udp::forward(
                client.clone(),
                path,
                socket,
                port.remote,
            ));
            continue;
        }
        let listener = TcpListener::bind((address, port.local))
            .await
            .map_err(|e| format!("can't listen on {address}:{}: {e}", port.local))?;
        let local = listener
            .local_addr()
            .map_err(|e| format!("can't listen on {address}:{}: {e}", port.local))?;
        println!("Forwarding from {local} -> {}", port.remote);
        listeners.push((listener, port.clone()));
    }
    for (listener, port) in listeners {
        let (client, namespace, target) = (client.clone(), namespace.to_string(), target.clone());
        tasks.spawn(async move {
            loop {
                let (socket, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        eprintln!("accepting on port {}: {e}", port.local);
                        continue;
                    }
                };
                let (client, namespace, target) =
                    (client.clone(), namespace.clone(), target.clone());
                let remote = port.remote;
                tokio::spawn(async move {
                    match connect(&client, &namespace, &target, remote, "tcp").await {
                        Ok(stream) => {
                            let (read, write) = socket.into_split();
                            relay(TokioIo::new(stream), read, write).await;
                        }
                        Err(e) => eprintln!("forwarding {peer} -> {remote}: {e}"),
                    }
                });
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_in_kubevirts_form() {
        assert_eq!(
            Target::parse("vmi/testvmi"),
            Ok(Target {
                owner: Owner::VirtualMachineInstance,
                name: "testvmi".into(),
                namespace: None
            })
        );
        let vm = Target::parse("vm/testvm.mynamespace").unwrap();
        assert_eq!(vm.owner, Owner::VirtualMachine);
        assert_eq!(vm.namespace.as_deref(), Some("mynamespace"));
        assert_eq!(vm.display("mynamespace"), "vm/testvm.mynamespace");
        assert!(Target::parse("testvm").is_err());
        assert_eq!(
            Target::parse("pod/x").unwrap_err(),
            "unsupported resource type 'pod'"
        );
        assert!(Target::parse("vmi/").is_err());
        assert!(Target::parse("vmi/x.").is_err());
    }

    #[test]
    fn ports_in_kubevirts_form() {
        assert_eq!(
            PortMapping::parse("8080:80"),
            Ok(PortMapping {
                protocol: "tcp".into(),
                local: 8080,
                remote: 80
            })
        );
        assert_eq!(PortMapping::parse("22").unwrap().remote, 22);
        assert_eq!(PortMapping::parse("udp/53").unwrap().protocol, "udp");
        for bad in ["0", "x", "sctp/1", "1:70000", ""] {
            assert!(PortMapping::parse(bad).is_err(), "{bad}");
        }
    }
}
