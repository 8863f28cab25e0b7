//! The launcher's one VM and the operations on it, all blocking (the gRPC service runs them on
//! blocking tasks). Every state change goes through `Launcher::set_state`, which pushes a
//! domain event to the handler's notify socket.
//!
//! `sync_vmi`: admit the VMI (parse, default, validate), probe KVM and choose the backend, read
//! the boot disk ([`crate::discovery`]), convert, check socket paths, prepare the volumes, set
//! up the pod network, start the backend with its vCPUs stopped (QEMU with ACPI for a kernel
//! from the user's disk), attach the console relay, then run the vCPUs (unless
//! `startStrategy: Paused`). A second call while the VM exists changes nothing.
//!
//! The guest agent: a VM whose backend has the agent channel gets an [`AgentChannel`] when it is
//! created (a migration target's too); its poller polls while the domain is Running and ends
//! with the VM (a final state, the VM replaced, the launcher stopping). `GetDomain` and every
//! domain event carry its last report; a change in it is pushed as a domain event by the
//! monitor's [`Launcher::poll`]. `soft_reboot` reboots the guest through it. Nothing here talks
//! to the guest while holding the VM mutex.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use api::VirtualMachineInstance;
use contract::proto::v1;
use contract::sockets::{check_socket_path, CONSOLE_SOCKET, MIGRATION_TARGET_SOCKET, VNC_SOCKET};
use vmm::capability::KvmCapability;
use vmm::config::ConsoleConfig;

use super::error::{OpError, SyncError};
use super::notify::Notifier;
use crate::agent::AgentChannel;
use crate::backend::qemu::{Acpi, Machine};
use crate::backend::{
    self, choose, Backend, BackendChoice, BackendError, BackendKind, MigrationParams, VmStatus,
};
use crate::console::ConsoleRelay;
use crate::converter::{self, HostFacts, KernelOrigin};
use crate::discovery;
use crate::domain::{DomainInfo, DomainState, VmiRef};
use crate::network::{self, PodNetwork};
use crate::volumes;

#[path = "migration_track.rs"]
mod migration_track;

#[path = "launcher_agent.rs"]
mod launcher_agent;
#[path = "launcher_start.rs"]
mod launcher_start;
use launcher_start::{check_sockets, firmware_backend, start_agent, start_backend};
use migration_track::MigrationTrack;

/// How long the console relay waits for the VMM's serial socket.
const CONSOLE_ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

/// How the launcher was started: its directories and defaults.
#[derive(Clone, Debug)]
pub struct Settings {
    pub socket_dir: PathBuf,
    pub run_dir: PathBuf,
    pub container_disk_dir: PathBuf,
    pub kernel_boot_dir: PathBuf,
    pub pvc_dir: PathBuf,
    pub generated_disk_dir: PathBuf,
    pub default_kernel: PathBuf,
    pub default_initramfs: Option<PathBuf>,
    /// `--no-os-disk-boots-kernel`: see [`HostFacts::no_os_disk_boots_kernel`].
    pub no_os_disk_boots_kernel: bool,
    pub tap_device: String,
    /// Set up the tap, NAT and DHCP for the pod interface (needs CAP_NET_ADMIN in the Pod's
    /// network namespace).
    pub pod_network: bool,
    /// Overrides the backend choice (benchmarks and tests of a backend).
    pub force_backend: Option<BackendKind>,
    /// Where OVMF is (`--ovmf-dir`, Debian's `/usr/share/OVMF`).
    pub ovmf_dir: PathBuf,
    /// Once the VM first runs, every thread of the process gives up its capabilities but
    /// `CAP_NET_ADMIN` for the VM's tap ([`vmm::capabilities::drop_process`]); off with
    /// `--keep-capabilities`, and in tests that run the launcher inside their own process.
    pub drop_capabilities: bool,
}

