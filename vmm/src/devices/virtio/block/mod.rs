//! virtio-blk backed by a raw file.
//!
//! One request queue. A request is a descriptor chain: a 16-byte device-readable header
//! (`type: u32, reserved: u32, sector: u64`), data descriptors (device-writable for reads and
//! GET_ID, device-readable for writes, none for flush) and a final device-writable status byte
//! (0 ok, 1 I/O error, 2 unsupported). Supported: IN, OUT, FLUSH, GET_ID (the disk id, 20 bytes,
//! NUL-padded). Read-only disks offer VIRTIO_BLK_F_RO and fail writes with an I/O error; requests
//! past the end of the disk or not a whole number of sectors fail the same way.
//!
//! [`request`] parses and executes one chain (tested against `virtio_queue::mock`); [`device`]
//! is the `VirtioDevice` and its worker thread.

pub mod device;
pub mod request;
#[cfg(test)]
mod tests;

pub use device::{Block, DiskHandle, DIRTY_BLOCK};

/// Bytes per sector.
pub const SECTOR_SIZE: u64 = 512;
/// Feature bits.
pub const VIRTIO_BLK_F_RO: u64 = 1 << 5;
pub const VIRTIO_BLK_F_FLUSH: u64 = 1 << 9;
/// Request types.
pub const VIRTIO_BLK_T_IN: u32 = 0;
pub const VIRTIO_BLK_T_OUT: u32 = 1;
pub const VIRTIO_BLK_T_FLUSH: u32 = 4;
pub const VIRTIO_BLK_T_GET_ID: u32 = 8;
/// Status values.
pub const VIRTIO_BLK_S_OK: u8 = 0;
pub const VIRTIO_BLK_S_IOERR: u8 = 1;
pub const VIRTIO_BLK_S_UNSUPP: u8 = 2;
/// Length of the GET_ID answer.
pub const VIRTIO_BLK_ID_BYTES: usize = 20;
