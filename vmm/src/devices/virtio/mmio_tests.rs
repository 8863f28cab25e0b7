//! virtio-mmio transport tests: the driver's negotiation sequence, activation, refusals, and
//! bad guest accesses (wrong widths, queues outside memory) that must not panic.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

use super::*;
use crate::devices::virtio::test_utils::*;
use crate::devices::virtio::{ActivateError, Activation, VIRTIO_F_VERSION_1};

struct Dummy {
    activations: Arc<AtomicUsize>,
    resets: Arc<AtomicUsize>,
    worker: crate::devices::virtio::DeviceWorker,
}

impl VirtioDevice for Dummy {
    fn device_type(&self) -> u32 {
        42
    }
    fn queue_max_sizes(&self) -> &[u16] {
        &[16]
    }
    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1 | 0b101
    }
    fn config_space(&self) -> Vec<u8> {
        vec![1, 2, 3, 4, 5, 6]
    }
    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        assert_eq!(activation.acked_features, VIRTIO_F_VERSION_1 | 0b001);
        assert_eq!(activation.queues.len(), 1);
        self.activations.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn reset(&mut self) {
        self.resets.fetch_add(1, Ordering::SeqCst);
    }
    fn device_worker(&mut self) -> &mut crate::devices::virtio::DeviceWorker {
        &mut self.worker
    }
}

fn transport() -> (MmioTransport, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let activations = Arc::new(AtomicUsize::new(0));
    let resets = Arc::new(AtomicUsize::new(0));
    let device = Dummy {
        activations: activations.clone(),
        resets: resets.clone(),
        worker: Default::default(),
    };
    let t = MmioTransport::new(
        Box::new(device),
        mem(),
        vec![EventFd::new(libc::EFD_NONBLOCK).unwrap()],
        Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap())),
    )
    .unwrap();
    (t, activations, resets)
}

fn r(t: &mut MmioTransport, offset: u64) -> u32 {
    let mut data = [0u8; 4];
    t.read(offset, &mut data);
    u32::from_le_bytes(data)
}

fn w(t: &mut MmioTransport, offset: u64, value: u32) {
    t.write(offset, &value.to_le_bytes());
}

