//! The socket console on this host's /dev/kvm: output the guest wrote before any client
//! connected reaches the first client, and output written while a client was away reaches the
//! next one.

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use vmm::config::ConsoleConfig;
use vmm::lifecycle::VmExit;

/// Reads from `stream` until `done` holds for what was read; fails with it on the deadline.
fn read_until<F: Fn(&str) -> bool>(stream: &mut UnixStream, what: &str, done: F) -> String {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("set a read timeout");
    let deadline = Instant::now() + GUEST_DEADLINE;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the console never showed {what}; got:\n{text}"
        );
        match stream.read(&mut buf) {
            Ok(0) => panic!("the console closed before {what}; got:\n{text}"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("read the console: {e}; got:\n{text}"),
        }
    }
}

/// Boots guest `name` with its serial port on a console socket in `scratch`.
fn boot_on_socket(name: &str, scratch: &Scratch) -> (vmm::vmm::Vmm, PathBuf) {
    let socket = scratch.path("console.sock");
    let mut cfg = config(name, &scratch.path("unused.log"));
    cfg.serial = ConsoleConfig::Socket {
        path: socket.clone(),
    };
    let vm = vmm::builder::build_and_boot(&cfg).expect("build and boot the VM");
    (vm, socket)
}

#[test]
fn first_client_gets_everything_the_guest_printed_before_it_connected() {
    let scratch = Scratch::new("console-late");
    let (mut vm, socket) = boot_on_socket("serial", &scratch);
    // The guest prints everything and powers off before anyone connects.
    let exit = match vm.wait_timeout(GUEST_DEADLINE) {
        Some(exit) => exit,
        None => panic!("the serial guest did not stop (then: {})", vm.stop()),
    };
    assert_eq!(exit, VmExit::PowerOff { code: 0 });

    let mut client = UnixStream::connect(&socket).expect("connect to the console socket");
    let text = read_until(&mut client, "TEST serial ok", |t| {
        t.contains("TEST serial ok\n")
    });
    // Every line, from the very first byte, in order and nothing else.
    assert_eq!(
        text,
        "hello from the ferrovirt serial test guest\nTEST serial ok\n"
    );
}

#[test]
fn a_client_that_reconnects_gets_what_was_printed_meanwhile() {
    let scratch = Scratch::new("console-reconnect");
    let (mut vm, socket) = boot_on_socket("counter", &scratch);

    let mut first = UnixStream::connect(&socket).expect("connect to the console socket");
    let text = read_until(&mut first, "COUNT 00000005", |t| {
        counts(t).last().is_some_and(|n| *n >= 5)
    });
    let seen = counts(&text);
    // The first client got the guest's output from its first line on.
    assert_eq!(
        seen.first(),
        Some(&0),
        "first client missed the start:\n{text}"
    );
    for pair in seen.windows(2) {
        assert_eq!(
            pair[1],
            pair[0] + 1,
            "first client: counter jumped {pair:?}"
        );
    }
    let last_seen = *seen.last().expect("counts were read");
    drop(first);

    // Away for about 20 lines (the counter prints about 20 a second).
    std::thread::sleep(Duration::from_millis(1000));
    let mut second = UnixStream::connect(&socket).expect("reconnect to the console socket");
    let text = read_until(&mut second, "10 counts", |t| counts(t).len() >= 10);
    vm.stop();
    let again = counts(&text);
    // What the kernel had already accepted into the first client's socket when it closed is
    // gone with that socket (a line or two); everything after it was kept for the next client.
    assert!(
        again[0] > last_seen && again[0] <= last_seen + 3,
        "second client started at COUNT {:x} after the first saw {last_seen:x}:\n{text}",
        again[0]
    );
    for pair in again.windows(2) {
        assert_eq!(
            pair[1],
            pair[0] + 1,
            "second client: counter jumped {pair:?}"
        );
    }
}
