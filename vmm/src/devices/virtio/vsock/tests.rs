//! vsock packet tests against `virtio_queue::mock` chains.

use virtio_queue::mock::MockSplitQueue;
use vm_memory::{ByteValued, Bytes, GuestAddress};

use super::packet::*;
use super::*;
use crate::devices::virtio::chain::{self, ChainError};
use crate::devices::virtio::test_utils::*;

fn rw_header(len: u32) -> PacketHeader {
    PacketHeader {
        src_cid: 3,
        dst_cid: HOST_CID,
        src_port: 5000,
        dst_port: 1234,
        len,
        type_: TYPE_STREAM,
        op: OP_RW,
        flags: 0,
        buf_alloc: 4096,
        fwd_cnt: 0,
    }
}

#[test]
fn header_is_44_bytes() {
    assert_eq!(HEADER_LEN, 44);
}

#[test]
fn tx_packet_split_over_descriptors() {
    let mem = mem();
    mem.write_slice(rw_header(5).as_slice(), GuestAddress(BUF))
        .unwrap();
    mem.write_slice(b"hello", GuestAddress(BUF + 0x100))
        .unwrap();
    let mock = MockSplitQueue::new(&mem, 16);
    let chain = mock
        .build_desc_chain(&[desc(BUF, 44, 0, 0), desc(BUF + 0x100, 5, 0, 0)])
        .unwrap();
    let (header, payload) = read_tx_packet(&mem, chain).unwrap();
    assert_eq!(header, rw_header(5));
    assert_eq!(payload, b"hello");
}

#[test]
fn malformed_tx_packets_are_errors() {
    let mem = mem();
    mem.write_slice(rw_header(100).as_slice(), GuestAddress(BUF))
        .unwrap();
    let mut huge = rw_header(0);
    huge.len = u32::MAX;
    mem.write_slice(huge.as_slice(), GuestAddress(BUF + 0x200))
        .unwrap();
    let cases: Vec<(&str, Vec<_>)> = vec![
        ("loop", vec![desc(BUF, 44, NEXT, 0)]),
        (
            "write-only",
            vec![desc(BUF, 44, NEXT, 1), desc(BUF + 44, 100, WRITE, 0)],
        ),
        ("short header", vec![desc(BUF, 20, 0, 0)]),
        (
            "payload missing",
            vec![desc(BUF, 44, NEXT, 1), desc(BUF + 44, 10, 0, 0)],
        ),
        ("length too large", vec![desc(BUF + 0x200, 44, 0, 0)]),
        ("outside memory", vec![desc(MEM_SIZE - 8, 44, 0, 0)]),
        (
            "zero length",
            vec![desc(BUF, 44, NEXT, 1), desc(BUF, 0, 0, 0)],
        ),
    ];
    for (what, descs) in cases {
        let mock = MockSplitQueue::new(&mem, 16);
        let chain = mock.build_multiple_desc_chains(&descs).unwrap();
        let err = read_tx_packet(&mem, chain).unwrap_err();
        let ok = match what {
            "loop" => matches!(err, PacketError::Chain(ChainError::Unterminated)),
            "write-only" => matches!(err, PacketError::Direction(1)),
            "short header" => matches!(err, PacketError::TooShort(20)),
            "payload missing" => matches!(
                err,
                PacketError::LengthMismatch {
                    len: 100,
                    available: 10
                }
            ),
            "length too large" => matches!(err, PacketError::TooLong(u32::MAX)),
            "zero length" => matches!(err, PacketError::Chain(ChainError::ZeroLength(1))),
            _ => matches!(err, PacketError::GuestMemory(..)),
        };
        assert!(ok, "{what}: {err:?}");
    }
}

