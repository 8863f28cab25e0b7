//! virtio-vsock with a unix-socket host side (Firecracker's "hybrid vsock"; this kernel has no
//! vhost-vsock).
//!
//! Queues: 0 receive (device to guest), 1 transmit (guest to device), 2 events (unused). Config
//! space: the guest CID (u64). Every packet is a 44-byte little-endian header
//! (`src_cid, dst_cid: u64; src_port, dst_port, len: u32; type, op: u16; flags, buf_alloc,
//! fwd_cnt: u32`) followed by `len` payload bytes. Only stream sockets (type 1) exist.
//!
//! Host side, for the configured socket path `S`:
//! * guest connects to host port `P` (op REQUEST): the device connects to the unix socket
//!   `S_P`; RESPONSE on success, RST otherwise;
//! * a host process connects to `S` and writes `CONNECT <port>\n`: the device sends REQUEST to
//!   guest port `<port>` from a fresh host port `L`; on the guest's RESPONSE it writes
//!   `OK <L>\n` to the host process, on RST it closes the connection;
//! * then RW packets carry the bytes both ways. Flow control is the virtio credit scheme: the
//!   device never sends more than the guest's `buf_alloc - (tx_cnt - fwd_cnt)`, and tells the
//!   guest its own `buf_alloc`/`fwd_cnt` in every header (CREDIT_UPDATE when asked, or when a
//!   lot was consumed silently);
//! * each direction ends on its own, as with TCP's half-close: SHUTDOWN with SEND from the guest
//!   shuts the host stream's write side once what the guest sent is written (the host reads
//!   EOF and may still write); the end of the host stream sends the guest SHUTDOWN with SEND
//!   (it reads EOF and may still send); when both directions are done (or the guest's SHUTDOWN
//!   has both flags, or it sends RST) the connection closes with RST.
//!
//! [`packet`] parses and writes packets on descriptor chains (mock-tested); [`muxer`] keeps the
//! connections; [`device`] is the `VirtioDevice` and its worker.

pub mod device;
pub mod muxer;
pub mod packet;
#[cfg(test)]
mod tests;

pub use device::Vsock;

/// CID of the host.
pub const HOST_CID: u64 = 2;
pub const TYPE_STREAM: u16 = 1;
pub const OP_REQUEST: u16 = 1;
pub const OP_RESPONSE: u16 = 2;
pub const OP_RST: u16 = 3;
pub const OP_SHUTDOWN: u16 = 4;
pub const OP_RW: u16 = 5;
pub const OP_CREDIT_UPDATE: u16 = 6;
pub const OP_CREDIT_REQUEST: u16 = 7;
