//! Port-forwarding on the handler side: virt-api's upgraded connection and a TCP connection to
//! a port of the guest, copied into each other until either closes.
//!
//! The connection is made from inside the launcher Pod's network namespace, to the guest's
//! address behind the masquerade binding's tap, as KubeVirt's virt-handler dials it: every
//! guest port is reachable (not only those the interface's `ports` forward from the Pod IP),
//! and no NetworkPolicy of the Pod is in the way. The launcher's process is found through its
//! socket (`SO_PEERCRED`, [`crate::podnet::launcher_process`]); the guest's address is the
//! second address of the network on the tap, read from the namespace's routing table
//! (`/proc/<pid>/net/route`), so it follows the VMI's `vmNetworkCIDR` without reading the VMI.
//! A thread of its own enters the namespace (`setns(2)` changes only the calling thread), dials
//! and ends; the socket stays in the namespace it was made in.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use contract::podnet::{guest_address, TAP_DEVICE};
use contract::sockets::LAUNCHER_SOCKET;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;

use super::{text, ServerConfig, PORT_FORWARD_UPGRADE};

/// How long the guest gets to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The network on the tap `tap` in a `/proc/<pid>/net/route` table: its address (the table's
/// fields are little-endian hex).
pub fn tap_network(route: &str, tap: &str) -> Option<Ipv4Addr> {
    route.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() != Some(&tap) {
            return None;
        }
        let hex = |i: usize| u32::from_str_radix(fields.get(i)?, 16).ok();
        let (destination, gateway, mask) = (hex(1)?, hex(2)?, hex(7)?);
        // The on-link route of the tap's own network, not a route through a gateway.
        (gateway == 0 && mask != 0 && mask != u32::MAX)
            .then(|| Ipv4Addr::from(destination.to_le_bytes()))
    })
}

/// Why the guest could not be reached.
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("no launcher for this VMI on this node")]
    NoLauncher(#[source] crate::podnet::PodNetError),
    #[error("reading the launcher's routing table")]
    Routes(#[source] io::Error),
    #[error("the launcher's network namespace has no {TAP_DEVICE} network (the VMI has no masquerade interface)")]
    NoGuestNetwork,
    #[error("entering the launcher's network namespace")]
    Namespace(#[source] io::Error),
    #[error("connecting to {0}")]
    Connect(SocketAddrV4, #[source] io::Error),
}

impl DialError {
    fn status(&self) -> StatusCode {
        match self {
            DialError::NoLauncher(_) => StatusCode::NOT_FOUND,
            DialError::NoGuestNetwork => StatusCode::BAD_REQUEST,
            DialError::Connect(..) => StatusCode::BAD_GATEWAY,
            DialError::Routes(_) | DialError::Namespace(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Connects to `port` of the guest of the launcher serving `socket` (blocking).
fn dial(socket: &std::path::Path, port: u16) -> Result<TcpStream, DialError> {
    let (pid, _) = crate::podnet::launcher_process(socket).map_err(DialError::NoLauncher)?;
    let routes =
        std::fs::read_to_string(format!("/proc/{pid}/net/route")).map_err(DialError::Routes)?;
    let network = tap_network(&routes, TAP_DEVICE).ok_or(DialError::NoGuestNetwork)?;
    let guest = SocketAddrV4::new(guest_address(network), port);
    let namespace =
        std::fs::File::open(format!("/proc/{pid}/ns/net")).map_err(DialError::Namespace)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&namespace),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(|e| DialError::Namespace(e.into()))?;
                TcpStream::connect_timeout(&SocketAddr::V4(guest), CONNECT_TIMEOUT)
                    .map_err(|e| DialError::Connect(guest, e))
            })
            .join()
            .unwrap_or_else(|_| {
                Err(DialError::Namespace(io::Error::other(
                    "the dialing thread panicked",
                )))
            })
    })
}

/// Connects to the guest's `port`, answers 101 and relays in the background.
pub async fn open(
    config: &ServerConfig,
    uid: &str,
    port: u16,
    mut request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if !super::asks_for_upgrade(&request, PORT_FORWARD_UPGRADE) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("port-forward needs Connection: Upgrade, Upgrade: {PORT_FORWARD_UPGRADE}"),
        );
    }
    let socket = config.socket_root.join(uid).join(LAUNCHER_SOCKET);
    let dialed = tokio::task::spawn_blocking(move || dial(&socket, port)).await;
    let stream = match dialed {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            let message = format!(
                "port-forward to port {port} of VMI {uid}: {}",
                crate::error_chain(&e)
            );
            log::info!("{message}");
            return text(e.status(), message);
        }
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let stream = match stream
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(stream))
    {
        Ok(stream) => stream,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    super::relay_upgraded(
        &mut request,
        PORT_FORWARD_UPGRADE,
        stream,
        format!("port-forward to port {port} of {uid}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTES: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000F40A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
tap0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
";

    #[test]
    fn the_guest_network_is_the_taps_on_link_route() {
        assert_eq!(
            tap_network(ROUTES, "tap0"),
            Some(Ipv4Addr::new(10, 0, 2, 0))
        );
        assert_eq!(
            guest_address(tap_network(ROUTES, "tap0").unwrap()),
            Ipv4Addr::new(10, 0, 2, 2)
        );
        assert_eq!(tap_network(ROUTES, "tap1"), None);
        assert_eq!(tap_network("Iface\tDestination\ntap0\tzz", "tap0"), None);
        // A default route through the tap is not its network.
        let via = "Iface\tDestination\tGateway\ntap0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000";
        assert_eq!(tap_network(via, "tap0"), None);
    }

    #[test]
    fn a_missing_launcher_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let error = dial(&dir.path().join("launcher-sock"), 22).unwrap_err();
        assert_eq!(error.status(), StatusCode::NOT_FOUND, "{error}");
    }

    #[test]
    fn a_process_without_the_tap_has_no_guest_network() {
        // This test process serves the socket: its namespace has no tap0 network.
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("launcher-sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let error = dial(&socket, 22).unwrap_err();
        assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{error}");
        assert!(error.to_string().contains("no tap0 network"), "{error}");
    }
}
