//! The QEMU guest agent protocol (qemu-guest-agent, "QGA"), as the host side speaks it over the
//! VM's `org.qemu.guest_agent.0` channel. Pure: generic over any `Read + Write` stream, so that
//! tests talk to a fake agent and the fuzz target feeds bytes.
//!
//! The protocol, step by step:
//! 1. A request is one JSON object, `{"execute":"<cmd>","arguments":{...}}`, then `\n`. A reply
//!    is one JSON object on one line: `{"return": ...}` or
//!    `{"error":{"class":"...","desc":"..."}}`. The agent never speaks unasked.
//! 2. The stream is not in step by itself: replies to earlier commands that timed out may still
//!    come, and what the host wrote while no agent ran in the guest is delivered (and answered)
//!    when one starts. So each round begins with [`AgentSession::sync`]: the host writes the
//!    byte `0xFF` (it resets the agent's JSON parser, ending whatever half request it holds),
//!    then `{"execute":"guest-sync-delimited","arguments":{"id":N}}` with a fresh `N`. The agent
//!    answers with `0xFF` then `{"return":N}`. The host discards everything up to a `0xFF`, then
//!    reads lines until `{"return":N}` with its own `N`, skipping the others (a `0xFF` inside a
//!    line starts the line anew: it ends a stale delimited reply).
//! 3. Then the commands, each a request and the next line as its reply ([`replies`] types them).
//!    `guest-shutdown` is the exception: it is not answered when it works.
//!
//! Everything read comes from the guest and is untrusted: a line longer than [`MAX_LINE`] is an
//! error, every read has a deadline (the stream's own read timeout bounds one `read`; the
//! session checks the deadline between reads, so a guest that trickles bytes cannot hold it
//! either), and the typed replies are bounded ([`replies::MAX_STRING`], [`replies::MAX_LIST`]).
//! Errors fall in two kinds ([`AgentError::in_step`]): the agent answered (an error reply, a
//! reply of an unexpected shape), and the stream is still in step; or it did not (timeout,
//! closed channel, garbage), and the next round must sync again.

pub mod replies;

