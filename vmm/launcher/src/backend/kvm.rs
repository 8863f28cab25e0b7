//! The KVM backend: the in-process rust-vmm VMM of the `vmm` crate.
//!
//! `vmm::builder::build_and_boot_with` builds the VM and starts its vCPUs at once; the returned
//! `vmm::vmm::Vmm` pauses, resumes, resets in place, asks the guest to shut down (Ctrl-Alt-Del on
//! its i8042) and stops it, and records why the VM stopped (`VmExit`). The VM is booted with
//! `ResetPolicy::RESTART`, KubeVirt's behaviour: a guest that reboots (or triple-faults) restarts
//! in place and the VMI stays running; the Reset RPC does the same from the host.
//! The VMM serves the serial port on the socket of the config and keeps what the guest printed
//! while no client was connected, so the launcher's console relay sees the guest's first bytes.
//!
//! Live migration (the VMM's own protocol, `vmm::migration`), over the unix sockets the handler
//! relays between the two nodes:
//! - target: [`KvmVm::start_incoming`] builds nothing yet; `listen_incoming` binds the socket and
//!   a thread accepts one connection and runs `Vmm::restore_from` with this launcher's own
//!   `VmConfig`, which builds the VM, receives memory, disks and state, and runs it;
//! - source: `start_migration` connects to the handler's socket and runs `send_migration` on a
//!   thread (the VM keeps running during pre-copy); writable disks go with the stream unless the
//!   request says they are shared (no block migration), at most the request's bandwidth (the
//!   stream waits between pieces, `backend::throttle`);
//! - progress is the bytes that went through the socket; once done, the VMM's total time and
//!   downtime. Cancelling shuts the socket down: the VMM fails the migration and the source runs
//!   on, as after any broken stream.
//!
//! The source's `Vmm` sits behind a `RwLock`: the migration thread reads it for the whole
//! migration (`send_migration` takes `&self`, as do pause, resume, reset and state), and the
//! rare `&mut` calls (stop, join) wait for it, after aborting the stream.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::thread;
use std::time::{Duration, Instant};

use vmm::builder::{build_and_boot_with, StartVmError};
use vmm::config::VmConfig;
use vmm::lifecycle::{ResetPolicy, VmExit};
use vmm::migration::{error_chain, MigrationOptions};
use vmm::vmm::{VmState, Vmm};

use super::throttle::Throttle;
use super::{
    process_stats, Backend, BackendError, BackendKind, MigrationParams, MigrationPhase,
    MigrationProgress, VmStatus, VmmStats,
};

/// How long one read or write of the migration stream may block before the migration fails
/// (the source then runs on).
const STREAM_TIMEOUT: Duration = Duration::from_secs(60);

/// A VM on the in-process KVM VMM.
pub struct KvmVm {
    /// `None` while the VM has not arrived yet (migration target).
    vmm: Option<Arc<RwLock<Vmm>>>,
    config: VmConfig,
    migration: Option<Migration>,
    host_stop: Option<String>,
    exited: Option<(String, bool)>,
}

/// A migration under way or ended, either direction.
struct Migration {
    progress: Arc<Mutex<MigrationProgress>>,
    /// Bytes through the socket so far.
    bytes: Arc<AtomicU64>,
    started: Instant,
    /// Another handle on the stream, to abort it (cancel, kill); `None` before the target
    /// accepted its connection.
    stream: Arc<Mutex<Option<UnixStream>>>,
    /// Set to make the target stop waiting for a connection, and to tell a cancel from a
    /// failure.
    abort: Arc<AtomicBool>,
    /// The VM that arrived (target side), until the backend takes it.
    arrived: Arc<Mutex<Option<Vmm>>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Migration {
    fn new() -> Migration {
        Migration {
            progress: Arc::new(Mutex::new(MigrationProgress::default())),
            bytes: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
            stream: Arc::new(Mutex::new(None)),
            abort: Arc::new(AtomicBool::new(false)),
            arrived: Arc::new(Mutex::new(None)),
            thread: None,
        }
    }

    /// Breaks the stream (or the wait for one); the VMM then fails the migration.
    fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
        if let Some(stream) = lock(&self.stream).as_ref() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Waits for the thread to end.
    fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                log::warn!("the migration thread panicked");
            }
        }
    }

    fn snapshot(&self) -> MigrationProgress {
        let mut progress = lock(&self.progress).clone();
        if !progress.phase.is_final() {
            progress.transferred_bytes = self.bytes.load(Ordering::Relaxed);
            progress.total_ms = Some(self.started.elapsed().as_millis() as u64);
        }
        progress
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stream that counts the bytes through it.
/// A migration stream that counts the bytes through it, and holds an outgoing stream to its
/// bandwidth limit.
struct Counted<'a> {
    stream: &'a mut UnixStream,
    bytes: &'a AtomicU64,
    throttle: Option<Throttle>,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(throttle) = self.throttle.as_mut() else {
            let n = self.stream.write(buf)?;
            self.bytes.fetch_add(n as u64, Ordering::Relaxed);
            return Ok(n);
        };
        let piece = throttle.piece(buf.len());
        thread::sleep(throttle.take(piece, Instant::now()));
        let n = self.stream.write(&buf[..piece]).inspect_err(|_| {
            throttle.give_back(piece);
        })?;
        throttle.give_back(piece - n);
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

fn set_timeouts(stream: &UnixStream) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(STREAM_TIMEOUT))?;
    stream.set_write_timeout(Some(STREAM_TIMEOUT))
}

