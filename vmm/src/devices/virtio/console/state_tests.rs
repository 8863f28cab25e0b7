//! The console's state in live migration: the control state's encoding, a restored device
//! and its new client, and a migration of the whole device through the virtio-mmio transport.

use super::*;

#[test]
fn control_state_round_trips_and_bad_state_is_refused() {
    let mut state = ControlState::default();
    state.set_host_connected(true);
    state
        .handle_driver_message(&message(BAD_ID, DEVICE_READY, 1))
        .unwrap();
    state
        .handle_driver_message(&message(1, PORT_READY, 1))
        .unwrap();
    state
        .handle_driver_message(&message(1, PORT_OPEN, 1))
        .unwrap();
    let bytes = state.encode();
    let back = ControlState::decode(&bytes).unwrap();
    assert!(back.device_ready());
    assert_eq!(
        back.port(1),
        Some(PortState {
            ready: true,
            guest_open: true,
            host_open_told: true
        })
    );
    // PORT_ADD x2, PORT_NAME, PORT_OPEN 1 still queued.
    assert_eq!(back.outgoing(), 4);
    assert_eq!(back.encode(), bytes);

    let mut bad_version = bytes.clone();
    bad_version[0] = 9;
    let mut bad_ports = bytes.clone();
    bad_ports[2] = 3;
    let mut bad_message = bytes.clone();
    let last_event = bad_message.len() - 4;
    bad_message[last_event] = DEVICE_READY as u8;
    let mut too_many = bytes.clone();
    let count_at = 2 + 4 + 3 * PORTS;
    too_many[count_at..count_at + 4].copy_from_slice(&1000u32.to_le_bytes());
    for (what, bytes) in [
        ("version", bad_version),
        ("ports", bad_ports),
        ("queued message", bad_message),
        ("count", too_many),
        ("truncated", bytes[..bytes.len() - 1].to_vec()),
        ("empty", Vec::new()),
    ] {
        assert!(ControlState::decode(&bytes).is_err(), "{what} was accepted");
    }
}

#[test]
fn a_restored_device_tells_the_driver_its_client_is_gone_and_serves_a_new_one() {
    let mut source = Rig::new("migrate-source");
    let _client = source.connect();
    source.handshake();
    source.control(AGENT_PORT, PORT_OPEN, 1);
    source.received_control();
    let state = source.device.save_state();
    assert!(!state.is_empty());

    // The target listens on its own socket; no client yet.
    let scratch = Scratch::new("migrate-target");
    let socket = scratch.0.join("agent.sock");
    let mut device = VirtioConsole::new(&socket).unwrap();
    device.restore_state(&state).unwrap();
    let mut target = Rig::with_device(device, socket, scratch);
    target.give(CONTROL_RX_QUEUE, 4, 256);
    target.event(START_EVENT);
    assert_eq!(
        target.received_control(),
        vec![received(AGENT_PORT, PORT_OPEN, 0)]
    );
    let mut client = target.connect();
    assert_eq!(
        target.received_control(),
        vec![received(AGENT_PORT, PORT_OPEN, 1)]
    );
    // The guest still has the port open: both ways at once.
    target.give(AGENT_RX_QUEUE, 1, 64);
    client.write_all(b"ping\n").unwrap();
    target.event(CLIENT_EVENT);
    assert_eq!(target.received(AGENT_RX_QUEUE), vec![b"ping\n".to_vec()]);
    target.send(AGENT_TX_QUEUE, b"pong\n", None);
    assert_eq!(read_n(&mut client, 5), b"pong\n");

    // Another device type's state, or none where a console had some, is refused.
    let scratch = Scratch::new("migrate-bad");
    let mut other = VirtioConsole::new(&scratch.0.join("agent.sock")).unwrap();
    assert!(other.restore_state(&[1, 2, 3]).is_err());
    assert!(other.restore_state(&[]).is_err());
}

