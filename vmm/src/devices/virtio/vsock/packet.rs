//! vsock packets on descriptor chains: [`read_tx_packet`] gathers a guest packet (header and
//! payload, all device-readable) and checks its length against the chain; [`write_rx_packet`]
//! scatters a device packet into a device-writable chain and says how much payload fits.

use crate::guest_memory::GuestMemoryMmap;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::DescriptorChain;
use vm_memory::{ByteValued, Bytes, GuestMemoryError};

use crate::devices::virtio::chain::{self, ChainError};

/// Largest payload accepted from the guest in one packet.
pub const MAX_PAYLOAD: usize = 64 << 10;

/// The packet header, little-endian on the wire (x86 hosts only, like the rest of the VMM).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, packed)]
pub struct PacketHeader {
    pub src_cid: u64,
    pub dst_cid: u64,
    pub src_port: u32,
    pub dst_port: u32,
    pub len: u32,
    pub type_: u16,
    pub op: u16,
    pub flags: u32,
    pub buf_alloc: u32,
    pub fwd_cnt: u32,
}

// SAFETY: `PacketHeader` is `repr(C, packed)` with only integer fields: no padding, and every bit
// pattern is a valid value.
unsafe impl ByteValued for PacketHeader {}

pub const HEADER_LEN: usize = std::mem::size_of::<PacketHeader>();

/// A malformed packet chain.
#[derive(Debug, thiserror::Error)]
pub enum PacketError {
    #[error("descriptor chain")]
    Chain(#[from] ChainError),
    #[error("descriptor {0} has the wrong direction")]
    Direction(usize),
    #[error("chain of {0} bytes is shorter than the 44-byte header")]
    TooShort(usize),
    #[error("header says {len} payload bytes, the chain carries {available}")]
    LengthMismatch { len: u32, available: usize },
    #[error("payload of {0} bytes exceeds {MAX_PAYLOAD}")]
    TooLong(u32),
    #[error("guest buffer at {0:#x}")]
    GuestMemory(u64, #[source] GuestMemoryError),
}

fn gather(
    mem: &GuestMemoryMmap,
    descs: &[Descriptor],
    limit: usize,
) -> Result<Vec<u8>, PacketError> {
    let mut bytes = Vec::new();
    for desc in descs {
        if bytes.len() >= limit {
            break;
        }
        let n = (desc.len() as usize).min(limit - bytes.len());
        let start = bytes.len();
        bytes.resize(start + n, 0);
        mem.read_slice(&mut bytes[start..], desc.addr())
            .map_err(|e| PacketError::GuestMemory(desc.addr().0, e))?;
    }
    Ok(bytes)
}

/// Reads a TX packet: header and payload.
pub fn read_tx_packet(
    mem: &GuestMemoryMmap,
    chain: DescriptorChain<&GuestMemoryMmap>,
) -> Result<(PacketHeader, Vec<u8>), PacketError> {
    let descs = chain::collect(chain)?;
    if let Some(index) = descs.iter().position(|d| d.is_write_only()) {
        return Err(PacketError::Direction(index));
    }
    let total: u64 = descs.iter().map(|d| u64::from(d.len())).sum();
    let header_bytes = gather(mem, &descs, HEADER_LEN)?;
    if header_bytes.len() < HEADER_LEN {
        return Err(PacketError::TooShort(header_bytes.len()));
    }
    let header = PacketHeader::from_slice(&header_bytes)
        .copied()
        .ok_or(PacketError::TooShort(header_bytes.len()))?;
    let len = header.len;
    if len as usize > MAX_PAYLOAD {
        return Err(PacketError::TooLong(len));
    }
    let available = (total - HEADER_LEN as u64) as usize;
    if (len as usize) > available {
        return Err(PacketError::LengthMismatch { len, available });
    }
    let all = gather(mem, &descs, HEADER_LEN + len as usize)?;
    Ok((header, all[HEADER_LEN..].to_vec()))
}

/// Payload bytes that fit a device-writable RX chain after the header, or an error for a
/// malformed chain.
pub fn rx_capacity(descs: &[Descriptor]) -> Result<usize, PacketError> {
    if let Some(index) = descs.iter().position(|d| !d.is_write_only()) {
        return Err(PacketError::Direction(index));
    }
    let total: u64 = descs.iter().map(|d| u64::from(d.len())).sum();
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    if total < HEADER_LEN {
        return Err(PacketError::TooShort(total));
    }
    Ok(total - HEADER_LEN)
}

/// Writes header + payload across the chain's descriptors; returns the used length. The caller
/// made sure the payload fits (`rx_capacity`).
pub fn write_rx_packet(
    mem: &GuestMemoryMmap,
    descs: &[Descriptor],
    header: &PacketHeader,
    payload: &[u8],
) -> Result<u32, PacketError> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(header.as_slice());
    bytes.extend_from_slice(payload);
    let mut rest = bytes.as_slice();
    for desc in descs {
        if rest.is_empty() {
            break;
        }
        let n = rest.len().min(desc.len() as usize);
        mem.write_slice(&rest[..n], desc.addr())
            .map_err(|e| PacketError::GuestMemory(desc.addr().0, e))?;
        rest = &rest[n..];
    }
    if !rest.is_empty() {
        return Err(PacketError::TooShort(bytes.len() - rest.len()));
    }
    Ok(bytes.len() as u32)
}
