//! Booting a guest under `qemu-system-x86_64 -M microvm -accel tcg`, reading its serial console
//! and typing into it, with a deadline on every wait.
//!
//! The console is QEMU's stdio: a reader thread per output stream sends chunks over a channel;
//! [`RunningGuest::wait_for`] consumes them until the text it waits for shows up after what
//! earlier waits consumed, the deadline passes, or QEMU exits. QEMU is killed when the
//! [`RunningGuest`] is dropped, so a failed assertion never leaves it running (QEMU pauses
//! instead of exiting on some errors).

use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use crate::host;

/// The QEMU binary; `guest-images/build.sh` installs it (package qemu-system-x86).
pub const QEMU: &str = "qemu-system-x86_64";

/// How many bytes of console output an error message quotes.
const OUTPUT_TAIL: usize = 4000;

/// A disk attached as virtio-blk over virtio-mmio.
#[derive(Debug, Clone)]
struct Disk {
    path: PathBuf,
    /// Read-only to the guest; otherwise writes go to a throwaway overlay (`snapshot=on`) so
    /// the cached image is never changed.
    readonly: bool,
}

/// What to boot: kernel, initrd, command line, disks, network.
#[derive(Debug, Clone)]
pub struct GuestSpec {
    kernel: PathBuf,
    initrd: Option<PathBuf>,
    cmdline: Vec<String>,
    disks: Vec<Disk>,
    user_net: bool,
    acpi: bool,
    virtio_console_log: Option<PathBuf>,
    memory_mib: u32,
    cpus: u32,
}

impl GuestSpec {
    /// A guest booting `kernel` with 256 MiB, one vCPU, the serial console on ttyS0.
    pub fn new(kernel: impl Into<PathBuf>) -> Self {
        Self {
            kernel: kernel.into(),
            initrd: None,
            cmdline: vec!["console=ttyS0".to_string()],
            disks: Vec::new(),
            user_net: false,
            acpi: true,
            virtio_console_log: None,
            memory_mib: 256,
            cpus: 1,
        }
    }

    pub fn initrd(mut self, initrd: impl Into<PathBuf>) -> Self {
        self.initrd = Some(initrd.into());
        self
    }

    /// Appends `arg` to the kernel command line.
    pub fn kernel_arg(mut self, arg: impl Into<String>) -> Self {
        self.cmdline.push(arg.into());
        self
    }

    /// Attaches a disk whose writes are discarded when QEMU exits.
    pub fn disk(mut self, path: impl Into<PathBuf>) -> Self {
        self.disks.push(Disk {
            path: path.into(),
            readonly: false,
        });
        self
    }

    /// Attaches a read-only disk.
    pub fn readonly_disk(mut self, path: impl Into<PathBuf>) -> Self {
        self.disks.push(Disk {
            path: path.into(),
            readonly: true,
        });
        self
    }

    /// Attaches a virtio-net NIC on QEMU's user-mode network (it answers DHCP: 10.0.2.15/24).
    pub fn user_net(mut self) -> Self {
        self.user_net = true;
        self
    }

    /// Boots without ACPI tables, as the Ferrovirt KVM VMM does: QEMU then declares the
    /// virtio-mmio devices with `virtio_mmio.device=` on the kernel command line, and
    /// `poweroff` halts instead of ending QEMU (`reboot -f` does end it, with `-no-reboot`).
    pub fn without_acpi(mut self) -> Self {
        self.acpi = false;
        self
    }

