//! A program run on a pseudo-terminal, as a user at a terminal runs it: its stdin, stdout and
//! stderr are the pty's terminal side (so `tcgetattr` and raw mode work), and the test reads
//! what it prints from the other side and types into it.
//!
//! A thread copies everything the program prints into a buffer; [`PtyProgram::expect`] waits
//! for a string to appear after what earlier expectations consumed, and a failure shows the
//! end of the output seen so far (a boot log's first lines are rarely what went wrong, and a
//! long message loses its end in CI's excerpt).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};

/// How many of the last lines an error shows.
pub const TAIL_LINES: usize = 60;

/// The last `n` lines of `text`, after a line that says how many were left out before them.
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= n {
        return text.to_string();
    }
    let left_out = lines.len() - n;
    format!(
        "[the first {left_out} lines left out]\n{}",
        lines[left_out..].join("\n")
    )
}

/// A program on a pty; killed when dropped.
pub struct PtyProgram {
    child: Child,
    input: File,
    output: Arc<Mutex<Vec<u8>>>,
    /// How much of `output` earlier expectations consumed.
    consumed: usize,
}

impl PtyProgram {
    /// Starts `program` with `args` on a new pty.
    pub fn spawn<S: AsRef<OsStr>>(program: &std::path::Path, args: &[S]) -> PtyProgram {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let controller = openpt(flags).unwrap_or_else(|e| panic!("opening /dev/ptmx: {e}"));
        grantpt(&controller).unwrap_or_else(|e| panic!("grantpt: {e}"));
        unlockpt(&controller).unwrap_or_else(|e| panic!("unlockpt: {e}"));
        let name = ptsname(&controller, Vec::new()).unwrap_or_else(|e| panic!("ptsname: {e}"));
        let terminal = rustix::fs::open(
            name.as_c_str(),
            OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap_or_else(|e| panic!("opening {name:?}: {e}"));
        let stdio = || {
            Stdio::from(
                terminal
                    .try_clone()
                    .unwrap_or_else(|e| panic!("duplicating the pty: {e}")),
            )
        };
        let child = Command::new(program)
            .args(args)
            .stdin(stdio())
            .stdout(stdio())
            .stderr(stdio())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        // Only the child holds the terminal side now: reads end (EIO) when it exits.
        drop(terminal);
        let controller = File::from(controller);
        let mut reader = controller
            .try_clone()
            .unwrap_or_else(|e| panic!("duplicating the pty: {e}"));
        let output = Arc::new(Mutex::new(Vec::new()));
        let sink = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut out) = sink.lock() {
                    out.extend_from_slice(&buf[..n]);
                }
            }
        });
        PtyProgram {
            child,
            input: controller,
            output,
            consumed: 0,
        }
    }

    /// Everything the program printed so far.
    pub fn output(&self) -> String {
        let out = self.output.lock().map(|o| o.clone()).unwrap_or_default();
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The last [`TAIL_LINES`] lines of what the program printed, saying how many came before.
    pub fn output_tail(&self) -> String {
        tail_lines(&self.output(), TAIL_LINES)
    }

    /// Waits up to `timeout` for `needle` to appear after what earlier expectations consumed;
    /// on success consumes up to its end and returns the text up to there. The error says
    /// what was expected and shows the end of the output.
    pub fn expect(&mut self, needle: &str, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = {
                let out = self.output.lock().map(|o| o.clone()).unwrap_or_default();
                find(&out[self.consumed.min(out.len())..], needle.as_bytes()).map(|at| {
                    let end = self.consumed + at + needle.len();
                    let text = String::from_utf8_lossy(&out[self.consumed..end]).into_owned();
                    (end, text)
                })
            };
            if let Some((end, text)) = found {
                self.consumed = end;
                return Ok(text);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "expected {needle:?} within {timeout:?}; the terminal showed:\n{}",
                    self.output_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// [`PtyProgram::expect`] for whichever of `needles` appears first; returns its index and
    /// the text up to its end.
    pub fn expect_any(
        &mut self,
        needles: &[&str],
        timeout: Duration,
    ) -> Result<(usize, String), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = {
                let out = self.output.lock().map(|o| o.clone()).unwrap_or_default();
                let rest = &out[self.consumed.min(out.len())..];
                needles
                    .iter()
                    .enumerate()
                    .filter_map(|(i, n)| find(rest, n.as_bytes()).map(|at| (at + n.len(), i)))
                    .min()
                    .map(|(len, i)| {
                        let end = self.consumed + len;
                        let text = String::from_utf8_lossy(&out[self.consumed..end]).into_owned();
                        (end, i, text)
                    })
            };
            if let Some((end, i, text)) = found {
                self.consumed = end;
                return Ok((i, text));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "expected one of {needles:?} within {timeout:?}; the terminal showed:\n{}",
                    self.output_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Marks everything printed so far as seen.
    pub fn skip_output(&mut self) {
        self.consumed = self.output.lock().map(|o| o.len()).unwrap_or(0);
    }

    /// Types `bytes`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.input
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("typing into the pty: {e}"));
    }

    /// Waits up to `timeout` for the program to exit.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for PtyProgram {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_on_the_pty_sees_a_terminal_and_echoes_input() {
        // `stty -echo` fails unless stdin is a terminal; `cat` then echoes only what it reads.
        let mut program = PtyProgram::spawn(
            std::path::Path::new("/bin/sh"),
            &["-c", "stty -echo && echo ready && head -n 1"],
        );
        program
            .expect("ready", Duration::from_secs(10))
            .expect("stty succeeded on the pty");
        program.send(b"typed-line\n");
        program
            .expect("typed-line", Duration::from_secs(10))
            .expect("head echoed the line");
        let status = program.wait(Duration::from_secs(10)).expect("sh exited");
        assert!(status.success());
        let missing = program.expect("never printed", Duration::from_millis(200));
        assert!(missing
            .expect_err("not printed")
            .contains("the terminal showed:"));
    }

    #[test]
    fn expect_any_takes_whichever_comes_first_and_consumes_it() {
        let mut program = PtyProgram::spawn(
            std::path::Path::new("/bin/sh"),
            &[
                "-c",
                "echo 'Login incorrect'; echo 'login: '; echo 'user$ '",
            ],
        );
        let needles = ["$ ", "Login incorrect"];
        let (first, text) = program
            .expect_any(&needles, Duration::from_secs(10))
            .expect("one of them");
        assert_eq!((first, text.trim()), (1, "Login incorrect"));
        let (second, _) = program
            .expect_any(&needles, Duration::from_secs(10))
            .expect("the prompt after it");
        assert_eq!(second, 0);
        let none = program.expect_any(&needles, Duration::from_millis(200));
        assert!(none.expect_err("nothing more").contains("expected one of"));
    }

    #[test]
    fn a_failed_expectation_shows_the_last_lines_and_counts_the_rest() {
        let mut program = PtyProgram::spawn(
            std::path::Path::new("/bin/sh"),
            &[
                "-c",
                "i=0; while [ $i -lt 100 ]; do echo line-$i; i=$((i+1)); done; sleep 5",
            ],
        );
        program
            .expect("line-99", Duration::from_secs(10))
            .expect("the last line");
        let error = program
            .expect("never printed", Duration::from_millis(200))
            .expect_err("not printed");
        let lines = 100 - TAIL_LINES;
        assert!(
            error.contains(&format!(
                "[the first {lines} lines left out]\nline-{lines}\n"
            )),
            "{error}"
        );
        assert!(error.trim_end().ends_with("line-99"), "{error}");
        assert!(!error.contains("line-0\n"), "{error}");
    }

    #[test]
    fn a_short_output_is_shown_whole() {
        assert_eq!(tail_lines("a\nb\n", 2), "a\nb\n");
        assert_eq!(
            tail_lines("a\nb\nc", 2),
            "[the first 1 lines left out]\nb\nc"
        );
    }
}
