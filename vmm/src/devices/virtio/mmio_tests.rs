//! virtio-mmio transport tests: the driver's negotiation sequence, activation, refusals, and
//! bad guest accesses (wrong widths, queues outside memory) that must not panic.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

use super::*;
use crate::devices::virtio::test_utils::*;
use crate::devices::virtio::ActivateError;

struct Dummy {
    activations: Arc<AtomicUsize>,
    resets: Arc<AtomicUsize>,
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
    fn worker(&mut self) -> Option<&mut crate::devices::virtio::worker::WorkerHandle> {
        None
    }
}

fn transport() -> (MmioTransport, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let activations = Arc::new(AtomicUsize::new(0));
    let resets = Arc::new(AtomicUsize::new(0));
    let device = Dummy {
        activations: activations.clone(),
        resets: resets.clone(),
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
