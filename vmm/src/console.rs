//! Console back ends: where a console's output goes and where its input comes from, for each
//! [`ConsoleConfig`] mode.
//!
//! * `off` / `null`: output discarded, no input.
//! * `tty`: the VMM's stdout and stdin.
//! * `file`: output appended to a file, no input.
//! * `socket`: the VMM listens on a unix socket; the latest client gets the output and its
//!   bytes become input. Output written while no client is connected is dropped.

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

type SharedClient = Arc<Mutex<Option<UnixStream>>>;

enum Input {
    None,
    Stdin,
    Socket(UnixListener, SharedClient),
}

/// An opened console back end.
pub struct Console {
    output: Option<Box<dyn Write + Send>>,
    input: Input,
}

/// Writes to the currently connected socket client, if any.
struct SocketOutput(SharedClient);

impl Write for SocketOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut client = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stream) = client.as_mut() {
            if stream.write_all(buf).is_err() {
                *client = None;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
                let client = SharedClient::default();
                (
                    Box::new(SocketOutput(client.clone())),
                    Input::Socket(listener, client),
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
            Input::Socket(listener, client) => spawn_named("console-socket", move || {
                for stream in listener.incoming() {
                    let mut stream = match stream {
                        Ok(stream) => stream,
                        Err(e) => {
                            warn!("console socket accept: {e}");
                            continue;
                        }
                    };
                    match stream.try_clone() {
                        Ok(writer) => {
                            *client.lock().unwrap_or_else(|e| e.into_inner()) = Some(writer)
                        }
                        Err(e) => warn!("console socket clone: {e}"),
                    }
                    pump(&mut stream, &mut sink);
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
