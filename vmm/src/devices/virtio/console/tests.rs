//! virtio-console tests: the device driven through its six queues in test guest memory, the
//! way Linux's virtio_console driver drives it, with a real client on its unix socket. The
//! worker is run event by event by the test (no thread), except in the migration test at the
//! end, which goes through the virtio-mmio transport and a real worker.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::epoll::Epoll;
use vmm_sys_util::eventfd::EventFd;

use super::control::{ControlMessage, ControlState, PortState, MAX_OUTGOING};
use super::device::{ConsoleWorker, CLIENT_EVENT, LISTENER_EVENT, START_EVENT};
use super::*;
use crate::devices::virtio::test_utils::*;
use crate::devices::virtio::{Interrupt, VirtioDevice, VIRTIO_F_VERSION_1};
use crate::devices::worker::EventRegistry;
use crate::guest_memory::GuestMemoryMmap;

/// The id Linux's DEVICE_READY carries (VIRTIO_CONSOLE_BAD_ID).
const BAD_ID: u32 = u32::MAX;
const QSIZE: u16 = 16;

/// The driver's side of one split queue in test guest memory, at `index * 0x1000`: buffers
/// are offered with descriptors taken in turn, and remembered by head so that what the device
/// wrote can be read back from the used ring.
struct DriverQueue {
    base: u64,
    next_desc: u16,
    avail_idx: u16,
    used_seen: u16,
    buffers: HashMap<u16, Vec<(u64, u32)>>,
}

impl DriverQueue {
    fn new(index: usize) -> DriverQueue {
        DriverQueue {
            base: index as u64 * 0x1000,
            next_desc: 0,
            avail_idx: 0,
            used_seen: 0,
            buffers: HashMap::new(),
        }
    }

    fn avail(&self) -> u64 {
        self.base + 0x100
    }

    fn used(&self) -> u64 {
        self.base + 0x200
    }

    fn queue(&self) -> Queue {
        let mut queue = Queue::new(QSIZE).unwrap();
        queue.set_size(QSIZE);
        queue.set_ready(true);
        queue.set_desc_table_address(Some(self.base as u32), Some(0));
        queue.set_avail_ring_address(Some(self.avail() as u32), Some(0));
        queue.set_used_ring_address(Some(self.used() as u32), Some(0));
        queue
    }

    /// Offers one chain of `(address, length, flags)` buffers (NEXT is set here); returns its
    /// head.
    fn offer(&mut self, mem: &GuestMemoryMmap, bufs: &[(u64, u32, u16)]) -> u16 {
        let head = self.next_desc;
        for (i, &(addr, len, flags)) in bufs.iter().enumerate() {
            let index = self.next_desc;
            self.next_desc = (self.next_desc + 1) % QSIZE;
            let flags = if i + 1 == bufs.len() {
                flags
            } else {
                flags | NEXT
            };
            mem.write_obj(
                desc(addr, len, flags, self.next_desc),
                GuestAddress(self.base + 16 * u64::from(index)),
            )
            .unwrap();
        }
        let slot = self.avail() + 4 + 2 * u64::from(self.avail_idx % QSIZE);
        mem.write_obj(head, GuestAddress(slot)).unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        mem.write_obj(self.avail_idx, GuestAddress(self.avail() + 2))
            .unwrap();
        self.buffers
            .insert(head, bufs.iter().map(|b| (b.0, b.1)).collect());
        head
    }

    /// The used entries since the last call: (head, length).
    fn take_used(&mut self, mem: &GuestMemoryMmap) -> Vec<(u16, u32)> {
        let idx: u16 = mem.read_obj(GuestAddress(self.used() + 2)).unwrap();
        let mut entries = Vec::new();
        while self.used_seen != idx {
            let slot = self.used() + 4 + 8 * u64::from(self.used_seen % QSIZE);
            let id: u32 = mem.read_obj(GuestAddress(slot)).unwrap();
            let len: u32 = mem.read_obj(GuestAddress(slot + 4)).unwrap();
            entries.push((id as u16, len));
            self.used_seen = self.used_seen.wrapping_add(1);
        }
        entries
    }