impl Settings {
    fn host_facts(&self, kvm_usable: bool) -> HostFacts {
        HostFacts {
            kvm_usable,
            container_disk_dir: self.container_disk_dir.clone(),
            kernel_boot_dir: self.kernel_boot_dir.clone(),
            pvc_dir: self.pvc_dir.clone(),
            generated_disk_dir: self.generated_disk_dir.clone(),
            default_kernel: self.default_kernel.clone(),
            default_initramfs: self.default_initramfs.clone(),
            no_os_disk_boots_kernel: self.no_os_disk_boots_kernel,
            tap_device: self.tap_device.clone(),
            socket_dir: self.socket_dir.clone(),
            run_dir: self.run_dir.clone(),
            ovmf_dir: self.ovmf_dir.clone(),
            boot: converter::BootDiscovery::NotLooked,
            smbios: Default::default(),
        }
    }
}

struct Vm {
    info: DomainInfo,
    backend: Box<dyn Backend>,
    /// Whether the VM has disks it writes to (they go with a migration).
    writable_disks: bool,
    migration: Option<MigrationTrack>,
    /// The serial socket the console relay attaches to once the VM has arrived (KVM migration
    /// target: the VMM creates it when the stream builds the VM).
    console_after_migration: Option<PathBuf>,
    /// Whether the VM has a tap: the launcher keeps `CAP_NET_ADMIN` for it (a QEMU or a domain
    /// started again opens it by name).
    has_tap: bool,
    /// The guest agent channel, when the backend has one.
    agent: Option<Arc<AgentChannel>>,
}

/// The launcher: settings, the console relay, the VM once there is one.
pub struct Launcher {
    settings: Settings,
    relay: ConsoleRelay,
    notifier: Notifier,
    vm: Mutex<Option<Vm>>,
    notify_socket: Mutex<Option<PathBuf>>,
    /// The pod network, set up once for the launcher's (the Pod's) lifetime.
    network: Mutex<Option<PodNetwork>>,
    /// Whether the process gave up its capabilities (once, when the VM first ran).
    capabilities_dropped: AtomicBool,
}

