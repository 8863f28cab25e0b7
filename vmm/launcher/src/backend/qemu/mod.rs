//! The QEMU TCG backend: `qemu-system-x86_64 -M microvm -accel tcg` as a child process,
//! controlled over QMP; `-M q35` with firmware (SeaBIOS or OVMF) for `firmware.bootloader`.
//!
//! Start: check that QEMU is on `PATH` and that the kernel (none for a guestless VM: microvm's
//! firmware runs, finds nothing and halts), initramfs and disk files exist;
//! spawn QEMU with its vCPUs stopped (`-S`); wait (with a deadline) for its QMP socket and
//! negotiate. Firmware on q35 needs its files first: OVMF's code and variables template (a
//! missing one names Debian's `ovmf`), the VM's own copy of the variables in the run directory
//! (fresh at each start, as KubeVirt's non-persistent EFI), and SeaBIOS's serial-port file for
//! `useSerial`. The caller then connects the console relay to the serial socket and calls
//! [`Backend::resume`], so the first console byte is not lost.
//!
//! Control: pause is QMP `stop`, resume `cont`, reset `system_reset`, forced stop `quit` (then
//! SIGKILL if QEMU has not exited within a deadline). Graceful shutdown: with Ferrovirt's own
//! kernel the machine runs without ACPI (see [`args`]), so there is no ACPI power button; the
//! launcher presses Ctrl-Alt-Del on the i8042 keyboard (QMP `send-key`): Linux signals init,
//! which shuts the system down and reboots (busybox init runs its `ctrlaltdel` action, systemd
//! its `ctrl-alt-del.target`). While a shutdown is pending a guest reset is the end of the
//! shutdown: the launcher then quits QEMU. A machine with ACPI (a distribution kernel from the
//! user's disk, firmware on q35) gets the power button of `system_powerdown` alone, as libvirt
//! sends it: with Ctrl-Alt-Del too, systemd would run its reboot beside the power-off.
//!
//! Soft reboot without the guest agent ([`Backend::request_reboot`]): as libvirt reboots
//! through ACPI, the power button with QEMU told to pause at the guest's power-off
//! (`set-action`), then `system_reset` and `cont`. Without ACPI, Ctrl-Alt-Del, which the
//! guest's init answers by rebooting; the VM keeps running through either.
//!
//! Guest agent: QEMU listens on `agent.sock` in the run directory for the host end of the
//! `org.qemu.guest_agent.0` channel ([`args`]); [`Backend::guest_agent_socket`] names it to the
//! launcher, which speaks the protocol itself (`crate::agent`). QEMU takes one client at a time.
//!
//! Death: [`Backend::poll`] reaps QEMU without blocking. The exit reason comes from the last
//! QMP `SHUTDOWN` event (guest power-off, host quit) or, when QEMU died without one, from its
//! exit status and the tail of its stderr: a crash.

pub mod args;
mod start;

/// The `PATH` lookup, kept at its old path (it lives in [`crate::util`]).
pub use crate::util::find_in_path;
pub use args::{Acpi, Machine};
pub use start::{host_tsc_khz, QemuStartError};

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use super::qmp::Qmp;
use super::{
    process_stats, Backend, BackendError, BackendKind, MigrationParams, MigrationPhase,
    MigrationProgress, VmStatus, VmmStats, CONTROL_TIMEOUT,
};

/// The QEMU binary (Debian package `qemu-system-x86`).
pub const QEMU_BINARY: &str = "qemu-system-x86_64";

/// A running QEMU.
pub struct QemuVm {
    child: Child,
    qmp: Qmp,
    stderr: Arc<Mutex<String>>,
    paused: bool,
    /// Set by a `BLOCK_IO_ERROR` that stopped the VM (QEMU's `werror=enospc`), until it resumes.
    io_error: Option<String>,
    /// The VMI's disk names, by QEMU drive index (`disk<N>`).
    disk_names: Vec<String>,
    /// The host end of the guest agent channel.
    agent_socket: PathBuf,
    /// Where QEMU writes a screenshot, for a VM with a graphics device.
    screenshot: Option<PathBuf>,
    shutting_down: bool,
    /// The machine has ACPI, so a graceful shutdown is its power button alone.
    acpi: bool,
    /// Set by [`Backend::kill`]: why the host stopped the VM.
    host_stop: Option<String>,
    /// Set by a guest-initiated `SHUTDOWN` event.
    guest_shutdown: bool,
    /// Set when the guest reset in answer to a shutdown request.
    guest_rebooted: bool,
    /// A reboot through ACPI is under way: the guest's power-off pauses QEMU (`set-action`),
    /// and the launcher resets and resumes it.
    acpi_rebooting: bool,
    /// The `STOP` that follows the power-off of a reboot through ACPI: not a pause of the VM
    /// (it is resumed at once), so not reported as one.
    ignore_stop: bool,
    panicked: bool,
    exited: Option<(String, bool)>,
    /// The migration under way or last done: its progress, kept once final.
    migrating: Option<MigrationProgress>,
}

