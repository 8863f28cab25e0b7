//! Console back ends: where a console's output goes and where its input comes from, for each
//! [`ConsoleConfig`] mode.
//!
//! * `off` / `null`: output discarded, no input.
//! * `tty`: the VMM's stdout and stdin.
//! * `file`: output appended to a file, no input.
//! * `socket`: the VMM listens on a unix socket and serves one client at a time: the client gets
//!   the output and its bytes become input. Output that no client has read (written before the
//!   first client connects, or while none is connected) is kept in a [`Backlog`] of the newest
//!   64 KiB; a connecting client gets that first (after a note of how many bytes were dropped, if
//!   any), then the output as it comes. Output a client failed to take (it went away during the
//!   write) goes back to the backlog for the next one.

mod backlog;

pub use backlog::{dropped_note, Backlog, BACKLOG_CAPACITY};

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use log::warn;

use crate::config::ConsoleConfig;

/// Opening a console back end failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenConsoleError {
    #[error("open console file {0}")]
    OpenFile(PathBuf, #[source] io::Error),
    #[error("listen on console socket {0}")]
    Listen(PathBuf, #[source] io::Error),
}

/// The connected client (if any) and what no client has read yet.
struct SocketState {
    client: Option<UnixStream>,
    backlog: Backlog,
}

type SharedSocket = Arc<Mutex<SocketState>>;

fn lock(socket: &SharedSocket) -> std::sync::MutexGuard<'_, SocketState> {
    socket.lock().unwrap_or_else(crate::poison::fatal)
}

enum Input {
    None,
    Stdin,
    Socket(UnixListener, SharedSocket),
}

/// An opened console back end.
pub struct Console {
    output: Option<Box<dyn Write + Send>>,
    input: Input,
}

/// Writes to the connected socket client, or into the backlog while there is none.
struct SocketOutput(SharedSocket);

impl Write for SocketOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut state = lock(&self.0);
        let unsent = match state.client.as_mut() {
            Some(stream) => match write_all_counted(stream, buf) {
                Ok(()) => return Ok(buf.len()),
                Err(sent) => {
                    state.client = None;
                    &buf[sent..]
                }
            },
            None => buf,
        };
        state.backlog.push(unsent);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes all of `buf`; on failure returns how many bytes were written.
fn write_all_counted<W: Write>(writer: &mut W, buf: &[u8]) -> Result<(), usize> {
    let mut sent = 0;
    while sent < buf.len() {
        match writer.write(&buf[sent..]) {
            Ok(0) => return Err(sent),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(sent),
        }
    }
    Ok(())
}

/// Makes `stream` the client: delivers the backlog to it first, holding the lock so that no
/// output can come in between. Returns false (backlog kept) when the client is already gone.
fn attach_client(socket: &SharedSocket, mut stream: UnixStream) -> bool {
    let mut state = lock(socket);
    let pending = state.backlog.take();
    match write_all_counted(&mut stream, &pending) {
        Ok(()) => {
            state.client = Some(stream);
            true
        }
        Err(sent) => {
            state.backlog.push(&pending[sent..]);
            false
        }
    }
}

impl Console {
    pub fn open(config: &ConsoleConfig) -> Result<Console, OpenConsoleError> {
        let (output, input): (Box<dyn Write + Send>, Input) = match config {
            ConsoleConfig::Off | ConsoleConfig::Null => (Box::new(io::sink()), Input::None),
            ConsoleConfig::Tty => (Box::new(io::stdout()), Input::Stdin),
            ConsoleConfig::File { path } => {
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| OpenConsoleError::OpenFile(path.clone(), e))?;
                (Box::new(file), Input::None)
            }
            ConsoleConfig::Socket { path } => {
                let _ = std::fs::remove_file(path);
                let listener = UnixListener::bind(path)
                    .map_err(|e| OpenConsoleError::Listen(path.clone(), e))?;
                let socket = Arc::new(Mutex::new(SocketState {
                    client: None,
                    backlog: Backlog::new(BACKLOG_CAPACITY),
                }));
                (
                    Box::new(SocketOutput(socket.clone())),
                    Input::Socket(listener, socket),
                )
            }
        };
        Ok(Console {
            output: Some(output),
            input,
        })
    }

    /// Takes the output writer (once).
    pub fn take_output(&mut self) -> Box<dyn Write + Send> {
        self.output.take().unwrap_or_else(|| Box::new(io::sink()))
    }

    /// Starts a thread that hands every input chunk to `sink`; no thread when there is no input.
    pub fn start_input<F>(self, mut sink: F) -> io::Result<()>
    where
        F: FnMut(&[u8]) + Send + 'static,
    {
        match self.input {
            Input::None => Ok(()),
            Input::Stdin => spawn_named("console-stdin", move || {
                pump(&mut io::stdin(), &mut sink);
            }),
            Input::Socket(listener, socket) => spawn_named("console-socket", move || {
                for stream in listener.incoming() {
                    let mut stream = match stream {
                        Ok(stream) => stream,
                        Err(e) => {
                            warn!("console socket accept: {e}");
                            continue;
                        }
                    };
                    let writer = match stream.try_clone() {
                        Ok(writer) => writer,
                        Err(e) => {
                            warn!("console socket clone: {e}");
                            continue;
                        }
                    };
                    if !attach_client(&socket, writer) {
                        continue;
                    }
                    pump(&mut stream, &mut sink);
                    // The client went away: output goes to the backlog until the next one.
                    lock(&socket).client = None;
                }
            }),
        }
    }
}

fn spawn_named<F: FnOnce() + Send + 'static>(name: &str, f: F) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
}

fn pump<R: Read, F: FnMut(&[u8])>(reader: &mut R, sink: &mut F) {
    let mut buf = [0u8; 256];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => sink(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn read_until(stream: &mut UnixStream, want: &[u8]) -> Vec<u8> {
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(want.len()).any(|w| w == want) {
            assert!(
                Instant::now() < deadline,
                "never got {:?}; got {:?}",
                String::from_utf8_lossy(want),
                String::from_utf8_lossy(&got)
            );
            match stream.read(&mut buf) {
                Ok(0) => panic!("console closed; got {:?}", String::from_utf8_lossy(&got)),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("read console: {e}"),
            }
        }
        got
    }

    #[test]
    fn socket_keeps_unread_output_for_the_next_client() {
        let dir = std::env::temp_dir().join(format!("ferrovirt-console-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("console.sock");
        let mut console = Console::open(&ConsoleConfig::Socket { path: path.clone() }).unwrap();
        let mut output = console.take_output();
        output
            .write_all(b"written before anyone listened\n")
            .unwrap();
        let (input_tx, input_rx) = mpsc::channel();
        console
            .start_input(move |bytes| input_tx.send(bytes.to_vec()).unwrap())
            .unwrap();
        output.write_all(b"second line\n").unwrap();

        let mut first = UnixStream::connect(&path).unwrap();
        let got = read_until(&mut first, b"second line\n");
        assert_eq!(got, b"written before anyone listened\nsecond line\n");
        output.write_all(b"streamed\n").unwrap();
        assert_eq!(read_until(&mut first, b"streamed\n"), b"streamed\n");
        first.write_all(b"typed").unwrap();
        assert_eq!(
            input_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            b"typed"
        );
        drop(first);

        // The peer is closed now: a write either fails into the backlog or, once the console
        // thread saw the disconnect, goes there directly. Nothing written from here is lost.
        output.write_all(b"while nobody was connected\n").unwrap();
        let mut second = UnixStream::connect(&path).unwrap();
        let got = read_until(&mut second, b"while nobody was connected\n");
        assert_eq!(got, b"while nobody was connected\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
