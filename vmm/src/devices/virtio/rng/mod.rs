//! virtio-rng: one queue of device-writable buffers that the device fills from a host entropy
//! source (default `/dev/urandom`). Each chain gets at most 64 KiB; the used length is what was
//! written. A chain with a device-readable descriptor is malformed.

use std::fs::File;
use std::io::Read;
use std::sync::{Arc, Mutex};

use crate::guest_memory::GuestMemoryMmap;
use log::warn;
use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{Address, Bytes, GuestMemoryError};

use super::chain::{self, ChainError};
use super::{
    ActivateError, Activation, DeviceWorker, Interrupt, VirtioDevice, TYPE_RNG, VIRTIO_F_VERSION_1,
};

const QUEUE_SIZES: [u16; 1] = [256];
/// Most bytes one chain receives.
pub const MAX_CHAIN_BYTES: usize = 64 << 10;

/// A malformed request or a failed entropy read.
#[derive(Debug, thiserror::Error)]
pub enum FillError {
    #[error("descriptor chain")]
    Chain(#[from] ChainError),
    #[error("descriptor {0} is device-readable")]
    Direction(usize),
    #[error("read entropy source")]
    Source(#[source] std::io::Error),
    #[error("guest buffer at {0:#x}")]
    GuestMemory(u64, #[source] GuestMemoryError),
}

/// Fills the chain's buffers from `source`; returns the bytes written.
pub fn fill_chain<R: Read>(
    mem: &GuestMemoryMmap,
    chain: DescriptorChain<&GuestMemoryMmap>,
    source: &mut R,
) -> Result<u32, FillError> {
    let descs = chain::collect(chain)?;
    if let Some(index) = descs.iter().position(|d| !d.is_write_only()) {
        return Err(FillError::Direction(index));
    }
    let mut budget = MAX_CHAIN_BYTES;
    let mut written = 0u32;
    let mut buf = vec![0u8; 4096];
    for desc in descs {
        let mut done = 0usize;
        while done < desc.len() as usize && budget > 0 {
            let n = (desc.len() as usize - done).min(buf.len()).min(budget);
            source
                .read_exact(&mut buf[..n])
                .map_err(FillError::Source)?;
            let addr = desc
                .addr()
                .checked_add(done as u64)
                .ok_or(FillError::GuestMemory(
                    desc.addr().0,
                    GuestMemoryError::InvalidGuestAddress(desc.addr()),
                ))?;
            mem.write_slice(&buf[..n], addr)
                .map_err(|e| FillError::GuestMemory(addr.0, e))?;
            done += n;
            budget -= n;
            written += n as u32;
        }
    }
    Ok(written)
}

/// A virtio-rng device.
pub struct Rng {
    source: Arc<Mutex<File>>,
    worker: DeviceWorker,
}

impl Rng {
    pub fn new(source: File) -> Rng {
        Rng {
            source: Arc::new(Mutex::new(source)),
            worker: DeviceWorker::default(),
        }
    }
}

struct RngWorker {
    mem: GuestMemoryMmap,
    queue: Queue,
    interrupt: Arc<Interrupt>,
    source: Arc<Mutex<File>>,
}

impl RngWorker {
    fn process_queue(&mut self) {
        let mut used_any = false;
        let mut source = self.source.lock().unwrap_or_else(crate::poison::fatal);
        while let Some(chain) = self.queue.pop_descriptor_chain(&self.mem) {
            if self.interrupt.is_broken() {
                return;
            }
            let head = chain.head_index();
            let len = match fill_chain(&self.mem, chain, &mut *source) {
                Ok(len) => len,
                Err(e) => {
                    warn!("virtio-rng: {e}; device marked broken");
                    self.interrupt.mark_broken();
                    return;
                }
            };
            if let Err(e) = self.queue.add_used(&self.mem, head, len) {
                warn!("virtio-rng: add used: {e}; device marked broken");
                self.interrupt.mark_broken();
                return;
            }
            used_any = true;
        }
        if used_any {
            self.interrupt.signal_used_queue(0);
        }
    }
}

impl VirtioDevice for Rng {
    fn device_type(&self) -> u32 {
        TYPE_RNG
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &QUEUE_SIZES
    }

    fn features(&self) -> u64 {
        VIRTIO_F_VERSION_1
    }

    fn config_space(&self) -> Vec<u8> {
        Vec::new()
    }

    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        let source = self.source.clone();
        self.worker.start_single_queue(
            "virtio-rng",
            activation,
            None,
            |mem, queue, interrupt| RngWorker {
                mem,
                queue,
                interrupt,
                source,
            },
            RngWorker::process_queue,
        )
    }

    fn device_worker(&mut self) -> &mut DeviceWorker {
        &mut self.worker
    }
}

#[cfg(test)]
mod tests;