impl QemuVm {
    fn execute(
        &mut self,
        command: &str,
        arguments: Option<serde_json::Value>,
    ) -> Result<(), BackendError> {
        if let Some((reason, _)) = &self.exited {
            return Err(BackendError::Exited(reason.clone()));
        }
        self.qmp.execute(command, arguments, CONTROL_TIMEOUT)?;
        Ok(())
    }

    fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    /// The guest powered off during a reboot through ACPI, and QEMU paused: reset and resume
    /// it (libvirt's reboot through ACPI), and let a later power-off end QEMU again.
    fn finish_acpi_reboot(&mut self) {
        self.acpi_rebooting = false;
        self.ignore_stop = true;
        log::info!("soft reboot: the guest powered off; resetting and resuming it");
        for (command, arguments) in [
            ("system_reset", None),
            ("cont", None),
            ("set-action", Some(json!({ "shutdown": "poweroff" }))),
        ] {
            if let Err(e) = self.qmp.execute(command, arguments, CONTROL_TIMEOUT) {
                log::warn!("soft reboot: QMP {command}: {e}");
            }
        }
    }

    /// Ctrl-Alt-Del on the i8042 keyboard: Linux signals init, which reboots (busybox init
    /// runs its `ctrlaltdel` action, systemd its `ctrl-alt-del.target`).
    fn ctrl_alt_del(&mut self) -> Result<(), BackendError> {
        let keys = json!({ "keys": [
            { "type": "qcode", "data": "ctrl" },
            { "type": "qcode", "data": "alt" },
            { "type": "qcode", "data": "delete" },
        ]});
        self.execute("send-key", Some(keys))
    }

    /// Applies the QMP events received since the last call.
    fn apply_events(&mut self) {
        for event in self.qmp.take_events() {
            match event.name.as_str() {
                "STOP" if self.ignore_stop => self.ignore_stop = false,
                "STOP" => self.paused = true,
                "RESUME" => {
                    self.paused = false;
                    self.io_error = None;
                }
                "BLOCK_IO_ERROR" if event.data["action"] == json!("stop") => {
                    self.io_error = Some(io_error_text(&event.data, &self.disk_names));
                }
                "SHUTDOWN" if event.data["guest"] == json!(true) && self.acpi_rebooting => {
                    self.finish_acpi_reboot();
                }
                "SHUTDOWN" if event.data["guest"] == json!(true) => self.guest_shutdown = true,
                "GUEST_PANICKED" => self.panicked = true,
                "RESET" if self.shutting_down && event.data["guest"] == json!(true) => {
                    // The guest rebooted in answer to the shutdown request: end it here.
                    log::info!("guest reset during shutdown: stopping QEMU");
                    self.guest_rebooted = true;
                    let _ = self.qmp.execute("quit", None, CONTROL_TIMEOUT);
                }
                // A reboot keeps the VM running, as it does under KubeVirt; the log says when
                // and why (a triple fault shows as `guest-reset` too).
                "RESET" => log::info!(
                    "the guest reset (by the guest: {}, reason: {})",
                    event.data["guest"],
                    event.data["reason"].as_str().unwrap_or("not given")
                ),
                _ => {}
            }
        }
    }
}

impl Backend for QemuVm {
    fn kind(&self) -> BackendKind {
        BackendKind::QemuTcg
    }

    fn pause(&mut self) -> Result<(), BackendError> {
        self.execute("stop", None)?;
        self.paused = true;
        Ok(())
    }

    fn resume(&mut self) -> Result<(), BackendError> {
        self.execute("cont", None)?;
        self.paused = false;
        self.io_error = None;
        Ok(())
    }

