//! Port-forwarding on the handler side: virt-api's upgraded connection and a TCP connection to
//! a port of the guest, copied into each other until either closes; or, for UDP, a socket
//! connected to the guest's port, each datagram carried on the upgraded connection as a 2-byte
//! big-endian length and its bytes (virt-api turns each into one WebSocket message, as
//! KubeVirt's virtctl sends and expects them).
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
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::Duration;

use bytes::Bytes;
use contract::podnet::{guest_address, TAP_DEVICE};
use contract::sockets::LAUNCHER_SOCKET;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{text, ServerConfig, PORT_FORWARD_UPGRADE};

/// How long the guest gets to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest datagram the 2-byte length can carry (a UDP datagram is smaller still).
const MAX_DATAGRAM: usize = u16::MAX as usize;

/// The transport of a port-forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    /// `tcp` or `udp`, as in the path.
    pub fn parse(name: &str) -> Option<Protocol> {
        match name {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            _ => None,
        }
    }
}

/// What [`dial`] made, in the launcher Pod's network namespace.
enum Dialed {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

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

/// How a failed dial is answered.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// An HTTP error: nothing to forward to.
    Status(StatusCode),
    /// A stream that ends at once: the guest did not accept the connection (not up yet, or
    /// nothing listens). KubeVirt's virt-handler upgrades before it dials, and KubeVirt's
    /// virtctl stops accepting local connections after a port-forward that fails to open, so
    /// an error here would end its forwarder while the guest boots.
    ClosedStream,
}

impl DialError {
    fn refusal(&self) -> Refusal {
        match self {
            DialError::NoLauncher(_) => Refusal::Status(StatusCode::NOT_FOUND),
            DialError::NoGuestNetwork => Refusal::Status(StatusCode::BAD_REQUEST),
            DialError::Connect(..) => Refusal::ClosedStream,
            DialError::Routes(_) | DialError::Namespace(_) => {
                Refusal::Status(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }
}

/// Connects to `port` of the guest of the launcher serving `socket` (blocking).
fn dial(socket: &std::path::Path, port: u16, protocol: Protocol) -> Result<Dialed, DialError> {
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
                let connect = |e| DialError::Connect(guest, e);
                match protocol {
                    Protocol::Tcp => {
                        TcpStream::connect_timeout(&SocketAddr::V4(guest), CONNECT_TIMEOUT)
                            .map(Dialed::Tcp)
                            .map_err(connect)
                    }
                    Protocol::Udp => UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
                        .and_then(|udp| udp.connect(guest).map(|()| Dialed::Udp(udp)))
                        .map_err(connect),
                }
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
    protocol: Protocol,
    mut request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if !super::asks_for_upgrade(&request, PORT_FORWARD_UPGRADE) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("port-forward needs Connection: Upgrade, Upgrade: {PORT_FORWARD_UPGRADE}"),
        );
    }
    let socket = config.socket_root.join(uid).join(LAUNCHER_SOCKET);
    let dialed = tokio::task::spawn_blocking(move || dial(&socket, port, protocol)).await;
    let dialed = match dialed {
        Ok(Ok(dialed)) => dialed,
        Ok(Err(e)) => {
            let message = format!(
                "port-forward to port {port} of VMI {uid}: {}",
                crate::error_chain(&e)
            );
            log::info!("{message}");
            return match e.refusal() {
                Refusal::Status(status) => text(status, message),
                Refusal::ClosedStream => {
                    let (closed, _) = tokio::io::duplex(1);
                    super::relay_upgraded(&mut request, PORT_FORWARD_UPGRADE, closed, message)
                }
            };
        }
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let what = format!("port-forward to port {port}/{protocol:?} of {uid}");
    let internal = |e: io::Error| text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    match dialed {
        Dialed::Tcp(stream) => match stream
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpStream::from_std(stream))
        {
            Ok(stream) => super::relay_upgraded(&mut request, PORT_FORWARD_UPGRADE, stream, what),
            Err(e) => internal(e),
        },
        Dialed::Udp(socket) => match socket
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UdpSocket::from_std(socket))
        {
            Ok(socket) => {
                let (near, far) = tokio::io::duplex(2 * (MAX_DATAGRAM + 2));
                tokio::spawn(carry_datagrams(far, socket));
                super::relay_upgraded(&mut request, PORT_FORWARD_UPGRADE, near, what)
            }
            Err(e) => internal(e),
        },
    }
}

/// Carries datagrams between `stream` (each a 2-byte big-endian length and its bytes) and the
/// connected `socket` until `stream` ends. A guest port that nobody listens on answers with
/// ICMP, which fails a later receive: ignored, as UDP goes on.
async fn carry_datagrams<S>(stream: S, socket: tokio::net::UdpSocket)
where
    S: AsyncRead + AsyncWrite,
{
    let (mut read, mut write) = tokio::io::split(stream);
    let to_guest = async {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let Ok(len) = read.read_u16().await else {
                return;
            };
            let datagram = &mut buf[..usize::from(len)];
            if read.read_exact(datagram).await.is_err() {
                return;
            }
            let _ = socket.send(datagram).await;
        }
    };
    let from_guest = async {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let n = match socket.recv(&mut buf).await {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(_) => return,
            };
            let len = u16::try_from(n).unwrap_or(u16::MAX);
            let mut framed = Vec::with_capacity(n + 2);
            framed.extend(len.to_be_bytes());
            framed.extend(&buf[..usize::from(len)]);
            if write.write_all(&framed).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = to_guest => {}
        () = from_guest => {}
    }
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
        for protocol in [Protocol::Tcp, Protocol::Udp] {
            let Err(error) = dial(&dir.path().join("launcher-sock"), 22, protocol) else {
                panic!("dialled {protocol:?} without a launcher");
            };
            assert_eq!(
                error.refusal(),
                Refusal::Status(StatusCode::NOT_FOUND),
                "{error}"
            );
        }
    }

    #[test]
    fn a_process_without_the_tap_has_no_guest_network() {
        // This test process serves the socket: its namespace has no tap0 network.
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("launcher-sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let Err(error) = dial(&socket, 22, Protocol::Udp) else {
            panic!("dialled without a guest network");
        };
        assert_eq!(
            error.refusal(),
            Refusal::Status(StatusCode::BAD_REQUEST),
            "{error}"
        );
        assert!(error.to_string().contains("no tap0 network"), "{error}");
    }

    #[test]
    fn a_guest_port_that_refuses_gets_a_stream_that_ends_not_an_error() {
        // Nothing listens on a port of a socket bound and dropped.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let address = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let refused = TcpStream::connect_timeout(&SocketAddr::V4(address), CONNECT_TIMEOUT)
            .expect_err("nothing listens");
        let error = DialError::Connect(address, refused);
        assert_eq!(error.refusal(), Refusal::ClosedStream, "{error}");
    }

    #[tokio::test]
    async fn datagrams_go_to_the_port_and_answers_come_back_framed() {
        let guest = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(guest.local_addr().unwrap()).await.unwrap();
        let (mut api, far) = tokio::io::duplex(1 << 16);
        let carrying = tokio::spawn(carry_datagrams(far, socket));
        api.write_all(b"\0\x04ping\0\x03two").await.unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = guest.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"ping");
        let (n, _) = guest.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"two");
        guest.send_to(b"pong", from).await.unwrap();
        guest.send_to(b"", from).await.unwrap();
        let mut framed = [0u8; 8];
        api.read_exact(&mut framed).await.unwrap();
        assert_eq!(&framed, b"\0\x04pong\0\0");
        // virt-api going away ends the relay.
        drop(api);
        carrying.await.unwrap();
    }
}
