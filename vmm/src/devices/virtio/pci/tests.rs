//! virtio-pci transport tests: what a driver finds in configuration space, common
//! configuration semantics, notify addresses, the ISR and INTx, MSI-X vectors, the PCI
//! configuration access window, reset and save/restore.

use std::sync::Mutex;

use super::interrupt::NO_VECTOR;
use super::*;
use crate::devices::irq::{GsiRouting, MsiMessage, RouteSink};
use crate::devices::pci::config_space::{BAR0, COMMAND_MEMORY, DEVICE_ID, VENDOR_ID as VENDOR_REG};
use crate::devices::virtio::test_utils::{mem, BUF};
use crate::devices::virtio::transport::{
    STATUS_ACKNOWLEDGE, STATUS_DRIVER, STATUS_DRIVER_OK, STATUS_FEATURES_OK, STATUS_NEEDS_RESET,
};
use crate::devices::virtio::{ActivateError, Activation, DeviceWorker, VIRTIO_F_VERSION_1};

const BAR: u64 = 0x1_0000_0000;

struct Dummy {
    activations: Arc<Mutex<Vec<(u64, usize)>>>,
    worker: DeviceWorker,
}

impl VirtioDevice for Dummy {
    fn device_type(&self) -> u32 {
        2
    }
    fn queue_max_sizes(&self) -> &[u16] {
        &[16, 8]
    }
    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1 | 0b101
    }
    fn config_space(&self) -> Vec<u8> {
        vec![1, 2, 3, 4, 5, 6]
    }
    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        self.activations
            .lock()
            .unwrap()
            .push((activation.acked_features, activation.queues.len()));
        Ok(())
    }
    fn device_worker(&mut self) -> &mut DeviceWorker {
        &mut self.worker
    }
}

#[derive(Clone, Default)]
struct Routes(Arc<Mutex<Vec<(u32, MsiMessage)>>>);

impl RouteSink for Routes {
    fn set_routes(&self, routes: &[(u32, MsiMessage)]) -> std::io::Result<()> {
        *self.0.lock().unwrap() = routes.to_vec();
        Ok(())
    }
}

struct Fixture {
    dev: VirtioPciDevice,
    activations: Arc<Mutex<Vec<(u64, usize)>>>,
    notify: Vec<EventFd>,
    vectors: Vec<EventFd>,
    intx: EventFd,
    routes: Routes,
}

fn eventfd() -> EventFd {
    EventFd::new(libc::EFD_NONBLOCK).unwrap()
}

fn fixture() -> Fixture {
    let activations = Arc::new(Mutex::new(Vec::new()));
    let device = Dummy {
        activations: activations.clone(),
        worker: DeviceWorker::default(),
    };
    let notify: Vec<EventFd> = (0..2).map(|_| eventfd()).collect();
    let vectors: Vec<EventFd> = (0..3).map(|_| eventfd()).collect();
    let routes = Routes::default();
    let msix = MsixVectors::new(
        vec![24, 25, 26],
        vectors.iter().map(|e| e.try_clone().unwrap()).collect(),
        Arc::new(GsiRouting::new(Box::new(routes.clone()))),
    )
    .unwrap();
    let intx = eventfd();
    let dev = VirtioPciDevice::new(
        Box::new(device),
        mem(),
        notify.iter().map(|e| e.try_clone().unwrap()).collect(),
        Arc::new(msix),
        LevelLine::new(intx.try_clone().unwrap()),
        PciPlacement {
            bar_address: BAR,
            intx_gsi: 17,
        },
    )
    .unwrap();
    Fixture {
        dev,
        activations,
        notify,
        vectors,
        intx,
        routes,
    }
}

fn bar_read(dev: &mut VirtioPciDevice, offset: u64, len: usize) -> u64 {
    let mut data = [0u8; 8];
    dev.read_bar(0, offset, &mut data[..len]);
    u64::from_le_bytes(data)
}