use std::io::{self, Read, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

pub use replies::{
    Filesystem, FilesystemDisk, GuestInfo, Interface, InterfaceAddress, OsInfo, SupportedCommand,
    Timezone, User,
};

/// The longest reply line read, in bytes.
pub const MAX_LINE: usize = 1 << 20;
/// The byte that delimits a sync reply and resets the agent's parser.
pub const DELIMITER: u8 = 0xFF;
/// Sync ids stay below 2^53, so that any JSON reader holds them exactly.
const SYNC_ID_MASK: u64 = (1 << 53) - 1;
/// How much is read from the stream at once.
const CHUNK: usize = 4096;

/// Why an exchange with the guest agent failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot write to the guest agent channel")]
    Write(#[source] io::Error),
    #[error("cannot read from the guest agent channel")]
    Read(#[source] io::Error),
    #[error("no answer from the guest agent within {0:?}")]
    Timeout(Duration),
    #[error("the guest agent channel was closed")]
    Closed,
    #[error("the guest agent sent a line longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("the guest agent sent a line that is not JSON")]
    NotJson(#[source] serde_json::Error),
    #[error("the guest agent sent a line that is neither a return nor an error")]
    NotAReply,
    #[error("the guest agent's reply to {command} has an unexpected shape")]
    Shape {
        command: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{command} failed in the guest agent: {class}: {desc}")]
    Command {
        command: &'static str,
        class: String,
        desc: String,
    },
}

impl AgentError {
    /// Whether the agent answered (the stream is still in step, the next command may follow);
    /// otherwise the next exchange must [`AgentSession::sync`] first.
    pub fn in_step(&self) -> bool {
        matches!(self, AgentError::Shape { .. } | AgentError::Command { .. })
    }
}

/// How `guest-shutdown` ends the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    Powerdown,
    Halt,
    Reboot,
}

impl ShutdownMode {
    fn as_str(self) -> &'static str {
        match self {
            ShutdownMode::Powerdown => "powerdown",
            ShutdownMode::Halt => "halt",
            ShutdownMode::Reboot => "reboot",
        }
    }
}

/// The ids of successive syncs: a start taken from the clock (so that a new session does not
/// reuse the ids of an old one whose replies may still be in the channel), then counting up.
#[derive(Clone, Copy, Debug)]
struct SyncIds {
    next: u64,
}

impl SyncIds {
    fn from_clock() -> SyncIds {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        // Fold the 128-bit count so that its fast-moving low bits stay.
        let folded = (nanos as u64) ^ ((nanos >> 64) as u64);
        SyncIds {
            next: folded & SYNC_ID_MASK,
        }
    }

    fn take(&mut self) -> u64 {
        let id = self.next;
        self.next = self.next.wrapping_add(1) & SYNC_ID_MASK;
        id
    }
}

/// Bytes read from the stream and not yet consumed. Consumed bytes are dropped when more are
/// read, so that taking many short lines costs no copying per line.
#[derive(Debug, Default)]
struct Inbox {
    buf: Vec<u8>,
    start: usize,
}

impl Inbox {
    fn unread(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.start = 0;
    }

    /// Reads what the stream has (at least one byte) before `deadline`.
    fn fill(
        &mut self,
        stream: &mut impl Read,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), AgentError> {
        self.buf.drain(..self.start);
        self.start = 0;
        let mut chunk = [0u8; CHUNK];
        loop {
            if Instant::now() >= deadline {
                return Err(AgentError::Timeout(timeout));
            }
            match stream.read(&mut chunk) {
                Ok(0) => return Err(AgentError::Closed),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                // The stream's read timeout: look at the deadline, then read again.
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(AgentError::Read(e)),
            }
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A conversation with the guest agent over `stream`.
#[derive(Debug)]
pub struct AgentSession<S> {
    stream: S,
    inbox: Inbox,
    ids: SyncIds,
}

impl<S: Read + Write> AgentSession<S> {
    /// A session whose sync ids start from the clock.
    pub fn new(stream: S) -> AgentSession<S> {
        Self::with_ids(stream, SyncIds::from_clock())
    }

    /// A session whose sync ids are `first`, `first + 1`, ... (tests and fuzzing, where the
    /// fake agent must know them).
    pub fn with_first_sync_id(stream: S, first: u64) -> AgentSession<S> {
        Self::with_ids(
            stream,
            SyncIds {
                next: first & SYNC_ID_MASK,
            },
        )
    }

    fn with_ids(stream: S, ids: SyncIds) -> AgentSession<S> {
        AgentSession {
            stream,
            inbox: Inbox::default(),
            ids,
        }
    }

    /// The stream (to set its timeouts).
    pub fn stream(&self) -> &S {
        &self.stream
    }

    /// Brings the stream in step (see the module docs, step 2), within `timeout`.
    pub fn sync(&mut self, timeout: Duration) -> Result<(), AgentError> {
        let deadline = Instant::now() + timeout;
        let id = self.ids.take();
        let mut request = vec![DELIMITER];
        request.extend_from_slice(
            json!({ "execute": "guest-sync-delimited", "arguments": { "id": id } })
                .to_string()
                .as_bytes(),
        );
        request.push(b'\n');
        self.write(&request, timeout)?;
        let mut delimited = false;
        loop {
            if self.take_sync_reply(id, &mut delimited) {
                return Ok(());
            }
            self.inbox.fill(&mut self.stream, deadline, timeout)?;
        }
    }

    /// Walks the unread bytes for the sync reply with `id`; consumes what it walked. A segment
    /// ends at a `0xFF` or a newline; only newline-ended segments after a `0xFF` count.
    fn take_sync_reply(&mut self, id: u64, delimited: &mut bool) -> bool {
        let unread = self.inbox.unread();
        let mut segment_start = 0;
        let mut found = None;
        for (at, &byte) in unread.iter().enumerate() {
            match byte {
                DELIMITER => {
                    *delimited = true;
                    segment_start = at + 1;
                }
                b'\n' => {
                    if *delimited && is_sync_reply(&unread[segment_start..at], id) {
                        found = Some(at + 1);
                        break;
                    }
                    segment_start = at + 1;
                }
                _ => {}
            }
        }
        let partial = unread.len() - segment_start;
        match found {
            Some(end) => {
                self.inbox.consume(end);
                true
            }
            // A partial segment longer than any reply is garbage: drop it.
            None if partial > MAX_LINE => {
                self.inbox.clear();
                false
            }
            None => {
                self.inbox.consume(segment_start);
                false
            }
        }
    }

    /// Runs `command` and returns its `return` value.
    pub fn execute(
        &mut self,
        command: &'static str,
        arguments: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, AgentError> {
        let deadline = Instant::now() + timeout;
        self.write(&request_line(command, arguments), timeout)?;
        let line = self.read_reply_line(deadline, timeout)?;
        parse_reply(command, &line)
    }

    /// Runs `command` and types its `return` value.
    fn query<T: DeserializeOwned>(
        &mut self,
        command: &'static str,
        timeout: Duration,
    ) -> Result<T, AgentError> {
        let value = self.execute(command, None, timeout)?;
        serde_json::from_value(value).map_err(|source| AgentError::Shape { command, source })
    }

    /// `guest-info`: the agent's version and commands.
    pub fn info(&mut self, timeout: Duration) -> Result<GuestInfo, AgentError> {
        self.query::<GuestInfo>("guest-info", timeout)
            .map(GuestInfo::bounded)
    }

    /// `guest-get-osinfo`.
    pub fn os_info(&mut self, timeout: Duration) -> Result<OsInfo, AgentError> {
        self.query::<OsInfo>("guest-get-osinfo", timeout)
            .map(OsInfo::bounded)
    }

    /// `guest-get-host-name`.
    pub fn host_name(&mut self, timeout: Duration) -> Result<String, AgentError> {
        self.query::<replies::HostName>("guest-get-host-name", timeout)
            .map(replies::HostName::bounded)
    }

    /// `guest-get-timezone`.
    pub fn timezone(&mut self, timeout: Duration) -> Result<Timezone, AgentError> {
        self.query::<Timezone>("guest-get-timezone", timeout)
            .map(Timezone::bounded)
    }

    /// `guest-get-users`: who is logged in.
    pub fn users(&mut self, timeout: Duration) -> Result<Vec<User>, AgentError> {
        self.query::<Vec<User>>("guest-get-users", timeout)
            .map(User::bounded_list)
    }

    /// `guest-get-fsinfo`: the mounted filesystems and the disks under them.
    pub fn filesystems(&mut self, timeout: Duration) -> Result<Vec<Filesystem>, AgentError> {
        self.query::<Vec<Filesystem>>("guest-get-fsinfo", timeout)
            .map(Filesystem::bounded_list)
    }

    /// `guest-network-get-interfaces`.
    pub fn interfaces(&mut self, timeout: Duration) -> Result<Vec<Interface>, AgentError> {
        self.query::<Vec<Interface>>("guest-network-get-interfaces", timeout)
            .map(Interface::bounded_list)
    }

    /// `guest-fsfreeze-status`: "thawed" or "frozen".
    pub fn fsfreeze_status(&mut self, timeout: Duration) -> Result<String, AgentError> {
        self.query::<String>("guest-fsfreeze-status", timeout)
            .map(|s| replies::bounded_string(s, replies::MAX_STRING))
    }

    /// `guest-fsfreeze-freeze`: flushes and freezes the guest's filesystems; how many.
    pub fn fsfreeze_freeze(&mut self, timeout: Duration) -> Result<u64, AgentError> {
        self.query::<u64>("guest-fsfreeze-freeze", timeout)
    }

    /// `guest-fsfreeze-thaw`: thaws them; how many.
    pub fn fsfreeze_thaw(&mut self, timeout: Duration) -> Result<u64, AgentError> {
        self.query::<u64>("guest-fsfreeze-thaw", timeout)
    }

    /// `guest-shutdown`: answered only when it fails, so this writes the request and waits at
    /// most `error_window` for an error reply. Silence, or the channel closing (the guest going
    /// down), is success. Sync first: the line read must be this command's.
    pub fn shutdown(
        &mut self,
        mode: ShutdownMode,
        error_window: Duration,
    ) -> Result<(), AgentError> {
        const COMMAND: &str = "guest-shutdown";
        let deadline = Instant::now() + error_window;
        let arguments = json!({ "mode": mode.as_str() });
        self.write(&request_line(COMMAND, Some(arguments)), error_window)?;
        match self.read_reply_line(deadline, error_window) {
            Ok(line) => parse_reply(COMMAND, &line).map(|_| ()),
            Err(AgentError::Timeout(_) | AgentError::Closed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn write(&mut self, bytes: &[u8], timeout: Duration) -> Result<(), AgentError> {
        let written = self
            .stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush());
        match written {
            Ok(()) => Ok(()),
            Err(e) if is_timeout(&e) => Err(AgentError::Timeout(timeout)),
            Err(e) => Err(AgentError::Write(e)),
        }
    }

    /// The next line that is not blank.
    fn read_reply_line(
        &mut self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Vec<u8>, AgentError> {
        loop {
            let line = self.read_line(deadline, timeout)?;
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Ok(line);
            }
        }
    }

    /// The next line, without its newline; at most [`MAX_LINE`] bytes.
    fn read_line(&mut self, deadline: Instant, timeout: Duration) -> Result<Vec<u8>, AgentError> {
        let mut scanned = 0;
        loop {
            let unread = self.inbox.unread();
            if let Some(at) = unread[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + at;
                if end > MAX_LINE {
                    self.inbox.consume(end + 1);
                    return Err(AgentError::LineTooLong);
                }
                let line = unread[..end].to_vec();
                self.inbox.consume(end + 1);
                return Ok(line);
            }
            scanned = unread.len();
            if scanned > MAX_LINE {
                self.inbox.clear();
                return Err(AgentError::LineTooLong);
            }
            self.inbox.fill(&mut self.stream, deadline, timeout)?;
        }
    }
}

/// `{"execute":...,"arguments":...}` and its newline.
fn request_line(command: &str, arguments: Option<Value>) -> Vec<u8> {
    let mut request = json!({ "execute": command });
    if let Some(arguments) = arguments {
        request["arguments"] = arguments;
    }
    let mut line = request.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Whether `segment` is `{"return": id}`.
fn is_sync_reply(segment: &[u8], id: u64) -> bool {
    serde_json::from_slice::<Value>(segment)
        .ok()
        .and_then(|v| v.get("return").and_then(Value::as_u64))
        == Some(id)
}

/// A reply line: its `return` value, or its error.
pub fn parse_reply(command: &'static str, line: &[u8]) -> Result<Value, AgentError> {
    let mut reply = match serde_json::from_slice::<Value>(line).map_err(AgentError::NotJson)? {
        Value::Object(reply) => reply,
        _ => return Err(AgentError::NotAReply),
    };
    if let Some(value) = reply.remove("return") {
        return Ok(value);
    }
    let Some(error) = reply.get("error") else {
        return Err(AgentError::NotAReply);
    };
    let field = |name: &str| {
        let text = error.get(name).and_then(Value::as_str).unwrap_or_default();
        replies::bounded_string(text.to_string(), replies::MAX_STRING)
    };
    Err(AgentError::Command {
        command,
        class: field("class"),
        desc: field("desc"),
    })
}

#[cfg(test)]
mod tests;
