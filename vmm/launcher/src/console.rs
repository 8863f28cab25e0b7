//! The serial console relay: the VMM serves the guest's serial port on a private unix socket;
//! the launcher connects to it once and serves `console-sock` in the socket directory, shared
//! with virt-handler.
//!
//! Flow: [`ConsoleRelay::start`] binds `console-sock` and starts a thread that accepts clients;
//! [`ConsoleRelay::attach`] connects to the VMM's serial socket (retrying until a deadline,
//! since the VMM creates it) and starts a thread that copies guest output to a backlog (the last
//! [`BACKLOG`] bytes, replayed to each new client so that a client connecting after boot still
//! sees the boot log) and to every connected client. Bytes a client writes go to the guest. When
//! the guest side closes (the VM is gone), every client is disconnected.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Bytes of console output kept for clients that connect later.
pub const BACKLOG: usize = 256 * 1024;

/// How long [`ConsoleRelay::attach`] retries without sleeping.
const SPIN: Duration = Duration::from_secs(2);

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("cannot listen on the console socket {0}")]
    Listen(PathBuf, #[source] std::io::Error),
    #[error("cannot connect to the VMM's serial socket {0} within {1:?}")]
    Connect(PathBuf, Duration, #[source] std::io::Error),
    #[error("cannot start a console thread")]
    Thread(#[source] std::io::Error),
}

#[derive(Default)]
struct Shared {
    backlog: VecDeque<u8>,
    clients: Vec<UnixStream>,
    guest: Option<UnixStream>,
}

/// The relay between the VMM's serial socket and `console-sock`.
#[derive(Clone)]
pub struct ConsoleRelay {
    shared: Arc<Mutex<Shared>>,
}

impl ConsoleRelay {
    /// Binds `console_sock` and accepts clients in the background.
    pub fn start(console_sock: &Path) -> Result<ConsoleRelay, ConsoleError> {
        let _ = std::fs::remove_file(console_sock);
        let listener = UnixListener::bind(console_sock)
            .map_err(|e| ConsoleError::Listen(console_sock.into(), e))?;
        let relay = ConsoleRelay {
            shared: Arc::default(),
        };
        let accepting = relay.clone();
        thread::Builder::new()
            .name("console-accept".into())
            .spawn(move || accepting.accept_loop(listener))
            .map_err(ConsoleError::Thread)?;
        Ok(relay)
    }

    /// Connects to the VMM's serial socket and relays it; replaces an earlier guest connection.
    pub fn attach(&self, serial_socket: &Path, timeout: Duration) -> Result<(), ConsoleError> {
        let start = Instant::now();
        let stream = loop {
            match UnixStream::connect(serial_socket) {
                Ok(stream) => break stream,
                Err(e) if start.elapsed() >= timeout => {
                    return Err(ConsoleError::Connect(serial_socket.into(), timeout, e))
                }
                // Spin for the first moments (the KVM VMM runs its vCPUs right after it binds
                // the socket), then poll gently.
                Err(_) if start.elapsed() < SPIN => thread::yield_now(),
                Err(_) => thread::sleep(Duration::from_millis(1)),
            }
        };
        let writer = stream.try_clone().map_err(ConsoleError::Thread)?;
        self.lock().guest = Some(writer);
        let relay = self.clone();
        thread::Builder::new()
            .name("console-guest".into())
            .spawn(move || relay.guest_output_loop(stream))
            .map_err(ConsoleError::Thread)?;
        Ok(())
    }

    /// Everything the guest printed that is still in the backlog.
    pub fn backlog(&self) -> Vec<u8> {
        self.lock().backlog.iter().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn accept_loop(self, listener: UnixListener) {
        for client in listener.incoming() {
            let Ok(mut client) = client else { continue };
            let Ok(reader) = client.try_clone() else {
                continue;
            };
            let _ = client.set_write_timeout(Some(Duration::from_secs(1)));
            {
                let mut shared = self.lock();
                let (a, b) = shared.backlog.as_slices();
                if client
                    .write_all(a)
                    .and_then(|_| client.write_all(b))
                    .is_err()
                {
                    continue;
                }
                shared.clients.push(client);
            }
            let relay = self.clone();
            let _ = thread::Builder::new()
                .name("console-client".into())
                .spawn(move || relay.client_input_loop(reader));
        }
    }

    fn guest_output_loop(self, mut stream: UnixStream) {
        let mut buf = [0u8; 4096];
        loop {
            let n = match stream.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut shared = self.lock();
            shared.backlog.extend(&buf[..n]);
            let excess = shared.backlog.len().saturating_sub(BACKLOG);
            shared.backlog.drain(..excess);
            // A client that cannot take the bytes is dropped, never waited for long.
            shared.clients.retain_mut(|client| {
                let _ = client.set_write_timeout(Some(Duration::from_millis(200)));
                client.write_all(&buf[..n]).is_ok()
            });
        }
        let mut shared = self.lock();
        shared.guest = None;
        for client in shared.clients.drain(..) {
            let _ = client.shutdown(Shutdown::Both);
        }
    }

    fn client_input_loop(self, mut client: UnixStream) {
        let mut buf = [0u8; 1024];
        loop {
            let n = match client.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut shared = self.lock();
            if let Some(guest) = shared.guest.as_mut() {
                let _ = guest.write_all(&buf[..n]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relays_output_with_backlog_and_input() {
        let dir = std::env::temp_dir().join(format!("launcher-console-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let serial = dir.join("serial.sock");
        let vmm_side = UnixListener::bind(&serial).unwrap();
        let relay = ConsoleRelay::start(&dir.join(contract::sockets::CONSOLE_SOCKET)).unwrap();
        relay.attach(&serial, Duration::from_secs(5)).unwrap();
        let (mut guest, _) = vmm_side.accept().unwrap();
        guest.write_all(b"early boot\n").unwrap();
        // Wait until the relay has the bytes, then connect a client: it gets the backlog.
        let deadline = Instant::now() + Duration::from_secs(10);
        while relay.backlog().len() < 11 {
            assert!(Instant::now() < deadline, "backlog never filled");
            thread::sleep(Duration::from_millis(5));
        }
        let mut client = UnixStream::connect(dir.join(contract::sockets::CONSOLE_SOCKET)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = vec![0u8; 11];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, b"early boot\n");
        // Input reaches the guest.
        client.write_all(b"root\n").unwrap();
        guest
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut input = [0u8; 5];
        guest.read_exact(&mut input).unwrap();
        assert_eq!(&input, b"root\n");
        // The guest side closing disconnects the client.
        drop(guest);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
