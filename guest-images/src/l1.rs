//! The nested-KVM tier: run a command, or a test of the calling test binary, inside an L1 VM
//! that has real KVM.
//!
//! This machine's `/dev/kvm` is PVM, which cannot run a stock Linux guest. `hack/kvm-host.sh`
//! boots an L1 under QEMU TCG with `-cpu max` (SVM and nested paging) and Debian's cloud kernel
//! with `kvm_amd`, copies files into it, runs a command there and exits with its status. This
//! module drives that script:
//!
//! 1. [`L1Run`] names the command, the files it needs (executables bring their shared
//!    libraries), environment, memory and a deadline; [`L1Run::run`] runs it and returns the
//!    exit status and everything the L1 printed.
//! 2. [`nested_test`] is what a test of the tier calls: on this host it re-runs the same test
//!    (the test binary itself, filtered to that one test) inside the L1 with
//!    `FERROVIRT_IN_L1=1`, and asserts it passed there; inside the L1 it runs the test's body.
//!    So a nested test is an ordinary Rust test whose body runs next to a real `/dev/kvm`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the environment of a test that runs inside the L1.
pub const IN_L1_ENV: &str = "FERROVIRT_IN_L1";

/// The harness script, from this crate's place in the repository.
pub fn harness_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("hack")
        .join("kvm-host.sh")
}

/// Whether this process runs inside the L1 of [`nested_test`].
pub fn in_l1() -> bool {
    std::env::var_os(IN_L1_ENV).is_some()
}

/// One command to run inside an L1.
#[derive(Debug, Clone)]
pub struct L1Run {
    command: Vec<String>,
    files: Vec<String>,
    envs: Vec<String>,
    memory_mib: u32,
    cpus: u32,
    timeout: Duration,
}

/// What an L1 run gave.
#[derive(Debug, Clone)]
pub struct L1Output {
    /// The command's exit status; 124 when the deadline passed, 125 when the L1 failed before
    /// the command ran.
    pub status: i32,
    /// The serial console (the command's output and the L1 kernel's warnings), then what the
    /// harness itself said.
    pub output: String,
    pub took: Duration,
}

/// The harness could not be started at all.
#[derive(Debug)]
pub struct L1Error(pub String);

impl fmt::Display for L1Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for L1Error {}

impl L1Run {
    pub fn new<S: Into<String>>(command: impl IntoIterator<Item = S>) -> Self {
        L1Run {
            command: command.into_iter().map(Into::into).collect(),
            files: Vec::new(),
            envs: Vec::new(),
            memory_mib: 3072,
            cpus: 2,
            timeout: Duration::from_secs(900),
        }
    }

    /// Copies `path` (a file or directory) into the L1 at the same absolute path.
    pub fn file(mut self, path: impl AsRef<Path>) -> Self {
        self.files.push(path.as_ref().display().to_string());
        self
    }

    /// Copies `src` into the L1 at `dest`.
    pub fn file_at(mut self, src: impl AsRef<Path>, dest: impl AsRef<Path>) -> Self {
        self.files.push(format!(
            "{}:{}",
            src.as_ref().display(),
            dest.as_ref().display()
        ));
        self
    }

    pub fn env(mut self, name: &str, value: impl fmt::Display) -> Self {
        self.envs.push(format!("{name}={value}"));
        self
    }

    pub fn memory_mib(mut self, memory_mib: u32) -> Self {
        self.memory_mib = memory_mib;
        self
    }

    pub fn cpus(mut self, cpus: u32) -> Self {
        self.cpus = cpus;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The harness command line.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(harness_script());
        for f in &self.files {
            cmd.arg("--file").arg(f);
        }
        for e in &self.envs {
            cmd.arg("--env").arg(e);
        }
        cmd.arg("--mem")
            .arg(self.memory_mib.to_string())
            .arg("--cpus")
            .arg(self.cpus.to_string())
            .arg("--timeout")
            .arg(self.timeout.as_secs().max(1).to_string())
            .arg("--")
            .args(&self.command);
        cmd
    }

    /// Runs it to the end (the harness enforces the deadline and always kills the L1).
    pub fn run(&self) -> Result<L1Output, L1Error> {
        let script = harness_script();
        if !script.exists() {
            return Err(L1Error(format!(
                "the nested-KVM harness {} is missing",
                script.display()
            )));
        }
        let started = Instant::now();
        let out = self
            .command()
            .stdin(Stdio::null())
            .output()
            .map_err(|e| L1Error(format!("run {}: {e}", script.display())))?;
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(L1Output {
            status: out.status.code().unwrap_or(-1),
            output,
            took: started.elapsed(),
        })
    }
}

/// How many L1s a nested test gets when the L1 machine dies under it ([`l1_died`]).
const L1_ATTEMPTS: u32 = 3;

/// What a nested test prints when it failed inside one L1 and passed in a fresh one:
/// hack/test.sh lists each such line in its summary as a flake.
pub const FLAKE_MARKER: &str = "ferrovirt-nested-flake:";

/// Whether a test that ran in an L1 gets one more, fresh L1: it failed there (the L1 itself
/// did not die: that has its own retries) or hit its deadline. Under QEMU TCG's emulated SVM a
/// guest also stalls now and then (the nested tier saw a Linux guest stop printing mid-line
/// 1.6 s into its boot, then pass in the next run), so a single failure does not yet tell a
/// fault of ours from one of the nested machinery; a second one does, and fails the test.
fn gets_a_second_l1(out: &L1Output) -> bool {
    out.status != 0 && !l1_died(out)
}

