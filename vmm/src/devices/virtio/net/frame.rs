//! Moving frames between descriptor chains and byte buffers, with every check at use: chain
//! shape (via [`chain::collect`]), descriptor direction, frame size limits and guest memory
//! bounds.

use crate::guest_memory::GuestMemoryMmap;
use virtio_queue::DescriptorChain;
use vm_memory::{Bytes, GuestMemoryError};

use super::{MAX_FRAME_LEN, VNET_HDR_LEN};
use crate::devices::virtio::chain::{self, ChainError};

/// A malformed TX or RX chain.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("descriptor chain")]
    Chain(#[from] ChainError),
    #[error("descriptor {0} has the wrong direction")]
    Direction(usize),
    #[error("frame of {0} bytes is shorter than the virtio-net header")]
    TooShort(usize),
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME_LEN}")]
    TooLong(usize),
    #[error("guest buffer at {0:#x}")]
    GuestMemory(u64, #[source] GuestMemoryError),
}

/// Gathers a TX chain (all device-readable) into `frame`; returns its length.
pub fn read_tx_frame(
    mem: &GuestMemoryMmap,
    chain: DescriptorChain<&GuestMemoryMmap>,
    frame: &mut Vec<u8>,
) -> Result<usize, FrameError> {
    frame.clear();
    for (index, desc) in chain::collect(chain)?.iter().enumerate() {
        if desc.is_write_only() {
            return Err(FrameError::Direction(index));
        }
        let len = desc.len() as usize;
        let total = frame.len() + len;
        if total > MAX_FRAME_LEN {
            return Err(FrameError::TooLong(total));
        }
        let start = frame.len();
        frame.resize(total, 0);
        mem.read_slice(&mut frame[start..], desc.addr())
            .map_err(|e| FrameError::GuestMemory(desc.addr().0, e))?;
    }
    if frame.len() < VNET_HDR_LEN {
        return Err(FrameError::TooShort(frame.len()));
    }
    Ok(frame.len())
}

/// What happened to a received frame.
#[derive(Debug, PartialEq, Eq)]
pub enum RxOutcome {
    /// Written; the used length.
    Delivered(u32),
    /// The chain was too small; the frame was dropped and the chain is returned unused.
    Dropped,
}

/// Scatters `frame` (vnet header included) into an RX chain (all device-writable).
pub fn write_rx_frame(
    mem: &GuestMemoryMmap,
    chain: DescriptorChain<&GuestMemoryMmap>,
    frame: &[u8],
) -> Result<RxOutcome, FrameError> {
    let descs = chain::collect(chain)?;
    if let Some(index) = descs.iter().position(|d| !d.is_write_only()) {
        return Err(FrameError::Direction(index));
    }
    let capacity: u64 = descs.iter().map(|d| u64::from(d.len())).sum();
    if capacity < frame.len() as u64 {
        return Ok(RxOutcome::Dropped);
    }
    let mut rest = frame;
    for desc in &descs {
        if rest.is_empty() {
            break;
        }
        let n = rest.len().min(desc.len() as usize);
        mem.write_slice(&rest[..n], desc.addr())
            .map_err(|e| FrameError::GuestMemory(desc.addr().0, e))?;
        rest = &rest[n..];
    }
    Ok(RxOutcome::Delivered(frame.len() as u32))
}