impl KvmVm {
    /// Builds and boots the VM; guest reboots restart it in place.
    pub fn start(config: &VmConfig) -> Result<KvmVm, StartVmError> {
        let vmm = build_and_boot_with(config, ResetPolicy::RESTART)?;
        Ok(KvmVm {
            vmm: Some(Arc::new(RwLock::new(vmm))),
            config: config.clone(),
            migration: None,
            host_stop: None,
            exited: None,
        })
    }

    /// A migration target: the VM is built from `config` when the stream arrives
    /// ([`Backend::listen_incoming`]).
    pub fn start_incoming(config: &VmConfig) -> KvmVm {
        KvmVm {
            vmm: None,
            config: config.clone(),
            migration: None,
            host_stop: None,
            exited: None,
        }
    }

    /// The VM, for the `&self` operations.
    fn vm(&self) -> Result<RwLockReadGuard<'_, Vmm>, BackendError> {
        match (&self.vmm, &self.exited) {
            (_, Some((reason, _))) => Err(BackendError::Exited(reason.clone())),
            (Some(vmm), None) => Ok(vmm.read().unwrap_or_else(|e| e.into_inner())),
            (None, None) => Err(BackendError::Vmm(
                "the VM has not arrived yet (incoming migration)".into(),
            )),
        }
    }

    /// Takes the VM that arrived by migration, once there is one.
    fn take_arrived(&mut self) {
        if self.vmm.is_some() {
            return;
        }
        if let Some(migration) = &self.migration {
            if let Some(vmm) = lock(&migration.arrived).take() {
                vmm.set_reset_policy(ResetPolicy::RESTART);
                self.vmm = Some(Arc::new(RwLock::new(vmm)));
            }
        }
    }

    fn exit_status(&self, exit: &VmExit) -> (String, bool) {
        match exit {
            VmExit::PowerOff { .. } => ("the guest powered off".to_string(), false),
            VmExit::Reset => ("the guest reset the machine".to_string(), false),
            VmExit::Stopped => (
                self.host_stop
                    .clone()
                    .unwrap_or_else(|| "stopped by the launcher".to_string()),
                false,
            ),
            VmExit::TripleFault => ("a vCPU triple-faulted".to_string(), true),
            VmExit::Error(e) => (format!("the VMM failed: {e}"), true),
        }
    }

    fn lifecycle(result: Result<(), vmm::vmm::LifecycleError>) -> Result<(), BackendError> {
        result.map_err(|e| BackendError::Vmm(e.to_string()))
    }
}

impl Backend for KvmVm {
    fn kind(&self) -> BackendKind {
        BackendKind::Kvm
    }

    fn pause(&mut self) -> Result<(), BackendError> {
        Self::lifecycle(self.vm()?.pause())
    }

    fn resume(&mut self) -> Result<(), BackendError> {
        self.take_arrived();
        let vm = self.vm()?;
        // Writes that waited for room on the host run again (and wait again if there is none).
        vm.retry_io();
        if vm.state() == VmState::Running {
            return Ok(());
        }
        Self::lifecycle(vm.resume())
    }

