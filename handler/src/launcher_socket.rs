//! Waking a VMI's pass the moment its launcher's socket appears, instead of looking for it again
//! every second: one inotify instance for the handler, one watch per launcher still starting.
//!
//! A VMI is Scheduled when its launcher Pod runs; the launcher creates its socket a moment later
//! in the Pod's socket directory, which virt-handler reaches through `socket_root/<uid>` (a
//! symlink, followed by the watch). The first `IN_CREATE` or `IN_MOVED_TO` in that directory
//! sends the VMI back to the controller's queue, and its watch is dropped: the pass looks at the
//! socket itself, and watches again if it is still not there.

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use api::VirtualMachineInstance;
use kube::runtime::reflector::ObjectRef;
use rustix::fd::OwnedFd;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::sync::mpsc::UnboundedSender;

type Waiting = Arc<Mutex<HashMap<i32, ObjectRef<VirtualMachineInstance>>>>;

/// What [`LauncherSockets::wait_for`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Wait {
    /// The socket is there now (it appeared before the watch was in place): go on.
    Appeared,
    /// The directory is watched; the VMI is sent back when something appears in it.
    Watching,
    /// The directory cannot be watched (not there yet): look again later.
    Unwatchable,
}

/// The handler's watches of launcher socket directories.
pub struct LauncherSockets {
    fd: Arc<OwnedFd>,
    waiting: Waiting,
}

impl LauncherSockets {
    /// Starts watching; each VMI whose directory gets a new entry is sent on `wake`.
    pub fn start(wake: UnboundedSender<ObjectRef<VirtualMachineInstance>>) -> io::Result<Self> {
        let fd = Arc::new(inotify::init(CreateFlags::CLOEXEC)?);
        let waiting = Waiting::default();
        let (reader_fd, reader_waiting) = (fd.clone(), waiting.clone());
        std::thread::Builder::new()
            .name("launcher-sockets".into())
            .spawn(move || forward(&reader_fd, &reader_waiting, &wake))?;
        Ok(Self { fd, waiting })
    }

    /// Watches `dir` until something appears in it, for `vmi`, whose launcher's socket is
    /// `socket` in it.
    pub fn wait_for(
        &self,
        dir: &Path,
        socket: &Path,
        vmi: ObjectRef<VirtualMachineInstance>,
    ) -> Wait {
        let flags = WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR;
        let wd = match inotify::add_watch(&*self.fd, dir, flags) {
            Ok(wd) => wd,
            Err(e) => {
                log::debug!("{vmi}: cannot watch {}: {e}", dir.display());
                return Wait::Unwatchable;
            }
        };
        self.lock().insert(wd, vmi);
        // The socket may have come between the caller's look and the watch.
        if socket.exists() {
            if self.lock().remove(&wd).is_some() {
                let _ = inotify::remove_watch(&*self.fd, wd);
            }
            return Wait::Appeared;
        }
        Wait::Watching
    }

    /// How many directories are watched.
    pub fn watched(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, ObjectRef<VirtualMachineInstance>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reads the inotify events (blocking, on a thread of its own) and sends each watched VMI back
/// once; stops when nobody listens any more.
fn forward(
    fd: &OwnedFd,
    waiting: &Waiting,
    wake: &UnboundedSender<ObjectRef<VirtualMachineInstance>>,
) {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 4096];
    let mut reader = inotify::Reader::new(fd, &mut buf);
    loop {
        let (wd, dropped) = match reader.next() {
            Ok(event) => (event.wd(), event.events().contains(ReadFlags::IGNORED)),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                log::warn!("launcher socket watch stopped: {e}");
                return;
            }
        };
        let vmi = waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&wd);
        let Some(vmi) = vmi else { continue };
        if !dropped {
            let _ = inotify::remove_watch(fd, wd);
        }
        if wake.send(vmi).is_err() {
            return;
        }
    }
}

#[cfg(test)]
#[path = "launcher_socket_tests.rs"]
mod tests;
