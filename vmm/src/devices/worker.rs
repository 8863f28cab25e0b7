//! A device worker thread: epoll over the device's event fds plus a kill eventfd. Each ready fd
//! is handed to the device's handler by its token, with an [`EventRegistry`] through which the
//! handler can add or remove fds (vsock connections come and go); the kill event ends the
//! thread.
//!
//! A worker can be paused between two handler calls ([`WorkerHandle::pause`], for live
//! migration: a paused worker touches neither guest memory nor its queues, so the migration can
//! copy them consistently) and resumed.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use log::warn;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

const KILL_TOKEN: u64 = u64::MAX;
const PAUSE_TOKEN: u64 = u64::MAX - 1;

/// Pause handshake between a [`WorkerHandle`] and its thread.
#[derive(Default)]
struct PauseState {
    requested: bool,
    parked: bool,
}

type SharedPause = Arc<(Mutex<PauseState>, Condvar)>;

/// Parks the worker thread while a pause is requested.
fn park(pause: &SharedPause) {
    let (lock, changed) = &**pause;
    let mut state = lock.lock().unwrap_or_else(crate::poison::fatal);
    if !state.requested {
        return;
    }
    state.parked = true;
    changed.notify_all();
    while state.requested {
        state = changed.wait(state).unwrap_or_else(crate::poison::fatal);
    }
    state.parked = false;
    changed.notify_all();
}

/// An fd the worker waits on, and the token its handler receives.
pub struct WorkerEvent {
    pub fd: RawFd,
    pub token: u64,
    pub edge_triggered: bool,
}

/// Adds and removes fds of a running worker.
pub struct EventRegistry<'a>(&'a Epoll);

impl<'a> EventRegistry<'a> {
    /// A registry over `epoll` (the worker makes its own; tests make one directly).
    pub fn new(epoll: &'a Epoll) -> Self {
        EventRegistry(epoll)
    }

    pub fn add(&self, event: WorkerEvent) -> io::Result<()> {
        let mut set = EventSet::IN;
        if event.edge_triggered {
            set |= EventSet::EDGE_TRIGGERED;
        }
        self.0.ctl(
            ControlOperation::Add,
            event.fd,
            EpollEvent::new(set, event.token),
        )
    }

    /// Registers a stream socket for readability and writability, edge-triggered.
    pub fn add_stream(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let set = EventSet::IN | EventSet::OUT | EventSet::EDGE_TRIGGERED;
        self.0
            .ctl(ControlOperation::Add, fd, EpollEvent::new(set, token))
    }

    pub fn remove(&self, fd: RawFd) -> io::Result<()> {
        self.0
            .ctl(ControlOperation::Delete, fd, EpollEvent::default())
    }
}

/// A running worker; stopping or dropping it ends and joins the thread.
pub struct WorkerHandle {
    kill: EventFd,
    pause_evt: EventFd,
    pause: SharedPause,
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Parks the thread between two handler calls; returns once it is parked (or has ended).
    pub fn pause(&mut self) {
        let Some(thread) = &self.thread else { return };
        let (lock, changed) = &*self.pause;
        let mut state = lock.lock().unwrap_or_else(crate::poison::fatal);
        state.requested = true;
        if let Err(e) = self.pause_evt.write(1) {
            warn!("worker: pause: {e}");
        }
        while !state.parked && !thread.is_finished() {
            state = match changed.wait_timeout(state, Duration::from_millis(10)) {
                Ok((state, _)) => state,
                Err(e) => crate::poison::fatal(e).0,
            };
        }
    }

    /// Lets a paused thread go on.
    pub fn resume(&mut self) {
        let (lock, changed) = &*self.pause;
        lock.lock().unwrap_or_else(crate::poison::fatal).requested = false;
        changed.notify_all();
    }

