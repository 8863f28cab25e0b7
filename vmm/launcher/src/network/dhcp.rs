//! A DHCP responder for exactly one client: the guest on the tap device.
//!
//! Protocol (RFC 2131, the part a one-guest link needs): the guest broadcasts DISCOVER, the
//! responder answers OFFER with the guest's address; the guest broadcasts REQUEST, the responder
//! answers ACK (or NAK when the guest asks for another address). Answers carry the subnet mask,
//! router, DNS servers, hostname and a lease time, and are broadcast on the tap (the socket is
//! bound to the tap device, so they never leave through the Pod's own interface). Messages from
//! other hardware addresses are ignored.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

const SERVER_PORT: u16 = contract::podnet::DHCP_SERVER_PORT;
const CLIENT_PORT: u16 = 68;
const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
const LEASE_SECONDS: u32 = 86_400;

const DISCOVER: u8 = 1;
const OFFER: u8 = 2;
const REQUEST: u8 = 3;
const ACK: u8 = 5;
const NAK: u8 = 6;

const OPT_SUBNET_MASK: u8 = 1;
const OPT_ROUTER: u8 = 3;
const OPT_DNS: u8 = 6;
const OPT_HOSTNAME: u8 = 12;
const OPT_REQUESTED_IP: u8 = 50;
const OPT_LEASE_TIME: u8 = 51;
const OPT_MESSAGE_TYPE: u8 = 53;
const OPT_SERVER_ID: u8 = 54;
const OPT_END: u8 = 255;
const OPT_PAD: u8 = 0;

/// What the guest gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub interface: String,
    pub client_mac: [u8; 6],
    pub address: Ipv4Addr,
    pub netmask: Ipv4Addr,
    pub router: Ipv4Addr,
    pub dns: Vec<Ipv4Addr>,
    pub hostname: String,
}

/// The nameservers of the Pod's `resolv.conf` (IPv4, not loopback: those mean nothing to the
/// guest).
pub fn pod_dns_servers(resolv_conf: &str) -> Vec<Ipv4Addr> {
    resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<Ipv4Addr>().ok())
        .filter(|a| !a.is_loopback())
        .collect()
}

/// The answer to one client message, if it deserves one.
pub fn respond(request: &[u8], lease: &Lease) -> Option<Vec<u8>> {
    if request.len() < 240 || request[0] != 1 || request[236..240] != MAGIC_COOKIE {
        return None;
    }
    if request[28..34] != lease.client_mac {
        return None;
    }
    let options = parse_options(&request[240..]);
    let message_type = *options
        .iter()
        .find(|(code, _)| *code == OPT_MESSAGE_TYPE)?
        .1
        .first()?;
    let reply_type = match message_type {
        DISCOVER => OFFER,
        REQUEST => {
            let requested = options
                .iter()
                .find(|(code, _)| *code == OPT_REQUESTED_IP)
                .and_then(|(_, v)| <[u8; 4]>::try_from(v.as_slice()).ok())
                .map(Ipv4Addr::from)
                .or_else(|| {
                    let ciaddr = Ipv4Addr::new(request[12], request[13], request[14], request[15]);
                    (!ciaddr.is_unspecified()).then_some(ciaddr)
                });
            match requested {
                Some(addr) if addr != lease.address => NAK,
                _ => ACK,
            }
        }
        _ => return None,
    };
    let mut reply = vec![0u8; 240];
    reply[0] = 2; // BOOTREPLY
    reply[1] = 1; // Ethernet
    reply[2] = 6;
    reply[4..8].copy_from_slice(&request[4..8]); // xid
    reply[10..12].copy_from_slice(&request[10..12]); // flags
    if reply_type != NAK {
        reply[16..20].copy_from_slice(&lease.address.octets()); // yiaddr
        reply[20..24].copy_from_slice(&lease.router.octets()); // siaddr
    }
    reply[28..44].copy_from_slice(&request[28..44]); // chaddr
    reply[236..240].copy_from_slice(&MAGIC_COOKIE);
    let mut put = |code: u8, value: &[u8]| {
        reply.push(code);
        reply.push(u8::try_from(value.len()).unwrap_or(u8::MAX));
        reply.extend_from_slice(&value[..value.len().min(255)]);
    };
    put(OPT_MESSAGE_TYPE, &[reply_type]);
    put(OPT_SERVER_ID, &lease.router.octets());
    if reply_type != NAK {
        put(OPT_LEASE_TIME, &LEASE_SECONDS.to_be_bytes());
        put(OPT_SUBNET_MASK, &lease.netmask.octets());
        put(OPT_ROUTER, &lease.router.octets());
        if !lease.dns.is_empty() {
            let dns: Vec<u8> = lease.dns.iter().flat_map(|a| a.octets()).collect();
            put(OPT_DNS, &dns);
        }
        if !lease.hostname.is_empty() {
            put(OPT_HOSTNAME, lease.hostname.as_bytes());
        }
    }
    reply.push(OPT_END);
    Some(reply)
}

