//! The launcher's end of a VM's guest agent channel (qemu-guest-agent on
//! `org.qemu.guest_agent.0`; the protocol is `vmm::agent`): a poller thread that keeps the last
//! report, and the commands the handler asks for (a reboot).
//!
//! The poller, step by step:
//! 1. It waits while the VM does not run ([`AgentChannel::set_running`]: a paused guest cannot
//!    answer; the report of the last poll stays), and ends when the VM is gone
//!    ([`AgentChannel::stop`], or the channel dropped with its VM).
//! 2. Each round (the first at once, then every [`Timings::interval`] from the start of the
//!    last): connect to the backend's socket when not connected (QEMU creates it at start;
//!    until then the round fails), then `guest-sync-delimited` within [`Timings::sync`].
//! 3. Then `guest-info` and, among the commands it lists as enabled, osinfo, host name,
//!    timezone, users, fsinfo, network interfaces and the fsfreeze status, each within
//!    [`Timings::command`]. A command the agent refuses (`CommandNotFound`, a reply of another
//!    shape) leaves its part empty.
//! 4. A round the agent does not complete (no socket, no sync, a timeout, garbage) reports
//!    `connected: false` with the error and nothing else, and drops the connection: the next
//!    round connects anew, so that QEMU discards what queued up for an agent that was not
//!    there (it would be answered in bulk when one starts).
//! 5. When the report changes in what is worth an event ([`snapshot::notable`]) the channel
//!    raises a flag that the launcher's monitor takes ([`AgentChannel::take_changed`]) to push a
//!    domain event. Connecting and disconnecting are logged once each.
//!
//! The connection sits behind a mutex that the poller takes for one exchange at a time (a sync,
//! or one command), so that a reboot waits at most one exchange. An exchange that ran on the
//! connection out of the poller's turn (the reboot) leaves it out of step: the poller's round
//! ends there and the next one syncs again. The launcher's VM mutex is never held here.

pub mod snapshot;

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use contract::proto::v1;
use vmm::agent::{AgentError, AgentSession, GuestInfo, ShutdownMode};

use crate::util::chain;
use snapshot::Polled;

/// How long one `read(2)` on the socket may block; the session checks its deadline between
/// reads, so this only sets how closely a deadline is kept.
const READ_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a write may block (QEMU stops reading while no agent has the port open).
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a reboot request waits for an error reply (success is not answered).
const SHUTDOWN_ERROR_WINDOW: Duration = Duration::from_secs(1);
/// How long freezing (the guest flushes every filesystem first) and thawing may take.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(60);

/// The poller's pace and deadlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// From the start of one round to the start of the next.
    pub interval: Duration,
    /// Deadline of the sync that starts each round.
    pub sync: Duration,
    /// Deadline of each command.
    pub command: Duration,
}

impl Default for Timings {
    /// A round every 5 s; sync within 3 s, each command within 5 s (TCG guests are slow).
    fn default() -> Timings {
        Timings {
            interval: Duration::from_secs(5),
            sync: Duration::from_secs(3),
            command: Duration::from_secs(5),
        }
    }
}