    pub fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.resume();
            if let Err(e) = self.kill.write(1) {
                warn!("worker: kill: {e}");
            }
            if thread.join().is_err() {
                warn!("worker thread panicked");
            }
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a worker thread named `name`; `kind` is the seccomp filter it installs when the
/// filters are on ([`crate::seccomp`]).
pub fn spawn<F>(
    name: &str,
    kind: crate::seccomp::ThreadKind,
    events: Vec<WorkerEvent>,
    mut handler: F,
) -> io::Result<WorkerHandle>
where
    F: FnMut(u64, &EventRegistry<'_>) + Send + 'static,
{
    let kill = EventFd::new(libc::EFD_NONBLOCK)?;
    let pause_evt = EventFd::new(libc::EFD_NONBLOCK)?;
    let pause = SharedPause::default();
    let epoll = Epoll::new()?;
    epoll.ctl(
        ControlOperation::Add,
        kill.as_raw_fd(),
        EpollEvent::new(EventSet::IN, KILL_TOKEN),
    )?;
    epoll.ctl(
        ControlOperation::Add,
        pause_evt.as_raw_fd(),
        EpollEvent::new(EventSet::IN, PAUSE_TOKEN),
    )?;
    let thread_pause_evt = pause_evt.try_clone()?;
    let thread_pause = pause.clone();
    let capacity = events.len() + 16;
    for event in events {
        EventRegistry(&epoll).add(event)?;
    }
    // The worker installs its kind's filter before it reads a queue: started by a filtered
    // vCPU thread (a driver's DRIVER_OK) it narrows that one; started by an unfiltered thread
    // (a migration target's restore) it is filtered all the same.
    let filter = crate::seccomp::enabled().then_some(kind);
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Some(kind) = filter {
                if let Err(e) = crate::seccomp::install(kind) {
                    warn!("worker: {}; it stops", crate::error::error_chain(&e));
                    return;
                }
            }
            let mut ready = vec![EpollEvent::default(); capacity];
            loop {
                let n = match epoll.wait(-1, &mut ready) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        warn!("worker epoll: {e}");
                        return;
                    }
                };
                for event in &ready[..n] {
                    if event.data() == KILL_TOKEN {
                        return;
                    }
                    if event.data() == PAUSE_TOKEN {
                        let _ = thread_pause_evt.read();
                        park(&thread_pause);
                        continue;
                    }
                    handler(event.data(), &EventRegistry(&epoll));
                }
            }
        })?;
    Ok(WorkerHandle {
        kill,
        pause_evt,
        pause,
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A `Worker`-kind worker on one eventfd (returned, to be written), running `on_event` each
    /// time the eventfd is read.
    fn worker_on_eventfd(mut on_event: impl FnMut() + Send + 'static) -> (WorkerHandle, EventFd) {
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let thread_evt = evt.try_clone().unwrap();
        let worker = spawn(
            "test-worker",
            crate::seccomp::ThreadKind::Worker,
            vec![WorkerEvent {
                fd: evt.as_raw_fd(),
                token: 0,
                edge_triggered: false,
            }],
            move |_, _| {
                let _ = thread_evt.read();
                on_event();
            },
        )
        .unwrap();
        (worker, evt)
    }

    #[test]
    fn a_paused_worker_handles_nothing_until_resumed() {
        let handled = Arc::new(AtomicU32::new(0));
        let seen = handled.clone();
        let (mut worker, evt) = worker_on_eventfd(move || {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        worker.pause();
        evt.write(1).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            handled.load(Ordering::SeqCst),
            0,
            "a paused worker ran its handler"
        );
        worker.resume();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while handled.load(Ordering::SeqCst) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the resumed worker never ran"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        worker.stop();
    }

    /// A worker started by a thread without a filter (as a migration target's restore starts
    /// them) installs its kind's filter and holds no capability all the same.
    #[test]
    fn a_worker_started_by_an_unfiltered_thread_is_filtered() {
        assert!(crate::seccomp::enabled());
        assert!(!crate::seccomp::current_thread_filtered());
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (mut worker, evt) = worker_on_eventfd(move || {
            // SAFETY: gettid has no arguments.
            let _ = tid_tx.send(unsafe { libc::gettid() });
        });
        evt.write(1).unwrap();
        let tid = tid_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the worker ran its handler");
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        worker.stop();
        // 2: SECCOMP_MODE_FILTER.
        let mode = crate::seccomp::tests::status_field(&status, "Seccomp:");
        assert_eq!(mode, "2", "{status}");
        let caps = crate::capabilities::ThreadCapabilities::parse(&status).expect("Cap* lines");
        assert!(caps.holds_at_most(0), "the worker's capabilities: {caps:?}");
    }
}
