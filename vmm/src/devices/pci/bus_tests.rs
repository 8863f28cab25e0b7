//! Root bus tests: both configuration mechanisms, absent functions, BARs following the
//! guest's configuration writes (with ioeventfds), against a fake mapper over a real bus.

use super::*;
use crate::devices::bus::Bus;
use crate::devices::pci::config_space::{Bar, BarKind, BAR0, COMMAND};

/// Records what the root asked for and keeps a real MMIO bus.
#[derive(Default)]
struct FakeMapper {
    bus: Bus,
    ioevents: Mutex<Vec<u64>>,
}

impl BarMapper for FakeMapper {
    fn map(&self, region: SharedDevice, base: u64, len: u64) -> Result<(), MapBarError> {
        self.bus.insert(region, base, len).map_err(MapBarError::Bus)
    }
    fn unmap(&self, base: u64) {
        assert!(
            self.bus.remove(base),
            "unmap of {base:#x}, which is not mapped"
        );
    }
    fn register_ioevent(&self, _evt: &EventFd, addr: u64) -> Result<(), MapBarError> {
        self.ioevents.lock().unwrap().push(addr);
        Ok(())
    }
    fn unregister_ioevent(&self, _evt: &EventFd, addr: u64) {
        let mut ioevents = self.ioevents.lock().unwrap();
        let at = ioevents
            .iter()
            .position(|a| *a == addr)
            .expect("registered");
        ioevents.remove(at);
    }
}

/// A function with one 64-bit BAR of 4 KiB whose byte `i` reads `i`, and an ioeventfd at 0x100.
struct TestDevice {
    config: ConfigSpace,
    notify: EventFd,
    writes: Vec<(u64, Vec<u8>)>,
}

impl TestDevice {
    fn new(address: u64) -> Self {
        let mut config = ConfigSpace::new(&PciHeader {
            vendor_id: 0x1af4,
            device_id: 0x1044,
            revision_id: 1,
            class: (0xff, 0, 0),
            subsystem_vendor_id: 0x1af4,
            subsystem_id: 0x40,
            interrupt_pin: Some(1),
        });
        let bar = Bar {
            kind: BarKind::Memory64,
            size: 0x1000,
            prefetchable: false,
        };
        config.add_bar(0, bar, address).unwrap();
        TestDevice {
            config,
            notify: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            writes: Vec::new(),
        }
    }
}

impl PciDevice for TestDevice {
    fn config(&self) -> &ConfigSpace {
        &self.config
    }
    fn write_config(&mut self, offset: usize, data: &[u8]) {
        self.config.write(offset, data);
    }
    fn read_bar(&mut self, _bar: usize, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = (offset as usize + i) as u8;
        }
    }
    fn write_bar(&mut self, _bar: usize, offset: u64, data: &[u8]) {
        self.writes.push((offset, data.to_vec()));
    }
    fn ioeventfds(&self, _bar: usize) -> Vec<(u64, &EventFd)> {
        vec![(0x100, &self.notify)]
    }
}

const WINDOW: Window = Window {
    start: 0x1_0000_0000,
    end: 0x1_0010_0000,
};

fn root() -> (Arc<Mutex<PciRoot>>, Arc<FakeMapper>) {
    let mapper = Arc::new(FakeMapper::default());
    let root = PciRoot::new(mapper.clone(), vec![WINDOW]);
    (Arc::new(Mutex::new(root)), mapper)
}

fn cf8(device: u8, register: u8) -> u32 {
    0x8000_0000 | u32::from(device) << 11 | u32::from(register)
}

fn io_read32(io: &mut PciConfigIo, address: u32) -> u32 {
    io.write(0, &address.to_le_bytes());
    let mut data = [0u8; 4];
    io.read(4, &mut data);
    u32::from_le_bytes(data)
}