    /// The first `len` bytes of the buffers of the chain at `head`.
    fn written(&self, mem: &GuestMemoryMmap, head: u16, len: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut left = len as usize;
        for &(addr, size) in &self.buffers[&head] {
            let n = left.min(size as usize);
            let mut part = vec![0u8; n];
            mem.read_slice(&mut part, GuestAddress(addr)).unwrap();
            bytes.extend(part);
            left -= n;
        }
        bytes
    }
}

/// A control message as the driver receives it: the header and what follows (the name).
#[derive(Debug, PartialEq, Eq)]
struct Received {
    id: u32,
    event: u16,
    value: u16,
    rest: Vec<u8>,
}

fn received(id: u32, event: u16, value: u16) -> Received {
    Received {
        id,
        event,
        value,
        rest: Vec::new(),
    }
}

fn message(id: u32, event: u16, value: u16) -> Vec<u8> {
    ControlMessage { id, event, value }.to_bytes()
}

/// A scratch directory for one test's socket, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("ferrovirt-console-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The device, a worker the test runs event by event, and the driver's queues.
struct Rig {
    mem: GuestMemoryMmap,
    queues: Vec<DriverQueue>,
    device: VirtioConsole,
    worker: ConsoleWorker,
    interrupt: Arc<Interrupt>,
    interrupt_evt: EventFd,
    epoll: Epoll,
    next_buf: u64,
    socket: PathBuf,
    _scratch: Scratch,
}

impl Rig {
    fn new(name: &str) -> Rig {
        let scratch = Scratch::new(name);
        let socket = scratch.0.join("agent.sock");
        let device = VirtioConsole::new(&socket).unwrap();
        Rig::with_device(device, socket, scratch)
    }

    fn with_device(device: VirtioConsole, socket: PathBuf, scratch: Scratch) -> Rig {
        let mem = mem();
        let queues: Vec<DriverQueue> = (0..QUEUES).map(DriverQueue::new).collect();
        let interrupt_evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let interrupt = Arc::new(Interrupt::new(interrupt_evt.try_clone().unwrap()));
        let worker = device.test_worker(
            mem.clone(),
            std::array::from_fn(|i| queues[i].queue()),
            std::array::from_fn(|_| EventFd::new(libc::EFD_NONBLOCK).unwrap()),
            interrupt.clone(),
        );
        Rig {
            mem,
            queues,
            device,
            worker,
            interrupt,
            interrupt_evt,
            epoll: Epoll::new().unwrap(),
            next_buf: BUF,
            socket,
            _scratch: scratch,
        }
    }

    fn event(&mut self, token: u64) {
        let reg = EventRegistry::new(&self.epoll);
        self.worker.handle(token, &reg);
    }

    fn buf(&mut self, len: u32) -> u64 {
        let addr = self.next_buf;
        self.next_buf += u64::from(len).next_multiple_of(0x100);
        assert!(self.next_buf < MEM_SIZE, "the test ran out of buffer space");
        addr
    }

    /// Offers `count` device-writable buffers of `len` bytes on `queue` and notifies it.
    fn give(&mut self, queue: u16, count: usize, len: u32) {
        for _ in 0..count {
            let addr = self.buf(len);
            self.queues[queue as usize].offer(&self.mem, &[(addr, len, WRITE)]);
        }
        self.event(u64::from(queue));
    }

    /// Sends `bytes` on `queue` as the guest would (split at `split` when given), notifies it
    /// and checks the device took the buffer back.
    fn send(&mut self, queue: u16, bytes: &[u8], split: Option<usize>) {
        let pieces: Vec<&[u8]> = match split {
            Some(at) => vec![&bytes[..at], &bytes[at..]],
            None => vec![bytes],
        };
        let mut bufs = Vec::new();
        for piece in pieces {
            let addr = self.buf(piece.len() as u32);
            self.mem.write_slice(piece, GuestAddress(addr)).unwrap();
            bufs.push((addr, piece.len() as u32, 0));
        }
        let head = self.queues[queue as usize].offer(&self.mem, &bufs);
        self.event(u64::from(queue));
        assert_eq!(
            self.queues[queue as usize].take_used(&self.mem),
            vec![(head, 0)],
            "the device took the guest's buffer on queue {queue} back, used length 0"
        );
    }