    fn request_shutdown(&mut self) -> Result<(), BackendError> {
        // A paused guest cannot react: let it run.
        if self.paused {
            self.resume()?;
        }
        self.shutting_down = true;
        if self.acpi_rebooting {
            // The power-off asked for now must end QEMU, not restart the guest.
            self.acpi_rebooting = false;
            self.execute("set-action", Some(json!({ "shutdown": "poweroff" })))?;
        }
        let powerdown = self.execute("system_powerdown", None);
        if self.acpi {
            // Ctrl-Alt-Del as well would race the button: systemd starts reboot.target for
            // it, and a reboot that wins restarts the guest instead of ending it (seen with the
            // Debian image on microvm with ACPI: both jobs ran and it rebooted).
            return powerdown;
        }
        let ctrl_alt_del = self.ctrl_alt_del();
        match (powerdown, ctrl_alt_del) {
            (Err(e), Err(_)) => Err(e),
            _ => Ok(()),
        }
    }

    fn kill(&mut self, reason: &str) -> Result<(), BackendError> {
        if self.exited.is_some() {
            return Ok(());
        }
        self.host_stop = Some(reason.to_string());
        let _ = self.qmp.execute("quit", None, Duration::from_secs(3));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.poll();
                return Ok(());
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.child.kill().map_err(BackendError::Kill)?;
        let _ = self.child.wait();
        self.poll();
        Ok(())
    }

    fn reset(&mut self) -> Result<(), BackendError> {
        self.execute("system_reset", None)
    }

    fn screenshot(&mut self) -> Result<Vec<u8>, BackendError> {
        let Some(path) = self.screenshot.clone() else {
            return Err(BackendError::Unsupported(
                "a screenshot of a VM without a graphics device",
            ));
        };
        let _ = std::fs::remove_file(&path);
        let file = path.display().to_string();
        self.execute(
            "screendump",
            Some(json!({ "filename": file, "format": "png" })),
        )?;
        let png = std::fs::read(&path)
            .map_err(|e| BackendError::Vmm(format!("reading QEMU's screendump {file}: {e}")));
        let _ = std::fs::remove_file(&path);
        png
    }

    fn request_reboot(&mut self) -> Result<(), BackendError> {
        if self.shutting_down {
            return Err(BackendError::Vmm("the VM is shutting down".into()));
        }
        if !self.acpi {
            return self.ctrl_alt_del();
        }
        self.execute("set-action", Some(json!({ "shutdown": "pause" })))?;
        self.acpi_rebooting = true;
        let pressed = self.execute("system_powerdown", None);
        if pressed.is_err() {
            self.acpi_rebooting = false;
            let _ = self.execute("set-action", Some(json!({ "shutdown": "poweroff" })));
        }
        pressed
    }

