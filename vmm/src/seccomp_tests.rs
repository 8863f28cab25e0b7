use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

use super::*;

/// Set in the copy of the test binary that a test starts to be killed.
pub(crate) const CHILD_ENV: &str = "FERROVIRT_SECCOMP_TEST_CHILD";

/// Runs this test binary's test `name` again in a child process with [`CHILD_ENV`] set to
/// `mode`; its exit status and stderr.
pub(crate) fn run_child(name: &str, mode: &str) -> (Option<i32>, String, String) {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, mode)
        .output()
        .expect("run the test binary again");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a vCPU thread does on a normal run, under its filter: memory, a lock, an eventfd in an
/// epoll, a pipe's write and read, a KVM-typed ioctl answered by the kernel (ENOTTY on a pipe),
/// starting and joining a worker thread that narrows the filter and does its I/O.
fn what_a_vcpu_does() {
    let mut v = vec![0u8; 8 << 20];
    v[4 << 20] = 1;
    let lock = std::sync::Mutex::new(0);
    *lock.lock().unwrap() += 1;
    let evt = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    let epoll = Epoll::new().expect("epoll");
    epoll
        .ctl(
            ControlOperation::Add,
            evt.as_raw_fd(),
            EpollEvent::new(EventSet::IN, 1),
        )
        .expect("epoll_ctl");
    evt.write(1).expect("eventfd write");
    let mut ready = [EpollEvent::default(); 1];
    assert_eq!(epoll.wait(0, &mut ready).expect("epoll_wait"), 1);
    let _copy = evt.try_clone().expect("dup of the eventfd");

    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array; created before the filter.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the fds are ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    install(ThreadKind::Vcpu).expect("install the vCPU filter");
    assert!(current_thread_filtered());

    let mut reader = std::fs::File::from(r);
    let mut writer = std::fs::File::from(w);
    writer.write_all(b"guest").expect("write");
    let mut buf = [0u8; 5];
    reader.read_exact(&mut buf).expect("read");
    assert_eq!(&buf, b"guest");
    // KVM_GET_API_VERSION's number on a pipe: allowed by type, refused by the kernel.
    // SAFETY: the ioctl takes no argument.
    let rc = unsafe { libc::ioctl(reader.as_raw_fd(), 0xAE00) };
    assert_eq!(rc, -1);
    // Opening a file fails, without ending the process.
    let open = std::fs::File::open("/etc/hostname").map(|_| ());
    assert_eq!(open.map_err(|e| e.raw_os_error()), Err(Some(libc::EACCES)));

    let worker = std::thread::Builder::new()
        .name("virtio-blk".into())
        .spawn(move || {
            install(ThreadKind::Worker).expect("the worker narrows the filter");
            writer.write_all(b"x").expect("worker write");
            let mut buf = [0u8; 1];
            reader.read_exact(&mut buf).expect("worker read");
            buf[0]
        })
        .expect("a worker thread from the filtered vCPU thread");
    assert_eq!(worker.join().expect("worker"), b'x');
}

/// A line of `/proc/self/task/TID/status` (`Cap*`, `Seccomp`).
fn task_status(tid: libc::pid_t, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .expect("the thread's status");
    status_field(&status, field)
}

#[test]
fn a_filtered_vcpu_thread_holds_no_capabilities() {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let vcpu = std::thread::spawn(move || {
        install(ThreadKind::Vcpu).expect("install the vCPU filter");
        // SAFETY: gettid has no arguments.
        tid_tx.send(unsafe { libc::gettid() }).expect("send tid");
        done_rx.recv().expect("told to end");
    });
    let tid = tid_rx.recv().expect("the vCPU thread's tid");
    // SAFETY: gettid has no arguments.
    let own = unsafe { libc::gettid() };
    println!(
        "the test's thread: CapEff {}, CapPrm {}",
        task_status(own, "CapEff:"),
        task_status(own, "CapPrm:")
    );
    let seen = [
        ("CapEff:", task_status(tid, "CapEff:")),
        ("CapPrm:", task_status(tid, "CapPrm:")),
        ("CapInh:", task_status(tid, "CapInh:")),
        ("CapAmb:", task_status(tid, "CapAmb:")),
        ("Seccomp:", task_status(tid, "Seccomp:")),
    ];
    done_tx.send(()).expect("end the vCPU thread");
    vcpu.join().expect("the vCPU thread");
    for (field, value) in &seen[..4] {
        assert_eq!(
            value, "0000000000000000",
            "{field} of the filtered vCPU thread"
        );
    }
    // 2: SECCOMP_MODE_FILTER.
    assert_eq!(seen[4].1, "2", "the vCPU thread's seccomp mode");
}