    fn control(&mut self, id: u32, event: u16, value: u16) {
        self.send(CONTROL_TX_QUEUE, &message(id, event, value), None);
    }

    /// What the device wrote in the used buffers of `queue` since the last look.
    fn received(&mut self, queue: u16) -> Vec<Vec<u8>> {
        let q = &mut self.queues[queue as usize];
        q.take_used(&self.mem)
            .into_iter()
            .map(|(head, len)| q.written(&self.mem, head, len))
            .collect()
    }

    fn received_control(&mut self) -> Vec<Received> {
        self.received(CONTROL_RX_QUEUE)
            .into_iter()
            .map(|bytes| {
                let msg = ControlMessage::parse(&bytes).expect("a whole control message");
                Received {
                    id: msg.id,
                    event: msg.event,
                    value: msg.value,
                    rest: bytes[CONTROL_HEADER_LEN..].to_vec(),
                }
            })
            .collect()
    }

    /// A host client connects (and the listener's event is handled).
    fn connect(&mut self) -> UnixStream {
        let client = UnixStream::connect(&self.socket).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        self.event(LISTENER_EVENT);
        client
    }

    /// The driver's handshake up to both ports ready (control buffers given first).
    fn handshake(&mut self) {
        self.give(CONTROL_RX_QUEUE, 8, 256);
        self.control(BAD_ID, DEVICE_READY, 1);
        self.control(0, PORT_READY, 1);
        self.control(AGENT_PORT, PORT_READY, 1);
    }

    fn assert_not_broken(&self) {
        assert!(!self.interrupt.is_broken(), "the device is marked broken");
    }
}

/// Reads exactly `n` bytes from the client.
fn read_n(client: &mut UnixStream, n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    client.read_exact(&mut bytes).unwrap();
    bytes
}

/// Nothing waits on the client's socket.
fn assert_nothing_to_read(client: &UnixStream) {
    client.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    match (&*client).read(&mut byte) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the client had something to read: {other:?} {byte:?}"),
    }
    client.set_nonblocking(false).unwrap();
}

#[test]
fn features_and_config_space_announce_two_ports() {
    let rig = Rig::new("config");
    let device = &rig.device;
    assert_eq!(device.device_type(), 3);
    assert_eq!(device.features(), VIRTIO_F_VERSION_1 | F_MULTIPORT);
    assert_eq!(device.queue_max_sizes().len(), 6);
    let config = device.config_space();
    assert_eq!(config.len(), 12);
    assert_eq!(&config[..4], &[0; 4], "cols and rows");
    assert_eq!(&config[4..8], &2u32.to_le_bytes(), "max_nr_ports");
    assert_eq!(&config[8..], &[0; 4], "emerg_wr");
    assert_eq!(device.socket_path(), rig.socket.as_path());
}

#[test]
fn the_handshake_adds_both_ports_and_names_the_agent_port() {
    let mut rig = Rig::new("handshake");
    rig.give(CONTROL_RX_QUEUE, 8, 256);
    assert!(
        rig.received_control().is_empty(),
        "nothing before DEVICE_READY"
    );

    rig.control(BAD_ID, DEVICE_READY, 1);
    assert_eq!(
        rig.received_control(),
        vec![received(0, PORT_ADD, 1), received(1, PORT_ADD, 1)]
    );
    rig.control(0, PORT_READY, 1);
    assert!(rig.received_control().is_empty(), "port 0 is not a console");
    rig.control(AGENT_PORT, PORT_READY, 1);
    let name = Received {
        rest: b"org.qemu.guest_agent.0".to_vec(),
        ..received(AGENT_PORT, PORT_NAME, 1)
    };
    // The used length is the header and the name, no NUL: Linux takes it as the name's end.
    let used = rig.queues[CONTROL_RX_QUEUE as usize].take_used(&rig.mem);
    assert_eq!(used.len(), 1);
    assert_eq!(used[0].1, 8 + 22);
    let bytes = rig.queues[CONTROL_RX_QUEUE as usize].written(&rig.mem, used[0].0, used[0].1);
    assert_eq!(&bytes[8..], name.rest.as_slice());
    assert_eq!(&bytes[..8], &message(1, PORT_NAME, 1)[..8]);

    let state = rig.device.control_state();
    assert!(state.device_ready());
    let ready = PortState {
        ready: true,
        ..PortState::default()
    };
    assert_eq!(state.port(0), Some(ready));
    assert_eq!(state.port(1), Some(ready));
    assert!(!state.guest_open(AGENT_PORT));
    rig.assert_not_broken();
    assert!(
        rig.interrupt_evt.read().unwrap() > 0,
        "interrupts were raised"
    );
}

