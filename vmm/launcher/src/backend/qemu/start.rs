//! Starting QEMU: the run directory and the firmware's files, the command line
//! ([`args::qemu_args`]), the process with the launcher's capabilities dropped, its stderr's
//! tail kept for error messages, and the QMP connection once QEMU has made its socket.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use vmm::config::VmConfig;

use super::args::{self, Machine};
use super::{find_in_path, QemuVm, QEMU_BINARY};
use crate::backend::qmp::{Qmp, QmpError};
use crate::backend::{AGENT_SOCKET, CONTROL_TIMEOUT};

/// How long QEMU gets to create its QMP socket.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How much of QEMU's stderr is kept for error messages.
const STDERR_TAIL: usize = 2000;

/// Why QEMU could not be started.
#[derive(Debug, thiserror::Error)]
pub enum QemuStartError {
    #[error("{QEMU_BINARY} is not in PATH (install the Debian package qemu-system-x86)")]
    QemuMissing,
    #[error("missing file")]
    MissingFile(#[source] crate::backend::MissingFile),
    #[error("the VM cannot run on QEMU")]
    Args(#[from] args::ArgsError),
    #[error("cannot prepare the run directory {0}")]
    RunDir(PathBuf, #[source] std::io::Error),
    #[error("cannot spawn {QEMU_BINARY}")]
    Spawn(#[source] std::io::Error),
    #[error("QEMU exited while starting ({status}): {stderr}")]
    ExitedEarly { status: String, stderr: String },
    #[error("QEMU did not open its QMP socket within {0:?}: {1}")]
    QmpTimeout(Duration, String),
    #[error("QMP handshake")]
    Qmp(#[source] QmpError),
    #[error("the OVMF firmware file {0} does not exist (install the Debian package ovmf)")]
    OvmfMissing(PathBuf),
    #[error("cannot write the firmware file {0}")]
    FirmwareFile(PathBuf, #[source] std::io::Error),
    #[error("the SMBIOS tables")]
    Smbios(#[source] vmm::smbios::SmbiosError),
}

/// The host TSC frequency in kHz from `/proc/cpuinfo` (`tsc_early_khz=`): the "cpu MHz" of a
/// CPU with a constant, known-rate TSC.
pub fn host_tsc_khz(cpuinfo: &str) -> Option<u64> {
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags"))?;
    let constant = flags.split_whitespace().any(|f| f == "constant_tsc");
    if !constant {
        return None;
    }
    let mhz = cpuinfo
        .lines()
        .find(|l| l.starts_with("cpu MHz"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse::<f64>()
        .ok()?;
    let khz = (mhz * 1000.0).round();
    (khz > 0.0 && khz < 1e8).then_some(khz as u64)
}

impl QemuVm {
    /// Starts QEMU for `config` with its vCPUs stopped; QEMU's sockets go to `run_dir`.
    pub fn start(
        config: &VmConfig,
        run_dir: &Path,
        machine: &Machine,
    ) -> Result<QemuVm, QemuStartError> {
        Self::start_with(config, run_dir, machine, false)
    }

    /// Starts QEMU for `config` waiting for an incoming migration (`-incoming defer`: the
    /// stream's socket is named later, by [`Backend::listen_incoming`]).
    pub fn start_incoming(
        config: &VmConfig,
        run_dir: &Path,
        machine: &Machine,
    ) -> Result<QemuVm, QemuStartError> {
        Self::start_with(config, run_dir, machine, true)
    }

    fn start_with(
        config: &VmConfig,
        run_dir: &Path,
        machine: &Machine,
        incoming: bool,
    ) -> Result<QemuVm, QemuStartError> {
        let qemu = find_in_path(QEMU_BINARY).ok_or(QemuStartError::QemuMissing)?;
        crate::backend::check_files(config).map_err(QemuStartError::MissingFile)?;
        std::fs::create_dir_all(run_dir).map_err(|e| QemuStartError::RunDir(run_dir.into(), e))?;
        let paths = args::QemuPaths {
            qmp: run_dir.join("qmp.sock"),
            agent: run_dir.join(AGENT_SOCKET),
            ovmf_vars: run_dir.join("OVMF_VARS.fd"),
            sercon_port: run_dir.join("sercon-port"),
            smbios_anchor: run_dir.join("smbios-anchor"),
            smbios_tables: run_dir.join("smbios-tables"),
        };
        prepare_firmware(machine, &paths)?;
        if let Some(tables) = args::smbios_files(config, machine).map_err(QemuStartError::Smbios)? {
            for (file, bytes) in [
                (&paths.smbios_anchor, &tables.entry_point),
                (&paths.smbios_tables, &tables.structures),
            ] {
                std::fs::write(file, bytes)
                    .map_err(|e| QemuStartError::FirmwareFile(file.clone(), e))?;
            }
        }
        let vnc = match machine {
            Machine::Q35(_, vnc) => vnc.as_deref(),
            Machine::Microvm(_) => None,
        };
        for socket in [Some(paths.qmp.as_path()), Some(paths.agent.as_path()), vnc]
            .into_iter()
            .flatten()
        {
            let _ = std::fs::remove_file(socket);
        }
        if let vmm::config::ConsoleConfig::Socket { path } = &config.serial {
            let _ = std::fs::remove_file(path);
        }
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mut arguments = args::qemu_args(config, &paths, host_tsc_khz(&cpuinfo), machine)?;
        if incoming {
            arguments.extend(["-incoming".to_string(), "defer".to_string()]);
        }
        log::info!("starting {} {}", qemu.display(), arguments.join(" "));
        // QEMU runs the guest (under TCG every guest instruction goes through it): it gets
        // none of the launcher's capabilities but the one attaching its tap takes.
        let mut command = Command::new(&qemu);
        vmm::capabilities::confine_child(&mut command, !config.net.is_empty());
        let mut child = command
            .args(&arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(QemuStartError::Spawn)?;
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(pipe) = child.stderr.take() {
            let tail = Arc::clone(&stderr);
            let _ = thread::Builder::new()
                .name("qemu-stderr".into())
                .spawn(move || keep_tail(pipe, tail));
        }
        match wait_for_qmp(&mut child, &paths.qmp, &stderr) {
            Ok(qmp) => Ok(QemuVm {
                child,
                qmp,
                stderr,
                paused: true,
                io_error: None,
                disk_names: config.disks.iter().map(|d| d.id.clone()).collect(),
                agent_socket: paths.agent.clone(),
                screenshot: vnc.map(|_| run_dir.join("screenshot.png")),
                shutting_down: false,
                acpi: !matches!(machine, Machine::Microvm(args::Acpi::Off)),
                host_stop: None,
                guest_shutdown: false,
                guest_rebooted: false,
                acpi_rebooting: false,
                ignore_stop: false,
                panicked: false,
                exited: None,
                migrating: None,
            }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }
}

/// The files the firmware of `machine` needs: OVMF's (checked; the variables copied for this VM)
/// or SeaBIOS's serial port.
fn prepare_firmware(machine: &Machine, paths: &args::QemuPaths) -> Result<(), QemuStartError> {
    use crate::converter::Firmware;
    match machine {
        Machine::Microvm(_) | Machine::Q35(Firmware::SeaBios { serial: false }, _) => Ok(()),
        Machine::Q35(Firmware::SeaBios { serial: true }, _) => {
            std::fs::write(&paths.sercon_port, args::SERCON_PORT)
                .map_err(|e| QemuStartError::FirmwareFile(paths.sercon_port.clone(), e))
        }
        Machine::Q35(
            Firmware::Ovmf {
                code,
                vars_template,
            },
            _,
        ) => {
            for file in [code, vars_template] {
                if !file.is_file() {
                    return Err(QemuStartError::OvmfMissing(file.clone()));
                }
            }
            std::fs::copy(vars_template, &paths.ovmf_vars)
                .map_err(|e| QemuStartError::FirmwareFile(paths.ovmf_vars.clone(), e))?;
            Ok(())
        }
    }
}

fn keep_tail(mut pipe: impl Read, tail: Arc<Mutex<String>>) {
    let mut buf = [0u8; 1024];
    loop {
        let n = match pipe.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        log::debug!("qemu: {}", text.trim_end());
        if let Ok(mut tail) = tail.lock() {
            tail.push_str(&text);
            if tail.len() > STDERR_TAIL {
                let cut = tail.len() - STDERR_TAIL;
                let cut = (cut..tail.len())
                    .find(|i| tail.is_char_boundary(*i))
                    .unwrap_or(0);
                tail.drain(..cut);
            }
        }
    }
}

fn wait_for_qmp(
    child: &mut Child,
    qmp: &Path,
    stderr: &Arc<Mutex<String>>,
) -> Result<Qmp, QemuStartError> {
    let deadline = Instant::now() + START_TIMEOUT;
    let tail = || {
        stderr
            .lock()
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            // Give the stderr reader a moment to collect QEMU's last words.
            thread::sleep(Duration::from_millis(100));
            return Err(QemuStartError::ExitedEarly {
                status: status.to_string(),
                stderr: tail(),
            });
        }
        if qmp.exists() {
            match Qmp::connect(qmp, CONTROL_TIMEOUT) {
                Ok(q) => return Ok(q),
                Err(QmpError::Connect { .. }) => {}
                Err(e) => return Err(QemuStartError::Qmp(e)),
            }
        }
        if Instant::now() >= deadline {
            return Err(QemuStartError::QmpTimeout(START_TIMEOUT, tail()));
        }
        thread::sleep(Duration::from_millis(20));
    }
}
