//! A small QMP client (QEMU Machine Protocol: JSON lines over a unix socket).
//!
//! Protocol: QEMU greets with `{"QMP": {...}}`; the client sends `qmp_capabilities` to leave
//! negotiation mode; then every `{"execute": CMD, "arguments": {...}}` is answered by exactly one
//! `{"return": ...}` or `{"error": {"class", "desc"}}`, in order, while asynchronous
//! `{"event": NAME, "data": {...}}` messages may arrive at any time. A reader thread parses every
//! line: answers go to the caller waiting in [`Qmp::execute`] (with a deadline), events are
//! appended to a shared list that the backend drains. When QEMU closes the socket the reader
//! marks the connection closed and every wait ends at once.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Why a QMP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("cannot connect to the QMP socket {path}")]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("QMP greeting missing or malformed")]
    Greeting,
    #[error("cannot write the QMP command {0}")]
    Write(String, #[source] std::io::Error),
    #[error("QEMU closed the QMP connection")]
    Closed,
    #[error("no answer to the QMP command {command} within {timeout:?}")]
    Timeout { command: String, timeout: Duration },
    #[error("QMP command {command} failed: {class}: {desc}")]
    Command {
        command: String,
        class: String,
        desc: String,
    },
}

/// An asynchronous QMP event.
#[derive(Clone, Debug, PartialEq)]
pub struct QmpEvent {
    pub name: String,
    pub data: Value,
}

/// A connected QMP session.
#[derive(Debug)]
pub struct Qmp {
    writer: UnixStream,
    answers: Receiver<Value>,
    events: Arc<Mutex<Vec<QmpEvent>>>,
}

impl Qmp {
    /// Connects, reads the greeting and negotiates capabilities, each step within `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Qmp, QmpError> {
        let stream = UnixStream::connect(path).map_err(|source| QmpError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        let reader = stream.try_clone().map_err(|source| QmpError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        let (tx, answers) = mpsc::channel();
        let events = Arc::new(Mutex::new(Vec::new()));
        let thread_events = Arc::clone(&events);
        thread::Builder::new()
            .name("qmp-reader".into())
            .spawn(move || read_loop(BufReader::new(reader), tx, thread_events))
            .map_err(|source| QmpError::Connect {
                path: path.display().to_string(),
                source,
            })?;
        let mut qmp = Qmp {
            writer: stream,
            answers,
            events,
        };
        match qmp.answers.recv_timeout(timeout) {
            Ok(greeting) if greeting.get("QMP").is_some() => {}
            _ => return Err(QmpError::Greeting),
        }
        qmp.execute("qmp_capabilities", None, timeout)?;
        Ok(qmp)
    }

    /// Runs one command and returns its `return` value.
    pub fn execute(
        &mut self,
        command: &str,
        arguments: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, QmpError> {
        let mut message = json!({ "execute": command });
        if let Some(arguments) = arguments {
            message["arguments"] = arguments;
        }
        let mut line = message.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| QmpError::Write(command.to_string(), e))?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match self.answers.recv_timeout(left) {
                Ok(answer) => answer,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(QmpError::Timeout {
                        command: command.to_string(),
                        timeout,
                    })
                }
                Err(RecvTimeoutError::Disconnected) => return Err(QmpError::Closed),
            };
            if let Some(value) = answer.get("return") {
                return Ok(value.clone());
            }
            if let Some(error) = answer.get("error") {
                let field = |name: &str| {
                    error
                        .get(name)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                return Err(QmpError::Command {
                    command: command.to_string(),
                    class: field("class"),
                    desc: field("desc"),
                });
            }
        }
    }

    /// Takes the events received so far.
    pub fn take_events(&self) -> Vec<QmpEvent> {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *events)
    }
}

fn read_loop(
    reader: BufReader<UnixStream>,
    answers: mpsc::Sender<Value>,
    events: Arc<Mutex<Vec<QmpEvent>>>,
) {
    for line in reader.lines() {
        let Ok(line) = line else { break };
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            log::warn!("QMP: ignoring a line that is not JSON: {line}");
            continue;
        };
        if let Some(name) = value.get("event").and_then(Value::as_str) {
            let event = QmpEvent {
                name: name.to_string(),
                data: value.get("data").cloned().unwrap_or(Value::Null),
            };
            log::debug!("QMP event {} {}", event.name, event.data);
            events.lock().unwrap_or_else(|e| e.into_inner()).push(event);
        } else if answers.send(value).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    /// A fake QEMU: greets, answers each command from a script, emits an event.
    fn fake_qemu(dir: &Path, script: Vec<(&'static str, &'static str)>) -> std::path::PathBuf {
        let path = dir.join("qmp.sock");
        let listener = UnixListener::bind(&path).unwrap();
        thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            writeln!(
                writer,
                r#"{{"QMP": {{"version": {{}}, "capabilities": []}}}}"#
            )
            .unwrap();
            let mut lines = BufReader::new(stream).lines();
            for (expected, answer) in script {
                let line = lines.next().unwrap().unwrap();
                let value: Value = serde_json::from_str(&line).unwrap();
                assert_eq!(value["execute"], expected);
                writeln!(writer, r#"{{"event": "STOP", "data": {{}}}}"#).unwrap();
                writeln!(writer, "{answer}").unwrap();
            }
        });
        path
    }

    #[test]
    fn commands_answers_errors_and_events() {
        let dir = std::env::temp_dir().join(format!("launcher-qmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = fake_qemu(
            &dir,
            vec![
                ("qmp_capabilities", r#"{"return": {}}"#),
                (
                    "query-status",
                    r#"{"return": {"status": "paused", "running": false}}"#,
                ),
                (
                    "cont",
                    r#"{"error": {"class": "GenericError", "desc": "nope"}}"#,
                ),
            ],
        );
        let timeout = Duration::from_secs(10);
        let mut qmp = Qmp::connect(&path, timeout).unwrap();
        let status = qmp.execute("query-status", None, timeout).unwrap();
        assert_eq!(status["status"], "paused");
        let err = qmp.execute("cont", None, timeout).unwrap_err();
        assert!(
            matches!(err, QmpError::Command { ref desc, .. } if desc == "nope"),
            "{err}"
        );
        let events = qmp.take_events();
        assert!(!events.is_empty() && events.iter().all(|e| e.name == "STOP"));
        // The fake QEMU has hung up: the next command fails at once, it does not hang.
        assert!(qmp.execute("query-status", None, timeout).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
