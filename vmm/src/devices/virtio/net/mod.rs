//! virtio-net on a tap device.
//!
//! Queues: 0 receive, 1 transmit. Every buffer starts with the 12-byte `virtio_net_hdr` (virtio
//! 1.x always has `num_buffers`), which is also the tap's vnet header (`IFF_VNET_HDR` with
//! `TUNSETVNETHDRSZ` 12), so frames pass between the queues and the tap unchanged, header
//! included. Offloads: the device offers checksum and TSO/UFO both ways; what the driver accepts
//! for its receive side is applied to the tap with `TUNSETOFFLOAD`.
//!
//! * Transmit: a chain of device-readable descriptors is gathered into one frame and written to
//!   the tap.
//! * Receive: the tap is read (edge-triggered, non-blocking) into a frame buffer; each frame is
//!   scattered into one chain of device-writable descriptors. A frame waits while the guest
//!   has no receive buffer, and reading resumes when the guest adds some. A frame that does not
//!   fit its chain is dropped.
//!
//! [`frame`] holds the chain <-> frame functions (tested against `virtio_queue::mock` and
//! fuzzed); [`tap`] opens the tap; [`device`] is the `VirtioDevice` and its worker.

pub mod device;
pub mod frame;
pub mod tap;
#[cfg(test)]
mod tests;

pub use device::Net;

/// Size of `virtio_net_hdr` with `num_buffers` (virtio 1.x).
pub const VNET_HDR_LEN: usize = 12;
/// Largest frame we move: 64 KiB of TSO payload plus headers.
pub const MAX_FRAME_LEN: usize = 65562;

pub const VIRTIO_NET_F_CSUM: u64 = 1 << 0;
pub const VIRTIO_NET_F_GUEST_CSUM: u64 = 1 << 1;
pub const VIRTIO_NET_F_MAC: u64 = 1 << 5;
pub const VIRTIO_NET_F_GUEST_TSO4: u64 = 1 << 7;
pub const VIRTIO_NET_F_GUEST_TSO6: u64 = 1 << 8;
pub const VIRTIO_NET_F_GUEST_UFO: u64 = 1 << 10;
pub const VIRTIO_NET_F_HOST_TSO4: u64 = 1 << 11;
pub const VIRTIO_NET_F_HOST_TSO6: u64 = 1 << 12;
pub const VIRTIO_NET_F_HOST_UFO: u64 = 1 << 14;