#[test]
fn control_messages_wait_for_receive_buffers() {
    let mut rig = Rig::new("wait");
    rig.control(BAD_ID, DEVICE_READY, 1);
    assert_eq!(rig.device.control_state().outgoing(), 2);
    rig.give(CONTROL_RX_QUEUE, 1, 64);
    assert_eq!(rig.received_control(), vec![received(0, PORT_ADD, 1)]);
    rig.give(CONTROL_RX_QUEUE, 1, 64);
    assert_eq!(rig.received_control(), vec![received(1, PORT_ADD, 1)]);
    assert_eq!(rig.device.control_state().outgoing(), 0);
}

#[test]
fn port_open_follows_the_host_client_both_ways() {
    let mut rig = Rig::new("host-open");
    // A client that connects before the port is ready is announced after its name.
    let client = rig.connect();
    rig.handshake();
    let messages = rig.received_control();
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(messages[2].event, PORT_NAME);
    assert_eq!(messages[3], received(AGENT_PORT, PORT_OPEN, 1));

    // It leaves: PORT_OPEN 0 once the device sees the end of its stream.
    drop(client);
    rig.event(CLIENT_EVENT);
    assert_eq!(
        rig.received_control(),
        vec![received(AGENT_PORT, PORT_OPEN, 0)]
    );
    // Another connects: PORT_OPEN 1.
    let _client = rig.connect();
    assert_eq!(
        rig.received_control(),
        vec![received(AGENT_PORT, PORT_OPEN, 1)]
    );
    assert!(rig.device.control_state().port(1).unwrap().host_open_told);

    // The guest opens and closes the port.
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    assert!(rig.device.control_state().guest_open(AGENT_PORT));
    rig.control(AGENT_PORT, PORT_OPEN, 0);
    assert!(!rig.device.control_state().guest_open(AGENT_PORT));
    assert!(rig.received_control().is_empty());
    rig.assert_not_broken();
}

#[test]
fn guest_output_reaches_the_client_and_is_dropped_without_one() {
    let mut rig = Rig::new("to-host");
    rig.handshake();
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    // No client: taken back and dropped.
    rig.send(AGENT_TX_QUEUE, b"lost\n", None);
    let mut client = rig.connect();
    rig.send(AGENT_TX_QUEUE, b"{\"return\": {}}\n", Some(4));
    assert_eq!(read_n(&mut client, 15), b"{\"return\": {}}\n");
    assert_nothing_to_read(&client);
    // Port 0 has no host side: its output is dropped too.
    rig.send(PORT0_TX_QUEUE, b"port zero", None);
    assert_nothing_to_read(&client);
    rig.assert_not_broken();
}

