//! The serial console relay: the VMM serves the guest's serial port on a private unix socket;
//! the launcher connects to it once and serves `console-sock` in the socket directory, shared
//! with virt-handler.
//!
//! Flow: [`ConsoleRelay::start`] binds `console-sock` and starts a thread that accepts clients;
//! [`ConsoleRelay::attach`] connects to the VMM's serial socket (retrying until a deadline,
//! since the VMM creates it) and starts a thread that copies guest output to a backlog (the last
//! [`BACKLOG`] bytes, replayed to each new client so that a client connecting after boot still
//! sees the boot log) and to every connected client's outbox. Each client has a thread that
//! writes its outbox, so a slow client (virt-handler relaying to a remote virtctl on a busy
//! node) neither holds up the guest nor loses bytes. A client that leaves more than
//! [`CLIENT_OUTBOX`] bytes unread is disconnected, which it sees as the end of the stream (it
//! can connect again and gets the backlog). Bytes a client writes go to the guest. When the
//! guest side closes (the VM is gone), every client gets what its outbox holds and is
//! disconnected.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// Bytes of console output kept for clients that connect later.
pub const BACKLOG: usize = 256 * 1024;

/// Bytes of console output queued for one client before it counts as stuck.
pub const CLIENT_OUTBOX: usize = 4 * 1024 * 1024;

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
    clients: Vec<Client>,
    guest: Option<UnixStream>,
}

/// What is still to be written to one client.
#[derive(Default)]
struct OutboxState {
    bytes: VecDeque<u8>,
    /// No more bytes come: the writer sends what is left and disconnects the client.
    closed: bool,
}

#[derive(Default)]
struct Outbox {
    state: Mutex<OutboxState>,
    ready: Condvar,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, OutboxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

/// A connected client: its outbox, and its stream, to cut it off.
struct Client {
    number: u64,
    outbox: Arc<Outbox>,
    stream: UnixStream,
}

impl Client {
    /// Queues `bytes`; false when the client is gone or has too much unread (then it is cut
    /// off, and its writer ends).
    fn queue(&self, bytes: &[u8]) -> bool {
        let mut state = self.outbox.lock();
        if state.closed {
            return false;
        }
        if state.bytes.len() + bytes.len() > CLIENT_OUTBOX {
            log::warn!(
                "console client {} left {} bytes unread: disconnecting it",
                self.number,
                state.bytes.len()
            );
            state.closed = true;
            state.bytes.clear();
            drop(state);
            self.outbox.ready.notify_all();
            let _ = self.stream.shutdown(Shutdown::Both);
            return false;
        }
        state.bytes.extend(bytes);
        drop(state);
        self.outbox.ready.notify_all();
        true
    }
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

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn accept_loop(self, listener: UnixListener) {
        for (number, client) in (1..).zip(listener.incoming()) {
            let Ok(stream) = client else { continue };
            let (Ok(reader), Ok(writer)) = (stream.try_clone(), stream.try_clone()) else {
                continue;
            };
            let outbox = Arc::new(Outbox::default());
            {
                let mut shared = self.lock();
                outbox.lock().bytes = shared.backlog.clone();
                shared.clients.push(Client {
                    number,
                    outbox: outbox.clone(),
                    stream,
                });
            }
            let writing = outbox.clone();
            let started = thread::Builder::new()
                .name("console-out".into())
                .spawn(move || client_output_loop(writer, &writing));
            if started.is_err() {
                outbox.close();
                let _ = reader.shutdown(Shutdown::Both);
                continue;
            }
            let relay = self.clone();
            let _ = thread::Builder::new()
                .name("console-in".into())
                .spawn(move || relay.client_input_loop(reader, &outbox));
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
            shared.clients.retain(|client| client.queue(&buf[..n]));
        }
        let mut shared = self.lock();
        shared.guest = None;
        for client in shared.clients.drain(..) {
            client.outbox.close();
        }
    }