fn bar_write(dev: &mut VirtioPciDevice, offset: u64, len: usize, value: u64) {
    dev.write_bar(0, offset, &value.to_le_bytes()[..len]);
}

fn cfg_read(dev: &mut VirtioPciDevice, offset: usize, len: usize) -> u32 {
    let mut data = [0u8; 4];
    dev.read_config(offset, &mut data[..len]);
    u32::from_le_bytes(data)
}

/// The virtio capabilities as Linux's `virtio_pci_find_capability` reads them:
/// `(cfg_type, bar, offset, length, cap offset)`.
fn virtio_caps(dev: &mut VirtioPciDevice) -> Vec<(u8, u8, u32, u32, usize)> {
    let caps = dev.config().capabilities();
    caps.into_iter()
        .filter(|(id, _)| *id == VENDOR_CAPABILITY)
        .map(|(_, at)| {
            (
                cfg_read(dev, at + 3, 1) as u8,
                cfg_read(dev, at + 4, 1) as u8,
                cfg_read(dev, at + 8, 4),
                cfg_read(dev, at + 12, 4),
                at,
            )
        })
        .collect()
}

const STATUS: u64 = 0x14;
const QUEUE_SELECT: u64 = 0x16;
const QUEUE_SIZE: u64 = 0x18;
const QUEUE_MSIX: u64 = 0x1a;
const QUEUE_ENABLE: u64 = 0x1c;
const QUEUE_NOTIFY_OFF: u64 = 0x1e;
const QUEUE_DESC: u64 = 0x20;

/// Feature negotiation and queue setup as Linux's virtio_pci_modern does them; queues at
/// `BUF + q * 0x1000`.
fn bring_up(dev: &mut VirtioPciDevice, queue_vectors: [u16; 2]) {
    bar_write(dev, STATUS, 1, 0);
    bar_write(
        dev,
        STATUS,
        1,
        u64::from(STATUS_ACKNOWLEDGE | STATUS_DRIVER),
    );
    bar_write(dev, 0x08, 4, 0);
    bar_write(dev, 0x0c, 4, 0b111);
    bar_write(dev, 0x08, 4, 1);
    bar_write(dev, 0x0c, 4, 1);
    let features_ok = STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK;
    bar_write(dev, STATUS, 1, u64::from(features_ok));
    assert_eq!(bar_read(dev, STATUS, 1), u64::from(features_ok));
    for q in 0..2u64 {
        bar_write(dev, QUEUE_SELECT, 2, q);
        bar_write(dev, QUEUE_SIZE, 2, 8);
        bar_write(dev, QUEUE_MSIX, 2, u64::from(queue_vectors[q as usize]));
        let base = BUF + q * 0x1000;
        // Linux writes each 64-bit address as two 32-bit halves.
        for (i, addr) in [base, base + 0x400, base + 0x800].into_iter().enumerate() {
            let field = QUEUE_DESC + 8 * i as u64;
            bar_write(dev, field, 4, addr & 0xffff_ffff);
            bar_write(dev, field + 4, 4, addr >> 32);
        }
        bar_write(dev, QUEUE_ENABLE, 2, 1);
    }
    bar_write(dev, STATUS, 1, u64::from(features_ok | STATUS_DRIVER_OK));
}