#[test]
fn client_bytes_land_in_receive_buffers_once_the_guest_opens_the_port() {
    let mut rig = Rig::new("to-guest");
    rig.handshake();
    rig.give(AGENT_RX_QUEUE, 3, 64);
    let mut client = rig.connect();
    client
        .write_all(b"\xff{\"execute\":\"guest-ping\"}\n")
        .unwrap();
    rig.event(CLIENT_EVENT);
    assert!(
        rig.received(AGENT_RX_QUEUE).is_empty(),
        "data went to a port the guest has not opened (Linux drops it)"
    );
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    assert_eq!(
        rig.received(AGENT_RX_QUEUE),
        vec![b"\xff{\"execute\":\"guest-ping\"}\n".to_vec()]
    );

    // More than one buffer holds: split over buffers, each used length what it got.
    let long: Vec<u8> = (0..100u8).collect();
    client.write_all(&long).unwrap();
    rig.event(CLIENT_EVENT);
    let got = rig.received(AGENT_RX_QUEUE);
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), vec![64, 36]);
    assert_eq!(got.concat(), long);

    // No buffer left: the bytes wait for the next one.
    client.write_all(b"later").unwrap();
    rig.event(CLIENT_EVENT);
    rig.give(AGENT_RX_QUEUE, 1, 64);
    rig.give(AGENT_RX_QUEUE, 1, 64);
    assert_eq!(rig.received(AGENT_RX_QUEUE), vec![b"later".to_vec()]);
    rig.assert_not_broken();
}

#[test]
fn a_new_client_replaces_the_old_one_and_what_it_left_undelivered() {
    let mut rig = Rig::new("replace");
    rig.handshake();
    rig.give(AGENT_RX_QUEUE, 2, 64);
    let mut first = rig.connect();
    first.write_all(b"stale request\n").unwrap();
    rig.event(CLIENT_EVENT);
    let mut second = rig.connect();
    let mut rest = Vec::new();
    first.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "the replaced client is closed");
    second.write_all(b"fresh\n").unwrap();
    rig.event(CLIENT_EVENT);
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    assert_eq!(rig.received(AGENT_RX_QUEUE), vec![b"fresh\n".to_vec()]);
    // The guest's answer goes to the new client.
    rig.send(AGENT_TX_QUEUE, b"ok\n", None);
    assert_eq!(read_n(&mut second, 3), b"ok\n");
    // Replacing is no disconnect: the driver heard of one connection only.
    let opens: Vec<_> = rig
        .received_control()
        .into_iter()
        .filter(|m| m.event == PORT_OPEN)
        .collect();
    assert_eq!(opens, vec![received(AGENT_PORT, PORT_OPEN, 1)]);
}

#[test]
fn what_a_client_sent_before_leaving_is_still_delivered() {
    let mut rig = Rig::new("leave");
    rig.handshake();
    let mut client = rig.connect();
    client
        .write_all(b"{\"execute\":\"guest-shutdown\"}\n")
        .unwrap();
    drop(client);
    rig.event(CLIENT_EVENT);
    assert!(!rig.device.control_state().port(1).unwrap().host_open_told);
    rig.give(AGENT_RX_QUEUE, 1, 64);
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    assert_eq!(
        rig.received(AGENT_RX_QUEUE),
        vec![b"{\"execute\":\"guest-shutdown\"}\n".to_vec()]
    );
}

#[test]
fn malformed_control_messages_are_ignored() {
    let mut rig = Rig::new("malformed");
    rig.give(CONTROL_RX_QUEUE, 8, 256);
    let before = rig.device.control_state();
    // Before DEVICE_READY, ports are not the driver's to ready.
    rig.control(1, PORT_READY, 1);
    rig.control(BAD_ID, DEVICE_READY, 1);
    let after_ready = rig.device.control_state();
    assert_ne!(before, after_ready);
    rig.received_control();

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("short header", vec![0, 0, 0, 0, 3, 0]),
        ("one byte", vec![7]),
        ("unknown event", message(1, 42, 1)),
        ("port out of range", message(7, PORT_READY, 1)),
        ("huge port id", message(u32::MAX, PORT_OPEN, 1)),
        ("a device's event", message(1, PORT_ADD, 1)),
        ("a name from the driver", message(1, PORT_NAME, 1)),
        ("open before ready", message(0, PORT_OPEN, 1)),
    ];
    for (what, bytes) in cases {
        rig.send(CONTROL_TX_QUEUE, &bytes, None);
        assert_eq!(
            rig.device.control_state(),
            after_ready,
            "{what} changed the state"
        );
        assert!(rig.received_control().is_empty(), "{what} was answered");
        rig.assert_not_broken();
    }

    // Chains the driver broke are ignored too, and taken back.
    let addr = rig.buf(8);
    rig.mem
        .write_slice(&message(1, PORT_READY, 1), GuestAddress(addr))
        .unwrap();
    let q = &mut rig.queues[CONTROL_TX_QUEUE as usize];
    let writable = q.offer(&rig.mem, &[(addr, 8, WRITE)]);
    let outside = q.offer(&rig.mem, &[(MEM_SIZE - 4, 8, 0)]);
    let empty = q.offer(&rig.mem, &[(addr, 0, 0)]);
    rig.event(u64::from(CONTROL_TX_QUEUE));
    assert_eq!(
        rig.queues[CONTROL_TX_QUEUE as usize].take_used(&rig.mem),
        vec![(writable, 0), (outside, 0), (empty, 0)]
    );
    assert_eq!(rig.device.control_state(), after_ready);
    rig.assert_not_broken();

    // A header split over two descriptors is whole.
    rig.send(CONTROL_TX_QUEUE, &message(1, PORT_READY, 1), Some(3));
    assert_eq!(rig.received_control()[0].event, PORT_NAME);
    rig.assert_not_broken();
}

