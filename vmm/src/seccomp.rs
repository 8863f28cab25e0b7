//! seccomp filters for the threads that run guest-driven code: the vCPU threads (every port
//! and MMIO access of the guest is handled there) and the virtio device workers (every queue
//! the guest fills is parsed there). Each installs the allow-list of its kind before it touches
//! the guest; a system call outside it makes the kernel trap the thread, and [`on_sigsys`]
//! prints which thread made which call and ends the process with [`EXIT_BAD_SYSCALL`], as
//! Firecracker does: a VMM whose guest-facing thread does what it never does is not trusted to
//! go on.
//!
//! The kinds, from what each thread was seen to call (`strace -f` over the KVM tier's tests),
//! checked by the nested tier (Debian's kernel and the Debian cloud image on the PCI machine):
//! - [`ThreadKind::Vcpu`]: `KVM_RUN` and the other KVM ioctls (BARs moved, irqfds), the serial
//!   console's output, memory and futexes, and what starting a device worker takes, because a
//!   driver's DRIVER_OK write activates the device on the vCPU thread. A worker started there
//!   inherits the filter and adds its own, so it holds the narrower of the two. A worker
//!   started elsewhere (a migration target's restore, a reset) installs its own all the same.
//! - [`ThreadKind::Worker`] (block, net, rng): epoll, eventfds, reads and writes of its disk or
//!   tap, `fdatasync` for a flush.
//! - [`ThreadKind::VsockWorker`]: epoll and eventfds as a worker, and Unix stream sockets,
//!   which it connects to the host side of guest-initiated connections.
//! - [`ThreadKind::ConsoleWorker`]: epoll and eventfds as a worker, and the client of the
//!   console's listening socket, which it accepts, reads and writes (no `socket`, no
//!   `connect`).
//!
//! Not one of them may execute a program, create a process (`clone` without `CLONE_THREAD`;
//! `clone3`, whose flags a filter cannot read, fails with ENOSYS so glibc falls back to
//! `clone`), open a socket other than a Unix one, signal another process, ptrace, mount or
//! change credentials (but give up capabilities): those trap. Opening a file fails with EACCES
//! instead (see [`OPEN`]). Every filtered thread holds no capability.
//! The launcher's own threads (gRPC, migration, QEMU) do what the handler asks, not what the
//! guest does: they have no allow-list, but the whole launcher, and every program it starts,
//! runs under [`deny_in_process`] from its first line, which closes what a compromised launcher
//! would reach for to leave its Pod (namespaces, mounts, ptrace, modules, BPF, keyrings, ...).
//! Once the VM runs they give up their capabilities too ([`crate::capabilities::drop_process`]).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The process's exit status when a filtered thread made a forbidden system call (128 +
/// SIGSYS, what a shell reports for a process killed by that signal).
pub const EXIT_BAD_SYSCALL: i32 = 128 + libc::SIGSYS;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the filters on or off for the VMs this process starts from now on (on by default;
/// `vmm --no-seccomp` and `virt-launcher --no-seccomp` turn them off to debug a filter).
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// Whether the VMs started from now on filter their threads.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The kinds of guest-facing threads, each with its own allow-list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ThreadKind {
    Vcpu = 1,
    Worker = 2,
    VsockWorker = 3,
    ConsoleWorker = 4,
}

impl ThreadKind {
    fn name(code: u8) -> &'static str {
        match code {
            1 => "vCPU",
            2 => "device worker",
            3 => "vsock device worker",
            4 => "console device worker",
            _ => "unfiltered",
        }
    }
}

thread_local! {
    /// The kind of the filter this thread installed last (0: none), read by the SIGSYS handler.
    static KIND: Cell<u8> = const { Cell::new(0) };
}

/// Whether this thread runs under one of the filters (a worker it starts then filters itself
/// too).
pub fn current_thread_filtered() -> bool {
    KIND.with(Cell::get) != 0
}