#[test]
fn port_io_reaches_the_host_bridge_and_absent_functions_read_all_ones() {
    let (root, _) = root();
    let mut io = PciConfigIo::new(root.clone());
    assert_eq!(io_read32(&mut io, cf8(0, 0)), 0x0008_1b36);
    assert_eq!(
        io_read32(&mut io, cf8(0, 8)) >> 8,
        0x06_00_00,
        "host bridge class"
    );
    assert_eq!(io_read32(&mut io, cf8(1, 0)), 0xffff_ffff, "empty slot");
    assert_eq!(
        io_read32(&mut io, cf8(0, 0) | 1 << 8),
        0xffff_ffff,
        "function 1"
    );
    assert_eq!(
        io_read32(&mut io, cf8(0, 0) | 1 << 16),
        0xffff_ffff,
        "bus 1"
    );
    assert_eq!(
        io_read32(&mut io, 0x0000_0000),
        0xffff_ffff,
        "enable bit clear"
    );

    // CONFIG_ADDRESS reads back; Linux's type 1 probe writes a single byte at 0xcfb first.
    io.write(3, &[0x01]);
    let mut address = [0u8; 4];
    io.read(0, &mut address);
    assert_eq!(u32::from_le_bytes(address), 0x0100_0000);
    io.write(0, &cf8(0, 0).to_le_bytes());
    io.read(0, &mut address);
    assert_eq!(u32::from_le_bytes(address), 0x8000_0000);
    // Narrow data accesses pick bytes of the selected dword.
    let mut device_id = [0u8; 2];
    io.read(6, &mut device_id);
    assert_eq!(u16::from_le_bytes(device_id), 0x0008);
    let mut byte = [0u8; 1];
    io.read(5, &mut byte);
    assert_eq!(byte[0], 0x1b);
}

#[test]
fn ecam_reaches_the_same_registers_and_its_extended_space_is_empty() {
    let (root, _) = root();
    let slot = lock_root(&root).next_slot().unwrap();
    assert_eq!(slot, 1);
    lock_root(&root)
        .add(slot, Arc::new(Mutex::new(TestDevice::new(WINDOW.start))))
        .unwrap();
    let mut ecam = PciConfigMmio::new(root.clone());
    let mut id = [0u8; 4];
    ecam.read(1 << 15, &mut id);
    assert_eq!(u32::from_le_bytes(id), 0x1044_1af4);
    ecam.read(2 << 15, &mut id);
    assert_eq!(id, [0xff; 4]);
    ecam.read(1 << 15 | 1 << 12, &mut id);
    assert_eq!(id, [0xff; 4], "function 1 of a single-function device");
    ecam.read(1 << 15 | 0x100, &mut id);
    assert_eq!(id, [0; 4], "no extended capabilities");
    // A write through ECAM lands where port I/O reads it.
    ecam.write(1 << 15 | 0x3c, &[11]);
    let mut io = PciConfigIo::new(root);
    assert_eq!(io_read32(&mut io, cf8(1, 0x3c)) & 0xff, 11);
}