#[test]
fn a_failing_driver_is_logged_and_changes_nothing() {
    let mut rig = Rig::new("fail");
    rig.give(CONTROL_RX_QUEUE, 4, 256);
    rig.control(BAD_ID, DEVICE_READY, 0);
    assert!(!rig.device.control_state().device_ready());
    rig.control(BAD_ID, DEVICE_READY, 1);
    rig.received_control();
    rig.control(AGENT_PORT, PORT_READY, 0);
    assert!(!rig.device.control_state().port(1).unwrap().ready);
    assert!(rig.received_control().is_empty());
    rig.assert_not_broken();
}

#[test]
fn the_control_queue_is_bounded_when_the_driver_gives_no_buffers() {
    let mut rig = Rig::new("flood");
    for _ in 0..10 {
        for _ in 0..QSIZE - 1 {
            let addr = rig.buf(8);
            rig.mem
                .write_slice(&message(BAD_ID, DEVICE_READY, 1), GuestAddress(addr))
                .unwrap();
            rig.queues[CONTROL_TX_QUEUE as usize].offer(&rig.mem, &[(addr, 8, 0)]);
        }
        rig.event(u64::from(CONTROL_TX_QUEUE));
        rig.queues[CONTROL_TX_QUEUE as usize].take_used(&rig.mem);
        rig.next_buf = BUF;
    }
    assert_eq!(rig.device.control_state().outgoing(), MAX_OUTGOING);
}

#[test]
fn malformed_data_and_receive_chains_mark_the_device_broken() {
    // A receive buffer the device cannot write, on the control queue.
    let mut rig = Rig::new("broken-rx");
    let addr = rig.buf(64);
    rig.queues[CONTROL_RX_QUEUE as usize].offer(&rig.mem, &[(addr, 64, 0)]);
    rig.control(BAD_ID, DEVICE_READY, 1);
    assert!(rig.interrupt.is_broken());

    // A control receive buffer too small for the port's name.
    let mut rig = Rig::new("broken-small");
    rig.give(CONTROL_RX_QUEUE, 2, 64);
    rig.control(BAD_ID, DEVICE_READY, 1);
    rig.give(CONTROL_RX_QUEUE, 1, 16);
    rig.control(AGENT_PORT, PORT_READY, 1);
    assert!(rig.interrupt.is_broken());

    // A transmit buffer the device would write to.
    let mut rig = Rig::new("broken-tx");
    let addr = rig.buf(16);
    rig.queues[AGENT_TX_QUEUE as usize].offer(&rig.mem, &[(addr, 16, WRITE)]);
    rig.event(u64::from(AGENT_TX_QUEUE));
    assert!(rig.interrupt.is_broken());

    // A transmit chain longer than any driver sends.
    let mut rig = Rig::new("broken-long");
    rig.queues[AGENT_TX_QUEUE as usize].offer(&rig.mem, &[(BUF, 512 << 10, 0)]);
    rig.event(u64::from(AGENT_TX_QUEUE));
    assert!(rig.interrupt.is_broken());

    // A receive buffer outside guest memory, with data to deliver.
    let mut rig = Rig::new("broken-outside");
    rig.handshake();
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    let mut client = rig.connect();
    client.write_all(b"data").unwrap();
    rig.queues[AGENT_RX_QUEUE as usize].offer(&rig.mem, &[(MEM_SIZE - 2, 64, WRITE)]);
    rig.event(CLIENT_EVENT);
    assert!(rig.interrupt.is_broken());
    // A broken device does nothing more until the driver resets it.
    rig.send_unchecked_control(message(BAD_ID, DEVICE_READY, 1));
    assert!(rig.queues[CONTROL_TX_QUEUE as usize]
        .take_used(&rig.mem)
        .is_empty());
}

