//! The vsock test guest on this host's /dev/kvm: a guest-initiated connection to a host unix
//! socket (`<socket>_1234`), data both ways, shutdown; then a host-initiated connection
//! (`CONNECT 6000` on `<socket>`) whose data the guest echoes.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use common::*;
use vmm::config::VsockConfig;
use vmm::lifecycle::VmExit;

#[test]
fn vsock_guest_talks_to_host_sockets_both_ways() {
    let scratch = Scratch::new("vsock");
    let serial = scratch.path("serial.log");
    let socket = scratch.path("vsock.sock");
    let port_socket = format!("{}_1234", socket.display());
    let listener = UnixListener::bind(&port_socket).expect("bind the host port socket");
    let mut cfg = config("vsock", &serial);
    cfg.vsock = Some(VsockConfig {
        cid: 42,
        socket: socket.clone(),
    });
    let mut vm = vmm::builder::build_and_boot(&cfg).expect("build and boot the VM");

    // Guest -> host.
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    let deadline = std::time::Instant::now() + GUEST_DEADLINE;
    let mut conn = loop {
        match listener.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if std::time::Instant::now() > deadline {
                    let exit = vm.stop();
                    panic!(
                        "guest never connected ({exit}); serial:\n{}",
                        serial_log(&serial)
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    conn.set_nonblocking(false).expect("blocking stream");
    conn.set_read_timeout(Some(GUEST_DEADLINE))
        .expect("timeout");
    let mut data = [0u8; 18];
    conn.read_exact(&mut data).expect("read the guest's data");
    assert_eq!(&data, b"FERROVIRT-VSOCK-TX");
    conn.write_all(b"FERROVIRT-VSOCK-RX")
        .expect("write to the guest");
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest)
        .expect("the guest's shutdown closes the stream");
    assert!(rest.is_empty(), "{rest:?}");

    // Host -> guest.
    wait_for_serial(&serial, "TEST vsock listening", |log| {
        log.contains("TEST vsock listening")
    });
    let mut host = UnixStream::connect(&socket).expect("connect to the vsock socket");
    host.set_read_timeout(Some(GUEST_DEADLINE))
        .expect("timeout");
    host.write_all(b"CONNECT 6000\n").expect("send CONNECT");
    let mut line = String::new();
    BufReader::new(&host)
        .read_line(&mut line)
        .expect("read the OK line");
    assert!(line.starts_with("OK "), "{line:?}");
    host.write_all(b"PING-FROM-HOST").expect("send data");
    let mut echo = [0u8; 14];
    host.read_exact(&mut echo).expect("read the echo");
    assert_eq!(&echo, b"PING-FROM-HOST");

    let exit = wait_for_exit(&mut vm, &serial);
    assert_lines(
        &serial_log(&serial),
        &[
            "TEST vsock cid 0000002a",
            "TEST vsock connected",
            "TEST vsock tx ok",
            "TEST vsock rx ok",
            "TEST vsock accepted",
            "TEST vsock echo ok",
            "TEST vsock ok",
        ],
    );
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
}