fn negotiate(t: &mut MmioTransport, high: u32) {
    w(t, REG_STATUS, 0);
    w(t, REG_STATUS, STATUS_ACKNOWLEDGE);
    w(t, REG_STATUS, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    w(t, REG_DRIVER_FEATURES_SEL, 0);
    w(t, REG_DRIVER_FEATURES, 0b011); // bit 1 is not offered: dropped
    w(t, REG_DRIVER_FEATURES_SEL, 1);
    w(t, REG_DRIVER_FEATURES, high);
    w(
        t,
        REG_STATUS,
        STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK,
    );
}

fn setup_queue(t: &mut MmioTransport, desc: u64) {
    w(t, REG_QUEUE_SEL, 0);
    assert_eq!(r(t, REG_QUEUE_NUM_MAX), 16);
    w(t, REG_QUEUE_NUM, 16);
    w(t, REG_QUEUE_DESC_LOW, desc as u32);
    w(t, REG_QUEUE_DESC_HIGH, (desc >> 32) as u32);
    w(t, REG_QUEUE_DRIVER_LOW, (BUF + 0x1000) as u32);
    w(t, REG_QUEUE_DRIVER_HIGH, 0);
    w(t, REG_QUEUE_DEVICE_LOW, (BUF + 0x2000) as u32);
    w(t, REG_QUEUE_DEVICE_HIGH, 0);
    w(t, REG_QUEUE_READY, 1);
}

const ALL_OK: u32 = STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK | STATUS_DRIVER_OK;

#[test]
fn identity_registers_and_config_space() {
    let (mut t, _, _) = transport();
    assert_eq!(r(&mut t, REG_MAGIC), 0x7472_6976);
    assert_eq!(r(&mut t, REG_VERSION), 2);
    assert_eq!(r(&mut t, REG_DEVICE_ID), 42);
    w(&mut t, REG_DEVICE_FEATURES_SEL, 1);
    assert_eq!(r(&mut t, REG_DEVICE_FEATURES), 1);
    w(&mut t, REG_DEVICE_FEATURES_SEL, 7);
    assert_eq!(r(&mut t, REG_DEVICE_FEATURES), 0);
    let mut two = [0u8; 2];
    t.read(CONFIG_SPACE + 2, &mut two);
    assert_eq!(two, [3, 4]);
    // Past the end of the config space: zeros, no panic.
    let mut far = [9u8; 4];
    t.read(CONFIG_SPACE + 4, &mut far);
    assert_eq!(far, [0; 4]);
    t.read(CONFIG_SPACE + u64::from(u32::MAX), &mut far);
}

#[test]
fn negotiation_and_activation() {
    let (mut t, activations, resets) = transport();
    negotiate(&mut t, 1);
    assert_ne!(r(&mut t, REG_STATUS) & STATUS_FEATURES_OK, 0);
    setup_queue(&mut t, BUF);
    w(&mut t, REG_STATUS, ALL_OK);
    assert_eq!(activations.load(Ordering::SeqCst), 1);
    assert_eq!(r(&mut t, REG_STATUS), ALL_OK);
    // Queue registers are frozen once the device runs.
    w(&mut t, REG_QUEUE_NUM, 2);
    w(&mut t, REG_STATUS, 0);
    assert_eq!(resets.load(Ordering::SeqCst), 1);
    assert_eq!(r(&mut t, REG_STATUS), 0);
}

#[test]
fn features_ok_needs_version_1() {
    let (mut t, activations, _) = transport();
    negotiate(&mut t, 0);
    assert_eq!(r(&mut t, REG_STATUS) & STATUS_FEATURES_OK, 0);
    w(&mut t, REG_STATUS, ALL_OK);
    assert_eq!(activations.load(Ordering::SeqCst), 0);
    assert_ne!(r(&mut t, REG_STATUS) & STATUS_NEEDS_RESET, 0);
}

#[test]
fn queue_outside_memory_marks_the_device_broken() {
    let (mut t, activations, _) = transport();
    negotiate(&mut t, 1);
    setup_queue(&mut t, MEM_SIZE + 0x10_0000);
    w(&mut t, REG_STATUS, ALL_OK);
    assert_eq!(activations.load(Ordering::SeqCst), 0);
    assert_ne!(r(&mut t, REG_STATUS) & STATUS_NEEDS_RESET, 0);
    assert_ne!(r(&mut t, REG_INTERRUPT_STATUS) & 2, 0);
    // A reset clears it.
    w(&mut t, REG_STATUS, 0);
    assert_eq!(r(&mut t, REG_STATUS), 0);
}

#[test]
fn odd_accesses_do_not_panic() {
    let (mut t, _, _) = transport();
    let mut one = [7u8; 1];
    t.read(REG_MAGIC, &mut one);
    assert_eq!(one, [0]);
    t.write(REG_STATUS, &[1]);
    assert_eq!(r(&mut t, REG_STATUS), 0);
    w(&mut t, REG_QUEUE_SEL, 1000);
    assert_eq!(r(&mut t, REG_QUEUE_NUM_MAX), 0);
    w(&mut t, REG_QUEUE_NOTIFY, 1000);
    w(&mut t, 0xff0, 1);
    t.write(CONFIG_SPACE, &[1, 2]);
    // Queue setup before FEATURES_OK is ignored.
    w(&mut t, REG_QUEUE_SEL, 0);
    w(&mut t, REG_QUEUE_READY, 1);
    assert_eq!(r(&mut t, REG_QUEUE_READY), 0);
}

/// Live migration of a transport with a running device (virtio-rng): the source takes one
/// chain, is paused and saved; a target over a copy of guest memory restores the state and
/// takes the driver's next chain from where the source stopped (not the first one again).
#[test]
fn restored_transport_continues_the_rings() {
    use crate::devices::virtio::rng::Rng;
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::{Bytes, GuestAddress};

    fn rng_transport(mem: &GuestMemoryMmap) -> (MmioTransport, EventFd) {
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let notify = evt.try_clone().unwrap();
        let source = std::fs::File::open("/dev/urandom").unwrap();
        let t = MmioTransport::new(
            Box::new(Rng::new(source)),
            mem.clone(),
            vec![evt],
            Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap())),
        )
        .unwrap();
        (t, notify)
    }
    fn used_idx(mem: &GuestMemoryMmap, used: u64) -> u16 {
        mem.read_obj(GuestAddress(used + 2)).unwrap()
    }
    fn wait_used(mem: &GuestMemoryMmap, used: u64, idx: u16) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while used_idx(mem, used) != idx {
            assert!(
                std::time::Instant::now() < deadline,
                "used index never reached {idx}"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    let source_mem = mem();
    let mock = MockSplitQueue::new(&source_mem, 16);
    let (desc, avail, used) = (
        mock.desc_table_addr().0,
        mock.avail_addr().0,
        mock.used_addr().0,
    );
    mock.build_desc_chain(&[desc_at(BUF, 16)]).unwrap();
    let (mut source, notify) = rng_transport(&source_mem);
    w(&mut source, REG_STATUS, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    w(&mut source, REG_DRIVER_FEATURES_SEL, 1);
    w(&mut source, REG_DRIVER_FEATURES, 1);
    w(
        &mut source,
        REG_STATUS,
        STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK,
    );
    w(&mut source, REG_QUEUE_SEL, 0);
    w(&mut source, REG_QUEUE_NUM, 16);
    w(&mut source, REG_QUEUE_DESC_LOW, desc as u32);
    w(&mut source, REG_QUEUE_DRIVER_LOW, avail as u32);
    w(&mut source, REG_QUEUE_DEVICE_LOW, used as u32);
    w(&mut source, REG_QUEUE_READY, 1);
    w(&mut source, REG_STATUS, ALL_OK);
    notify.write(1).unwrap();
    wait_used(&source_mem, used, 1);

    source.pause_device();
    let state = source.state();
    assert!(state.activated);
    assert_eq!(state.queues[0].size, 16);
    let target_mem = mem();
    let mut copy = vec![0u8; MEM_SIZE as usize];
    source_mem.read_slice(&mut copy, GuestAddress(0)).unwrap();
    target_mem.write_slice(&copy, GuestAddress(0)).unwrap();
    let (mut target, notify) = rng_transport(&target_mem);
    target.restore(&state).unwrap();
    assert_eq!(r(&mut target, REG_STATUS), ALL_OK);
    assert_eq!(target.state(), state);

    // The driver offers a second chain (descriptor 1, avail slot 1) on the target.
    target_mem
        .write_obj(desc_at(BUF + 0x100, 32), GuestAddress(desc + 16))
        .unwrap();
    target_mem
        .write_obj(1u16, GuestAddress(avail + 4 + 2))
        .unwrap();
    target_mem.write_obj(2u16, GuestAddress(avail + 2)).unwrap();
    notify.write(1).unwrap();
    wait_used(&target_mem, used, 2);
    let id: u32 = target_mem.read_obj(GuestAddress(used + 4 + 8)).unwrap();
    let len: u32 = target_mem.read_obj(GuestAddress(used + 4 + 8 + 4)).unwrap();
    assert_eq!((id, len), (1, 32), "the target must take the second chain");

    // A transport of another device type refuses the state.
    let mut other = dummy_transport(&target_mem);
    assert!(matches!(
        other.restore(&state),
        Err(RestoreTransportError::DeviceType {
            expected: 42,
            got: 4
        })
    ));
    source.resume_device();
}

fn desc_at(addr: u64, len: u32) -> virtio_queue::desc::RawDescriptor {
    desc(addr, len, WRITE, 0)
}

fn dummy_transport(mem: &GuestMemoryMmap) -> MmioTransport {
    let device = Dummy {
        activations: Arc::new(AtomicUsize::new(0)),
        resets: Arc::new(AtomicUsize::new(0)),
        worker: Default::default(),
    };
    MmioTransport::new(
        Box::new(device),
        mem.clone(),
        vec![EventFd::new(libc::EFD_NONBLOCK).unwrap()],
        Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap())),
    )
    .unwrap()
}