    /// Adds a virtio-console (`hvc0` in the guest) whose output goes to the file `log`.
    pub fn virtio_console_log(mut self, log: impl Into<PathBuf>) -> Self {
        self.virtio_console_log = Some(log.into());
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

    /// The QEMU command line for this guest, with `tsc_early_khz=tsc_khz` on the kernel
    /// command line.
    pub fn command(&self, tsc_khz: u64) -> Command {
        let mut cmdline = self.cmdline.clone();
        cmdline.push(format!("tsc_early_khz={tsc_khz}"));
        // A panic ends QEMU (reboot + -no-reboot) instead of leaving it spinning.
        cmdline.push("panic=-1".to_string());

        let mut command = Command::new(QEMU);
        let machine = if self.acpi {
            "microvm"
        } else {
            "microvm,acpi=off"
        };
        command
            .args(["-M", machine, "-accel", "tcg"])
            .args(["-m", &self.memory_mib.to_string()])
            .args(["-smp", &self.cpus.to_string()])
            .args(["-nodefaults", "-no-user-config", "-display", "none"])
            .args(["-serial", "stdio", "-no-reboot"])
            .arg("-kernel")
            .arg(&self.kernel);
        if let Some(initrd) = &self.initrd {
            command.arg("-initrd").arg(initrd);
        }
        command.arg("-append").arg(cmdline.join(" "));
        for (index, disk) in self.disks.iter().enumerate() {
            let mode = if disk.readonly {
                "readonly=on"
            } else {
                "snapshot=on"
            };
            command.arg("-drive").arg(format!(
                "id=disk{index},file={},format=raw,if=none,{mode}",
                escape_option(&disk.path)
            ));
            command
                .arg("-device")
                .arg(format!("virtio-blk-device,drive=disk{index}"));
        }
        if self.user_net {
            command.args(["-netdev", "user,id=net0"]);
            command.args(["-device", "virtio-net-device,netdev=net0"]);
        }
        if let Some(log) = &self.virtio_console_log {
            command
                .arg("-chardev")
                .arg(format!("file,id=hvc0,path={}", escape_option(log)));
            command.args(["-device", "virtio-serial-device"]);
            command.args(["-device", "virtconsole,chardev=hvc0"]);
        }
        command
    }

    /// Starts QEMU. Checks first that the kernel, initrd and disks exist.
    pub fn spawn(&self) -> Result<RunningGuest, GuestError> {
        let files = std::iter::once(&self.kernel)
            .chain(self.initrd.iter())
            .chain(self.disks.iter().map(|disk| &disk.path));
        for file in files {
            if !file.exists() {
                return Err(GuestError::MissingFile(file.clone()));
            }
        }
        let tsc_khz = host::tsc_khz().map_err(GuestError::Tsc)?;
        let mut command = self.command(tsc_khz);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = command.spawn().map_err(GuestError::Spawn)?;
        let (sender, receiver) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            forward(stdout, sender.clone());
        }
        if let Some(stderr) = child.stderr.take() {
            forward(stderr, sender);
        }
        let stdin = child.stdin.take();
        Ok(RunningGuest {
            child,
            stdin,
            chunks: receiver,
            output: Vec::new(),
            cursor: 0,
            started,
            streams_closed: false,
        })
    }
}

/// QEMU option values double commas to escape them.
fn escape_option(path: &Path) -> String {
    path.display().to_string().replace(',', ",,")
}

fn forward(mut stream: impl Read + Send + 'static, sender: Sender<Vec<u8>>) {
    thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sender.send(buffer[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

/// A step of running a guest that failed.
#[derive(Debug)]
pub enum GuestError {
    MissingFile(PathBuf),
    Tsc(host::TscUnknown),
    Spawn(std::io::Error),
    WriteConsole(std::io::Error),
    Wait(std::io::Error),
    /// The text did not show up before the deadline.
    Timeout {
        waiting_for: String,
        after: Duration,
        output_tail: String,
    },
    /// QEMU exited (or closed its output) before the text showed up.
    Exited {
        waiting_for: String,
        status: Option<ExitStatus>,
        output_tail: String,
    },
    /// QEMU did not exit before the deadline.
    StillRunning {
        after: Duration,
        output_tail: String,
    },
}

impl fmt::Display for GuestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestError::MissingFile(path) => write!(
                f,
                "{} is missing: build the guest images with `guest-images/build.sh` (as root)",
                path.display()
            ),
            GuestError::Tsc(e) => write!(f, "{e}"),
            GuestError::Spawn(e) => write!(
                f,
                "starting {QEMU}: {e} (guest-images/build.sh installs qemu-system-x86)"
            ),
            GuestError::WriteConsole(e) => write!(f, "writing to the guest console: {e}"),
            GuestError::Wait(e) => write!(f, "waiting for {QEMU}: {e}"),
            GuestError::Timeout {
                waiting_for,
                after,
                output_tail,
            } => write!(
                f,
                "{waiting_for:?} did not appear on the console within {after:?}; console tail:\n{output_tail}"
            ),
            GuestError::Exited {
                waiting_for,
                status,
                output_tail,
            } => write!(
                f,
                "QEMU exited ({status:?}) before {waiting_for:?} appeared; console tail:\n{output_tail}"
            ),
            GuestError::StillRunning { after, output_tail } => write!(
                f,
                "QEMU still running after {after:?}; console tail:\n{output_tail}"
            ),
        }
    }
}

impl std::error::Error for GuestError {}

/// A running QEMU guest; killed on drop.
#[derive(Debug)]
pub struct RunningGuest {
    child: Child,
    stdin: Option<ChildStdin>,
    chunks: Receiver<Vec<u8>>,
    output: Vec<u8>,
    /// Output before this offset was consumed by earlier waits.
    cursor: usize,
    started: Instant,
    streams_closed: bool,
}