#[test]
fn bars_follow_memory_decoding_sizing_and_relocation() {
    let (root, mapper) = root();
    let device = Arc::new(Mutex::new(TestDevice::new(WINDOW.start)));
    lock_root(&root).add(1, device.clone()).unwrap();
    lock_root(&root).sync_all();
    let bar_reg = BAR0;
    let mut data = [0u8; 2];
    assert!(mapper.bus.read(WINDOW.start + 0x10, &mut data));
    assert_eq!(
        data,
        [0x10, 0x11],
        "the BAR reaches the device at its offset"
    );
    assert_eq!(*mapper.ioevents.lock().unwrap(), vec![WINDOW.start + 0x100]);
    assert_eq!(lock_root(&root).mapped_bar(1, 0), Some(WINDOW.start));

    let mut ecam = PciConfigMmio::new(root.clone());
    let at = |reg: usize| 1u64 << 15 | reg as u64;
    // The guest sizes the BAR with decoding off, as Linux does.
    ecam.write(at(COMMAND), &0u16.to_le_bytes());
    assert!(
        !mapper.bus.read(WINDOW.start, &mut data),
        "decoding off: unmapped"
    );
    assert!(mapper.ioevents.lock().unwrap().is_empty());
    ecam.write(at(bar_reg), &[0xff; 4]);
    ecam.write(at(bar_reg + 4), &[0xff; 4]);
    let mut low = [0u8; 4];
    ecam.read(at(bar_reg), &mut low);
    assert_eq!(u32::from_le_bytes(low), 0xffff_f004, "4 KiB, 64-bit");
    assert_eq!(lock_root(&root).mapped_bar(1, 0), None);

    // It moves the BAR and turns decoding back on.
    let new = WINDOW.start + 0x8000;
    ecam.write(at(bar_reg), &(new as u32).to_le_bytes());
    ecam.write(at(bar_reg + 4), &((new >> 32) as u32).to_le_bytes());
    assert_eq!(lock_root(&root).mapped_bar(1, 0), None, "still off");
    ecam.write(at(COMMAND), &2u16.to_le_bytes());
    assert_eq!(lock_root(&root).mapped_bar(1, 0), Some(new));
    assert!(!mapper.bus.read(WINDOW.start, &mut data));
    mapper.bus.write(new + 0x20, &[1, 2]);
    assert_eq!(device.lock().unwrap().writes, vec![(0x20, vec![1, 2])]);
    assert_eq!(*mapper.ioevents.lock().unwrap(), vec![new + 0x100]);

    // A BAR moved outside the windows is left unmapped (with a warning), never over RAM.
    ecam.write(at(bar_reg + 4), &0u32.to_le_bytes());
    assert_eq!(lock_root(&root).mapped_bar(1, 0), None);
    assert!(mapper.ioevents.lock().unwrap().is_empty());
}

#[test]
fn a_bar_moved_over_another_stays_unmapped() {
    let (root, mapper) = root();
    lock_root(&root)
        .add(1, Arc::new(Mutex::new(TestDevice::new(WINDOW.start))))
        .unwrap();
    lock_root(&root)
        .add(
            2,
            Arc::new(Mutex::new(TestDevice::new(WINDOW.start + 0x1000))),
        )
        .unwrap();
    lock_root(&root).sync_all();
    assert_eq!(mapper.ioevents.lock().unwrap().len(), 2);
    let mut ecam = PciConfigMmio::new(root.clone());
    ecam.write(2 << 15 | BAR0 as u64, &(WINDOW.start as u32).to_le_bytes());
    assert_eq!(lock_root(&root).mapped_bar(2, 0), None);
    assert_eq!(lock_root(&root).mapped_bar(1, 0), Some(WINDOW.start));
    let mut data = [0u8; 1];
    assert!(mapper.bus.read(WINDOW.start + 5, &mut data));
    assert_eq!(data[0], 5);
    // Moving it back maps it again.
    ecam.write(
        2 << 15 | BAR0 as u64,
        &((WINDOW.start + 0x2000) as u32).to_le_bytes(),
    );
    assert_eq!(
        lock_root(&root).mapped_bar(2, 0),
        Some(WINDOW.start + 0x2000)
    );
}

#[test]
fn slots_run_out_after_31_devices() {
    let (root, _) = root();
    let mut root = lock_root(&root);
    for expected in 1..32u8 {
        let slot = root.next_slot().unwrap();
        assert_eq!(slot, expected);
        root.add(slot, Arc::new(Mutex::new(HostBridge::new())))
            .unwrap();
    }
    assert_eq!(root.next_slot(), Err(SlotsFull));
    assert_eq!(
        root.add(1, Arc::new(Mutex::new(HostBridge::new()))),
        Err(SlotsFull)
    );
    assert_eq!(super::super::MAX_DEVICES, 31);
}