#[test]
fn the_function_and_its_capabilities_are_what_linux_looks_for() {
    let mut f = fixture();
    assert_eq!(cfg_read(&mut f.dev, VENDOR_REG, 2), 0x1af4);
    assert_eq!(cfg_read(&mut f.dev, DEVICE_ID, 2), 0x1042, "0x1040 + block");
    assert_eq!(
        cfg_read(&mut f.dev, 0x08, 4),
        0x0100_0001,
        "revision 1, class 01.00"
    );
    assert_eq!(cfg_read(&mut f.dev, 0x2c, 4), 0x0040_1af4, "subsystem");
    assert_eq!(cfg_read(&mut f.dev, 0x3c, 2), 0x0111, "INTA#, line 17");
    assert_eq!(cfg_read(&mut f.dev, BAR0, 4), BAR as u32 | 0b100);
    assert_eq!(cfg_read(&mut f.dev, BAR0 + 4, 4), (BAR >> 32) as u32);
    assert_ne!(f.dev.config().command() & COMMAND_MEMORY, 0);
    let caps = f.dev.config().capabilities();
    assert_eq!(caps[0], (msix::CAPABILITY_ID, 0x40));
    assert_eq!(
        cfg_read(&mut f.dev, 0x42, 2),
        2,
        "3 vectors: 2 queues + config"
    );
    assert_eq!(
        cfg_read(&mut f.dev, 0x44, 4),
        0x4000,
        "table in BAR 0 at 0x4000"
    );
    assert_eq!(
        cfg_read(&mut f.dev, 0x48, 4),
        0x5000,
        "PBA in BAR 0 at 0x5000"
    );
    let virtio: Vec<_> = virtio_caps(&mut f.dev)
        .into_iter()
        .map(|(t, b, o, l, _)| (t, b, o, l))
        .collect();
    assert_eq!(
        virtio,
        vec![
            (CAP_COMMON, 0, 0x0000, 0x38),
            (CAP_NOTIFY, 0, 0x3000, 8),
            (CAP_ISR, 0, 0x1000, 1),
            (CAP_DEVICE, 0, 0x2000, 6),
            (CAP_PCI_CFG, 0, 0, 0),
        ]
    );
    let notify_cap = virtio_caps(&mut f.dev)[1].4;
    assert_eq!(cfg_read(&mut f.dev, notify_cap + 2, 1), 20, "cap_len");
    assert_eq!(cfg_read(&mut f.dev, notify_cap + 16, 4), NOTIFY_MULTIPLIER);
}

#[test]
fn feature_select_status_and_reset() {
    let mut f = fixture();
    assert_eq!(
        bar_read(&mut f.dev, 0x04, 4),
        0b101,
        "device features, low half"
    );
    bar_write(&mut f.dev, 0x00, 4, 1);
    assert_eq!(
        bar_read(&mut f.dev, 0x04, 4),
        1,
        "VERSION_1 in the high half"
    );
    bar_write(&mut f.dev, 0x00, 4, 2);
    assert_eq!(bar_read(&mut f.dev, 0x04, 4), 0);
    assert_eq!(bar_read(&mut f.dev, 0x12, 2), 2, "num_queues");
    // Driver features outside negotiation are ignored.
    bar_write(&mut f.dev, 0x0c, 4, 0b101);
    assert_eq!(bar_read(&mut f.dev, 0x0c, 4), 0);
    // Without VERSION_1 FEATURES_OK does not stick.
    bar_write(
        &mut f.dev,
        STATUS,
        1,
        u64::from(STATUS_ACKNOWLEDGE | STATUS_DRIVER),
    );
    bar_write(&mut f.dev, 0x0c, 4, 0b111);
    assert_eq!(bar_read(&mut f.dev, 0x0c, 4), 0b101, "only offered bits");
    bar_write(
        &mut f.dev,
        STATUS,
        1,
        u64::from(STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK),
    );
    assert_eq!(
        bar_read(&mut f.dev, STATUS, 1) & u64::from(STATUS_FEATURES_OK),
        0
    );

    bring_up(&mut f.dev, [0, 1]);
    assert_eq!(
        *f.activations.lock().unwrap(),
        vec![(VIRTIO_F_VERSION_1 | 0b101, 2)]
    );
    // Queue registers are frozen while the device runs.
    bar_write(&mut f.dev, QUEUE_SELECT, 2, 0);
    bar_write(&mut f.dev, QUEUE_SIZE, 2, 4);
    assert_eq!(bar_read(&mut f.dev, QUEUE_SIZE, 2), 8);
    assert_eq!(bar_read(&mut f.dev, QUEUE_DESC, 8), BUF);
    // Reset: status, features, queues and vectors go back.
    bar_write(&mut f.dev, STATUS, 1, 0);
    assert_eq!(bar_read(&mut f.dev, STATUS, 1), 0);
    assert_eq!(bar_read(&mut f.dev, QUEUE_SIZE, 2), 16, "the maximum again");
    assert_eq!(bar_read(&mut f.dev, QUEUE_ENABLE, 2), 0);
    assert_eq!(bar_read(&mut f.dev, QUEUE_MSIX, 2), u64::from(NO_VECTOR));
    assert_eq!(bar_read(&mut f.dev, 0x10, 2), u64::from(NO_VECTOR));
}