/// Why an exchange over the channel failed.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("cannot connect to the guest agent socket {0}")]
    Connect(PathBuf, #[source] std::io::Error),
    #[error("cannot set the timeouts of the guest agent socket")]
    Timeouts(#[source] std::io::Error),
    #[error("guest-sync-delimited")]
    Sync(#[source] AgentError),
    #[error("another exchange used the channel during the poll")]
    OutOfStep,
    #[error("{0}")]
    Command(&'static str, #[source] AgentError),
    #[error("cannot start the guest agent poller thread")]
    Thread(#[source] std::io::Error),
}

impl ChannelError {
    /// Whether the agent could not be reached at all (no socket, no answer to the sync).
    pub fn unreachable(&self) -> bool {
        matches!(
            self,
            ChannelError::Connect(..) | ChannelError::Timeouts(_) | ChannelError::Sync(_)
        )
    }
}

/// The connection: a session once connected, and whether the stream is in step (synced, and
/// every exchange since answered).
#[derive(Default)]
struct Link {
    session: Option<AgentSession<UnixStream>>,
    in_step: bool,
}

impl Link {
    /// Connects when not connected, then syncs.
    fn connect_and_sync(
        &mut self,
        socket: &Path,
        timeout: Duration,
    ) -> Result<&mut AgentSession<UnixStream>, ChannelError> {
        self.in_step = false;
        let mut session = match self.session.take() {
            Some(session) => session,
            None => AgentSession::new(connect(socket)?),
        };
        // A failed sync drops the connection (see the module docs, step 4).
        session.sync(timeout).map_err(ChannelError::Sync)?;
        self.in_step = true;
        Ok(self.session.insert(session))
    }

    /// Drops the connection.
    fn reset(&mut self) {
        self.session = None;
        self.in_step = false;
    }
}

fn connect(socket: &Path) -> Result<UnixStream, ChannelError> {
    let stream =
        UnixStream::connect(socket).map_err(|e| ChannelError::Connect(socket.to_path_buf(), e))?;
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(WRITE_TIMEOUT)))
        .map_err(ChannelError::Timeouts)?;
    Ok(stream)
}

/// Whether the poller may poll, and whether it must end.
#[derive(Default)]
struct Control {
    running: bool,
    stopped: bool,
}

/// What the poller thread and the launcher share.
struct Shared {
    socket: PathBuf,
    timings: Timings,
    link: Mutex<Link>,
    report: Mutex<v1::GuestAgent>,
    changed: AtomicBool,
    /// Counts freezes and thaws: an automatic thaw acts only if nothing came after its freeze.
    freezes: AtomicU64,
    control: Mutex<Control>,
    wake: Condvar,
}

/// The launcher's end of a VM's guest agent channel; dropping it ends the poller.
pub struct AgentChannel {
    shared: Arc<Shared>,
}

impl AgentChannel {
    /// Starts the poller of the agent behind `socket`; it polls once the VM runs.
    pub fn start(socket: PathBuf, timings: Timings) -> Result<AgentChannel, ChannelError> {
        let shared = Arc::new(Shared {
            socket,
            timings,
            link: Mutex::new(Link::default()),
            report: Mutex::new(snapshot::disconnected(
                "the guest agent has not been polled yet".into(),
            )),
            changed: AtomicBool::new(false),
            freezes: AtomicU64::new(0),
            control: Mutex::new(Control::default()),
            wake: Condvar::new(),
        });
        let poller = Arc::clone(&shared);
        thread::Builder::new()
            .name("guest-agent".into())
            .spawn(move || poller.run())
            .map_err(ChannelError::Thread)?;
        Ok(AgentChannel { shared })
    }

    /// Polls while `running` (the VM runs); waits otherwise, keeping the last report.
    pub fn set_running(&self, running: bool) {
        self.shared.control().running = running;
        self.shared.wake.notify_all();
    }

    /// Ends the poller (the VM is gone) and closes the connection.
    pub fn stop(&self) {
        self.shared.control().stopped = true;
        self.shared.wake.notify_all();
    }

    /// The last report.
    pub fn report(&self) -> v1::GuestAgent {
        self.shared.report().clone()
    }

    /// Whether the report changed (in what is worth a domain event) since the last call.
    pub fn take_changed(&self) -> bool {
        self.shared.changed.swap(false, Ordering::SeqCst)
    }

    /// Freezes the guest's filesystems (`guest-fsfreeze-freeze`) and, unless `unfreeze_after`
    /// is zero, thaws them by itself once that has passed without an [`AgentChannel::thaw`],
    /// as KubeVirt's `unfreezeTimeout` does. Returns how many filesystems froze.
    pub fn freeze(&self, unfreeze_after: Duration) -> Result<u64, ChannelError> {
        let frozen = self.shared.exchange("guest-fsfreeze-freeze", |session| {
            session.fsfreeze_freeze(FREEZE_TIMEOUT)
        })?;
        let generation = self.shared.freezes.fetch_add(1, Ordering::SeqCst) + 1;
        // An earlier freeze's automatic thaw is not this one's: it wakes and ends.
        self.shared.wake.notify_all();
        self.shared.changed.store(true, Ordering::SeqCst);
        if !unfreeze_after.is_zero() {
            let shared = Arc::clone(&self.shared);
            let spawned = thread::Builder::new()
                .name("guest-agent-thaw".into())
                .spawn(move || {
                    if shared.freeze_outlasts(generation, unfreeze_after) {
                        log::warn!(
                            "the guest's filesystems were frozen for {unfreeze_after:?} without \
                             an unfreeze: thawing them"
                        );
                        if let Err(e) = shared.thaw() {
                            log::warn!("thawing the guest's filesystems: {}", chain(&e));
                        }
                    }
                });
            if let Err(e) = spawned {
                log::warn!("no automatic thaw after {unfreeze_after:?}: {e}");
            }
        }
        Ok(frozen)
    }

    /// Thaws the guest's filesystems (`guest-fsfreeze-thaw`); how many thawed.
    pub fn thaw(&self) -> Result<u64, ChannelError> {
        // A pending automatic thaw is for an earlier freeze now: it wakes and ends.
        self.shared.freezes.fetch_add(1, Ordering::SeqCst);
        self.shared.wake.notify_all();
        self.shared.thaw()
    }

    /// Asks the guest to reboot (`guest-shutdown`, mode reboot): syncs, sends the request and
    /// waits briefly for an error (success is not answered). [`ChannelError::unreachable`]
    /// when the agent does not answer the sync.
    pub fn reboot(&self) -> Result<(), ChannelError> {
        self.shared.exchange("guest-shutdown", |session| {
            session.shutdown(ShutdownMode::Reboot, SHUTDOWN_ERROR_WINDOW)
        })
    }
}

impl Drop for AgentChannel {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    /// One command out of the poller's turn: sync, then `run`; the poller syncs again after.
    fn exchange<T>(
        &self,
        command: &'static str,
        run: impl FnOnce(&mut AgentSession<UnixStream>) -> Result<T, AgentError>,
    ) -> Result<T, ChannelError> {
        let mut link = self.link();
        let result = link
            .connect_and_sync(&self.socket, self.timings.sync)
            .and_then(|session| run(session).map_err(|e| ChannelError::Command(command, e)));
        link.in_step = false;
        result
    }

    /// Waits up to `after` while freeze number `generation` is the last freeze or thaw; true
    /// when it still is then (the automatic thaw is due), false once a thaw or another freeze
    /// came, or the VM is gone.
    fn freeze_outlasts(&self, generation: u64, after: Duration) -> bool {
        let deadline = Instant::now() + after;
        let mut control = self.control();
        loop {
            if control.stopped || self.freezes.load(Ordering::SeqCst) != generation {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            control = match self.wake.wait_timeout(control, deadline - now) {
                Ok((control, _)) => control,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// `guest-fsfreeze-thaw`; how many filesystems thawed.
    fn thaw(&self) -> Result<u64, ChannelError> {
        let thawed = self.exchange("guest-fsfreeze-thaw", |session| {
            session.fsfreeze_thaw(FREEZE_TIMEOUT)
        })?;
        self.changed.store(true, Ordering::SeqCst);
        Ok(thawed)
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn link(&self) -> MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn report(&self) -> MutexGuard<'_, v1::GuestAgent> {
        self.report.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The poller thread.
    fn run(&self) {
        let mut next = Instant::now();
        while self.wait_turn(next) {
            let started = Instant::now();
            let report = match self.poll_round() {
                Ok(polled) => {
                    snapshot::keep_while_frozen(snapshot::connected(polled), &self.report())
                }
                Err(e) => {
                    log::debug!("guest agent poll: {}", chain(&e));
                    // A command the agent did not answer: connect anew (step 4). A failed
                    // sync has dropped the connection already; a reboot that interrupted the
                    // round keeps it, for its request to reach the guest.
                    if matches!(e, ChannelError::Command(..)) {
                        self.link().reset();
                    }
                    snapshot::disconnected(chain(&e))
                }
            };
            self.publish(report);
            next = started + self.timings.interval;
        }
        self.link().reset();
        log::debug!("guest agent poller of {} ended", self.socket.display());
    }

    /// Waits until the VM runs and `next` has come; false once stopped.
    fn wait_turn(&self, next: Instant) -> bool {
        let mut control = self.control();
        loop {
            if control.stopped {
                return false;
            }
            let now = Instant::now();
            if control.running && now >= next {
                return true;
            }
            let wait = if control.running {
                next - now
            } else {
                // Woken by set_running or stop.
                Duration::from_secs(3600)
            };
            control = match self.wake.wait_timeout(control, wait) {
                Ok((control, _)) => control,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// One round (steps 2 and 3 of the module docs).
    fn poll_round(&self) -> Result<Polled, ChannelError> {
        self.link()
            .connect_and_sync(&self.socket, self.timings.sync)
            .map(|_| ())?;
        let info = self.command("guest-info", |s, t| s.info(t))?;
        let supports = |command: &str| {
            info.as_ref()
                .is_none_or(|i: &GuestInfo| i.supports(command))
        };
        let mut polled = Polled::default();
        if supports("guest-get-osinfo") {
            polled.os = self.command("guest-get-osinfo", |s, t| s.os_info(t))?;
        }
        if supports("guest-get-host-name") {
            polled.host_name = self.command("guest-get-host-name", |s, t| s.host_name(t))?;
        }
        if supports("guest-get-timezone") {
            polled.timezone = self.command("guest-get-timezone", |s, t| s.timezone(t))?;
        }
        if supports("guest-get-users") {
            polled.users = self.command("guest-get-users", |s, t| s.users(t))?;
        }
        if supports("guest-get-fsinfo") {
            polled.filesystems = self.command("guest-get-fsinfo", |s, t| s.filesystems(t))?;
        }
        if supports("guest-network-get-interfaces") {
            polled.interfaces =
                self.command("guest-network-get-interfaces", |s, t| s.interfaces(t))?;
        }
        if supports("guest-fsfreeze-status") {
            polled.fsfreeze_status =
                self.command("guest-fsfreeze-status", |s, t| s.fsfreeze_status(t))?;
        }
        polled.info = info;
        Ok(polled)
    }

    /// Runs one command of a round on the synced connection: `None` when the agent refused
    /// it (the stream stays in step), an error when it did not answer.
    fn command<T>(
        &self,
        name: &'static str,
        run: impl FnOnce(&mut AgentSession<UnixStream>, Duration) -> Result<T, AgentError>,
    ) -> Result<Option<T>, ChannelError> {
        let mut link = self.link();
        if !link.in_step {
            return Err(ChannelError::OutOfStep);
        }
        let session = link.session.as_mut().ok_or(ChannelError::OutOfStep)?;
        match run(session, self.timings.command) {
            Ok(value) => Ok(Some(value)),
            Err(e) if e.in_step() => {
                log::debug!("guest agent: {name}: {}", chain(&e));
                Ok(None)
            }
            Err(e) => {
                link.in_step = false;
                Err(ChannelError::Command(name, e))
            }
        }
    }

    /// Keeps `report`; raises the changed flag and logs a connect or disconnect.
    fn publish(&self, report: v1::GuestAgent) {
        let mut current = self.report();
        match (current.connected, report.connected) {
            (false, true) => log::info!(
                "guest agent connected: version {}, {}",
                report.version,
                report
                    .os
                    .as_ref()
                    .map_or("no OS info", |os| os.pretty_name.as_str())
            ),
            (true, false) => log::info!("guest agent disconnected: {}", report.error),
            _ => {}
        }
        if snapshot::notable(&current) != snapshot::notable(&report) {
            self.changed.store(true, Ordering::SeqCst);
        }
        *current = report;
    }
}

#[cfg(test)]
mod tests;
