//! Giving up Linux capabilities: a guest-facing thread's own ([`drop_thread`]), a program the
//! launcher starts ([`confine_child`]), and the whole launcher process once its VM runs
//! ([`drop_process`]).
//!
//! On a cluster the launcher runs as KubeVirt's non-root user 107 and holds no capability at
//! all (virt-handler prepares what takes one), so there is nothing to give up. As root (the
//! `Root` feature gate, or outside a cluster) it holds what its setup takes: the tap, NAT and
//! DHCP of the pod network, QEMU's tap. Once the VM runs it needs none of that again, but for
//! the tap itself (`CAP_NET_ADMIN`): a QEMU started again, or a new domain after a final one,
//! opens it by name.
//!
//! Capabilities belong to threads in Linux, and `capset(2)` changes only the caller's, so
//! [`drop_process`] does what libcap's psx does: it signals every thread of the process that
//! still holds more than it keeps, each gives its own up in the signal handler, and it reads
//! `/proc/self/task` until every thread shows the result.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// Linux's `CAP_NET_ADMIN`: what attaching to a tap by name (`TUNSETIFF`) takes.
pub const CAP_NET_ADMIN: u32 = 12;

/// The mask of one capability, as [`drop_thread`] and [`drop_process`] take them.
pub const fn mask(cap: u32) -> u64 {
    1 << cap
}