/// The console behind the virtio-mmio transport, with its real worker thread: the handshake,
/// a migration of the transport's state through the STATE record's encoding into a new
/// transport (another socket) over a copy of guest memory, and the guest's port still open
/// there.
#[test]
fn the_console_migrates_through_the_mmio_transport() {
    use crate::devices::bus::BusDevice;
    use crate::devices::virtio::mmio::*;
    use crate::migration::state::{decode_transport, encode_transport};

    fn w(t: &mut MmioTransport, offset: u64, value: u32) {
        t.write(offset, &value.to_le_bytes());
    }
    fn transport(mem: &GuestMemoryMmap, socket: &std::path::Path) -> (MmioTransport, Vec<EventFd>) {
        let evts: Vec<EventFd> = (0..QUEUES)
            .map(|_| EventFd::new(libc::EFD_NONBLOCK).unwrap())
            .collect();
        let notify = evts.iter().map(|e| e.try_clone().unwrap()).collect();
        let t = MmioTransport::new(
            Box::new(VirtioConsole::new(socket).unwrap()),
            mem.clone(),
            evts,
            Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap())),
        )
        .unwrap();
        (t, notify)
    }
    /// Waits until `queue` has `n` new used entries.
    fn wait_used(mem: &GuestMemoryMmap, queue: &mut DriverQueue, n: usize) -> Vec<(u16, u32)> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut used = Vec::new();
        while used.len() < n {
            used.extend(queue.take_used(mem));
            assert!(std::time::Instant::now() < deadline, "used: {used:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
        used
    }
    fn offer_message(mem: &GuestMemoryMmap, q: &mut DriverQueue, addr: u64, bytes: &[u8]) {
        mem.write_slice(bytes, GuestAddress(addr)).unwrap();
        q.offer(mem, &[(addr, bytes.len() as u32, 0)]);
    }

    let scratch = Scratch::new("mmio");
    let source_mem = mem();
    let mut queues: Vec<DriverQueue> = (0..QUEUES).map(DriverQueue::new).collect();
    let (mut source, notify) = transport(&source_mem, &scratch.0.join("source.sock"));
    w(&mut source, REG_STATUS, 1 | 2);
    w(&mut source, REG_DRIVER_FEATURES_SEL, 0);
    w(&mut source, REG_DRIVER_FEATURES, F_MULTIPORT as u32);
    w(&mut source, REG_DRIVER_FEATURES_SEL, 1);
    w(&mut source, REG_DRIVER_FEATURES, 1);
    w(&mut source, REG_STATUS, 1 | 2 | 8);
    for (i, q) in queues.iter().enumerate() {
        w(&mut source, REG_QUEUE_SEL, i as u32);
        w(&mut source, REG_QUEUE_NUM, u32::from(QSIZE));
        w(&mut source, REG_QUEUE_DESC_LOW, q.base as u32);
        w(&mut source, REG_QUEUE_DRIVER_LOW, q.avail() as u32);
        w(&mut source, REG_QUEUE_DEVICE_LOW, q.used() as u32);
        w(&mut source, REG_QUEUE_READY, 1);
    }
    w(&mut source, REG_STATUS, 1 | 2 | 8 | 4);
    // Control buffers, then the handshake, each message once the previous one is taken.
    for i in 0..8 {
        queues[CONTROL_RX_QUEUE as usize].offer(&source_mem, &[(BUF + i * 0x100, 256, WRITE)]);
    }
    let mut addr = BUF + 0x1_0000;
    for (id, event) in [
        (BAD_ID, DEVICE_READY),
        (0, PORT_READY),
        (AGENT_PORT, PORT_READY),
        (AGENT_PORT, PORT_OPEN),
    ] {
        offer_message(
            &source_mem,
            &mut queues[CONTROL_TX_QUEUE as usize],
            addr,
            &message(id, event, 1),
        );
        addr += 0x100;
        notify[CONTROL_TX_QUEUE as usize].write(1).unwrap();
        wait_used(&source_mem, &mut queues[CONTROL_TX_QUEUE as usize], 1);
    }
    // PORT_ADD x2 and PORT_NAME.
    wait_used(&source_mem, &mut queues[CONTROL_RX_QUEUE as usize], 3);
    queues[AGENT_RX_QUEUE as usize].offer(&source_mem, &[(BUF + 0x2_0000, 64, WRITE)]);
    notify[AGENT_RX_QUEUE as usize].write(1).unwrap();

    source.pause_device();
    let state = source.state();
    assert!(!state.device_state.is_empty(), "the console's ports travel");
    let record = encode_transport(&state);
    let decoded = decode_transport(&record, 0).unwrap();
    assert_eq!(decoded, state);
    let target_mem = mem();
    let mut copy = vec![0u8; MEM_SIZE as usize];
    source_mem.read_slice(&mut copy, GuestAddress(0)).unwrap();
    target_mem.write_slice(&copy, GuestAddress(0)).unwrap();
    let target_socket = scratch.0.join("target.sock");
    let (mut target, notify) = transport(&target_mem, &target_socket);
    target.restore(&decoded).unwrap();
    assert_eq!(target.state(), state);

    // The launcher connects to the target's socket; the guest's open port gets its bytes.
    let mut client = UnixStream::connect(&target_socket).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // PORT_OPEN 1 for the new client (no client was connected to the source).
    let used = wait_used(&target_mem, &mut queues[CONTROL_RX_QUEUE as usize], 1);
    let opened = queues[CONTROL_RX_QUEUE as usize].written(&target_mem, used[0].0, used[0].1);
    assert_eq!(opened, message(AGENT_PORT, PORT_OPEN, 1));
    client.write_all(b"ping\n").unwrap();
    let used = wait_used(&target_mem, &mut queues[AGENT_RX_QUEUE as usize], 1);
    assert_eq!(
        queues[AGENT_RX_QUEUE as usize].written(&target_mem, used[0].0, used[0].1),
        b"ping\n"
    );
    offer_message(
        &target_mem,
        &mut queues[AGENT_TX_QUEUE as usize],
        BUF + 0x3_0000,
        b"pong\n",
    );
    notify[AGENT_TX_QUEUE as usize].write(1).unwrap();
    assert_eq!(read_n(&mut client, 5), b"pong\n");
    source.resume_device();
}