#[test]
fn every_kind_compiles_to_a_program_the_kernel_takes() {
    for kind in [
        ThreadKind::Vcpu,
        ThreadKind::Worker,
        ThreadKind::VsockWorker,
        ThreadKind::ConsoleWorker,
    ] {
        let program = program(kind).expect("compile");
        // The kernel's limit per filter (BPF_MAXINSNS).
        assert!(
            !program.is_empty() && program.len() < 4096,
            "{kind:?}: {} instructions",
            program.len()
        );
    }
}

#[test]
fn a_vcpu_thread_under_its_filter_runs_and_starts_a_filtered_worker() {
    if std::env::var(CHILD_ENV).as_deref() == Ok("allowed") {
        std::thread::spawn(what_a_vcpu_does)
            .join()
            .expect("the vCPU thread's work");
        println!("FILTERED-WORK-DONE");
        return;
    }
    let (status, stdout, stderr) = run_child(
        "seccomp::tests::a_vcpu_thread_under_its_filter_runs_and_starts_a_filtered_worker",
        "allowed",
    );
    assert_eq!(status, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("FILTERED-WORK-DONE"), "{stdout}");
}

/// Runs `call` in a thread under the vCPU filter; the process is expected to end there.
fn under_vcpu_filter(what: &str, call: impl FnOnce() + Send + 'static) {
    std::thread::spawn(|| {
        install(ThreadKind::Vcpu).expect("install");
        call();
    })
    .join()
    .expect("thread");
    panic!("the process survived {what} under the vCPU filter");
}

#[test]
fn a_forbidden_system_call_ends_the_process_and_names_the_thread_and_the_call() {
    const NAME: &str =
        "seccomp::tests::a_forbidden_system_call_ends_the_process_and_names_the_thread_and_the_call";
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("execve") => under_vcpu_filter("an execve", || {
            // What a compromised vCPU thread would do first.
            let path = c"/bin/sh";
            let argv = [path.as_ptr(), std::ptr::null()];
            // SAFETY: a NUL-terminated path and argument vector, an empty environment.
            unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), [std::ptr::null()].as_ptr()) };
        }),
        // A vCPU thread has Unix sockets (the serial console's), no network ones.
        Ok("inet") => under_vcpu_filter("a TCP socket", || {
            let _ = std::net::TcpStream::connect("127.0.0.1:1");
        }),
        Ok("fork") => under_vcpu_filter("a fork", || {
            // SAFETY: the child, if any, exits at once.
            if unsafe { libc::fork() } == 0 {
                // SAFETY: leaving a forked child.
                unsafe { libc::_exit(0) };
            }
        }),
        // A block worker has no business with sockets, even Unix ones.
        Ok("worker-socket") => under_vcpu_filter("a socket in a block worker", || {
            std::thread::spawn(|| {
                install(ThreadKind::Worker).expect("install");
                let _ = std::os::unix::net::UnixStream::connect("/nonexistent");
            })
            .join()
            .expect("worker");
        }),
        Ok(other) => panic!("unknown child mode {other}"),
        Err(_) => {}
    }
    for (mode, thread, call) in [
        ("execve", "vCPU", format!("{} (execve)", libc::SYS_execve)),
        ("inet", "vCPU", format!("{} (socket)", libc::SYS_socket)),
        // glibc's fork is clone(2) without CLONE_THREAD.
        ("fork", "vCPU", format!("{} (clone)", libc::SYS_clone)),
        (
            "worker-socket",
            "device worker",
            format!("{} (socket)", libc::SYS_socket),
        ),
    ] {
        let (status, stdout, stderr) = run_child(NAME, mode);
        assert_eq!(
            status,
            Some(EXIT_BAD_SYSCALL),
            "{mode}: stdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let expected = format!(
            "ferrovirt vmm: seccomp: the {thread} thread made system call {call}, which its \
             filter forbids; the VMM exits"
        );
        assert!(
            stderr.contains(&expected),
            "{mode}: want {expected:?} in:\n{stderr}"
        );
    }
}