    fn poll(&mut self) -> VmStatus {
        if let Some((reason, crashed)) = &self.exited {
            return VmStatus::Exited {
                reason: reason.clone(),
                crashed: *crashed,
            };
        }
        self.apply_events();
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.apply_events();
                let (reason, crashed) = if let Some(why) = &self.host_stop {
                    (why.clone(), false)
                } else if self.panicked {
                    ("the guest kernel panicked".to_string(), true)
                } else if self.guest_shutdown {
                    ("the guest powered off".to_string(), false)
                } else if self.guest_rebooted {
                    (
                        "the guest shut down (it reset after Ctrl-Alt-Del; QEMU was stopped)"
                            .to_string(),
                        false,
                    )
                } else {
                    (
                        format!(
                            "QEMU exited unexpectedly ({status}): {}",
                            self.stderr_tail()
                        ),
                        true,
                    )
                };
                self.exited = Some((reason.clone(), crashed));
                VmStatus::Exited { reason, crashed }
            }
            Ok(None) if self.paused => match &self.io_error {
                Some(why) => VmStatus::PausedOnIoError(why.clone()),
                None => VmStatus::Paused,
            },
            Ok(None) => VmStatus::Running,
            Err(e) => VmStatus::Exited {
                reason: format!("cannot wait for QEMU: {e}"),
                crashed: true,
            },
        }
    }

    fn guest_agent_socket(&self) -> Option<PathBuf> {
        Some(self.agent_socket.clone())
    }

    fn stats(&mut self) -> VmmStats {
        if self.exited.is_some() {
            return VmmStats::default();
        }
        process_stats(self.child.id())
    }

    fn listen_incoming(&mut self, socket: &Path) -> Result<(), BackendError> {
        let _ = std::fs::remove_file(socket);
        // The return path: the target tells the source whether it loaded the stream, so the
        // source reports `completed` only once the target has the VM (without it, a target
        // that failed to load was reported migrated and the VM was lost).
        self.execute(
            "migrate-set-capabilities",
            Some(json!({ "capabilities": [{ "capability": "return-path", "state": true }] })),
        )?;
        self.execute(
            "migrate-incoming",
            Some(json!({ "uri": format!("unix:{}", socket.display()) })),
        )?;
        self.migrating = Some(MigrationProgress::default());
        Ok(())
    }

    fn start_migration(
        &mut self,
        socket: &Path,
        params: &MigrationParams,
    ) -> Result<(), BackendError> {
        let capabilities = json!({ "capabilities": [
            { "capability": "block", "state": params.block },
            { "capability": "zero-blocks", "state": params.block },
            { "capability": "events", "state": true },
            { "capability": "return-path", "state": true },
        ]});
        self.execute("migrate-set-capabilities", Some(capabilities))?;
        let mut parameters = serde_json::Map::new();
        // QEMU's default is 32 MiB/s; unlimited means as fast as the stream goes.
        let bandwidth = match params.bandwidth_bytes_per_second {
            0 => u64::from(u32::MAX),
            n => n,
        };
        parameters.insert("max-bandwidth".into(), json!(bandwidth));
        if params.max_downtime_ms > 0 {
            parameters.insert("downtime-limit".into(), json!(params.max_downtime_ms));
        }
        self.execute(
            "migrate-set-parameters",
            Some(serde_json::Value::Object(parameters)),
        )?;
        self.execute(
            "migrate",
            Some(json!({ "uri": format!("unix:{}", socket.display()) })),
        )?;
        self.migrating = Some(MigrationProgress::default());
        Ok(())
    }

    fn migration(&mut self) -> Option<MigrationProgress> {
        let last = self.migrating.clone()?;
        if last.phase.is_final() || self.exited.is_some() {
            return Some(last);
        }
        let progress = match self.qmp.execute("query-migrate", None, CONTROL_TIMEOUT) {
            Ok(answer) => migration_progress(&answer),
            Err(e) => {
                log::warn!("query-migrate: {e}");
                return Some(last);
            }
        };
        self.migrating = Some(progress.clone());
        Some(progress)
    }

    fn cancel_migration(&mut self) -> Result<(), BackendError> {
        self.execute("migrate_cancel", None)
    }
}

/// What a `BLOCK_IO_ERROR` event says, with QEMU's drive `disk<N>` named by the VMI's disk
/// name: `write on disk emptydisk: No space left on device`.
fn io_error_text(data: &serde_json::Value, disk_names: &[String]) -> String {
    let drive = [&data["device"], &data["node-name"], &data["qom-path"]]
        .into_iter()
        .filter_map(|v| v.as_str())
        .find(|s| !s.is_empty())
        .unwrap_or("?");
    let name = drive
        .strip_prefix("disk")
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| disk_names.get(n));
    let device = match name {
        Some(name) => format!("disk {name}"),
        None => format!("drive {drive}"),
    };
    let operation = data["operation"].as_str().unwrap_or("I/O");
    let reason = match (data["reason"].as_str(), data["nospace"].as_bool()) {
        (Some(reason), _) => reason.to_string(),
        (None, Some(true)) => "no space left on the host".to_string(),
        (None, _) => "I/O error".to_string(),
    };
    format!("{operation} on {device}: {reason}")
}

/// Reads QMP's `query-migrate` answer (either side of the stream).
pub fn migration_progress(answer: &serde_json::Value) -> MigrationProgress {
    let number = |section: &str, field: &str| answer[section][field].as_u64().unwrap_or(0);
    let phase = match answer["status"].as_str().unwrap_or("") {
        "completed" => MigrationPhase::Completed,
        "failed" => MigrationPhase::Failed,
        "cancelled" => MigrationPhase::Cancelled,
        _ => MigrationPhase::Active,
    };
    MigrationProgress {
        phase,
        error: answer["error-desc"].as_str().unwrap_or("").to_string(),
        transferred_bytes: number("ram", "transferred") + number("disk", "transferred"),
        remaining_bytes: number("ram", "remaining") + number("disk", "remaining"),
        total_bytes: number("ram", "total") + number("disk", "total"),
        total_ms: answer["total-time"].as_u64(),
        downtime_ms: answer["downtime"].as_u64(),
    }
}

impl Drop for QemuVm {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests;
