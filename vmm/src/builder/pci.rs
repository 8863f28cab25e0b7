//! Step 4 for the PCI machine: the root bus and its devices, their interrupts, the ACPI PM
//! registers and the ACPI tables that describe it all.
//!
//! 1. the GSI routing table goes to KVM once (a KVM without routing fails here, not later);
//! 2. per virtio device, in slot order from 1: a notify eventfd per queue, an MSI-X vector per
//!    queue plus one (a GSI from 24 up, an irqfd bound to it), an INTx line (GSI
//!    `16 + slot % 8`, a resampled irqfd), BAR 0 from the 64-bit window;
//! 3. the ACPI PM registers at 0x600 with the SCI on GSI 9 (a resampled irqfd);
//! 4. CONFIG_ADDRESS/CONFIG_DATA on the port I/O bus, ECAM on the MMIO bus, then every BAR
//!    mapped (and its ioeventfds registered) where the configuration spaces say;
//! 5. the resampler thread for the level-triggered lines, and the ACPI tables.

use std::sync::{Arc, Mutex};

use vmm_sys_util::eventfd::EventFd;

use super::StartVmError;
use crate::acpi::{AcpiPlatform, AcpiTables};
use crate::arch::{
    pci_intx_gsi, pci_mmio64_window, PCI_ECAM_SIZE, PCI_ECAM_START, PCI_MMIO32_END,
    PCI_MMIO32_START,
};
use crate::devices::bus::Bus;
use crate::devices::irq::{
    GsiRouting, LevelLine, ResampledLine, Resampler, FIRST_MSI_GSI, MAX_GSI,
};
use crate::devices::legacy::acpi_pm::{AcpiPm, PM_BASE, PM_LEN, SCI_IRQ};
use crate::devices::pci::allocator::{BarAllocator, Window};
use crate::devices::pci::bus::{PciConfigIo, PciConfigMmio, PciRoot};
use crate::devices::pci::msix::MsixVectors;
use crate::devices::virtio::pci::{PciPlacement, VirtioPciDevice, BAR_INDEX, BAR_KIND, BAR_SIZE};
use crate::devices::virtio::transport::VirtioTransport;
use crate::devices::virtio::VirtioDevice;
use crate::guest_memory::GuestMemoryMmap;
use crate::lifecycle::RunControl;
use crate::vmm::PciMachine;
use crate::vstate::pci::{level_irqfd, KvmBarMapper, KvmRouteSink};
use crate::vstate::vm::Vm;

const PCI_CONFIG_PORT: u64 = 0xcf8;

/// The PCI machine's devices.
pub(crate) struct BuiltPci {
    pub transports: Vec<Arc<Mutex<dyn VirtioTransport>>>,
    pub machine: Arc<PciMachine>,
    pub acpi: AcpiTables,
}

fn eventfd() -> Result<EventFd, StartVmError> {
    EventFd::new(libc::EFD_NONBLOCK).map_err(StartVmError::EventFd)
}