#[test]
fn the_sigsys_message_formats_numbers_on_the_stack() {
    let mut m = Message::default();
    m.push(b"n=");
    m.push_number(0);
    m.push(b",");
    m.push_number(-257);
    m.push(b",");
    m.push_number(i64::from(i32::MAX));
    assert_eq!(&m.buf[..m.len], b"n=0,-257,2147483647");
    let mut full = Message::default();
    full.push(&[b'x'; 300]);
    assert_eq!(full.len, 256, "a long message is cut, not overflowed");
}

/// The value of `field` (`Name:`) in a `/proc/.../status` text.
pub(crate) fn status_field(status: &str, field: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("no {field} in:\n{status}"))
        .trim()
        .to_string()
}

/// Two calls the process-wide filter denies, and what they return: keyctl with an operation no
/// kernel has (EOPNOTSUPP without the filter, for any user), and a read of the process's own
/// memory with no iovec arrays (EINVAL without it).
fn denied_probes() -> (i64, i64) {
    let result = |r: libc::c_long| {
        if r < 0 {
            -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            r
        }
    };
    // SAFETY: keyctl with an unknown operation reads no memory; process_vm_readv with null
    // iovec arrays reads and writes none.
    unsafe {
        (
            result(libc::syscall(libc::SYS_keyctl, 9999, 0, 0, 0, 0)),
            result(libc::syscall(
                libc::SYS_process_vm_readv,
                libc::getpid(),
                std::ptr::null::<libc::iovec>(),
                0,
                std::ptr::null::<libc::iovec>(),
                0,
                0,
            )),
        )
    }
}

#[test]
fn the_process_wide_filter_denies_with_eperm_in_every_later_thread_and_program() {
    let eperm = -i64::from(libc::EPERM);
    if std::env::var(CHILD_ENV).as_deref() == Ok("process") {
        let unfiltered = (-i64::from(libc::EOPNOTSUPP), -i64::from(libc::EINVAL));
        assert_eq!(denied_probes(), unfiltered, "unfiltered");
        super::deny_in_process().expect("the process-wide filter");
        assert_eq!(denied_probes(), (eperm, eperm), "on the installing thread");
        let thread = std::thread::spawn(move || {
            // SAFETY: unshare takes flags only.
            let unshared = unsafe { libc::unshare(libc::CLONE_NEWUTS) };
            (
                denied_probes(),
                unshared,
                std::io::Error::last_os_error().raw_os_error(),
            )
        })
        .join()
        .expect("a thread started afterwards");
        assert_eq!(thread.0, (eperm, eperm), "on a thread started afterwards");
        assert_eq!((thread.1, thread.2), (-1, Some(libc::EPERM)), "unshare");
        // A program started afterwards runs, and under the filter.
        let out = Command::new("cat")
            .arg("/proc/self/status")
            .output()
            .expect("cat runs under the filter");
        let status = String::from_utf8_lossy(&out.stdout);
        assert_eq!(status_field(&status, "Seccomp:"), "2", "{status}");
        let filters: u32 = status_field(&status, "Seccomp_filters:").parse().unwrap();
        assert!(filters >= 2, "the program's filters: {filters}");
        assert_eq!(status_field(&status, "NoNewPrivs:"), "1");
        println!("PROCESS-FILTER-HOLDS");
        return;
    }
    let (status, stdout, stderr) = run_child(
        "seccomp::tests::the_process_wide_filter_denies_with_eperm_in_every_later_thread_and_program",
        "process",
    );
    assert_eq!(status, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("PROCESS-FILTER-HOLDS"), "{stdout}");
}

#[test]
fn the_process_wide_filter_compiles_to_a_program_the_kernel_takes() {
    let program = super::process_program().expect("compile");
    assert!(
        !program.is_empty() && program.len() < 4096,
        "{} instructions",
        program.len()
    );
}
