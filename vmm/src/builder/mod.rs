//! Building and booting a VM from a [`VmConfig`], in one documented order:
//!
//! 1. validate the config;
//! 2. map guest memory, create the KVM VM (memory slots, TSS, irqchip, PIT);
//! 3. legacy devices on the I/O bus: COM1 (irq 4) to its console, i8042 (irq 1), power-off port;
//! 4. the virtio devices, in order disks, nets, rng, vsock, the guest agent channel (a
//!    virtio-console), on the configured transport:
//!    * mmio: device `i` at `0xd0000000 + i * 0x1000`, irq `5 + i`, each queue's notify register
//!      bound to an eventfd (KVM ioeventfd with the queue index as datamatch), the interrupt to
//!      an irqfd;
//!    * pci: the PCI root bus with device `i` in slot `i + 1`, MSI-X and INTx, the ACPI PM
//!      registers and the ACPI tables ([`pci`]);
//! 5. load the kernel, initramfs and command line (with the virtio-mmio entries), write the ACPI
//!    tables (pci), the zero page, GDT and page tables;
//! 6. create and configure the vCPUs, then start one thread each, and the reset thread.
//!
//! Step 5 is [`crate::payload`]'s. Steps 2 and 6 also save the power-on state of the interrupt
//! controllers and of each vCPU, to which a reset in place ([`crate::reset`]) returns before it
//! repeats step 5.

pub(crate) mod pci;

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::guest_memory::GuestMemoryMmap;
use kvm_ioctls::IoEventAddress;
use vmm_sys_util::eventfd::EventFd;

use crate::acpi::AcpiError;
use crate::arch::{LAST_IRQ, VIRTIO_FIRST_IRQ, VIRTIO_MMIO_SIZE, VIRTIO_MMIO_START};
use crate::config::{parse_mac, PayloadConfig, Transport, ValidationError, VmConfig};
use crate::console::{Console, OpenConsoleError};
use crate::devices::bus::{Bus, BusError};
use crate::devices::legacy::i8042::I8042;
use crate::devices::legacy::power_off::PowerOffPort;
use crate::devices::legacy::serial::{feed_input, SerialDevice};
use crate::devices::legacy::{COM1_BASE, COM1_IRQ, I8042_DATA_PORT, I8042_IRQ, POWER_OFF_PORT};
use crate::devices::virtio::block::request::RawFile;
use crate::devices::virtio::block::Block;
use crate::devices::virtio::console::VirtioConsole;
use crate::devices::virtio::mmio::{CreateTransportError, MmioTransport, REG_QUEUE_NOTIFY};
use crate::devices::virtio::net::tap::{Tap, TapError};
use crate::devices::virtio::net::Net;
use crate::devices::virtio::rng::Rng;
use crate::devices::virtio::transport::VirtioTransport;
use crate::devices::virtio::vsock::Vsock;
use crate::devices::virtio::{Interrupt, VirtioDevice};
use crate::lifecycle::{ResetPolicy, RunControl};
use crate::payload::{load_payload, PayloadError, Platform};
use crate::reset::{PowerOnState, ResetWorker};
use crate::smbios::SmbiosTables;
use crate::vmm::{PciMachine, VcpuThreads, Vmm};
use crate::vstate::memory::{create_guest_memory, MemoryError};
use crate::vstate::state::{save_vm, KvmStateError};
use crate::vstate::vcpu::{ConfigureVcpuError, Vcpu};
use crate::vstate::vm::{CreateVmError, Vm};