impl Launcher {
    pub fn new(settings: Settings, relay: ConsoleRelay, notifier: Notifier) -> Launcher {
        Launcher {
            settings,
            relay,
            notifier,
            vm: Mutex::new(None),
            notify_socket: Mutex::new(None),
            network: Mutex::new(None),
            capabilities_dropped: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Vm>> {
        self.vm.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn domain(&self, vm: &mut Vm) -> v1::Domain {
        let stats = vm.backend.stats();
        let mut domain = vm.info.to_proto(&stats, CONSOLE_SOCKET);
        domain.migration = vm.migration.as_ref().map(MigrationTrack::to_proto);
        domain.guest_agent = vm.agent.as_ref().map(|agent| agent.report());
        domain
    }

    /// Records a state (and reason); pushes an event when something changed.
    fn set_state(&self, vm: &mut Vm, state: DomainState, reason: &str) {
        if vm.info.state == state && vm.info.reason == reason {
            return;
        }
        log::info!("domain {}: {:?} ({reason})", vm.info.vmi.name, state);
        vm.info.state = state;
        vm.info.reason = reason.to_string();
        if state == DomainState::Running {
            self.give_up_capabilities(vm);
        }
        if let Some(agent) = &vm.agent {
            agent.set_running(state == DomainState::Running);
            if state.is_final() {
                agent.stop();
            }
        }
        self.push_event(vm);
    }

    /// Sends the domain to the handler's notify socket, when it named one.
    fn push_event(&self, vm: &mut Vm) {
        let socket = self
            .notify_socket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(socket) = socket {
            let domain = self.domain(vm);
            self.notifier.send(socket, domain);
        }
    }

    /// Once the VM runs, the launcher has set up all that needed privileges (the pod network,
    /// QEMU started, the disks open): every thread gives up its capabilities but the tap's.
    /// A failure leaves the VM running and says so.
    fn give_up_capabilities(&self, vm: &Vm) {
        if !self.settings.drop_capabilities
            || self.capabilities_dropped.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let (keep, kept) = if vm.has_tap {
            (
                vmm::capabilities::mask(vmm::capabilities::CAP_NET_ADMIN),
                "CAP_NET_ADMIN for the tap",
            )
        } else {
            (0, "none")
        };
        match vmm::capabilities::drop_process(keep) {
            Ok(signalled) => log::info!(
                "the VM runs: the launcher gave up its capabilities on every thread \
                 ({signalled} signalled); kept: {kept}"
            ),
            Err(e) => log::error!(
                "the VM runs, but the launcher could not give up its capabilities: {}",
                super::error::chain(&e)
            ),
        }
    }

    /// Creates and boots the VM of the VMI.
    pub fn sync_vmi(
        &self,
        vmi_json: &[u8],
        options: &v1::SyncOptions,
    ) -> Result<v1::Domain, SyncError> {
        self.create_vm(vmi_json, options, false)
    }

    /// Creates the VM of the VMI waiting for an incoming migration on
    /// [`MIGRATION_TARGET_SOCKET`].
    pub fn prepare_migration_target(
        &self,
        vmi_json: &[u8],
        options: &v1::SyncOptions,
    ) -> Result<v1::Domain, SyncError> {
        self.create_vm(vmi_json, options, true)
    }

    fn create_vm(
        &self,
        vmi_json: &[u8],
        options: &v1::SyncOptions,
        incoming: bool,
    ) -> Result<v1::Domain, SyncError> {
        let vmi = converter::admit_vmi(vmi_json)?;
        if !options.notify_socket.is_empty() {
            let socket = PathBuf::from(&options.notify_socket);
            check_socket_path(&socket).map_err(SyncError::SocketPath)?;
            *self.notify_socket.lock().unwrap_or_else(|e| e.into_inner()) = Some(socket);
        }
        let mut slot = self.lock();
        if let Some(vm) = slot.as_mut() {
            if !vm.info.state.is_final() {
                let requested = vmi_ref(&vmi);
                let same = vm.info.vmi.name == requested.name
                    && vm.info.vmi.namespace == requested.namespace
                    && (requested.uid.is_empty() || vm.info.vmi.uid == requested.uid);
                if !same {
                    return Err(SyncError::OtherVmi(vm.info.vmi.name.clone()));
                }
                return Ok(self.domain(vm));
            }
        }
        let kvm = vmm::capability::probe();
        let mut choice = choose(options.use_emulation, &kvm);
        if let Some(kind) = self.settings.force_backend {
            choice = BackendChoice {
                kind,
                reason: format!(
                    "forced by the launcher's --backend flag ({})",
                    choice.reason
                ),
            };
        }
        let mut facts = self.settings.host_facts(kvm == KvmCapability::Hardware);
        if let Some(smbios) = &options.smbios {
            facts.smbios = converter::smbios::ClusterSmbios::from(smbios);
        }
        let plans = converter::disks::volume_plans(&vmi, &facts)
            .map_err(|e| SyncError::Convert(converter::ConvertError::Disks(e)))?;
        facts.boot = discovery::discover_boot(&vmi, &plans, &facts.run_dir)?;
        let converter::Converted {
            config,
            boot,
            firmware,
        } = converter::convert(&vmi, &facts)?;
        log::info!("boot: {}", boot.description);
        if let Some(firmware) = &firmware {
            choice = firmware_backend(choice, firmware, self.settings.force_backend)?;
        }
        if incoming {
            let source = backend::source_backend(&vmi);
            choice = backend::migration_target_backend(choice, source, self.settings.force_backend)
                .map_err(SyncError::MigrationBackend)?;
        }
        check_sockets(&config, &facts)?;
        volumes::prepare::prepare(&plans)?;
        if self.settings.pod_network && !config.net.is_empty() {
            let mut network = self.network.lock().unwrap_or_else(|e| e.into_inner());
            if network.is_none() {
                *network = Some(network::setup(&vmi, &self.settings.tap_device)?);
            }
        }
        // The KVM VMM runs its vCPUs as soon as it is built: connect the console relay while it
        // builds, the moment its serial socket appears. QEMU waits with stopped vCPUs (`-S`)
        // until the relay is attached. A KVM migration target builds its VM only when the
        // stream arrives: the relay attaches then (the VMM keeps the output meanwhile).
        let serial = match &config.serial {
            ConsoleConfig::Socket { path } => Some(path.clone()),
            _ => None,
        };
        let kvm_incoming = incoming && choice.kind == BackendKind::Kvm;
        let console_after_migration = serial.clone().filter(|_| kvm_incoming);
        let serial = serial.filter(|_| !kvm_incoming);
        let early_attach = match (&serial, choice.kind) {
            (Some(path), BackendKind::Kvm) => {
                let _ = std::fs::remove_file(path);
                let (relay, path) = (self.relay.clone(), path.clone());
                Some(thread::spawn(move || {
                    relay.attach(&path, CONSOLE_ATTACH_TIMEOUT)
                }))
            }
            _ => None,
        };
        // On QEMU microvm, a distribution kernel finds its virtio-mmio devices through ACPI
        // only; ours boots without (see backend::qemu::args). The KVM VMM gives such a kernel
        // its PCI machine with ACPI tables instead (the config's transport).
        // Firmware runs on q35 (PCI, ACPI of its own).
        let machine = match (firmware, boot.origin) {
            (Some(firmware), _) => Machine::Q35(firmware, self.vnc_socket(&vmi)),
            (None, KernelOrigin::UserDisk | KernelOrigin::Firmware) => Machine::Microvm(Acpi::On),
            (None, KernelOrigin::KernelBoot | KernelOrigin::Bundled | KernelOrigin::Guestless) => {
                Machine::Microvm(Acpi::Off)
            }
        };
        let mut backend = start_backend(
            choice.kind,
            &config,
            &self.settings.run_dir,
            incoming,
            &machine,
        )?;
        match (early_attach, &serial) {
            (Some(attaching), _) => match attaching.join() {
                Ok(result) => result?,
                Err(_) => log::warn!("the console attach thread panicked"),
            },
            (None, Some(path)) => self.relay.attach(path, CONSOLE_ATTACH_TIMEOUT)?,
            (None, None) => {}
        }
        let paused = vmi.spec.start_strategy.as_deref() == Some("Paused");
        let writable_disks = config.disks.iter().any(|d| !d.readonly);
        let mut migration = None;
        let (state, reason) = if incoming {
            let socket = self.settings.socket_dir.join(MIGRATION_TARGET_SOCKET);
            check_socket_path(&socket).map_err(SyncError::SocketPath)?;
            backend.listen_incoming(&socket).map_err(SyncError::Boot)?;
            migration = Some(MigrationTrack::new(true, writable_disks));
            (DomainState::Paused, "waiting for the incoming migration")
        } else if paused {
            backend.pause().map_err(SyncError::Boot)?;
            (
                DomainState::Paused,
                "started paused (startStrategy: Paused)",
            )
        } else {
            backend.resume().map_err(SyncError::Boot)?;
            (DomainState::Running, "booted")
        };
        let agent = start_agent(backend.as_ref());
        let mut vm = Vm {
            info: DomainInfo {
                vmi: vmi_ref(&vmi),
                state: DomainState::Starting,
                reason: String::new(),
                backend: choice,
                boot,
                vcpus: u32::from(config.cpus.boot_vcpus),
                memory_bytes: config.memory.size,
                started: Instant::now(),
                grace_period_seconds: vmi
                    .spec
                    .termination_grace_period_seconds
                    .unwrap_or(api::defaults::DEFAULT_GRACE_PERIOD_SECONDS),
                io_error: false,
            },
            backend,
            writable_disks,
            migration,
            console_after_migration,
            has_tap: !config.net.is_empty(),
            agent,
        };
        self.set_state(&mut vm, state, reason);
        let domain = self.domain(&mut vm);
        *slot = Some(vm);
        Ok(domain)
    }

    /// Runs `op` on the VM that `vmi` names.
    fn with_vm<T>(
        &self,
        vmi: &str,
        op: impl FnOnce(&Self, &mut Vm) -> Result<T, OpError>,
    ) -> Result<T, OpError> {
        let mut slot = self.lock();
        let vm = slot.as_mut().ok_or(OpError::NoVm)?;
        if !vm.info.vmi.matches(vmi) {
            return Err(OpError::OtherVmi(vmi.to_string(), vm.info.vmi.name.clone()));
        }
        op(self, vm)
    }

    fn require_live(vm: &Vm) -> Result<(), OpError> {
        if vm.info.state.is_final() {
            return Err(OpError::Gone(vm.info.reason.clone()));
        }
        Ok(())
    }

    pub fn pause(&self, vmi: &str) -> Result<v1::Domain, OpError> {
        self.with_vm(vmi, |this, vm| {
            Self::require_live(vm)?;
            vm.backend.pause()?;
            this.set_state(vm, DomainState::Paused, "paused by the handler");
            Ok(this.domain(vm))
        })
    }

    pub fn unpause(&self, vmi: &str) -> Result<v1::Domain, OpError> {
        self.with_vm(vmi, |this, vm| {
            Self::require_live(vm)?;
            vm.backend.resume()?;
            vm.info.io_error = false;
            this.set_state(vm, DomainState::Running, "unpaused by the handler");
            Ok(this.domain(vm))
        })
    }

    pub fn kill(&self, vmi: &str) -> Result<v1::Domain, OpError> {
        self.with_vm(vmi, |this, vm| {
            if !vm.info.state.is_final() {
                vm.backend.kill("killed by the handler")?;
                this.set_state(vm, DomainState::Shutoff, "killed by the handler");
            }
            Ok(this.domain(vm))
        })
    }

    /// A PNG of the VM's screen (QEMU's screendump); FAILED_PRECONDITION without a graphics
    /// device.
    pub fn screenshot(&self, vmi: &str) -> Result<Vec<u8>, OpError> {
        self.with_vm(vmi, |_, vm| {
            Self::require_live(vm)?;
            vm.backend.screenshot().map_err(|e| match e {
                BackendError::Unsupported(_) => OpError::NoGraphics,
                other => other.into(),
            })
        })
    }

    /// Where QEMU's VNC server listens, in the socket directory virt-handler reaches, for a VMI
    /// that asks for a graphics device (validation lets only a firmware boot, on QEMU's q35, ask).
    fn vnc_socket(&self, vmi: &VirtualMachineInstance) -> Option<PathBuf> {
        (vmi.spec.domain.devices.autoattach_graphics_device == Some(true))
            .then(|| self.settings.socket_dir.join(VNC_SOCKET))
    }

    pub fn reset(&self, vmi: &str) -> Result<v1::Domain, OpError> {
        self.with_vm(vmi, |this, vm| {
            Self::require_live(vm)?;
            vm.backend.reset()?;
            // A paused VM stays paused through a reset.
            let state = match vm.backend.poll() {
                VmStatus::Paused | VmStatus::PausedOnIoError(_) => DomainState::Paused,
                _ => DomainState::Running,
            };
            this.set_state(vm, state, "reset by the handler");
            Ok(this.domain(vm))
        })
    }

    /// Graceful shutdown: asks the guest, waits up to the grace period, then stops the VM.
    pub fn shutdown(&self, vmi: &str, grace: Option<i64>) -> Result<v1::Domain, OpError> {
        let grace = self.with_vm(vmi, |this, vm| {
            Self::require_live(vm)?;
            let grace = grace.unwrap_or(vm.info.grace_period_seconds).max(0);
            vm.backend.request_shutdown()?;
            let reason = format!("graceful shutdown requested, grace period {grace} s");
            this.set_state(vm, DomainState::ShuttingDown, &reason);
            Ok(grace)
        })?;
        let deadline = Instant::now() + Duration::from_secs(grace.unsigned_abs());
        loop {
            let done = self.with_vm(vmi, |this, vm| {
                this.poll_vm(vm);
                if vm.info.state.is_final() {
                    return Ok(Some(this.domain(vm)));
                }
                if Instant::now() >= deadline {
                    let reason = format!(
                        "the guest did not power off within the grace period of {grace} s: stopped by force"
                    );
                    vm.backend.kill(&reason)?;
                    this.set_state(vm, DomainState::Shutoff, &reason);
                    return Ok(Some(this.domain(vm)));
                }
                Ok(None)
            })?;
            if let Some(domain) = done {
                return Ok(domain);
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts sending the VM to the unix socket `socket` (the handler's end of the stream).
    pub fn migrate(&self, request: &v1::MigrateRequest) -> Result<v1::Domain, OpError> {
        let socket = PathBuf::from(&request.socket);
        check_socket_path(&socket).map_err(OpError::Migration)?;
        self.with_vm(&request.vmi, |this, vm| {
            Self::require_live(vm)?;
            // A VM that came in by migration may leave the same way once it has arrived.
            if vm
                .migration
                .as_ref()
                .is_some_and(|m| !m.progress.phase.is_final())
            {
                return Err(OpError::Migration(
                    "a migration of this VM is already under way".into(),
                ));
            }
            let params = MigrationParams {
                bandwidth_bytes_per_second: request.bandwidth_bytes_per_second,
                max_downtime_ms: request.max_downtime_ms,
                block: vm.writable_disks,
            };
            vm.backend.start_migration(&socket, &params)?;
            log::info!(
                "migrating {} to {} (block migration: {})",
                vm.info.vmi.name,
                socket.display(),
                params.block
            );
            vm.migration = Some(MigrationTrack::new(false, params.block));
            Ok(this.domain(vm))
        })
    }

    /// Aborts the outgoing migration; the VM keeps running here.
    pub fn cancel_migration(&self, vmi: &str) -> Result<v1::Domain, OpError> {
        self.with_vm(vmi, |this, vm| {
            match &vm.migration {
                Some(m) if !m.target && !m.progress.phase.is_final() => {
                    vm.backend.cancel_migration()?;
                }
                _ => return Err(OpError::Migration("no outgoing migration to cancel".into())),
            }
            this.poll_vm(vm);
            Ok(this.domain(vm))
        })
    }

    /// The domain, if there is a VM.
    pub fn get_domain(&self) -> Option<v1::Domain> {
        let mut slot = self.lock();
        let vm = slot.as_mut()?;
        self.poll_vm(vm);
        Some(self.domain(vm))
    }

    /// Stops the VM (if any) because the launcher itself is stopping.
    pub fn stop_vm(&self) {
        if let Some(vm) = self.lock().as_mut() {
            if !vm.info.state.is_final() {
                let reason = "the launcher stopped";
                if let Err(e) = vm.backend.kill(reason) {
                    log::warn!("cannot stop the VM: {e}");
                }
                self.set_state(vm, DomainState::Shutoff, reason);
            }
        }
    }

    /// Notices state changes the VMM made by itself (guest power-off, crash).
    pub fn poll(&self) {
        if let Some(vm) = self.lock().as_mut() {
            self.poll_vm(vm);
        }
    }

    /// Notices what changed by itself: the VM's state, then the guest agent's report.
    fn poll_vm(&self, vm: &mut Vm) {
        self.poll_backend(vm);
        if vm.info.state.is_final() {
            return;
        }
        if vm.agent.as_ref().is_some_and(|agent| agent.take_changed()) {
            self.push_event(vm);
        }
    }

    fn poll_backend(&self, vm: &mut Vm) {
        if vm.info.state.is_final() {
            return;
        }
        self.poll_migration(vm);
        if vm.info.state.is_final() {
            return;
        }
        let migrating = vm
            .migration
            .as_ref()
            .is_some_and(|m| !m.progress.phase.is_final());
        match vm.backend.poll() {
            VmStatus::Exited { reason, crashed } => {
                let state = if crashed {
                    DomainState::Crashed
                } else {
                    DomainState::Shutoff
                };
                self.set_state(vm, state, &reason);
            }
            // The source pauses at the switch-over, the target until the stream ends.
            VmStatus::Paused | VmStatus::PausedOnIoError(_) if migrating => {}
            VmStatus::PausedOnIoError(why) => {
                vm.info.io_error = true;
                let reason = format!("paused by the VMM: {why}; unpause once the disk has room");
                self.set_state(vm, DomainState::Paused, &reason);
            }
            VmStatus::Paused if vm.info.state == DomainState::Running => {
                self.set_state(vm, DomainState::Paused, "paused by the VMM");
            }
            VmStatus::Running if vm.info.state == DomainState::Paused => {
                vm.info.io_error = false;
                self.set_state(vm, DomainState::Running, "resumed by the VMM");
            }
            _ => {}
        }
    }
}

fn vmi_ref(vmi: &VirtualMachineInstance) -> VmiRef {
    VmiRef {
        name: vmi.metadata.name.clone().unwrap_or_default(),
        namespace: vmi.metadata.namespace.clone().unwrap_or_default(),
        uid: vmi.metadata.uid.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
#[path = "launcher_tests.rs"]
mod tests;