fn parse_options(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut options = Vec::new();
    while let Some((&code, rest)) = bytes.split_first() {
        match code {
            OPT_END => break,
            OPT_PAD => bytes = rest,
            _ => {
                let Some((&len, rest)) = rest.split_first() else {
                    break;
                };
                let len = usize::from(len);
                if rest.len() < len {
                    break;
                }
                options.push((code, rest[..len].to_vec()));
                bytes = &rest[len..];
            }
        }
    }
    options
}

/// The responder thread; stops when dropped.
pub struct DhcpServer {
    stop: Arc<AtomicBool>,
}

impl DhcpServer {
    /// Binds UDP port 67 on the lease's interface and answers in a thread.
    pub fn start(lease: Lease) -> std::io::Result<DhcpServer> {
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_reuse_address(true)?;
        socket.set_broadcast(true)?;
        socket.bind_device(Some(lease.interface.as_bytes()))?;
        let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, SERVER_PORT));
        socket.bind(&any.into())?;
        let socket: UdpSocket = socket.into();
        socket.set_read_timeout(Some(Duration::from_millis(500)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        thread::Builder::new()
            .name("dhcp".into())
            .spawn(move || serve(socket, lease, stopped))?;
        Ok(DhcpServer { stop })
    }
}

impl Drop for DhcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(socket: UdpSocket, lease: Lease, stop: Arc<AtomicBool>) {
    let mut buf = [0u8; 1500];
    let broadcast = SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT);
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, _)) = socket.recv_from(&mut buf) else {
            continue;
        };
        if let Some(reply) = respond(&buf[..n], &lease) {
            if let Err(e) = socket.send_to(&reply, broadcast) {
                log::warn!("DHCP: cannot answer on {}: {e}", lease.interface);
            } else {
                log::info!(
                    "DHCP: answered the guest on {} ({})",
                    lease.interface,
                    lease.address
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> Lease {
        Lease {
            interface: "tap0".into(),
            client_mac: [2, 0, 0, 0, 0, 9],
            address: Ipv4Addr::new(10, 0, 2, 2),
            netmask: Ipv4Addr::new(255, 255, 255, 0),
            router: Ipv4Addr::new(10, 0, 2, 1),
            dns: vec![Ipv4Addr::new(10, 96, 0, 10)],
            hostname: "vm1".into(),
        }
    }

    fn request(message_type: u8, mac: [u8; 6], requested: Option<Ipv4Addr>) -> Vec<u8> {
        let mut m = vec![0u8; 240];
        m[0] = 1;
        m[1] = 1;
        m[2] = 6;
        m[4..8].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        m[10] = 0x80;
        m[28..34].copy_from_slice(&mac);
        m[236..240].copy_from_slice(&MAGIC_COOKIE);
        m.extend_from_slice(&[OPT_MESSAGE_TYPE, 1, message_type]);
        if let Some(addr) = requested {
            m.push(OPT_REQUESTED_IP);
            m.push(4);
            m.extend_from_slice(&addr.octets());
        }
        m.extend_from_slice(&[OPT_PAD, OPT_END]);
        m
    }

    fn option(reply: &[u8], code: u8) -> Option<Vec<u8>> {
        parse_options(&reply[240..])
            .into_iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| v)
    }

    #[test]
    fn discover_request_and_strangers() {
        let lease = lease();
        let mac = lease.client_mac;
        let cases = [
            (request(DISCOVER, mac, None), Some(OFFER)),
            (request(REQUEST, mac, Some(lease.address)), Some(ACK)),
            (request(REQUEST, mac, None), Some(ACK)),
            (
                request(REQUEST, mac, Some(Ipv4Addr::new(10, 0, 2, 99))),
                Some(NAK),
            ),
            (request(DISCOVER, [2, 0, 0, 0, 0, 1], None), None),
            (request(7, mac, None), None),
            (vec![1u8; 100], None),
        ];
        for (message, want) in cases {
            let reply = respond(&message, &lease);
            assert_eq!(
                reply
                    .as_ref()
                    .and_then(|r| option(r, OPT_MESSAGE_TYPE))
                    .map(|v| v[0]),
                want
            );
            if let Some(reply) = reply {
                assert_eq!(reply[0], 2);
                assert_eq!(&reply[4..8], &message[4..8]);
                assert_eq!(&reply[28..34], &mac);
                if want != Some(NAK) {
                    assert_eq!(&reply[16..20], &lease.address.octets());
                    assert_eq!(
                        option(&reply, OPT_ROUTER),
                        Some(lease.router.octets().to_vec())
                    );
                    assert_eq!(
                        option(&reply, OPT_SUBNET_MASK),
                        Some(lease.netmask.octets().to_vec())
                    );
                    assert_eq!(option(&reply, OPT_DNS), Some(vec![10, 96, 0, 10]));
                    assert_eq!(option(&reply, OPT_HOSTNAME), Some(b"vm1".to_vec()));
                }
            }
        }
    }

    #[test]
    fn dns_from_resolv_conf() {
        let conf = "search svc.cluster.local\nnameserver 10.96.0.10\nnameserver 127.0.0.53\nnameserver ::1\noptions ndots:5\n";
        assert_eq!(pod_dns_servers(conf), vec![Ipv4Addr::new(10, 96, 0, 10)]);
    }
}