#[test]
fn queue_select_and_vectors() {
    let mut f = fixture();
    bar_write(&mut f.dev, QUEUE_SELECT, 2, 1);
    assert_eq!(bar_read(&mut f.dev, QUEUE_SIZE, 2), 8, "queue 1's maximum");
    assert_eq!(bar_read(&mut f.dev, QUEUE_NOTIFY_OFF, 2), 1);
    bar_write(&mut f.dev, QUEUE_MSIX, 2, 2);
    assert_eq!(bar_read(&mut f.dev, QUEUE_MSIX, 2), 2);
    bar_write(&mut f.dev, QUEUE_MSIX, 2, 3);
    assert_eq!(
        bar_read(&mut f.dev, QUEUE_MSIX, 2),
        u64::from(NO_VECTOR),
        "no vector 3"
    );
    bar_write(&mut f.dev, 0x10, 2, 0);
    assert_eq!(bar_read(&mut f.dev, 0x10, 2), 0);
    bar_write(&mut f.dev, QUEUE_SELECT, 2, 5);
    assert_eq!(bar_read(&mut f.dev, QUEUE_SIZE, 2), 0, "no queue 5");
    assert_eq!(bar_read(&mut f.dev, QUEUE_MSIX, 2), u64::from(NO_VECTOR));
    // Queue setup before FEATURES_OK is ignored.
    bar_write(&mut f.dev, QUEUE_SELECT, 2, 0);
    bar_write(&mut f.dev, QUEUE_ENABLE, 2, 1);
    assert_eq!(bar_read(&mut f.dev, QUEUE_ENABLE, 2), 0);
    // A read spanning fields is cut from the whole structure.
    assert_eq!(
        bar_read(&mut f.dev, 0x10, 4),
        2 << 16,
        "config vector 0, 2 queues"
    );
}

#[test]
fn notify_addresses_map_to_queues() {
    let mut f = fixture();
    let offsets: Vec<u64> = f.dev.ioeventfds(0).into_iter().map(|(o, _)| o).collect();
    assert_eq!(offsets, vec![0x3000, 0x3004]);
    assert!(f.dev.ioeventfds(1).is_empty());
    bar_write(&mut f.dev, NOTIFY_OFFSET + 4, 2, 1);
    assert!(f.notify[0].read().is_err());
    assert_eq!(f.notify[1].read().unwrap(), 1);
    bar_write(&mut f.dev, NOTIFY_OFFSET, 2, 0);
    assert_eq!(f.notify[0].read().unwrap(), 1);
    // A queue that does not exist: a warning.
    bar_write(&mut f.dev, NOTIFY_OFFSET + 0x40, 2, 16);
}

