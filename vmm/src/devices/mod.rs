//! Emulated devices: the I/O and MMIO buses the vCPU loop routes exits to, the legacy devices
//! (16550 serial, i8042, power-off port) and the virtio-mmio devices.

pub mod bus;
pub mod irq;
pub mod legacy;
pub mod pci;
pub mod virtio;