/// Building or installing a filter failed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("build the {0:?} filter")]
    Build(ThreadKind, #[source] seccompiler::BackendError),
    #[error("install the {0:?} filter")]
    Install(ThreadKind, #[source] seccompiler::Error),
    #[error("give up the capabilities of the {0:?} thread")]
    Capabilities(ThreadKind, #[source] std::io::Error),
    #[error("build the process-wide filter")]
    BuildProcess(#[source] seccompiler::BackendError),
    #[error("install the process-wide filter")]
    InstallProcess(#[source] seccompiler::Error),
}

/// The compiled filter of `kind`.
pub fn program(kind: ThreadKind) -> Result<BpfProgram, SeccompError> {
    let build = |e| SeccompError::Build(kind, e);
    SeccompFilter::new(
        rules(kind).map_err(build)?,
        SeccompAction::Trap,
        SeccompAction::Allow,
        TargetArch::x86_64,
    )
    .and_then(BpfProgram::try_from)
    .map_err(build)
}

/// Calls that fail with `errno` instead of trapping, in a filter stacked on the allow-list
/// (which lets them through: ERRNO takes precedence over ALLOW, TRAP over both).
fn errno_filter(
    calls: &[libc::c_long],
    errno: i32,
) -> Result<BpfProgram, seccompiler::BackendError> {
    SeccompFilter::new(
        calls.iter().map(|call| (*call, Vec::new())).collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        TargetArch::x86_64,
    )
    .and_then(BpfProgram::try_from)
}

/// Opening a file fails with EACCES rather than trapping. In the nested tier a vsock worker
/// opened one (under the L1's glibc; most likely its malloc reading the CPU count from sysfs
/// for a new arena, not confirmed) and with EACCES the test passed: the caller copes.
const OPEN: &[libc::c_long] = &[libc::SYS_open, libc::SYS_openat, libc::SYS_openat2];

/// Installs the filter of `kind` on the calling thread (and the SIGSYS handler, once per
/// process); what the thread starts from then on inherits it. The thread first gives up every
/// capability ([`crate::capabilities::drop_thread`]).
pub fn install(kind: ThreadKind) -> Result<(), SeccompError> {
    crate::capabilities::drop_thread().map_err(|e| SeccompError::Capabilities(kind, e))?;
    install_sigsys_handler();
    let build = |e| SeccompError::Build(kind, e);
    let program = program(kind)?;
    // clone3's flags are out of a filter's reach: ENOSYS makes glibc use clone.
    let enosys = errno_filter(&[libc::SYS_clone3], libc::ENOSYS).map_err(build)?;
    let eacces = errno_filter(OPEN, libc::EACCES).map_err(build)?;
    // The errno filters first, so that installing the allow-list is the last seccomp(2) call.
    for filter in [&enosys, &eacces, &program] {
        seccompiler::apply_filter(filter).map_err(|e| SeccompError::Install(kind, e))?;
    }
    KIND.with(|k| k.set(kind as u8));
    Ok(())
}

/// What no thread of a launcher needs, nor any program it starts: each fails with EPERM, as
/// most of them would for an unprivileged process, so a program that tries one copes.
/// Namespaces and mounts, tracing and other processes' memory, kernel modules and kexec, BPF,
/// perf events, userfaultfd, io_uring, keyrings, the clock, swap, reboot, raw port I/O, file
/// handles (the open_by_handle_at escape) and the kernel log.
pub const PROCESS_DENIED: &[libc::c_long] = &[
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_syslog,
    libc::SYS_uselib,
    libc::SYS_vhangup,
];

/// The namespace flags of clone(2) that [`deny_in_process`] refuses (`CLONE_NEWTIME` shares its
/// bit with the exit signal's field, so it is left to the missing capability).
const CLONE_NAMESPACES: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

/// The process-wide filter: [`PROCESS_DENIED`], and clone(2) with a namespace flag, fail with
/// EPERM; everything else is let through.
pub fn process_program() -> Result<BpfProgram, SeccompError> {
    let build = SeccompError::BuildProcess;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = PROCESS_DENIED
        .iter()
        .map(|call| (*call, Vec::new()))
        .collect();
    let clone = CLONE_NAMESPACES
        .iter()
        .map(|flag| {
            let flag = *flag as u64;
            SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(flag), flag)?])
        })
        .collect::<Result<_, _>>()
        .map_err(build)?;
    rules.insert(libc::SYS_clone, clone);
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .and_then(BpfProgram::try_from)
    .map_err(build)
}

/// Installs the process-wide filter on the calling thread; every thread and program it starts
/// from then on inherits it. The launcher calls it first thing, before it has another thread.
/// clone3(2), whose flags a filter cannot read, fails with ENOSYS, so glibc falls back to
/// clone(2) and its flags are checked. Sets `no_new_privs`, as any filter needs.
pub fn deny_in_process() -> Result<(), SeccompError> {
    let enosys =
        errno_filter(&[libc::SYS_clone3], libc::ENOSYS).map_err(SeccompError::BuildProcess)?;
    for filter in [&enosys, &process_program()?] {
        seccompiler::apply_filter(filter).map_err(SeccompError::InstallProcess)?;
    }
    Ok(())
}

fn cond(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

/// What every kind may call: memory, futexes, time, signals it handles, its own thread's end,
/// epoll and eventfds, reads and writes on the fds it was given.
const COMMON: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_fstat,
    libc::SYS_lseek,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_gettimeofday,
    libc::SYS_getrandom,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigprocmask,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_eventfd2,
    libc::SYS_poll,
    libc::SYS_ppoll,
    // Starting a worker (the vCPU thread does) and the start of the worker itself.
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
];

/// The block, net and rng workers' I/O on their disk or tap.
const WORKER_IO: &[libc::c_long] = &[
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_fdatasync,
];

/// The vsock worker's Unix stream sockets (`socket` itself only for AF_UNIX, below).
const SOCKETS: &[libc::c_long] = &[
    libc::SYS_connect,
    libc::SYS_accept4,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_shutdown,
    libc::SYS_setsockopt,
    libc::SYS_getsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
];

/// The console worker's client socket: accepted from the listener the device bound, then
/// read and written (`recvfrom`, `sendto` underneath std's `read` and `write` on sockets).
const ACCEPTED_SOCKETS: &[libc::c_long] =
    &[libc::SYS_accept4, libc::SYS_sendto, libc::SYS_recvfrom];

/// ioctl types a filtered thread may use: KVM's (0xAE) and the terminal/tun one ('T':
/// FIONBIO, FIONREAD, TUNSETOFFLOAD).
const IOCTL_TYPES: &[u64] = &[0xAE, b'T' as u64];

fn rules(kind: ThreadKind) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let (vcpu, io, sockets, accepted) = match kind {
        // The vCPU thread starts the workers, so its filter holds theirs (they narrow it).
        ThreadKind::Vcpu => (true, true, true, true),
        ThreadKind::Worker => (false, true, false, false),
        ThreadKind::VsockWorker => (false, false, true, false),
        ThreadKind::ConsoleWorker => (false, false, false, true),
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let lists = [
        (COMMON, true),
        (WORKER_IO, io),
        (SOCKETS, sockets),
        (ACCEPTED_SOCKETS, accepted),
    ];
    for call in lists
        .iter()
        .filter(|(_, on)| *on)
        .flat_map(|(calls, _)| calls.iter())
    {
        rules.insert(*call, Vec::new());
    }
    let arg_is = |arg: u8, values: &[u64]| -> Result<Vec<SeccompRule>, _> {
        values
            .iter()
            .map(|v| SeccompRule::new(vec![cond(arg, SeccompCmpOp::Eq, *v)?]))
            .collect()
    };
    rules.insert(
        libc::SYS_ioctl,
        IOCTL_TYPES
            .iter()
            .map(|t| SeccompRule::new(vec![cond(1, SeccompCmpOp::MaskedEq(0xff00), t << 8)?]))
            .collect::<Result<_, _>>()?,
    );
    // Duplicating a descriptor it holds (try_clone of an eventfd or socket) and its flags.
    let fcntl = [
        libc::F_DUPFD_CLOEXEC,
        libc::F_GETFD,
        libc::F_SETFD,
        libc::F_GETFL,
        libc::F_SETFL,
    ];
    rules.insert(libc::SYS_fcntl, arg_is(1, &fcntl.map(|op| op as u64))?);
    // Naming a new worker thread, and the worker narrowing its filter ([`install`]); giving up
    // capabilities, which can only lower what the thread holds (a worker's own, and the
    // launcher's process-wide drop, [`crate::capabilities::drop_process`]).
    let prctl = [
        libc::PR_SET_NAME,
        libc::PR_GET_NAME,
        libc::PR_SET_NO_NEW_PRIVS,
        libc::PR_CAPBSET_DROP,
    ];
    rules.insert(libc::SYS_prctl, arg_is(0, &prctl.map(|op| op as u64))?);
    rules.insert(libc::SYS_capget, Vec::new());
    rules.insert(libc::SYS_capset, Vec::new());
    rules.insert(
        libc::SYS_seccomp,
        arg_is(0, &[u64::from(libc::SECCOMP_SET_MODE_FILTER)])?,
    );
    // Signals only to threads of its own process (the vCPU kick).
    rules.insert(libc::SYS_tgkill, arg_is(0, &[std::process::id().into()])?);
    if sockets {
        rules.insert(libc::SYS_socket, arg_is(0, &[libc::AF_UNIX as u64])?);
    }
    if vcpu {
        let thread = libc::CLONE_THREAD as u64;
        rules.insert(
            libc::SYS_clone,
            vec![SeccompRule::new(vec![cond(
                0,
                SeccompCmpOp::MaskedEq(thread),
                thread,
            )?])?],
        );
        // Let through to the ENOSYS filter of [`install`].
        rules.insert(libc::SYS_clone3, Vec::new());
    }
    // Let through to the EACCES filter of [`install`].
    for call in OPEN {
        rules.insert(*call, Vec::new());
    }
    Ok(rules)
}

fn install_sigsys_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with a valid handler and flags is what sigaction(2)
        // takes; the handler only writes to stderr and exits.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigsys as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut());
        }
    });
}