#[test]
fn without_msix_interrupts_use_intx_and_the_isr_is_read_to_clear() {
    let mut f = fixture();
    bring_up(&mut f.dev, [0, 1]);
    let interrupt = f.dev.interrupt();
    let pending = f.dev.intx_pending();
    assert!(!pending());
    interrupt.signal_used_queue(1);
    assert_eq!(f.intx.read().unwrap(), 1, "INTx raised");
    assert!(f.vectors.iter().all(|v| v.read().is_err()));
    assert!(pending(), "the line stays up until the ISR is read");
    assert_eq!(bar_read(&mut f.dev, ISR_OFFSET, 1), 1);
    assert_eq!(bar_read(&mut f.dev, ISR_OFFSET, 1), 0, "read-to-clear");
    assert!(!pending());
    interrupt.mark_broken();
    assert_eq!(f.intx.read().unwrap(), 1);
    assert_eq!(
        bar_read(&mut f.dev, ISR_OFFSET, 1),
        2,
        "configuration change"
    );
    assert_ne!(
        bar_read(&mut f.dev, STATUS, 1) & u64::from(STATUS_NEEDS_RESET),
        0
    );
    // INTx disabled in the command register: nothing.
    f.dev.write_config(0x04, &0x0402u16.to_le_bytes());
    interrupt.signal_used_queue(0);
    assert!(f.intx.read().is_err());
    assert!(!pending());
}

#[test]
fn with_msix_each_queue_fires_its_vector() {
    let mut f = fixture();
    bring_up(&mut f.dev, [1, NO_VECTOR]);
    bar_write(&mut f.dev, 0x10, 2, 0);
    for vector in 0..3u64 {
        let entry = MSIX_TABLE_OFFSET + vector * 16;
        bar_write(&mut f.dev, entry, 4, 0xfee0_0000);
        bar_write(&mut f.dev, entry + 8, 4, 0x30 + vector);
        bar_write(&mut f.dev, entry + 12, 4, 0);
    }
    f.dev
        .write_config(0x42, &msix::CONTROL_ENABLE.to_le_bytes());
    assert_eq!(f.routes.0.lock().unwrap().len(), 3);
    let interrupt = f.dev.interrupt();
    interrupt.signal_used_queue(0);
    assert_eq!(f.vectors[1].read().unwrap(), 1, "queue 0 has vector 1");
    interrupt.signal_used_queue(1);
    assert!(
        f.vectors.iter().all(|v| v.read().is_err()),
        "NO_VECTOR: nothing"
    );
    assert!(f.intx.read().is_err(), "and never INTx while MSI-X is on");
    interrupt.signal_config();
    assert_eq!(f.vectors[0].read().unwrap(), 1);
    assert!(!f.dev.intx_pending()());
    // Masked in the table: pending bit in the PBA, delivered on unmask.
    bar_write(&mut f.dev, MSIX_TABLE_OFFSET + 16 + 12, 4, 1);
    interrupt.signal_used_queue(0);
    assert!(f.vectors[1].read().is_err());
    assert_eq!(bar_read(&mut f.dev, MSIX_PBA_OFFSET, 8), 0b10);
    bar_write(&mut f.dev, MSIX_TABLE_OFFSET + 16 + 12, 4, 0);
    assert_eq!(f.vectors[1].read().unwrap(), 1);
    assert_eq!(bar_read(&mut f.dev, MSIX_PBA_OFFSET, 8), 0);
    assert_eq!(bar_read(&mut f.dev, MSIX_TABLE_OFFSET + 32 + 8, 4), 0x32);
}

#[test]
fn the_pci_cfg_window_reaches_bar_0() {
    let mut f = fixture();
    let window = virtio_caps(&mut f.dev)[4].4;
    f.dev.write_config(window + 4, &[0]);
    f.dev.write_config(window + 8, &0x12u32.to_le_bytes());
    f.dev.write_config(window + 12, &2u32.to_le_bytes());
    assert_eq!(
        cfg_read(&mut f.dev, window + 16, 2),
        2,
        "num_queues through the window"
    );
    // A write through it: device_feature_select.
    f.dev.write_config(window + 8, &0u32.to_le_bytes());
    f.dev.write_config(window + 12, &4u32.to_le_bytes());
    f.dev.write_config(window + 16, &1u32.to_le_bytes());
    assert_eq!(bar_read(&mut f.dev, 0x04, 4), 1);
    // A bad window (length 3) is refused with a warning.
    f.dev.write_config(window + 12, &3u32.to_le_bytes());
    assert_eq!(cfg_read(&mut f.dev, window + 16, 4), 1, "unchanged");
}

