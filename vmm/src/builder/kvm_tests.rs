//! The KVM tier (`--features kvm`): the PCI machine on this host's /dev/kvm, driven from its
//! buses as a guest would drive it (no vCPU runs: the real irqfds, resampled irqfds,
//! ioeventfds and GSI routing are KVM's).
#![cfg(feature = "kvm")]

use std::sync::Weak;

use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress};

use super::*;
use crate::arch::PCI_ECAM_START;
use crate::config::{ConsoleConfig, DiskConfig, MemoryConfig, RngConfig};
use crate::devices::irq::{MsiMessage, RouteSink};
use crate::devices::pci::bus::BarMapper;
use crate::devices::virtio::test_utils::{desc, WRITE};
use crate::vstate::pci::{KvmBarMapper, KvmRouteSink};

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("fv-builder-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A PCI machine with a disk (slot 1) and virtio-rng (slot 2).
fn pci_machine(scratch: &Scratch) -> Machine {
    assert!(
        std::path::Path::new("/dev/kvm").exists(),
        "/dev/kvm is missing: this test builds a PCI machine on KVM"
    );
    let disk = scratch.0.join("disk.img");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    let config = VmConfig {
        payload: PayloadConfig {
            kernel: "/not/loaded/by/build_machine".into(),
            ..Default::default()
        },
        memory: MemoryConfig { size: 64 << 20 },
        disks: vec![DiskConfig {
            id: "disk0".into(),
            path: disk,
            readonly: false,
        }],
        rng: Some(RngConfig::default()),
        serial: ConsoleConfig::Null,
        transport: Transport::Pci,
        ..VmConfig::default()
    };
    build_machine(&config).expect("build the PCI machine")
}

fn cf8(device: u8, register: u8) -> [u8; 4] {
    (0x8000_0000u32 | u32::from(device) << 11 | u32::from(register)).to_le_bytes()
}

fn pio_config_read(machine: &Machine, device: u8, register: u8) -> u32 {
    let pio = &machine.buses.0;
    assert!(pio.write(0xcf8, &cf8(device, register)));
    let mut data = [0u8; 4];
    assert!(pio.read(0xcfc, &mut data));
    u32::from_le_bytes(data)
}

fn ecam(device: u8, register: u64) -> u64 {
    PCI_ECAM_START + (u64::from(device) << 15) + register
}

fn mmio_read(machine: &Machine, addr: u64, len: usize) -> Option<u64> {
    let mut data = [0u8; 8];
    machine
        .buses
        .1
        .read(addr, &mut data[..len])
        .then(|| u64::from_le_bytes(data))
}

fn mmio_write(machine: &Machine, addr: u64, len: usize, value: u64) {
    assert!(machine.buses.1.write(addr, &value.to_le_bytes()[..len]));
}

fn bar0(machine: &Machine, device: u8) -> u64 {
    let low = mmio_read(machine, ecam(device, 0x10), 4).unwrap();
    let high = mmio_read(machine, ecam(device, 0x14), 4).unwrap();
    high << 32 | (low & !0xf)
}

#[test]
fn the_pci_machine_answers_through_port_io_and_ecam() {
    let scratch = Scratch::new("config");
    let machine = pci_machine(&scratch);
    assert_eq!(pio_config_read(&machine, 0, 0), 0x0008_1b36, "host bridge");
    assert_eq!(pio_config_read(&machine, 1, 0), 0x1042_1af4, "virtio-blk");
    assert_eq!(pio_config_read(&machine, 2, 0), 0x1044_1af4, "virtio-rng");
    assert_eq!(pio_config_read(&machine, 3, 0), 0xffff_ffff, "empty slot");
    assert_eq!(mmio_read(&machine, ecam(2, 0), 4), Some(0x1044_1af4));
    assert_eq!(
        pio_config_read(&machine, 1, 0x3c) & 0xffff,
        0x0100 | u32::from(crate::arch::pci_intx_gsi(1) as u8),
        "INTA#, its GSI as interrupt line"
    );
    let (start, _) = crate::arch::pci_mmio64_window(64 << 20);
    assert_eq!(bar0(&machine, 1), start);
    assert_eq!(bar0(&machine, 2), start + 0x8000);
    // The BAR reaches the device: num_queues of the common configuration.
    assert_eq!(mmio_read(&machine, bar0(&machine, 1) + 0x12, 2), Some(1));
    assert!(machine.pci.is_some());
    match &machine.platform {
        Platform::Pci { acpi } => assert_eq!(acpi.rsdp, crate::acpi::ACPI_START),
        Platform::Mmio { .. } => panic!("a PCI machine with the mmio platform"),
    }
}

/// The guest agent channel comes after the other virtio devices, which keep their slots: on
/// PCI a virtio-console function (1af4:1043, communication controller) with six queues; its
/// socket listens from the moment the machine is built.
#[test]
fn the_agent_channel_is_the_last_virtio_device_and_listens() {
    let scratch = Scratch::new("agent");
    let socket = scratch.0.join("agent.sock");
    let disk = scratch.0.join("disk.img");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    // A stale socket file from an earlier VM is replaced.
    std::fs::write(&socket, b"stale").unwrap();
    let config = VmConfig {
        payload: PayloadConfig {
            kernel: "/not/loaded/by/build_machine".into(),
            ..Default::default()
        },
        memory: MemoryConfig { size: 64 << 20 },
        disks: vec![DiskConfig {
            id: "disk0".into(),
            path: disk,
            readonly: false,
        }],
        rng: Some(RngConfig::default()),
        agent: Some(crate::config::AgentChannelConfig {
            socket: socket.clone(),
        }),
        serial: ConsoleConfig::Null,
        transport: Transport::Pci,
        ..VmConfig::default()
    };
    let machine = build_machine(&config).expect("build the PCI machine");
    assert_eq!(pio_config_read(&machine, 1, 0), 0x1042_1af4, "virtio-blk");
    assert_eq!(pio_config_read(&machine, 2, 0), 0x1044_1af4, "virtio-rng");
    assert_eq!(
        pio_config_read(&machine, 3, 0),
        0x1043_1af4,
        "virtio-console"
    );
    assert_eq!(
        pio_config_read(&machine, 3, 8) >> 8,
        0x07_80_00,
        "class code"
    );
    assert_eq!(pio_config_read(&machine, 4, 0), 0xffff_ffff, "empty slot");
    assert_eq!(mmio_read(&machine, bar0(&machine, 3) + 0x12, 2), Some(6));
    std::os::unix::net::UnixStream::connect(&socket).expect("the agent socket listens");
    drop(machine);

    // The same order on virtio-mmio.
    let mmio = VmConfig {
        transport: Transport::Mmio,
        ..config
    };
    let machine = build_machine(&mmio).expect("build the virtio-mmio machine");
    let types: Vec<u32> = machine
        .virtio
        .iter()
        .map(|t| t.lock().unwrap().device_type())
        .collect();
    assert_eq!(types, vec![2, 4, 3]);
}

#[test]
fn a_relocated_bar_takes_its_ioeventfds_along() {
    let scratch = Scratch::new("relocate");
    let machine = pci_machine(&scratch);
    let old = bar0(&machine, 1);
    let new = old + 0x10_0000;
    mmio_write(&machine, ecam(1, 0x04), 2, 0);
    assert_eq!(mmio_read(&machine, old + 0x12, 2), None, "decoding off");
    mmio_write(&machine, ecam(1, 0x10), 4, new & 0xffff_ffff);
    mmio_write(&machine, ecam(1, 0x14), 4, new >> 32);
    mmio_write(&machine, ecam(1, 0x04), 2, 0x2);
    assert_eq!(mmio_read(&machine, new + 0x12, 2), Some(1));
    assert_eq!(mmio_read(&machine, old + 0x12, 2), None);

    // KVM refuses a second ioeventfd where the device's is: it moved to the new notify address.
    let mapper = KvmBarMapper {
        vm: Arc::downgrade(&machine.vm),
        mmio: Arc::downgrade(&machine.buses.1),
    };
    let probe = EventFd::new(libc::EFD_NONBLOCK).unwrap();
    assert!(mapper.register_ioevent(&probe, new + 0x3000).is_err());
    mapper.register_ioevent(&probe, old + 0x3000).unwrap();
    mapper.unregister_ioevent(&probe, old + 0x3000);
    let gone = KvmBarMapper {
        vm: Weak::new(),
        mmio: Weak::new(),
    };
    assert!(gone.register_ioevent(&probe, old).is_err());
}

#[test]
fn kvm_takes_the_routing_table_with_msi_routes() {
    let scratch = Scratch::new("routes");
    let machine = pci_machine(&scratch);
    let sink = KvmRouteSink(Arc::downgrade(&machine.vm));
    let message = MsiMessage {
        address: 0xfee0_0000,
        data: 0x4041,
    };
    sink.set_routes(&[(24, message), (25, message)]).unwrap();
    assert!(KvmRouteSink(Weak::new()).set_routes(&[]).is_err());
}

#[test]
fn virtio_rng_serves_its_queue_over_pci_with_msix() {
    let scratch = Scratch::new("rng");
    let machine = pci_machine(&scratch);
    let bar = bar0(&machine, 2);
    let mem = &machine.mem;
    let mock = MockSplitQueue::new(mem, 16);
    let buffer = 0x20_0000;
    mock.build_desc_chain(&[desc(buffer, 64, WRITE, 0)])
        .unwrap();
    // MSI-X vector 0 for the queue, enabled.
    mmio_write(&machine, bar + 0x4000, 4, 0xfee0_0000);
    mmio_write(&machine, bar + 0x4008, 4, 0x41);
    mmio_write(&machine, bar + 0x400c, 4, 0);
    mmio_write(&machine, ecam(2, 0x42), 2, 0x8000);
    // Driver bring-up through the common configuration.
    mmio_write(&machine, bar + 0x14, 1, 0);
    mmio_write(&machine, bar + 0x14, 1, 3);
    mmio_write(&machine, bar + 0x08, 4, 1);
    mmio_write(&machine, bar + 0x0c, 4, 1);
    mmio_write(&machine, bar + 0x14, 1, 0xb);
    mmio_write(&machine, bar + 0x16, 2, 0);
    mmio_write(&machine, bar + 0x18, 2, 16);
    mmio_write(&machine, bar + 0x1a, 2, 0);
    assert_eq!(
        mmio_read(&machine, bar + 0x1a, 2),
        Some(0),
        "vector 0 taken"
    );
    mmio_write(&machine, bar + 0x20, 8, mock.desc_table_addr().0);
    mmio_write(&machine, bar + 0x28, 8, mock.avail_addr().0);
    mmio_write(&machine, bar + 0x30, 8, mock.used_addr().0);
    mmio_write(&machine, bar + 0x1c, 2, 1);
    mmio_write(&machine, bar + 0x14, 1, 0xf);
    assert_eq!(mmio_read(&machine, bar + 0x14, 1), Some(0xf), "DRIVER_OK");
    // The notify write reaches the worker (here from the VMM side, so through the bus).
    mmio_write(&machine, bar + 0x3000, 2, 0);
    let used = mock.used_addr().0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while mem.read_obj::<u16>(GuestAddress(used + 2)).unwrap() != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the used ring never moved"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let len: u32 = mem.read_obj(GuestAddress(used + 8)).unwrap();
    assert_eq!(len, 64);
    // A reset stops the device.
    mmio_write(&machine, bar + 0x14, 1, 0);
    assert_eq!(mmio_read(&machine, bar + 0x14, 1), Some(0));
}
