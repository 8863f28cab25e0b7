use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;

use super::*;
use crate::seccomp::tests::{run_child, status_field, CHILD_ENV};

fn is_root() -> bool {
    // SAFETY: geteuid has no arguments.
    unsafe { libc::geteuid() == 0 }
}

fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no arguments.
    unsafe { libc::gettid() }
}

/// The `Cap*` and `NoNewPrivs` lines of a program started through [`confine_child`].
fn confined_status(keep_net_admin: bool) -> String {
    let mut command = Command::new("/bin/cat");
    command.arg("/proc/self/status");
    confine_child(&mut command, keep_net_admin);
    let out = command.output().expect("run cat under confine_child");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("status is text")
}

#[test]
fn a_confined_child_holds_only_the_capability_it_keeps_and_gains_none() {
    for (keep_net_admin, bounding) in [(false, "0000000000000000"), (true, "0000000000001000")] {
        let status = confined_status(keep_net_admin);
        assert_eq!(status_field(&status, "NoNewPrivs:"), "1", "{status}");
        if is_root() {
            for field in ["CapBnd:", "CapPrm:", "CapEff:"] {
                assert_eq!(
                    status_field(&status, field),
                    bounding,
                    "{field} with keep_net_admin {keep_net_admin}"
                );
            }
        } else {
            // Not root: nothing to drop, and execve grants nothing.
            assert_eq!(status_field(&status, "CapEff:"), "0000000000000000");
        }
    }
}

#[test]
fn a_status_file_parses_into_its_capability_sets() {
    let status = "Name:\tvirt-launcher\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
                  CapEff:\t0000000000001000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n\
                  NoNewPrivs:\t1\nSeccomp:\t0\n";
    let caps = ThreadCapabilities::parse(status).expect("a full status");
    assert_eq!(caps.permitted, 0x1ff_ffff_ffff);
    assert_eq!(caps.effective, mask(CAP_NET_ADMIN));
    assert!(caps.no_new_privs);
    assert!(
        !caps.holds_at_most(mask(CAP_NET_ADMIN)),
        "a full permitted set is more than CAP_NET_ADMIN"
    );
    let dropped = ThreadCapabilities {
        permitted: mask(CAP_NET_ADMIN),
        ..caps
    };
    assert!(dropped.holds_at_most(mask(CAP_NET_ADMIN)));
    assert!(!dropped.holds_at_most(0));
    let may_gain = ThreadCapabilities {
        no_new_privs: false,
        ..dropped
    };
    assert!(
        !may_gain.holds_at_most(mask(CAP_NET_ADMIN)),
        "without no_new_privs a program it runs may gain more"
    );
    assert_eq!(ThreadCapabilities::parse("Name:\tx\nCapEff:\tzz\n"), None);
}

/// In a child process (the drop is for the whole process): threads blocked in a read, parked
/// on a lock and filtered as a vCPU, then [`drop_process`]; every thread must hold no more than
/// `CAP_NET_ADMIN` after it, the blocked read must go on (SA_RESTART), the filtered thread
/// must live, and a thread and a program started afterwards must hold no more either.
#[test]
fn a_process_wide_drop_reaches_every_thread_and_breaks_none() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("drop-process") {
        let (code, stdout, stderr) = run_child(
            "capabilities::tests::a_process_wide_drop_reaches_every_thread_and_breaks_none",
            "drop-process",
        );
        println!("{stdout}\n{stderr}");
        assert_eq!(code, Some(0), "the child: {stdout}\n{stderr}");
        assert!(stdout.contains("drop-process: done"), "{stdout}");
        return;
    }
    let keep = mask(CAP_NET_ADMIN);
    let before = ThreadCapabilities::of_thread(gettid()).expect("own status");
    if is_root() {
        assert!(
            !before.holds_at_most(keep),
            "as root the test thread starts with more: {before:?}"
        );
    }
    // A thread blocked in a read of a socket, which gets its data only after the drop.
    let (mut writer, mut reader) = UnixStream::pair().expect("socketpair");
    let blocked = std::thread::spawn(move || {
        let mut buf = [0u8; 5];
        reader.read_exact(&mut buf).map(|()| buf)
    });
    // A thread parked until told to end.
    let (park_tx, park_rx) = std::sync::mpsc::channel::<()>();
    let parked = std::thread::spawn(move || park_rx.recv().is_ok());
    // A thread under the vCPU filter, which drops its own capabilities when it installs it.
    let (vcpu_tx, vcpu_rx) = std::sync::mpsc::channel::<()>();
    let (vcpu_tid_tx, vcpu_tid_rx) = std::sync::mpsc::channel();
    let vcpu = std::thread::spawn(move || {
        crate::seccomp::install(crate::seccomp::ThreadKind::Vcpu).expect("the vCPU filter");
        vcpu_tid_tx.send(gettid()).expect("send tid");
        vcpu_rx.recv().is_ok()
    });
    let vcpu_tid = vcpu_tid_rx.recv().expect("the vCPU thread's tid");
    // Most likely the reader is in its read by now, which is the case SA_RESTART is for; had it
    // not got there yet, the signal is handled all the same and the test still holds.
    std::thread::sleep(Duration::from_millis(50));

    let signalled = drop_process(keep).expect("drop_process");
    println!("drop-process: signalled {signalled} thread(s)");
    if is_root() {
        // The blocked reader and the parked thread at least; not the filtered vCPU thread.
        assert!(signalled >= 2, "signalled {signalled}");
    }
    for tid in threads().expect("threads") {
        let caps = ThreadCapabilities::of_thread(tid).expect("a thread's status");
        assert!(caps.holds_at_most(keep), "thread {tid}: {caps:?}");
        if is_root() && tid != vcpu_tid {
            assert_eq!(caps.bounding, keep, "thread {tid}'s bounding set");
        }
    }

    writer
        .write_all(b"after")
        .expect("write to the blocked reader");
    assert_eq!(
        &blocked.join().expect("the reader").expect("its read"),
        b"after",
        "the read interrupted by the signal went on"
    );
    park_tx.send(()).expect("wake the parked thread");
    assert!(parked.join().expect("the parked thread"));
    vcpu_tx.send(()).expect("end the vCPU thread");
    assert!(vcpu
        .join()
        .expect("the filtered thread lived through the drop"));

    let later = std::thread::spawn(|| ThreadCapabilities::of_thread(gettid()))
        .join()
        .expect("a thread started after the drop")
        .expect("its status");
    assert!(later.holds_at_most(keep), "a later thread: {later:?}");
    let out = Command::new("/bin/cat")
        .arg("/proc/self/status")
        .output()
        .expect("run cat after the drop");
    let program =
        ThreadCapabilities::parse(&String::from_utf8_lossy(&out.stdout)).expect("cat's status");
    assert!(
        program.holds_at_most(keep),
        "a program run as root after the drop: {program:?}"
    );
    println!("drop-process: done");
}