    fn request_shutdown(&mut self) -> Result<(), BackendError> {
        let vm = self.vm()?;
        if vm.state() == VmState::Paused {
            Self::lifecycle(vm.resume())?;
        }
        // A guest that answers Ctrl-Alt-Del by rebooting is done shutting down: its reset
        // ends the VM instead of restarting it (as the QEMU backend does).
        vm.set_reset_policy(ResetPolicy::default());
        vm.request_shutdown();
        Ok(())
    }

    fn kill(&mut self, reason: &str) -> Result<(), BackendError> {
        if self.exited.is_some() {
            return Ok(());
        }
        self.host_stop = Some(reason.to_string());
        // A migration holds the VM until its stream breaks.
        if let Some(migration) = self.migration.as_mut() {
            if !lock(&migration.progress).phase.is_final() {
                migration.abort();
            }
            migration.join();
        }
        self.take_arrived();
        let exit = match &self.vmm {
            Some(vmm) => vmm.write().unwrap_or_else(|e| e.into_inner()).stop(),
            None => VmExit::Stopped,
        };
        self.exited = Some(self.exit_status(&exit));
        Ok(())
    }

    fn reset(&mut self) -> Result<(), BackendError> {
        Self::lifecycle(self.vm()?.reset())
    }

    fn poll(&mut self) -> VmStatus {
        if let Some((reason, crashed)) = &self.exited {
            return VmStatus::Exited {
                reason: reason.clone(),
                crashed: *crashed,
            };
        }
        self.take_arrived();
        let Some(vmm) = &self.vmm else {
            // The target waits for its VM, as QEMU waits paused with `-incoming`.
            return VmStatus::Paused;
        };
        let vm = vmm.read().unwrap_or_else(|e| e.into_inner());
        let state = vm.state();
        let stalled = vm.stalled_disk();
        drop(vm);
        let was_paused = state == VmState::Paused;
        match (state, stalled) {
            (VmState::Running | VmState::Paused, Some((disk, why))) => {
                // As QEMU's werror=enospc: the guest stops at the write the host had no room
                // for, which waits at the head of its queue.
                let paused = was_paused || {
                    let vm = vmm.read().unwrap_or_else(|e| e.into_inner());
                    vm.pause()
                        .map_err(|e| log::warn!("pausing on a full disk: {e}"))
                        .is_ok()
                };
                if paused {
                    VmStatus::PausedOnIoError(format!("disk {disk}: {why}"))
                } else {
                    VmStatus::Running
                }
            }
            (VmState::Running, None) => VmStatus::Running,
            (VmState::Paused, None) => VmStatus::Paused,
            (VmState::Stopped(exit), _) => {
                // Join the vCPU threads (they have all left already), unless a migration
                // thread still holds the VM.
                let exit = match vmm.try_write() {
                    Ok(mut vmm) => vmm.wait_timeout(Duration::ZERO).unwrap_or(exit),
                    Err(_) => exit,
                };
                let (reason, crashed) = self.exit_status(&exit);
                self.exited = Some((reason.clone(), crashed));
                VmStatus::Exited { reason, crashed }
            }
        }
    }

    fn stats(&mut self) -> VmmStats {
        VmmStats {
            pid: 0,
            ..process_stats(std::process::id())
        }
    }

    /// None: the VMM has no virtio-console with the multiport feature yet (virtio-serial: named
    /// ports beside the console, hvc0), so there is no `org.qemu.guest_agent.0` port for
    /// qemu-guest-agent to open, and GetDomain reports no guest agent for this backend.
    fn guest_agent_socket(&self) -> Option<std::path::PathBuf> {
        self.config.agent.as_ref().map(|agent| agent.socket.clone())
    }