#[test]
fn rx_packet_is_scattered_and_checked() {
    let mem = mem();
    let mock = MockSplitQueue::new(&mem, 16);
    let chain = mock
        .build_desc_chain(&[desc(BUF, 30, WRITE, 0), desc(BUF + 0x100, 100, WRITE, 0)])
        .unwrap();
    let descs = chain::collect(chain).unwrap();
    assert_eq!(rx_capacity(&descs).unwrap(), 130 - 44);
    let len = write_rx_packet(&mem, &descs, &rw_header(4), b"data").unwrap();
    assert_eq!(len, 48);
    let mut first = [0u8; 30];
    mem.read_slice(&mut first, GuestAddress(BUF)).unwrap();
    assert_eq!(&first[..], &rw_header(4).as_slice()[..30]);
    let mut tail = [0u8; 18];
    mem.read_slice(&mut tail, GuestAddress(BUF + 0x100))
        .unwrap();
    assert_eq!(&tail[14..], b"data");

    // Read-only, too small, outside memory.
    let ro = MockSplitQueue::new(&mem, 16);
    let descs = chain::collect(ro.build_desc_chain(&[desc(BUF, 64, 0, 0)]).unwrap()).unwrap();
    assert!(matches!(
        rx_capacity(&descs),
        Err(PacketError::Direction(0))
    ));
    let small = MockSplitQueue::new(&mem, 16);
    let descs =
        chain::collect(small.build_desc_chain(&[desc(BUF, 40, WRITE, 0)]).unwrap()).unwrap();
    assert!(matches!(
        rx_capacity(&descs),
        Err(PacketError::TooShort(40))
    ));
    let out = MockSplitQueue::new(&mem, 16);
    let descs = chain::collect(
        out.build_desc_chain(&[desc(MEM_SIZE + 0x1000, 64, WRITE, 0)])
            .unwrap(),
    )
    .unwrap();
    assert!(matches!(
        write_rx_packet(&mem, &descs, &rw_header(0), b""),
        Err(PacketError::GuestMemory(..))
    ));
}

mod muxer {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    use vmm_sys_util::epoll::Epoll;

    use super::*;
    use crate::devices::virtio::vsock::muxer::{Muxer, BUF_ALLOC};
    use crate::devices::worker::EventRegistry;

    fn guest(op: u16, src_port: u32, dst_port: u32, len: u32, buf_alloc: u32) -> PacketHeader {
        PacketHeader {
            op,
            src_port,
            dst_port,
            len,
            buf_alloc,
            ..rw_header(0)
        }
    }

    #[test]
    fn guest_connection_lifecycle() {
        let dir = scratch("mux");
        let (path, listener, port_listener) = bound(&dir);
        let epoll = Epoll::new().unwrap();
        let reg = EventRegistry::new(&epoll);
        let mut mux = Muxer::new(3, &path, listener);

        // Nothing listens on port 99: RST.
        mux.handle_guest_packet(&guest(OP_REQUEST, 5000, 99, 0, 4096), &[], &reg);
        let (rst, _) = mux.next_rx_packet(4096, &reg).unwrap();
        assert_eq!((rst.op, rst.src_port, rst.dst_port), (OP_RST, 99, 5000));

        // Port 1234 listens: RESPONSE, then data to the host stream.
        mux.handle_guest_packet(&guest(OP_REQUEST, 5000, 1234, 0, 8), &[], &reg);
        let (resp, _) = mux.next_rx_packet(4096, &reg).unwrap();
        assert_eq!({ resp.op }, OP_RESPONSE);
        assert_eq!({ resp.buf_alloc }, BUF_ALLOC);
        let (mut host, _) = port_listener.accept().unwrap();
        mux.handle_guest_packet(&guest(OP_RW, 5000, 1234, 3, 8), b"abc", &reg);
        let mut got = [0u8; 3];
        host.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abc");

        // Host data goes out within the guest's credit (8 bytes) and the buffer capacity.
        host.write_all(b"0123456789").unwrap();
        let token = 16;
        mux.stream_event(token, &reg);
        let (rw, data) = mux.next_rx_packet(5, &reg).unwrap();
        assert_eq!((rw.op, rw.len, rw.fwd_cnt), (OP_RW, 5, 3));
        assert_eq!(data, b"01234");
        let (_, data) = mux.next_rx_packet(4096, &reg).unwrap();
        assert_eq!(data, b"567");
        assert!(mux.next_rx_packet(4096, &reg).is_none(), "credit exhausted");
        // The guest consumed it all: the rest comes.
        let mut update = guest(OP_CREDIT_UPDATE, 5000, 1234, 0, 8);
        update.fwd_cnt = 8;
        mux.handle_guest_packet(&update, &[], &reg);
        let (_, data) = mux.next_rx_packet(4096, &reg).unwrap();
        assert_eq!(data, b"89");

        // Credit request, then shutdown closes the host stream.
        mux.handle_guest_packet(&guest(OP_CREDIT_REQUEST, 5000, 1234, 0, 8), &[], &reg);
        assert_eq!(
            { mux.next_rx_packet(4096, &reg).unwrap().0.op },
            OP_CREDIT_UPDATE
        );
        mux.handle_guest_packet(&guest(OP_SHUTDOWN, 5000, 1234, 0, 8), &[], &reg);
        assert_eq!({ mux.next_rx_packet(4096, &reg).unwrap().0.op }, OP_RST);
        let mut rest = Vec::new();
        host.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());

