//! A device worker thread: epoll over the device's event fds plus a kill eventfd. Each ready fd
//! is handed to the device's handler by its token, with an [`EventRegistry`] through which the
//! handler can add or remove fds (vsock connections come and go); the kill event ends the
//! thread.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::thread::JoinHandle;

use log::warn;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

const KILL_TOKEN: u64 = u64::MAX;

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
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    pub fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
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

/// Starts a worker thread named `name`.
pub fn spawn<F>(name: &str, events: Vec<WorkerEvent>, mut handler: F) -> io::Result<WorkerHandle>
where
    F: FnMut(u64, &EventRegistry<'_>) + Send + 'static,
{
    let kill = EventFd::new(libc::EFD_NONBLOCK)?;
    let epoll = Epoll::new()?;
    epoll.ctl(
        ControlOperation::Add,
        kill.as_raw_fd(),
        EpollEvent::new(EventSet::IN, KILL_TOKEN),
    )?;
    let capacity = events.len() + 16;
    for event in events {
        EventRegistry(&epoll).add(event)?;
    }
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
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
                    handler(event.data(), &EventRegistry(&epoll));
                }
            }
        })?;
    Ok(WorkerHandle {
        kill,
        thread: Some(thread),
    })
}