    fn listen_incoming(&mut self, socket: &Path) -> Result<(), BackendError> {
        if self.vmm.is_some() || self.migration.is_some() {
            return Err(BackendError::Vmm(
                "this VM is not waiting for an incoming migration".into(),
            ));
        }
        let _ = std::fs::remove_file(socket);
        let io = |what: &str, e: std::io::Error| {
            BackendError::Vmm(format!("{what} {}: {e}", socket.display()))
        };
        let listener = UnixListener::bind(socket).map_err(|e| io("listen on", e))?;
        // Polled, so that a VMI deleted before the source connects stops the wait.
        listener
            .set_nonblocking(true)
            .map_err(|e| io("configure", e))?;
        let mut migration = Migration::new();
        let (progress, bytes, stream_slot, abort, arrived) = (
            Arc::clone(&migration.progress),
            Arc::clone(&migration.bytes),
            Arc::clone(&migration.stream),
            Arc::clone(&migration.abort),
            Arc::clone(&migration.arrived),
        );
        let config = self.config.clone();
        let socket = socket.to_path_buf();
        let thread = thread::Builder::new()
            .name("migration-in".into())
            .spawn(move || {
                let fail = |error: String| {
                    let mut p = lock(&progress);
                    p.phase = if abort.load(Ordering::SeqCst) {
                        MigrationPhase::Cancelled
                    } else {
                        MigrationPhase::Failed
                    };
                    p.error = error;
                };
                let mut stream = loop {
                    if abort.load(Ordering::SeqCst) {
                        return fail("stopped before the source connected".into());
                    }
                    match listener.accept() {
                        Ok((stream, _)) => break stream,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            thread::sleep(Duration::from_millis(20));
                        }
                        Err(e) => return fail(format!("accept on {}: {e}", socket.display())),
                    }
                };
                let _ = std::fs::remove_file(&socket);
                if let Err(e) = set_timeouts(&stream) {
                    return fail(format!("configure the migration stream: {e}"));
                }
                *lock(&stream_slot) = stream.try_clone().ok();
                if abort.load(Ordering::SeqCst) {
                    return fail("stopped before the stream began".into());
                }
                let started = Instant::now();
                let mut counted = Counted {
                    stream: &mut stream,
                    bytes: &bytes,
                    throttle: None,
                };
                match vmm::vmm::Vmm::restore_from(&config, &mut counted) {
                    Ok(vmm) => {
                        let received = bytes.load(Ordering::Relaxed);
                        log::info!(
                            "incoming migration: {received} bytes in {:?}",
                            started.elapsed()
                        );
                        *lock(&arrived) = Some(vmm);
                        let mut p = lock(&progress);
                        p.phase = MigrationPhase::Completed;
                        p.transferred_bytes = received;
                        p.total_bytes = received;
                        p.total_ms = Some(started.elapsed().as_millis() as u64);
                    }
                    Err(e) => fail(error_chain(&e)),
                }
            })
            .map_err(|e| BackendError::Vmm(format!("start the migration thread: {e}")))?;
        migration.thread = Some(thread);
        self.migration = Some(migration);
        Ok(())
    }

    fn start_migration(
        &mut self,
        socket: &Path,
        params: &MigrationParams,
    ) -> Result<(), BackendError> {
        self.take_arrived();
        let vmm = match (&self.vmm, &self.exited) {
            (Some(vmm), None) => Arc::clone(vmm),
            (_, Some((reason, _))) => return Err(BackendError::Exited(reason.clone())),
            (None, None) => {
                return Err(BackendError::Vmm(
                    "the VM has not arrived yet (incoming migration)".into(),
                ))
            }
        };
        if let Some(migration) = self.migration.as_mut() {
            if !lock(&migration.progress).phase.is_final() {
                return Err(BackendError::Vmm(
                    "a migration of this VM is already under way".into(),
                ));
            }
            migration.join();
        }
        let throttle = Throttle::new(params.bandwidth_bytes_per_second);
        if throttle.is_some() {
            log::info!(
                "outgoing migration limited to {} bytes/s",
                params.bandwidth_bytes_per_second
            );
        }
        let mut options = MigrationOptions::default();
        if !params.block {
            // Without block migration the writable disks are on storage both sides see.
            options.shared_disks = self
                .config
                .disks
                .iter()
                .filter(|d| !d.readonly)
                .map(|d| d.id.clone())
                .collect();
        }
        let mut stream = UnixStream::connect(socket)
            .map_err(|e| BackendError::Vmm(format!("connect to {}: {e}", socket.display())))?;
        set_timeouts(&stream)
            .map_err(|e| BackendError::Vmm(format!("configure the migration stream: {e}")))?;
        let mut migration = Migration::new();
        lock(&migration.progress).total_bytes = bytes_to_migrate(&self.config, &options);
        *lock(&migration.stream) = stream.try_clone().ok();
        let (progress, bytes, abort) = (
            Arc::clone(&migration.progress),
            Arc::clone(&migration.bytes),
            Arc::clone(&migration.abort),
        );
        let thread = thread::Builder::new()
            .name("migration-out".into())
            .spawn(move || {
                let vmm = vmm.read().unwrap_or_else(|e| e.into_inner());
                let mut counted = Counted {
                    stream: &mut stream,
                    bytes: &bytes,
                    throttle,
                };
                let result = vmm.send_migration(&mut counted, &options);
                let mut p = lock(&progress);
                match result {
                    Ok(stats) => {
                        log::info!(
                            "outgoing migration: {} bytes in {:.3} s ({} pages in {} rounds, {} disk blocks), downtime {:.3} s",
                            stats.bytes_sent,
                            stats.total.as_secs_f64(),
                            stats.pages_sent,
                            stats.pages_per_round.len(),
                            stats.disk_blocks_sent,
                            stats.downtime.as_secs_f64()
                        );
                        p.phase = MigrationPhase::Completed;
                        p.transferred_bytes = stats.bytes_sent;
                        p.total_bytes = stats.bytes_sent;
                        p.total_ms = Some(stats.total.as_millis() as u64);
                        p.downtime_ms = Some(stats.downtime.as_millis() as u64);
                    }
                    Err(e) => {
                        p.phase = if abort.load(Ordering::SeqCst) {
                            MigrationPhase::Cancelled
                        } else {
                            MigrationPhase::Failed
                        };
                        p.error = error_chain(&e);
                        p.transferred_bytes = bytes.load(Ordering::Relaxed);
                    }
                }
            })
            .map_err(|e| BackendError::Vmm(format!("start the migration thread: {e}")))?;
        migration.thread = Some(thread);
        self.migration = Some(migration);
        Ok(())
    }

    fn migration(&mut self) -> Option<MigrationProgress> {
        let progress = self.migration.as_ref()?.snapshot();
        if progress.phase.is_final() {
            if let Some(migration) = self.migration.as_mut() {
                migration.join();
            }
            self.take_arrived();
        }
        Some(progress)
    }

    fn cancel_migration(&mut self) -> Result<(), BackendError> {
        match &self.migration {
            Some(migration) if !lock(&migration.progress).phase.is_final() => {
                migration.abort();
                Ok(())
            }
            _ => Err(BackendError::Vmm("no migration to cancel".into())),
        }
    }
}