/// Whether the L1 machine died under the command (exit status 125 with hack/kvm-host.sh's
/// "ended ... without an exit status": its kernel panicked, or it reset, which QEMU's
/// `-no-reboot` turns into an exit), as opposed to the command failing or the deadline passing.
fn l1_died(out: &L1Output) -> bool {
    out.status == 125 && out.output.contains("without an exit status")
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs the test `name` (the calling test's name, as `cargo test` filters it) inside an L1:
/// outside the L1 it boots one with this test binary and `files`, runs
/// `<this binary> --exact <name> --nocapture --test-threads 1` there with
/// [`IN_L1_ENV`] set, prints what it printed and panics unless it passed; inside the L1 it runs
/// `body`. `files` are what the body needs (the binaries it starts, the guest images).
pub fn nested_test(name: &str, files: &[PathBuf], timeout: Duration, body: impl FnOnce()) {
    nested_test_in(name, files, 3072, timeout, body)
}

/// [`nested_test`] in an L1 of `memory_mib`: the files are copied into the L1's memory, so a
/// test that brings a whole disk image needs room for it and for the copies it makes.
pub fn nested_test_in(
    name: &str,
    files: &[PathBuf],
    memory_mib: u32,
    timeout: Duration,
    body: impl FnOnce(),
) {
    if in_l1() {
        body();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary knows its own path");
    let run = || {
        let mut run = L1Run::new([
            exe.display().to_string(),
            "--exact".into(),
            name.into(),
            "--nocapture".into(),
            "--test-threads".into(),
            "1".into(),
        ])
        .file(&exe)
        .env(IN_L1_ENV, 1)
        .env("RUST_BACKTRACE", 1)
        .memory_mib(memory_mib)
        .timeout(timeout);
        for f in files {
            run = run.file(f);
        }
        let out = run
            .run()
            .unwrap_or_else(|e| panic!("nested test {name}: {e}"));
        println!(
            "--- {name} inside the L1 ({:.1} s) ---\n{}",
            out.took.as_secs_f64(),
            out.output
        );
        out
    };
    // The L1 machine itself (Debian's kernel with kvm_amd on QEMU TCG's emulated SVM) can die
    // under a test: its kernel overflows its stack in a page fault during KVM_RUN, or it resets.
    // That is the test machinery failing, not the test: it gets a fresh L1, at most
    // L1_ATTEMPTS in all, each death printed with its console above.
    let run_in_a_living_l1 = || {
        let mut out = run();
        for attempt in 2..=L1_ATTEMPTS {
            if !l1_died(&out) {
                break;
            }
            println!(
                "nested test {name}: the L1 machine died before the test ended (its console \
                 is above); attempt {attempt} of {L1_ATTEMPTS} in a fresh L1"
            );
            out = run();
        }
        out
    };
    let mut out = run_in_a_living_l1();
    if gets_a_second_l1(&out) {
        println!(
            "nested test {name}: FAILED inside the L1 (exit status {}; its output is above); \
             once more in a fresh L1, to tell a stall of the nested machinery from a failure",
            out.status
        );
        out = run_in_a_living_l1();
        if out.status == 0 {
            println!(
                "{FLAKE_MARKER} {name} failed in its first L1 and passed in a second (the \
                 failure is printed above)"
            );
        }
    }
    assert_eq!(
        out.status,
        0,
        "nested test {name} failed inside the L1 (exit status {}; 124: deadline, 125: the L1 \
         did not run it); its last lines:\n{}",
        out.status,
        tail(&out.output, 40)
    );
    assert!(
        out.output.contains("test result: ok. 1 passed"),
        "nested test {name}: the L1 did not run exactly that test:\n{}",
        tail(&out.output, 40)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(status: i32, output: &str) -> L1Output {
        L1Output {
            status,
            output: output.into(),
            took: Duration::from_secs(1),
        }
    }

    #[test]
    fn only_an_l1_that_died_under_its_command_is_retried() {
        let ended = "kvm-host: the L1 ended after 59s without an exit status; QEMU said:";
        let panic = format!("[ 56.8] Kernel panic - not syncing: Fatal exception\n{ended}");
        assert!(l1_died(&output(125, &panic)));
        // A silent reset ends the L1 the same way.
        assert!(l1_died(&output(125, ended)));
        // The command ran and failed: a guest's panic on the console is the test's business.
        assert!(!l1_died(&output(101, &panic)));
        // The L1 could not start the command, or the deadline passed.
        assert!(!l1_died(&output(
            125,
            "kvm-host: the L1 failed before the command ran"
        )));
        assert!(!l1_died(&output(124, "kvm-host: deadline of 600s passed")));
    }

    #[test]
    fn a_test_that_failed_in_a_living_l1_gets_one_more() {
        let ended = "kvm-host: the L1 ended after 59s without an exit status; QEMU said:";
        assert!(gets_a_second_l1(&output(101, "test result: FAILED")));
        assert!(gets_a_second_l1(&output(
            124,
            "kvm-host: deadline of 600s passed"
        )));
        // A dead L1 has retries of its own; a pass needs none.
        assert!(!gets_a_second_l1(&output(125, ended)));
        assert!(!gets_a_second_l1(&output(0, "test result: ok. 1 passed")));
    }
}