#[test]
fn odd_accesses_do_not_panic() {
    let mut f = fixture();
    let mut data = [0xaau8; 8];
    f.dev.read_bar(1, 0, &mut data);
    assert_eq!(data, [0; 8]);
    f.dev.read_bar(0, BAR_SIZE + 0x100, &mut data);
    f.dev.read_bar(0, ISR_OFFSET + 1, &mut data[..1]);
    assert_eq!(data[0], 0);
    f.dev.write_bar(0, ISR_OFFSET, &[1]);
    f.dev.write_bar(0, DEVICE_OFFSET, &[1]);
    f.dev.write_bar(0, MSIX_PBA_OFFSET, &[1]);
    f.dev.write_bar(0, 0x36, &[1, 2, 3, 4]);
    f.dev.write_bar(0, 0x04, &[1, 2, 3, 4]);
    f.dev.write_bar(0, 0x12, &[9, 9]);
    assert_eq!(bar_read(&mut f.dev, 0x12, 2), 2);
    f.dev.write_bar(0, u64::MAX - 2, &[1, 2, 3, 4]);
    f.dev.read_bar(0, u64::MAX - 2, &mut data);
    bar_write(&mut f.dev, QUEUE_ENABLE, 2, 0);
    assert_eq!(
        bar_read(&mut f.dev, DEVICE_OFFSET + 2, 2),
        0x0403,
        "device config"
    );
}

#[test]
fn hardware_reset_and_save_restore() {
    let mut source = fixture();
    bring_up(&mut source.dev, [1, 2]);
    bar_write(&mut source.dev, 0x10, 2, 0);
    bar_write(&mut source.dev, MSIX_TABLE_OFFSET + 16, 4, 0xfee0_0000);
    bar_write(&mut source.dev, MSIX_TABLE_OFFSET + 16 + 12, 4, 0);
    source
        .dev
        .write_config(0x42, &msix::CONTROL_ENABLE.to_le_bytes());
    source.dev.write_config(BAR0, &0x8000u32.to_le_bytes());
    source.dev.write_config(0x3c, &[18]);
    let snapshot = source.dev.snapshot();

    let mut target = fixture();
    target.dev.restore(&snapshot).unwrap();
    assert_eq!(target.dev.snapshot(), snapshot);
    assert_eq!(target.activations.lock().unwrap().len(), 1, "activated");
    assert_eq!(
        cfg_read(&mut target.dev, BAR0, 4),
        0x8000 | 0b100,
        "moved BAR"
    );
    assert_eq!(cfg_read(&mut target.dev, 0x3c, 1), 18);
    assert_eq!(
        bar_read(&mut target.dev, QUEUE_MSIX, 2),
        2,
        "queue 1 selected last"
    );
    assert!(target
        .routes
        .0
        .lock()
        .unwrap()
        .iter()
        .any(|(gsi, _)| *gsi == 25));
    target.dev.interrupt().signal_used_queue(0);
    assert_eq!(target.vectors[1].read().unwrap(), 1);
    let mmio = TransportSnapshot::Mmio(snapshot_transport(&snapshot));
    assert!(target.dev.restore(&mmio).is_err());

    target.dev.hardware_reset();
    assert_eq!(cfg_read(&mut target.dev, BAR0, 4), BAR as u32 | 0b100);
    assert!(!target.dev.irq.msix().enabled());
    assert_eq!(bar_read(&mut target.dev, STATUS, 1), 0);
}

fn snapshot_transport(snapshot: &TransportSnapshot) -> TransportState {
    match snapshot {
        TransportSnapshot::Pci(state) => state.transport.clone(),
        TransportSnapshot::Mmio(state) => state.clone(),
    }
}