impl Drop for KvmVm {
    fn drop(&mut self) {
        if let Some(migration) = self.migration.as_mut() {
            migration.abort();
            migration.join();
        }
    }
}

/// What a migration has to move, as KubeVirt counts it for `completionTimeoutPerGiB`: the
/// guest's memory and the size of each disk it copies (writable, not on shared storage). A
/// disk file that cannot be read counts nothing.
fn bytes_to_migrate(config: &VmConfig, options: &MigrationOptions) -> u64 {
    let disks: u64 = config
        .disks
        .iter()
        .filter(|d| !d.readonly && !options.shared_disks.contains(&d.id))
        .filter_map(|d| std::fs::metadata(&d.path).ok())
        .map(|m| m.len())
        .sum();
    config.memory.size + disks
}

#[cfg(test)]
mod tests {
    use vmm::config::DiskConfig;

    use super::*;

    #[test]
    fn a_migration_moves_the_memory_and_the_disks_it_copies() {
        let dir = crate::util::scratch_dir("kvm-migration-total");
        let disk = |id: &str, len: u64, readonly: bool| {
            let path = dir.join(id);
            std::fs::File::create(&path).unwrap().set_len(len).unwrap();
            DiskConfig {
                id: id.into(),
                path,
                readonly,
            }
        };
        let mut config = VmConfig::default();
        config.memory.size = 128 << 20;
        config.disks = vec![
            disk("root", 40 << 20, false),
            disk("cloudinit", 1 << 20, true),
            disk("scratch", 64 << 30, false),
        ];
        let mut options = MigrationOptions::default();
        assert_eq!(
            bytes_to_migrate(&config, &options),
            (128 << 20) + (40 << 20) + (64 << 30)
        );
        // Without block migration the writable disks are shared: only the memory moves.
        options.shared_disks = vec!["root".into(), "scratch".into()];
        assert_eq!(bytes_to_migrate(&config, &options), 128 << 20);
        // A disk file that is gone counts nothing.
        options.shared_disks.clear();
        std::fs::remove_file(dir.join("scratch")).unwrap();
        assert_eq!(
            bytes_to_migrate(&config, &options),
            (128 << 20) + (40 << 20)
        );
    }
}