/// Building or booting the VM failed.
#[derive(Debug, thiserror::Error)]
pub enum StartVmError {
    #[error("invalid config")]
    Validate(#[source] ValidationError),
    #[error("guest memory")]
    Memory(#[source] MemoryError),
    #[error("create VM")]
    CreateVm(#[source] CreateVmError),
    #[error("open console")]
    Console(#[source] OpenConsoleError),
    #[error("create eventfd")]
    EventFd(#[source] std::io::Error),
    #[error("register irqfd for irq {0}")]
    RegisterIrqfd(u32, #[source] kvm_ioctls::Error),
    #[error("register ioeventfd at {0:#x}")]
    RegisterIoevent(u64, #[source] kvm_ioctls::Error),
    #[error("place device on bus")]
    Bus(#[source] BusError),
    #[error("open disk {0}")]
    OpenDisk(PathBuf, #[source] std::io::Error),
    #[error("open tap for net {0:?}")]
    OpenTap(String, #[source] TapError),
    #[error("net {0:?}: bad mac")]
    BadMac(String),
    #[error("open entropy source {0}")]
    OpenRng(PathBuf, #[source] std::io::Error),
    #[error("bind vsock socket {0}")]
    Vsock(PathBuf, #[source] std::io::Error),
    #[error("bind the guest agent channel's socket {0}")]
    AgentChannel(PathBuf, #[source] std::io::Error),
    #[error("too many virtio devices: irq {0} is past the last IOAPIC pin (or GSI)")]
    TooManyDevices(u32),
    #[error("set the GSI routing table")]
    GsiRouting(#[source] std::io::Error),
    #[error("no PCI slot left")]
    PciSlots,
    #[error("MSI-X vectors")]
    Msix(#[source] crate::devices::pci::msix::MsixError),
    #[error("register a level-triggered irqfd for GSI {0}")]
    LevelIrqfd(u32, #[source] std::io::Error),
    #[error("allocate a BAR")]
    PciBar(#[source] crate::devices::pci::allocator::AllocError),
    #[error("map BAR 0 of the device in PCI slot {0}")]
    PciBarMap(u8),
    #[error("ACPI tables")]
    Acpi(#[source] AcpiError),
    #[error("virtio transport")]
    Transport(#[source] CreateTransportError),
    /// Step 5: the kernel, initramfs, command line and boot tables ([`crate::payload`]).
    #[error("load the payload")]
    Payload(#[from] PayloadError),
    #[error("configure vCPU")]
    Vcpu(#[source] ConfigureVcpuError),
    #[error("save the power-on state of the interrupt controllers")]
    PowerOnState(#[source] KvmStateError),
    #[error("start thread")]
    Thread(#[source] std::io::Error),
}

fn irq_eventfd(vm: &Vm, irq: u32) -> Result<EventFd, StartVmError> {
    let evt = EventFd::new(libc::EFD_NONBLOCK).map_err(StartVmError::EventFd)?;
    vm.fd
        .register_irqfd(&evt, irq)
        .map_err(|e| StartVmError::RegisterIrqfd(irq, e))?;
    Ok(evt)
}

/// A VM with its memory, devices and buses, before its vCPUs exist: what booting and a
/// migration target (the `migration` module) have in common.
pub(crate) struct Machine {
    pub vm: Arc<Vm>,
    pub mem: GuestMemoryMmap,
    pub control: Arc<RunControl>,
    pub buses: (Arc<Bus>, Arc<Bus>),
    pub serial: Arc<Mutex<SerialDevice>>,
    pub i8042: Arc<Mutex<I8042>>,
    pub virtio: Vec<Arc<Mutex<dyn VirtioTransport>>>,
    /// The PCI root bus, ACPI PM and interrupt routing (PCI machine only).
    pub pci: Option<Arc<PciMachine>>,
    pub platform: Platform,
    /// The SMBIOS tables step 5 writes, when the config has them.
    pub smbios: Option<SmbiosTables>,
    pub vcpu_count: u8,
    console: Console,
    /// For a reset in place: the VM's power-on state and what step 5 loads.
    power_on_vm: Vec<u8>,
    payload: PayloadConfig,
    memory_size: u64,
}

/// Builds the VM described by `config` and starts its vCPUs; the guest's reset requests and
/// triple faults end the VM.
pub fn build_and_boot(config: &VmConfig) -> Result<Vmm, StartVmError> {
    build_and_boot_with(config, ResetPolicy::default())
}

/// [`build_and_boot`] with what the guest's reset requests and triple faults do.
pub fn build_and_boot_with(config: &VmConfig, policy: ResetPolicy) -> Result<Vmm, StartVmError> {
    let machine = build_machine(config)?;
    machine.control.lock().policy = policy;
    let entry = load_payload(
        &machine.mem,
        &config.payload,
        config.memory.size,
        &machine.platform,
        machine.smbios.as_ref(),
    )?;
    let vcpu_count = machine.vcpu_count;
    let vcpus = (0..vcpu_count)
        .map(|id| {
            Vcpu::new(
                &machine.vm,
                id,
                vcpu_count,
                entry,
                machine.buses.clone(),
                machine.control.clone(),
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(StartVmError::Vcpu)?;
    machine.start(vcpus)
}

/// Steps 1 to 4: memory, the KVM VM, legacy and virtio devices on their buses.
pub(crate) fn build_machine(config: &VmConfig) -> Result<Machine, StartVmError> {
    config.validate().map_err(StartVmError::Validate)?;
    let smbios = config
        .smbios
        .as_ref()
        .map(SmbiosTables::build_in_place)
        .transpose()
        .map_err(|e| StartVmError::Payload(PayloadError::Smbios(e)))?;

    let mem = create_guest_memory(config.memory.size).map_err(StartVmError::Memory)?;
    let vm = Arc::new(Vm::new(&mem).map_err(StartVmError::CreateVm)?);
    let power_on_vm = save_vm(&vm.fd).map_err(StartVmError::PowerOnState)?;
    let vcpu_count = config.cpus.boot_vcpus;
    let control = Arc::new(RunControl::new(usize::from(vcpu_count)));

    let pio = Arc::new(Bus::new());
    let mut console = Console::open(&config.serial).map_err(StartVmError::Console)?;
    let serial = Arc::new(Mutex::new(SerialDevice::new(
        irq_eventfd(&vm, COM1_IRQ)?,
        console.take_output(),
    )));
    pio.insert(serial.clone(), COM1_BASE, 8)
        .map_err(StartVmError::Bus)?;
    let i8042 = Arc::new(Mutex::new(I8042::new(
        control.clone(),
        irq_eventfd(&vm, I8042_IRQ)?,
    )));
    pio.insert(i8042.clone(), I8042_DATA_PORT, 5)
        .map_err(StartVmError::Bus)?;
    pio.insert(
        Arc::new(Mutex::new(PowerOffPort::new(control.clone()))),
        POWER_OFF_PORT,
        4,
    )
    .map_err(StartVmError::Bus)?;

    let mmio = Arc::new(Bus::new());
    let devices = virtio_devices(config)?;
    let (virtio, pci, platform) = match config.transport {
        Transport::Mmio => {
            let mut slots = Vec::new();
            let mut virtio: Vec<Arc<Mutex<dyn VirtioTransport>>> = Vec::new();
            for device in devices {
                let index = slots.len() as u64;
                let base = VIRTIO_MMIO_START + index * VIRTIO_MMIO_SIZE;
                let irq = VIRTIO_FIRST_IRQ + index as u32;
                if irq > LAST_IRQ {
                    return Err(StartVmError::TooManyDevices(irq));
                }
                virtio.push(add_virtio_device(&vm, &mem, &mmio, device, base, irq)?);
                slots.push((base, irq));
            }
            (virtio, None, Platform::Mmio { slots })
        }
        Transport::Pci => {
            let built = pci::build_pci(
                &vm,
                &mem,
                (&pio, &mmio),
                &control,
                devices,
                config.memory.size,
                vcpu_count,
            )?;
            let platform = Platform::Pci { acpi: built.acpi };
            (built.transports, Some(built.machine), platform)
        }
    };
    Ok(Machine {
        vm,
        mem,
        control,
        buses: (pio, mmio),
        serial,
        i8042,
        virtio,
        pci,
        platform,
        smbios,
        vcpu_count,
        console,
        power_on_vm,
        payload: config.payload.clone(),
        memory_size: config.memory.size,
    })
}

impl Machine {
    /// Step 6: starts the console input, one thread per vCPU and the reset thread. The vCPUs
    /// run at once unless a pause was requested on the machine's run control before (a paused
    /// migration source).
    pub(crate) fn start(self, vcpus: Vec<Vcpu>) -> Result<Vmm, StartVmError> {
        let serial = self.serial.clone();
        self.console
            .start_input(move |bytes| feed_input(&serial, bytes))
            .map_err(StartVmError::Thread)?;
        let fds: Vec<_> = vcpus.iter().map(|v| v.fd()).collect();
        let power_on_vcpus = vcpus.iter().map(|v| v.power_on_state().to_vec()).collect();
        let devices = crate::vmm::Devices {
            serial: self.serial,
            i8042: self.i8042,
            virtio: self.virtio,
            pci: self.pci,
        };
        let threads = Arc::new(VcpuThreads::default());
        let vm = self.vm;
        let mut vmm = Vmm::new(
            self.control.clone(),
            threads.clone(),
            fds.clone(),
            devices.clone(),
            vm.clone(),
            self.mem.clone(),
        );
        for vcpu in vcpus {
            match vcpu.spawn() {
                Ok(thread) => threads.push(thread),
                Err(e) => {
                    self.control
                        .request_exit(crate::lifecycle::VmExit::Error(format!("start vCPU: {e}")));
                    drop(vmm);
                    return Err(StartVmError::Thread(e));
                }
            }
        }
        let reset = ResetWorker {
            control: self.control.clone(),
            threads,
            vcpu_fds: fds,
            vm,
            mem: self.mem,
            devices,
            power_on: PowerOnState {
                vm: self.power_on_vm,
                vcpus: power_on_vcpus,
                payload: self.payload,
                memory_size: self.memory_size,
                platform: self.platform,
                smbios: self.smbios,
            },
            migrating: vmm.migrating.clone(),
        };
        match reset.spawn() {
            Ok(thread) => vmm.set_reset_thread(thread),
            Err(e) => {
                self.control
                    .request_exit(crate::lifecycle::VmExit::Error(format!(
                        "start the reset thread: {e}"
                    )));
                drop(vmm);
                return Err(StartVmError::Thread(e));
            }
        }
        Ok(vmm)
    }
}

/// The configured virtio devices, opened, in slot order.
fn virtio_devices(config: &VmConfig) -> Result<Vec<Box<dyn VirtioDevice>>, StartVmError> {
    let mut devices: Vec<Box<dyn VirtioDevice>> = Vec::new();
    for disk in &config.disks {
        let file = OpenOptions::new()
            .read(true)
            .write(!disk.readonly)
            .open(&disk.path)
            .map_err(|e| StartVmError::OpenDisk(disk.path.clone(), e))?;
        let backend =
            RawFile::new(file).map_err(|e| StartVmError::OpenDisk(disk.path.clone(), e))?;
        let block = Block::new(Box::new(backend), disk.readonly, &disk.id)
            .map_err(|e| StartVmError::OpenDisk(disk.path.clone(), e))?;
        devices.push(Box::new(block));
    }
    for net in &config.net {
        let mac = parse_mac(&net.mac).ok_or_else(|| StartVmError::BadMac(net.id.clone()))?;
        let tap = Tap::open(&net.tap).map_err(|e| StartVmError::OpenTap(net.id.clone(), e))?;
        devices.push(Box::new(Net::new(tap, mac)));
    }
    if let Some(rng) = &config.rng {
        let source = File::open(&rng.src).map_err(|e| StartVmError::OpenRng(rng.src.clone(), e))?;
        devices.push(Box::new(Rng::new(source)));
    }
    if let Some(vsock) = &config.vsock {
        let device = Vsock::new(vsock.cid, &vsock.socket)
            .map_err(|e| StartVmError::Vsock(vsock.socket.clone(), e))?;
        devices.push(Box::new(device));
    }
    if let Some(agent) = &config.agent {
        let device = VirtioConsole::new(&agent.socket)
            .map_err(|e| StartVmError::AgentChannel(agent.socket.clone(), e))?;
        devices.push(Box::new(device));
    }
    Ok(devices)
}

fn add_virtio_device(
    vm: &Vm,
    mem: &GuestMemoryMmap,
    mmio: &Bus,
    device: Box<dyn VirtioDevice>,
    base: u64,
    irq: u32,
) -> Result<Arc<Mutex<MmioTransport>>, StartVmError> {
    let notify = base + REG_QUEUE_NOTIFY;
    let mut queue_evts = Vec::new();
    for index in 0..device.queue_max_sizes().len() as u32 {
        let evt = EventFd::new(libc::EFD_NONBLOCK).map_err(StartVmError::EventFd)?;
        vm.fd
            .register_ioevent(&evt, &IoEventAddress::Mmio(notify), index)
            .map_err(|e| StartVmError::RegisterIoevent(notify, e))?;
        queue_evts.push(evt);
    }
    let interrupt = Arc::new(Interrupt::new(irq_eventfd(vm, irq)?));
    let transport = MmioTransport::new(device, mem.clone(), queue_evts, interrupt)
        .map_err(StartVmError::Transport)?;
    let transport = Arc::new(Mutex::new(transport));
    mmio.insert(transport.clone(), base, VIRTIO_MMIO_SIZE)
        .map_err(StartVmError::Bus)?;
    Ok(transport)
}

#[cfg(test)]
mod kvm_tests;