/// The SIGSYS handler: says which thread made which call, then ends the process. Only
/// async-signal-safe work: a message formatted on the stack, one write(2), _exit(2).
extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t; for SIGSYS its union holds `_sigsys`, whose
    // `_syscall` (an int) follows `_call_addr` (a pointer) at offset 16 + 8.
    let nr = unsafe { *(info as *const u8).add(24).cast::<libc::c_int>() };
    let kind = KIND.with(Cell::get);
    let mut message = Message::default();
    message.push(b"ferrovirt vmm: seccomp: the ");
    message.push(ThreadKind::name(kind).as_bytes());
    message.push(b" thread made system call ");
    message.push_number(nr.into());
    message.push(b" (");
    message.push(syscall_name(nr.into()).as_bytes());
    message.push(b"), which its filter forbids; the VMM exits\n");
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is valid.
    unsafe {
        libc::write(2, message.buf.as_ptr().cast(), message.len);
        libc::_exit(EXIT_BAD_SYSCALL);
    }
}

struct Message {
    buf: [u8; 256],
    len: usize,
}

impl Default for Message {
    fn default() -> Self {
        Message {
            buf: [0; 256],
            len: 0,
        }
    }
}

impl Message {
    fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
    }

    fn push_number(&mut self, mut n: i64) {
        if n < 0 {
            self.push(b"-");
            n = -n;
        }
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }
}