/// Builds the PCI machine (steps 1 to 5 of the module docs).
pub(crate) fn build_pci(
    vm: &Arc<Vm>,
    mem: &GuestMemoryMmap,
    buses: (&Bus, &Arc<Bus>),
    control: &Arc<RunControl>,
    devices: Vec<Box<dyn VirtioDevice>>,
    memory_size: u64,
    vcpus: u8,
) -> Result<BuiltPci, StartVmError> {
    let (pio, mmio) = buses;
    let routing = Arc::new(GsiRouting::new(Box::new(KvmRouteSink(Arc::downgrade(vm)))));
    routing.commit_now().map_err(StartVmError::GsiRouting)?;
    let mmio32 = Window {
        start: PCI_MMIO32_START,
        end: PCI_MMIO32_END,
    };
    let (start, end) = pci_mmio64_window(memory_size);
    let mmio64 = Window { start, end };
    let mut allocator = BarAllocator::new(mmio32, mmio64);
    let mapper = KvmBarMapper {
        vm: Arc::downgrade(vm),
        mmio: Arc::downgrade(mmio),
    };
    let mut root = PciRoot::new(Arc::new(mapper), allocator.windows().to_vec());
    let mut next_gsi = FIRST_MSI_GSI;
    let mut lines = Vec::new();
    let mut intx = Vec::new();
    let mut transports: Vec<Arc<Mutex<dyn VirtioTransport>>> = Vec::new();
    for device in devices {
        let slot = root.next_slot().map_err(|_| StartVmError::PciSlots)?;
        let queues = device.queue_max_sizes().len();
        let queue_evts = (0..queues)
            .map(|_| eventfd())
            .collect::<Result<Vec<_>, _>>()?;
        let mut gsis = Vec::new();
        let mut irqfds = Vec::new();
        for _ in 0..=queues {
            if next_gsi >= MAX_GSI {
                return Err(StartVmError::TooManyDevices(next_gsi));
            }
            let irqfd = eventfd()?;
            vm.fd
                .register_irqfd(&irqfd, next_gsi)
                .map_err(|e| StartVmError::RegisterIrqfd(next_gsi, e))?;
            gsis.push(next_gsi);
            irqfds.push(irqfd);
            next_gsi += 1;
        }
        let msix = MsixVectors::new(gsis, irqfds, routing.clone()).map_err(StartVmError::Msix)?;
        let intx_gsi = pci_intx_gsi(slot);
        let (irqfd, resamplefd) =
            level_irqfd(vm, intx_gsi).map_err(|e| StartVmError::LevelIrqfd(intx_gsi, e))?;
        let bar_address = allocator
            .allocate(BAR_KIND, BAR_SIZE)
            .map_err(StartVmError::PciBar)?;
        let placement = PciPlacement {
            bar_address,
            intx_gsi: intx_gsi as u8,
        };
        let line = LevelLine::new(irqfd.try_clone().map_err(StartVmError::EventFd)?);
        let transport = VirtioPciDevice::new(
            device,
            mem.clone(),
            queue_evts,
            Arc::new(msix),
            line,
            placement,
        )
        .map_err(StartVmError::Transport)?;
        lines.push(ResampledLine {
            resamplefd,
            line: LevelLine::new(irqfd),
            pending: transport.intx_pending(),
        });
        let transport = Arc::new(Mutex::new(transport));
        root.add(slot, transport.clone())
            .map_err(|_| StartVmError::PciSlots)?;
        transports.push(transport);
        intx.push((slot, intx_gsi));
    }

    let (irqfd, resamplefd) =
        level_irqfd(vm, SCI_IRQ).map_err(|e| StartVmError::LevelIrqfd(SCI_IRQ, e))?;
    let sci = LevelLine::new(irqfd.try_clone().map_err(StartVmError::EventFd)?);
    let acpi_pm = AcpiPm::new(control.clone(), sci);
    lines.push(ResampledLine {
        resamplefd,
        line: LevelLine::new(irqfd),
        pending: acpi_pm.sci_pending(),
    });
    let acpi_pm = Arc::new(Mutex::new(acpi_pm));
    pio.insert(acpi_pm.clone(), PM_BASE, PM_LEN)
        .map_err(StartVmError::Bus)?;

    let root = Arc::new(Mutex::new(root));
    pio.insert(
        Arc::new(Mutex::new(PciConfigIo::new(root.clone()))),
        PCI_CONFIG_PORT,
        8,
    )
    .map_err(StartVmError::Bus)?;
    mmio.insert(
        Arc::new(Mutex::new(PciConfigMmio::new(root.clone()))),
        PCI_ECAM_START,
        PCI_ECAM_SIZE,
    )
    .map_err(StartVmError::Bus)?;
    {
        let mut root = root.lock().unwrap_or_else(crate::poison::fatal);
        root.sync_all();
        if let Some((slot, _)) = intx
            .iter()
            .find(|(slot, _)| root.mapped_bar(*slot, BAR_INDEX).is_none())
        {
            return Err(StartVmError::PciBarMap(*slot));
        }
    }

    let resampler = Resampler::new(lines);
    let thread = resampler.spawn().map_err(StartVmError::Thread)?;
    let acpi = AcpiTables::build(&AcpiPlatform {
        vcpus,
        ecam: Window {
            start: PCI_ECAM_START,
            end: PCI_ECAM_START + PCI_ECAM_SIZE,
        },
        mmio32,
        mmio64,
        intx,
    })
    .map_err(StartVmError::Acpi)?;
    Ok(BuiltPci {
        transports,
        machine: Arc::new(PciMachine::new(root, acpi_pm, resampler, thread)),
        acpi,
    })
}