impl RunningGuest {
    /// Waits until `text` appears in the console output after what earlier waits consumed, and
    /// returns the time since QEMU was started.
    pub fn wait_for(&mut self, text: &str, timeout: Duration) -> Result<Duration, GuestError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(position) = find(&self.output[self.cursor..], text.as_bytes()) {
                self.cursor += position + text.len();
                return Ok(self.started.elapsed());
            }
            if self.streams_closed {
                let status = self.child.wait().ok();
                return Err(GuestError::Exited {
                    waiting_for: text.to_string(),
                    status,
                    output_tail: self.output_tail(),
                });
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(remaining) {
                Ok(chunk) => self.output.extend_from_slice(&chunk),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(GuestError::Timeout {
                        waiting_for: text.to_string(),
                        after: timeout,
                        output_tail: self.output_tail(),
                    })
                }
                Err(RecvTimeoutError::Disconnected) => self.streams_closed = true,
            }
        }
    }

    /// Types `line` and a newline on the serial console.
    pub fn send_line(&mut self, line: &str) -> Result<(), GuestError> {
        let stdin = self.stdin.as_mut().ok_or_else(|| {
            GuestError::WriteConsole(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "console input already closed",
            ))
        })?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(GuestError::WriteConsole)
    }

    /// Logs in as `user` with `password` at a `login:` prompt that has already appeared (wait
    /// for it first, e.g. `"myhost login: "`), and waits for the shell prompt (`$ ` or `# `
    /// after the user's name).
    pub fn login(
        &mut self,
        user: &str,
        password: &str,
        timeout: Duration,
    ) -> Result<(), GuestError> {
        self.send_line(user)?;
        self.wait_for("Password: ", timeout)?;
        self.send_line(password)?;
        let prompt = if user == "root" { "# " } else { "$ " };
        self.wait_for(&format!("{user}@"), timeout)?;
        self.wait_for(prompt, timeout)?;
        Ok(())
    }

    /// Waits for QEMU to exit, collecting the rest of its output.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, GuestError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().map_err(GuestError::Wait)? {
                self.drain();
                return Ok(status);
            }
            if Instant::now() >= deadline {
                self.drain();
                return Err(GuestError::StillRunning {
                    after: timeout,
                    output_tail: self.output_tail(),
                });
            }
            match self.chunks.recv_timeout(Duration::from_millis(50)) {
                Ok(chunk) => self.output.extend_from_slice(&chunk),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.streams_closed = true;
                    thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// Everything the console printed so far (lossy UTF-8).
    pub fn output(&mut self) -> String {
        self.drain();
        String::from_utf8_lossy(&self.output).into_owned()
    }

    /// Kills QEMU and waits for it.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    fn drain(&mut self) {
        while let Ok(chunk) = self.chunks.try_recv() {
            self.output.extend_from_slice(&chunk);
        }
    }

    fn output_tail(&self) -> String {
        let start = self.output.len().saturating_sub(OUTPUT_TAIL);
        String::from_utf8_lossy(&self.output[start..]).into_owned()
    }
}

impl Drop for RunningGuest {
    fn drop(&mut self) {
        self.kill();
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(command: &Command) -> Vec<String> {
        command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn command_has_tsc_deadline_disks_and_net() {
        let spec = GuestSpec::new("/k/vmlinux")
            .initrd("/k/initrd")
            .kernel_arg("root=/dev/vda")
            .disk("/d/root,1.img")
            .readonly_disk("/d/seed.iso")
            .user_net();
        let args = args(&spec.command(2_599_998));
        let joined = args.join(" ");
        assert!(joined.starts_with("-M microvm -accel tcg"), "{joined}");
        let append = args.iter().position(|a| a == "-append").unwrap();
        assert_eq!(
            args[append + 1],
            "console=ttyS0 root=/dev/vda tsc_early_khz=2599998 panic=-1"
        );
        assert!(args
            .contains(&"id=disk0,file=/d/root,,1.img,format=raw,if=none,snapshot=on".to_string()));
        assert!(
            args.contains(&"id=disk1,file=/d/seed.iso,format=raw,if=none,readonly=on".to_string())
        );
        assert!(args.contains(&"virtio-net-device,netdev=net0".to_string()));
        assert!(args.contains(&"-no-reboot".to_string()));
    }

    #[test]
    fn find_locates_needles() {
        assert_eq!(find(b"abc READY x", b"READY"), Some(4));
        assert_eq!(find(b"abc", b"READY"), None);
    }
}