/// The names of the calls a compromised guest-facing thread would likely make.
fn syscall_name(nr: libc::c_long) -> &'static str {
    const NAMES: &[(libc::c_long, &str)] = &[
        (libc::SYS_open, "open"),
        (libc::SYS_openat, "openat"),
        (libc::SYS_openat2, "openat2"),
        (libc::SYS_execve, "execve"),
        (libc::SYS_execveat, "execveat"),
        (libc::SYS_fork, "fork"),
        (libc::SYS_vfork, "vfork"),
        (libc::SYS_clone, "clone"),
        (libc::SYS_socket, "socket"),
        (libc::SYS_bind, "bind"),
        (libc::SYS_listen, "listen"),
        (libc::SYS_kill, "kill"),
        (libc::SYS_tgkill, "tgkill"),
        (libc::SYS_ptrace, "ptrace"),
        (libc::SYS_mount, "mount"),
        (libc::SYS_unlink, "unlink"),
        (libc::SYS_unlinkat, "unlinkat"),
        (libc::SYS_mkdir, "mkdir"),
        (libc::SYS_mkdirat, "mkdirat"),
        (libc::SYS_chmod, "chmod"),
        (libc::SYS_setuid, "setuid"),
        (libc::SYS_ioctl, "ioctl"),
        (libc::SYS_fcntl, "fcntl"),
        (libc::SYS_prctl, "prctl"),
        (libc::SYS_newfstatat, "newfstatat"),
        (libc::SYS_statx, "statx"),
        (libc::SYS_pread64, "pread64"),
        (libc::SYS_pwrite64, "pwrite64"),
        (libc::SYS_connect, "connect"),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == nr)
        .map_or("see asm/unistd_64.h", |(_, name)| name)
}

#[cfg(test)]
#[path = "seccomp_tests.rs"]
pub(crate) mod tests;
