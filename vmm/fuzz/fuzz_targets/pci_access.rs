//! Fuzzes guest accesses to the PCI machine: configuration space through CONFIG_ADDRESS /
//! CONFIG_DATA and ECAM, and BAR 0 of a virtio-pci device (common configuration, ISR, notify,
//! device configuration, MSI-X table and PBA), as a sequence of reads and writes at any offset
//! and width, BAR relocations included.
//!
//! Input: 14-byte operations: kind (u8: 0/1 port I/O write/read at 0xcf8 + offset % 8, 2/3 ECAM
//! write/read, 4/5 MMIO write/read in the 64-bit BAR window), width (u8: 1, 2, 4 or 8 from the low
//! two bits), offset (u32), value (u64).
//! Checked besides not panicking: the device keeps its identity, and a BAR is mapped only
//! inside the window.
#![no_main]

use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use vm_memory::GuestAddress;
use vmm::devices::bus::{Bus, BusDevice, SharedDevice};
use vmm::devices::irq::{GsiRouting, LevelLine, MsiMessage, RouteSink};
use vmm::devices::pci::allocator::Window;
use vmm::devices::pci::bus::{BarMapper, MapBarError, PciConfigIo, PciConfigMmio, PciRoot};
use vmm::devices::pci::msix::MsixVectors;
use vmm::devices::virtio::pci::{PciPlacement, VirtioPciDevice};
use vmm::devices::virtio::{
    ActivateError, Activation, DeviceWorker, VirtioDevice, VIRTIO_F_VERSION_1,
};
use vmm::vstate::memory::GuestMemoryMmap;
use vmm_sys_util::eventfd::EventFd;

const WINDOW: Window = Window {
    start: 0x1_0000_0000,
    end: 0x1_0010_0000,
};

/// A two-queue device that takes its queues and does nothing with them.
struct Idle(DeviceWorker);

impl VirtioDevice for Idle {
    fn device_type(&self) -> u32 {
        4
    }
    fn queue_max_sizes(&self) -> &[u16] {
        &[16, 16]
    }
    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1 | 1
    }
    fn config_space(&self) -> Vec<u8> {
        vec![1, 2, 3, 4]
    }
    fn activate(&mut self, _activation: Activation) -> Result<(), ActivateError> {
        Ok(())
    }
    fn device_worker(&mut self) -> &mut DeviceWorker {
        &mut self.0
    }
}

struct NoRoutes;

impl RouteSink for NoRoutes {
    fn set_routes(&self, _routes: &[(u32, MsiMessage)]) -> std::io::Result<()> {
        Ok(())
    }
}

/// BARs on a plain bus, no KVM.
#[derive(Default)]
struct BusMapper(Bus);

impl BarMapper for BusMapper {
    fn map(&self, region: SharedDevice, base: u64, len: u64) -> Result<(), MapBarError> {
        assert!(WINDOW.holds(base, len), "BAR mapped outside the window at {base:#x}");
        self.0.insert(region, base, len).map_err(MapBarError::Bus)
    }
    fn unmap(&self, base: u64) {
        self.0.remove(base);
    }
    fn register_ioevent(&self, _evt: &EventFd, _addr: u64) -> Result<(), MapBarError> {
        Ok(())
    }
    fn unregister_ioevent(&self, _evt: &EventFd, _addr: u64) {}
}

fn eventfd() -> EventFd {
    EventFd::new(libc::EFD_NONBLOCK).expect("eventfd")
}

fuzz_target!(|data: &[u8]| {
    let Ok(mem) = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]) else {
        return;
    };
    let routing = Arc::new(GsiRouting::new(Box::new(NoRoutes)));
    let msix = MsixVectors::new(vec![24, 25, 26], vec![eventfd(), eventfd(), eventfd()], routing)
        .expect("3 vectors");
    let device = VirtioPciDevice::new(
        Box::new(Idle(DeviceWorker::default())),
        mem,
        vec![eventfd(), eventfd()],
        Arc::new(msix),
        LevelLine::new(eventfd()),
        PciPlacement {
            bar_address: WINDOW.start,
            intx_gsi: 17,
        },
    )
    .expect("the device");
    let mapper = Arc::new(BusMapper::default());
    let mut root = PciRoot::new(mapper.clone(), vec![WINDOW]);
    root.add(1, Arc::new(Mutex::new(device))).expect("slot 1");
    root.sync_all();
    let root = Arc::new(Mutex::new(root));
    let mut io = PciConfigIo::new(root.clone());
    let mut ecam = PciConfigMmio::new(root.clone());

    for op in data.chunks_exact(14) {
        let width = [1usize, 2, 4, 8][usize::from(op[1] & 3)];
        let offset = u64::from(u32::from_le_bytes([op[2], op[3], op[4], op[5]]));
        let value = u64::from_le_bytes(op[6..14].try_into().expect("8 bytes"));
        let bytes = value.to_le_bytes();
        let mut out = [0u8; 8];
        match op[0] % 6 {
            0 => io.write(offset % 8, &bytes[..width.min(4)]),
            1 => io.read(offset % 8, &mut out[..width.min(4)]),
            2 => ecam.write(offset % (1 << 20), &bytes[..width]),
            3 => ecam.read(offset % (1 << 20), &mut out[..width]),
            4 => {
                mapper
                    .0
                    .write(WINDOW.start + offset % 0x10_0000, &bytes[..width]);
            }
            _ => {
                mapper
                    .0
                    .read(WINDOW.start + offset % 0x10_0000, &mut out[..width]);
            }
        }
    }
    let mut id = [0u8; 4];
    ecam.read(1 << 15, &mut id);
    assert_eq!(u32::from_le_bytes(id), 0x1044_1af4, "the device changed its identity");
});