        // Data for a connection that does not exist, and a packet from a wrong CID.
        mux.handle_guest_packet(&guest(OP_RW, 5000, 1234, 1, 8), b"x", &reg);
        assert_eq!({ mux.next_rx_packet(4096, &reg).unwrap().0.op }, OP_RST);
        let mut spoofed = guest(OP_REQUEST, 1, 1234, 0, 8);
        spoofed.src_cid = 7;
        mux.handle_guest_packet(&spoofed, &[], &reg);
        assert_eq!({ mux.next_rx_packet(4096, &reg).unwrap().0.op }, OP_RST);
        assert!(mux.next_rx_packet(4096, &reg).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The VMM's vsock socket in `dir` (non-blocking) and a host service listening on port 1234.
    fn bound(dir: &std::path::Path) -> (std::path::PathBuf, UnixListener, UnixListener) {
        let path = dir.join("v.sock");
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port_listener = UnixListener::bind(format!("{}_1234", path.display())).unwrap();
        (path, listener, port_listener)
    }

    /// A connection to guest port 1234 from host port 5000, established; returns the muxer,
    /// the host's end and the registry's epoll (kept alive).
    fn established(dir: &std::path::Path) -> (Muxer, std::os::unix::net::UnixStream, Epoll) {
        let (path, listener, port_listener) = bound(dir);
        let epoll = Epoll::new().unwrap();
        let mut mux = Muxer::new(3, &path, listener);
        {
            let reg = EventRegistry::new(&epoll);
            mux.handle_guest_packet(&guest(OP_REQUEST, 5000, 1234, 0, 4096), &[], &reg);
            assert_eq!(
                { mux.next_rx_packet(4096, &reg).unwrap().0.op },
                OP_RESPONSE
            );
        }
        let (host, _) = port_listener.accept().unwrap();
        (mux, host, epoll)
    }

    fn shutdown(flags: u32) -> PacketHeader {
        PacketHeader {
            flags,
            ..guest(OP_SHUTDOWN, 5000, 1234, 0, 4096)
        }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ferrovirt-vsock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn neither_the_guest_nor_host_clients_open_more_connections_than_the_limit() {
        use crate::devices::virtio::vsock::muxer::MAX_CONNECTIONS;
        assert_eq!(MAX_CONNECTIONS, 1023, "Firecracker's limit");
        let dir = scratch("limit");
        let (path, listener, port_listener) = bound(&dir);
        let epoll = Epoll::new().unwrap();
        let reg = EventRegistry::new(&epoll);
        let mut mux = Muxer::new(3, &path, listener).with_max_connections(2);
        let mut ops = Vec::new();
        for src_port in 5000..5005 {
            mux.handle_guest_packet(&guest(OP_REQUEST, src_port, 1234, 0, 4096), &[], &reg);
            let (reply, _) = mux.next_rx_packet(4096, &reg).unwrap();
            ops.push((reply.op, reply.dst_port));
        }
        assert_eq!(
            ops,
            [
                (OP_RESPONSE, 5000),
                (OP_RESPONSE, 5001),
                (OP_RST, 5002),
                (OP_RST, 5003),
                (OP_RST, 5004)
            ]
        );
        assert_eq!(mux.connections(), 2);
        // Only the two connections reached the host.
        port_listener.set_nonblocking(true).unwrap();
        assert!(port_listener.accept().is_ok() && port_listener.accept().is_ok());
        assert!(port_listener.accept().is_err());

        // A host client while the table is full is closed without a REQUEST to the guest.
        let mut client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        client.write_all(b"CONNECT 1234\n").unwrap();
        mux.accept(&reg);
        assert!(mux.next_rx_packet(4096, &reg).is_none());
        // Closed with its CONNECT line unread: the client reads a reset (or EOF).
        let mut rest = Vec::new();
        match client.read_to_end(&mut rest) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("the host client was not closed: {other:?} {rest:?}"),
        }

        // One closed by the guest makes room again.
        mux.handle_guest_packet(&guest(OP_RST, 5000, 1234, 0, 4096), &[], &reg);
        mux.handle_guest_packet(&guest(OP_REQUEST, 5010, 1234, 0, 4096), &[], &reg);
        assert_eq!(
            { mux.next_rx_packet(4096, &reg).unwrap().0.op },
            OP_RESPONSE
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_guest_that_gives_no_receive_buffers_cannot_grow_the_control_queue() {
        use crate::devices::virtio::vsock::muxer::MAX_QUEUED_CONTROL;
        let dir = scratch("flood");
        let (path, listener, _port_listener) = bound(&dir);
        let epoll = Epoll::new().unwrap();
        let reg = EventRegistry::new(&epoll);
        let mut mux = Muxer::new(3, &path, listener);
        // Junk the host answers with RST, and never a receive buffer to take the answers.
        for port in 0..5 * MAX_QUEUED_CONTROL as u32 {
            mux.handle_guest_packet(&guest(OP_RW, port, 4321, 0, 4096), &[], &reg);
        }
        assert_eq!(mux.queued_control(), MAX_QUEUED_CONTROL);
        // A real connection is still answered.
        mux.handle_guest_packet(&guest(OP_REQUEST, 9000, 1234, 0, 4096), &[], &reg);
        assert_eq!(mux.queued_control(), MAX_QUEUED_CONTROL + 1);
        let mut last = None;
        while let Some((header, _)) = mux.next_rx_packet(4096, &reg) {
            last = Some(header.op);
        }
        assert_eq!(last, Some(OP_RESPONSE));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_guest_half_closes_and_still_receives() {
        use crate::devices::virtio::vsock::muxer::SHUTDOWN_SEND;
        let dir = scratch("guest-half");
        let (mut mux, mut host, epoll) = established(&dir);
        let reg = EventRegistry::new(&epoll);
        mux.handle_guest_packet(&guest(OP_RW, 5000, 1234, 4, 4096), b"ping", &reg);
        mux.handle_guest_packet(&shutdown(SHUTDOWN_SEND), &[], &reg);
        assert!(
            mux.next_rx_packet(4096, &reg).is_none(),
            "a half close is no RST"
        );
        // The host reads what the guest sent, then EOF, and can still answer.
        let mut got = Vec::new();
        host.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"ping");
        host.write_all(b"pong").unwrap();
        mux.stream_event(16, &reg);
        let (rw, data) = mux.next_rx_packet(4096, &reg).unwrap();
        assert_eq!(({ rw.op }, data.as_slice()), (OP_RW, &b"pong"[..]));
        // Data after the guest's SEND shutdown breaks the protocol: RST.
        mux.handle_guest_packet(&guest(OP_RW, 5000, 1234, 1, 4096), b"x", &reg);
        assert_eq!({ mux.next_rx_packet(4096, &reg).unwrap().0.op }, OP_RST);
        drop(host);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_end_of_the_host_stream_half_closes_towards_the_guest() {
        use crate::devices::virtio::vsock::muxer::{SHUTDOWN_RCV, SHUTDOWN_SEND};
        let dir = scratch("host-half");
        let (mut mux, mut host, epoll) = established(&dir);
        let reg = EventRegistry::new(&epoll);
        host.write_all(b"data").unwrap();
        host.shutdown(std::net::Shutdown::Write).unwrap();
        mux.stream_event(16, &reg);
        let (rw, data) = mux.next_rx_packet(4096, &reg).unwrap();
        assert_eq!(({ rw.op }, data.as_slice()), (OP_RW, &b"data"[..]));
        mux.stream_event(16, &reg);
        let (sd, _) = mux.next_rx_packet(4096, &reg).unwrap();
        assert_eq!(({ sd.op }, { sd.flags }), (OP_SHUTDOWN, SHUTDOWN_SEND));
        // The guest may still send; the host reads it.
        mux.handle_guest_packet(&guest(OP_RW, 5000, 1234, 5, 4096), b"reply", &reg);
        let mut got = [0u8; 5];
        host.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"reply");
        // The guest closes too: RST, and the host reads EOF.
        mux.handle_guest_packet(&shutdown(SHUTDOWN_RCV | SHUTDOWN_SEND), &[], &reg);
        assert_eq!({ mux.next_rx_packet(4096, &reg).unwrap().0.op }, OP_RST);
        let mut rest = Vec::new();
        host.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