impl Rig {
    /// Offers a control message without expecting it to be taken.
    fn send_unchecked_control(&mut self, bytes: Vec<u8>) {
        let addr = self.buf(bytes.len() as u32);
        self.mem.write_slice(&bytes, GuestAddress(addr)).unwrap();
        self.queues[CONTROL_TX_QUEUE as usize].offer(&self.mem, &[(addr, 8, 0)]);
        self.event(u64::from(CONTROL_TX_QUEUE));
    }
}

#[test]
fn a_driver_reset_forgets_the_ports_but_keeps_the_client() {
    let mut rig = Rig::new("reset");
    let mut client = rig.connect();
    rig.handshake();
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    rig.device.reset();
    let state = rig.device.control_state();
    assert!(!state.device_ready());
    assert_eq!(state.port(1), Some(PortState::default()));
    assert_eq!(state.outgoing(), 0);

    // The rebooted driver: the client is announced again once the port is ready.
    let mut rig = Rig::with_device(
        rig.device,
        rig.socket.clone(),
        Scratch(std::env::temp_dir().join("ferrovirt-console-reset-unused")),
    );
    rig.event(START_EVENT);
    rig.handshake();
    assert_eq!(
        rig.received_control().last(),
        Some(&received(AGENT_PORT, PORT_OPEN, 1))
    );
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    rig.send(AGENT_TX_QUEUE, b"after reset\n", None);
    assert_eq!(read_n(&mut client, 12), b"after reset\n");
}

#[test]
fn a_client_that_does_not_read_holds_the_guest_back_and_loses_nothing() {
    let mut rig = Rig::new("backpressure");
    rig.handshake();
    rig.control(AGENT_PORT, PORT_OPEN, 1);
    let mut client = rig.connect();
    // 14 buffers of 32 KiB (Linux's largest), 448 KiB in all: more than the device holds for
    // the client and the socket's buffer together.
    const CHUNK: u32 = 32 << 10;
    let mut sent = Vec::new();
    for i in 0..14u32 {
        let addr = rig.buf(CHUNK);
        let bytes: Vec<u8> = (0..CHUNK).map(|j| (i * 7 + j / 251) as u8).collect();
        rig.mem.write_slice(&bytes, GuestAddress(addr)).unwrap();
        rig.queues[AGENT_TX_QUEUE as usize].offer(&rig.mem, &[(addr, CHUNK, 0)]);
        sent.extend(bytes);
    }
    rig.event(u64::from(AGENT_TX_QUEUE));
    let mut taken = rig.queues[AGENT_TX_QUEUE as usize]
        .take_used(&rig.mem)
        .len();
    assert!(
        taken < 14,
        "the device took every buffer although the client read nothing"
    );
    // The client reads; each time its socket drains, the device takes more.
    let mut got: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    client.set_nonblocking(true).unwrap();
    for _ in 0..1000 {
        match client.read(&mut buf) {
            Ok(n) => got.extend(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                rig.event(CLIENT_EVENT);
                taken += rig.queues[AGENT_TX_QUEUE as usize]
                    .take_used(&rig.mem)
                    .len();
                if got.len() == sent.len() {
                    break;
                }
            }
            Err(e) => panic!("read: {e}"),
        }
    }
    assert_eq!(taken, 14);
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "the guest's bytes arrived otherwise");
    rig.assert_not_broken();
}

// The device's state: its round trip, a restored device, a migration through the transport.
#[path = "state_tests.rs"]
mod state;