/// Why [`drop_process`] could not finish.
#[derive(Debug, thiserror::Error)]
pub enum CapabilitiesError {
    #[error("install the handler of signal {0}")]
    Handler(libc::c_int, #[source] std::io::Error),
    #[error("list the threads of the process")]
    Threads(#[source] std::io::Error),
    #[error("give up this thread's capabilities")]
    Own(#[source] std::io::Error),
    #[error("{0} thread(s) could not give up their capabilities")]
    Failed(usize),
    #[error("thread(s) {0:?} still hold capabilities after {ROUNDS} rounds")]
    Holding(Vec<libc::pid_t>),
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`: version 3 takes two, capabilities 0-31 and 32-63.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Sets the calling thread's effective and permitted sets to what it holds of `keep` (a
/// thread can only lower them) and empties its inheritable set, and so its ambient one.
/// Async-signal-safe: two system calls, nothing allocated.
fn capset(keep: u64) -> Result<(), libc::c_int> {
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes two data structs into the array, which lives for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &header as *const Header,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(errno());
    }
    for (half, set) in data.iter_mut().enumerate() {
        let keep = (keep >> (32 * half)) as u32;
        set.permitted &= keep;
        set.effective = set.permitted;
        set.inheritable = 0;
    }
    // SAFETY: capset reads the header and two data structs, both live for the call; pid 0 is
    // the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns the calling thread's errno, valid for its life.
    unsafe { *libc::__errno_location() }
}

/// Takes every capability but those in `keep` out of the calling thread's bounding set, so
/// that a program it executes as root is not granted them. Needs `CAP_SETPCAP`; without it
/// (not root, or already dropped) there is nothing this thread could drop, and that is not an
/// error. Async-signal-safe: prctl calls only.
fn drop_bounding(keep: u64) -> Result<(), libc::c_int> {
    for cap in 0..64u32 {
        if keep & mask(cap) != 0 {
            continue;
        }
        // SAFETY: PR_CAPBSET_DROP takes a capability number and touches no memory.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) } != 0 {
            return match errno() {
                // Past the kernel's last capability, or not allowed to drop any.
                libc::EINVAL | libc::EPERM => Ok(()),
                e => Err(e),
            };
        }
    }
    Ok(())
}

/// What one thread does to hold no more than `keep`, for good: the bounding set (while it
/// still may), the capability sets, then `no_new_privs`, so that no program it executes gains
/// any (setuid, file capabilities, root's execve: with `no_new_privs` an execve grants no
/// more than the permitted set it had). Async-signal-safe.
fn give_up(keep: u64) -> Result<(), libc::c_int> {
    drop_bounding(keep)?;
    capset(keep)?;
    // SAFETY: PR_SET_NO_NEW_PRIVS touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Empties the calling thread's capability sets (a guest-facing thread needs none of the
/// launcher's); the threads it starts inherit that.
pub fn drop_thread() -> std::io::Result<()> {
    capset(0).map_err(std::io::Error::from_raw_os_error)
}

/// Makes the program `command` starts hold no capability, but `CAP_NET_ADMIN` when
/// `keep_net_admin`, and gain none: in the child, before it executes, every other capability
/// leaves the bounding set (so the root user's execve does not grant it) and `no_new_privs` is
/// set (so setuid and file capabilities grant nothing back). A parent without `CAP_SETPCAP`
/// (not root) has nothing to drop: the child only gets `no_new_privs`.
pub fn confine_child(command: &mut std::process::Command, keep_net_admin: bool) {
    use std::os::unix::process::CommandExt;
    let keep = if keep_net_admin {
        mask(CAP_NET_ADMIN)
    } else {
        0
    };
    // SAFETY: the closure runs in the child between fork and exec; it makes only prctl calls,
    // which are async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            drop_bounding(keep).map_err(std::io::Error::from_raw_os_error)?;
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// How many rounds of signals [`drop_process`] sends before it gives up (a thread started by
/// one that had not yet dropped is caught by the next round).
const ROUNDS: usize = 5;

/// How long one round waits for the signalled threads to answer.
const ROUND_WAIT: Duration = Duration::from_secs(1);

/// The signal [`drop_process`] sends (the vCPU kick is `SIGRTMIN + 1`).
fn drop_signal() -> libc::c_int {
    vmm_sys_util::signal::SIGRTMIN() + 2
}

/// What the signalled threads keep, and how they answered.
static KEEP: AtomicU64 = AtomicU64::new(0);
static ANSWERED: AtomicUsize = AtomicUsize::new(0);
static FAILED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_drop_signal(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // The interrupted code may read errno after this returns.
    let saved = errno();
    if give_up(KEEP.load(Ordering::SeqCst)).is_err() {
        FAILED.fetch_add(1, Ordering::SeqCst);
    }
    ANSWERED.fetch_add(1, Ordering::SeqCst);
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = saved };
}

fn install_handler() -> Result<(), CapabilitiesError> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with a valid handler and flags is what sigaction(2)
        // takes. SA_RESTART: a thread interrupted in a blocking call goes on with it.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_drop_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(drop_signal(), &action, std::ptr::null_mut())
        };
        if rc != 0 {
            result = Err(CapabilitiesError::Handler(
                drop_signal(),
                std::io::Error::last_os_error(),
            ));
        }
    });
    result
}

/// One thread's capability state, from its `/proc/self/task/TID/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCapabilities {
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub ambient: u64,
    pub bounding: u64,
    pub no_new_privs: bool,
}

impl ThreadCapabilities {
    /// Parses the `Cap*` and `NoNewPrivs` lines of a status file.
    pub fn parse(status: &str) -> Option<ThreadCapabilities> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let hex = |name: &str| u64::from_str_radix(field(name)?, 16).ok();
        Some(ThreadCapabilities {
            effective: hex("CapEff")?,
            permitted: hex("CapPrm")?,
            inheritable: hex("CapInh")?,
            ambient: hex("CapAmb")?,
            bounding: hex("CapBnd")?,
            no_new_privs: field("NoNewPrivs")? == "1",
        })
    }

    /// The thread's capabilities, `None` when it has ended.
    pub fn of_thread(tid: libc::pid_t) -> Option<ThreadCapabilities> {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
        ThreadCapabilities::parse(&status)
    }

    /// Whether neither this thread nor a program it executes can hold a capability outside
    /// `keep`: no more than `keep` effective and permitted, nothing inheritable or ambient,
    /// and `no_new_privs` (the bounding set does not matter then).
    pub fn holds_at_most(&self, keep: u64) -> bool {
        self.effective & !keep == 0
            && self.permitted & !keep == 0
            && self.inheritable == 0
            && self.ambient == 0
            && self.no_new_privs
    }
}

/// The threads of this process.
pub fn threads() -> std::io::Result<Vec<libc::pid_t>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// Makes every thread of the process hold no capability but those in `keep` (see
/// [`mask`]), and gain none by executing a program; returns how many threads it signalled.
/// Threads that already hold no more (the seccomp-filtered vCPUs and workers) are left alone.
pub fn drop_process(keep: u64) -> Result<usize, CapabilitiesError> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    install_handler()?;
    KEEP.store(keep, Ordering::SeqCst);
    FAILED.store(0, Ordering::SeqCst);
    give_up(keep).map_err(|e| CapabilitiesError::Own(std::io::Error::from_raw_os_error(e)))?;
    let pid = std::process::id() as libc::pid_t;
    let mut signalled = 0;
    let mut holding = threads_holding_more(keep)?;
    for _ in 0..ROUNDS {
        if holding.is_empty() {
            break;
        }
        ANSWERED.store(0, Ordering::SeqCst);
        let mut sent = 0;
        for tid in &holding {
            // SAFETY: tgkill sends a signal whose handler is installed above; a thread that
            // ended meanwhile gives ESRCH.
            if unsafe { libc::syscall(libc::SYS_tgkill, pid, *tid, drop_signal()) } == 0 {
                sent += 1;
            }
        }
        signalled += sent;
        let deadline = Instant::now() + ROUND_WAIT;
        while ANSWERED.load(Ordering::SeqCst) < sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let failed = FAILED.load(Ordering::SeqCst);
        if failed > 0 {
            return Err(CapabilitiesError::Failed(failed));
        }
        holding = threads_holding_more(keep)?;
    }
    if holding.is_empty() {
        Ok(signalled)
    } else {
        Err(CapabilitiesError::Holding(holding))
    }
}

/// The threads that hold more than `keep`.
fn threads_holding_more(keep: u64) -> Result<Vec<libc::pid_t>, CapabilitiesError> {
    Ok(threads()
        .map_err(CapabilitiesError::Threads)?
        .into_iter()
        .filter(|tid| {
            ThreadCapabilities::of_thread(*tid).is_some_and(|caps| !caps.holds_at_most(keep))
        })
        .collect())
}

#[cfg(test)]
#[path = "capabilities_tests.rs"]
mod tests;