    fn client_input_loop(self, mut client: UnixStream, outbox: &Outbox) {
        let mut buf = [0u8; 1024];
        loop {
            let n = match client.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut shared = self.lock();
            if let Some(guest) = shared.guest.as_mut() {
                let _ = guest.write_all(&buf[..n]);
            }
        }
        // The client left: its writer ends too.
        outbox.close();
    }
}

/// Writes what `outbox` receives to `client` until it is closed and empty, or the client is
/// gone; then disconnects the client.
fn client_output_loop(mut client: UnixStream, outbox: &Outbox) {
    loop {
        let bytes: Vec<u8> = {
            let mut state = outbox.lock();
            while state.bytes.is_empty() && !state.closed {
                state = outbox.ready.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            if state.bytes.is_empty() {
                break;
            }
            state.bytes.drain(..).collect()
        };
        if client.write_all(&bytes).is_err() {
            outbox.close();
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A relay attached to a serial socket played by the test: the relay, the guest's end of
    /// the serial socket, and the directory (with `console-sock`).
    fn relay_with_guest() -> (ConsoleRelay, UnixStream, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let serial = dir.path().join("serial.sock");
        let vmm_side = UnixListener::bind(&serial).unwrap();
        let relay =
            ConsoleRelay::start(&dir.path().join(contract::sockets::CONSOLE_SOCKET)).unwrap();
        relay.attach(&serial, Duration::from_secs(5)).unwrap();
        let (guest, _) = vmm_side.accept().unwrap();
        (relay, guest, dir)
    }

    fn connect(dir: &tempfile::TempDir) -> UnixStream {
        let client =
            UnixStream::connect(dir.path().join(contract::sockets::CONSOLE_SOCKET)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        client
    }

    /// Bytes that differ from one offset to the next, so a gap or a repeat shows.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn relays_output_with_backlog_and_input() {
        let (relay, mut guest, dir) = relay_with_guest();
        guest.write_all(b"early boot\n").unwrap();
        // Wait until the relay has the bytes, then connect a client: it gets the backlog.
        let deadline = Instant::now() + Duration::from_secs(10);
        while relay.backlog().len() < 11 {
            assert!(Instant::now() < deadline, "backlog never filled");
            thread::sleep(Duration::from_millis(5));
        }
        let mut client = connect(&dir);
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
        assert!(rest.is_empty(), "after the guest closed: {rest:?}");
    }

    #[test]
    fn a_client_that_reads_late_gets_every_byte_in_order() {
        let (relay, mut guest, dir) = relay_with_guest();
        let mut client = connect(&dir);
        // The client is connected once the relay wrote its (empty) backlog: input reaches the
        // guest only from a registered client.
        client.write_all(b"\r").unwrap();
        guest
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        guest.read_exact(&mut [0u8; 1]).unwrap();
        // A boot log burst far larger than the socket buffers, written before the client reads
        // a byte: the relay takes it all without waiting for the client.
        let burst = pattern(CLIENT_OUTBOX / 2);
        guest.write_all(&burst).unwrap();
        let mut got = vec![0u8; burst.len()];
        client.read_exact(&mut got).unwrap();
        assert!(
            got == burst,
            "the client got the burst with bytes missing or out of order"
        );
        assert_eq!(relay.backlog(), burst[burst.len() - BACKLOG..]);
    }

    #[test]
    fn a_client_that_reads_nothing_is_disconnected_and_the_others_go_on() {
        let (_relay, mut guest, dir) = relay_with_guest();
        let mut stuck = connect(&dir);
        let mut reading = connect(&dir);
        for client in [&mut stuck, &mut reading] {
            client.write_all(b"\r").unwrap();
        }
        guest
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        guest.read_exact(&mut [0u8; 2]).unwrap();
        // The guest writes in steps and the reading client reads each step before the next
        // one, however slowly the test threads are scheduled: its outbox never nears the limit,
        // while the stuck client's passes it.
        let step = CLIENT_OUTBOX / 4;
        let total = 3 * CLIENT_OUTBOX;
        let (read_tx, read_rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            for _ in 0..total / step {
                let mut got = vec![0u8; step];
                let read = reading.read_exact(&mut got).map(|_| got);
                let failed = read.is_err();
                if read_tx.send(read).is_err() || failed {
                    return;
                }
            }
        });
        let output = pattern(total);
        for chunk in output.chunks(step) {
            guest.write_all(chunk).unwrap();
            let got = read_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the reading client reads each step")
                .expect("the reading client gets every byte");
            assert!(
                got == chunk,
                "the reading client got bytes missing or out of order"
            );
        }
        // The stuck client sees the end of the stream, after fewer bytes than were written.
        let mut unread = Vec::new();
        stuck.read_to_end(&mut unread).unwrap();
        assert!(
            unread.len() < total,
            "the stuck client got all {total} bytes: it was never cut off"
        );
    }
}
