//! The virtio-blk `VirtioDevice`: config space (capacity in sectors), features, and a worker
//! thread that drains the request queue whenever the guest notifies it.
//!
//! Every write is recorded in a bitmap of [`DIRTY_BLOCK`]-byte blocks, which a live migration
//! reads and clears through the device's [`DiskHandle`] to copy what the guest wrote.
//!
//! A write the host has no room for (ENOSPC) does not fail the guest's request: the worker
//! leaves it at the head of the queue and stalls the disk ([`DiskHandle::stalled`] says why),
//! as QEMU's `werror=enospc` does. Whoever runs the VM pauses it, and after making room calls
//! [`DiskHandle::retry`]: the worker runs the request again and the guest loses no write.

use std::io;
use std::sync::{Arc, Mutex};

use crate::guest_memory::GuestMemoryMmap;
use log::warn;
use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::request::{disk_id, DiskBackend, DiskView, ExecuteError, Request};
use super::*;
use crate::devices::virtio::{
    ActivateError, Activation, DeviceWorker, Interrupt, VirtioDevice, TYPE_BLOCK,
    VIRTIO_F_VERSION_1,
};

const QUEUE_SIZES: [u16; 1] = [256];

/// Granularity of the written-blocks bitmap.
pub const DIRTY_BLOCK: u64 = 64 << 10;

/// The disk and what the worker needs besides the queue.
struct Disk {
    backend: Box<dyn DiskBackend>,
    readonly: bool,
    id: [u8; VIRTIO_BLK_ID_BYTES],
    /// Blocks written since the migration last took them: bit `i` is block `i`.
    written: Vec<u64>,
    /// Why the queue waits: a write the host had no room for.
    stalled: Option<String>,
}

/// Sets the bits of the blocks `offset..offset + len` touches.
fn mark_written(written: &mut [u64], offset: u64, len: u64) {
    if len == 0 {
        return;
    }
    let first = offset / DIRTY_BLOCK;
    let last = (offset + len - 1) / DIRTY_BLOCK;
    for block in first..=last {
        if let Some(word) = written.get_mut((block / 64) as usize) {
            *word |= 1 << (block % 64);
        }
    }
}

/// A backend whose writes are recorded in the written-blocks bitmap.
struct Tracking<'a> {
    inner: &'a mut dyn DiskBackend,
    written: &'a mut [u64],
}

impl DiskBackend for Tracking<'_> {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        mark_written(self.written, offset, buf.len() as u64);
        self.inner.write_at(buf, offset)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The disk of a virtio-blk device as a live migration sees it.
#[derive(Clone)]
pub struct DiskHandle {
    disk: Arc<Mutex<Disk>>,
    id: String,
    /// Wakes the worker to look at the queue again.
    wake: Arc<EventFd>,
}

impl DiskHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(crate::poison::fatal)
    }

    /// The disk's id from the config.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn size_bytes(&self) -> u64 {
        self.lock().backend.size_bytes()
    }

    pub fn readonly(&self) -> bool {
        self.lock().readonly
    }

    /// The blocks written since the last call (bit `i`: block `i` of [`DIRTY_BLOCK`] bytes),
    /// cleared.
    pub fn take_written(&self) -> Vec<u64> {
        let mut disk = self.lock();
        let taken = disk.written.clone();
        disk.written.fill(0);
        taken
    }

    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.lock().backend.read_at(buf, offset)
    }

    /// Writes through to the backend (a migration target filling its disk).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.lock().backend.write_at(buf, offset)
    }

    pub fn flush(&self) -> io::Result<()> {
        self.lock().backend.flush()
    }

    /// Why the guest's requests wait (a write the host had no room for), if they do.
    pub fn stalled(&self) -> Option<String> {
        self.lock().stalled.clone()
    }

    /// Runs the stalled request again (once there is room); it stalls again if there is not.
    pub fn retry(&self) {
        if self.lock().stalled.take().is_some() {
            if let Err(e) = self.wake.write(1) {
                warn!("virtio-blk {}: wake the worker: {e}", self.id);
            }
        }
    }
}

/// A virtio-blk device.
pub struct Block {
    /// Shared with the worker while the device is active.
    disk: Arc<Mutex<Disk>>,
    id: String,
    wake: Arc<EventFd>,
    capacity: u64,
    readonly: bool,
    worker: DeviceWorker,
}

impl Block {
    pub fn new(backend: Box<dyn DiskBackend>, readonly: bool, id: &str) -> io::Result<Block> {
        let capacity = backend.size_bytes() / SECTOR_SIZE;
        Ok(Block {
            disk: Arc::new(Mutex::new(Disk::new(backend, readonly, id))),
            id: id.to_string(),
            wake: Arc::new(EventFd::new(libc::EFD_NONBLOCK)?),
            capacity,
            readonly,
            worker: DeviceWorker::default(),
        })
    }
}

impl Disk {
    fn new(backend: Box<dyn DiskBackend>, readonly: bool, id: &str) -> Disk {
        let blocks = backend.size_bytes().div_ceil(DIRTY_BLOCK);
        Disk {
            backend,
            readonly,
            id: disk_id(id),
            written: vec![0; blocks.div_ceil(64) as usize],
            stalled: None,
        }
    }
}

/// The queue side of the worker.
pub(super) struct BlockWorker {
    mem: GuestMemoryMmap,
    queue: Queue,
    interrupt: Arc<Interrupt>,
    disk: Arc<Mutex<Disk>>,
}

impl BlockWorker {
    pub(super) fn process_queue(&mut self) {
        if self.interrupt.is_broken() {
            return;
        }
        let mut used_any = false;
        let mut disk = self.disk.lock().unwrap_or_else(crate::poison::fatal);
        let disk = &mut *disk;
        while disk.stalled.is_none() {
            let Some(chain) = self.queue.pop_descriptor_chain(&self.mem) else {
                break;
            };
            let head = chain.head_index();
            let result = Request::parse(&self.mem, chain)
                .map_err(|e| e.to_string())
                .and_then(|req| {
                    let view = DiskView {
                        backend: &mut Tracking {
                            inner: disk.backend.as_mut(),
                            written: &mut disk.written,
                        },
                        readonly: disk.readonly,
                        id: &disk.id,
                    };
                    match req.execute(&self.mem, view) {
                        Err(ExecuteError::NoSpace(offset, e)) => {
                            Ok(Err(format!("write at {offset:#x}: {e}")))
                        }
                        Err(e) => Err(e.to_string()),
                        Ok(len) => Ok(Ok(len)),
                    }
                });
            let result = match result {
                Ok(Err(no_space)) => {
                    // Leave the request at the head of the queue for the retry.
                    let next = self.queue.next_avail();
                    self.queue.set_next_avail(next.wrapping_sub(1));
                    warn!("virtio-blk: {no_space}: the queue waits for room");
                    disk.stalled = Some(no_space);
                    break;
                }
                Ok(Ok(len)) => Ok(len),
                Err(e) => Err(e),
            };
            match result {
                Ok(len) => {
                    if let Err(e) = self.queue.add_used(&self.mem, head, len) {
                        warn!("virtio-blk: add used: {e}");
                        self.interrupt.mark_broken();
                        return;
                    }
                    used_any = true;
                }
                Err(e) => {
                    warn!("virtio-blk: bad request (chain {head}): {e}; device marked broken");
                    self.interrupt.mark_broken();
                    return;
                }
            }
        }
        if used_any {
            self.interrupt.signal_used_queue(0);
        }
    }
}

impl VirtioDevice for Block {
    fn device_type(&self) -> u32 {
        TYPE_BLOCK
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &QUEUE_SIZES
    }

    fn features(&self) -> u64 {
        let ro = if self.readonly { VIRTIO_BLK_F_RO } else { 0 };
        VIRTIO_F_VERSION_1 | VIRTIO_BLK_F_FLUSH | ro
    }

    fn config_space(&self) -> Vec<u8> {
        self.capacity.to_le_bytes().to_vec()
    }

    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        let disk = self.disk.clone();
        self.worker.start_single_queue(
            "virtio-blk",
            activation,
            Some(self.wake.clone()),
            |mem, queue, interrupt| BlockWorker {
                mem,
                queue,
                interrupt,
                disk,
            },
            BlockWorker::process_queue,
        )
    }

    fn device_worker(&mut self) -> &mut DeviceWorker {
        &mut self.worker
    }

    fn disk(&self) -> Option<DiskHandle> {
        Some(DiskHandle {
            disk: self.disk.clone(),
            id: self.id.clone(),
            wake: self.wake.clone(),
        })
    }
}

#[cfg(test)]
pub(super) mod tests_support {
    use super::*;

    /// A worker over a mock queue and the handle a migration would use, for tests.
    pub(in crate::devices::virtio::block) fn worker_and_handle<D: DiskBackend + 'static>(
        mem: GuestMemoryMmap,
        queue: Queue,
        interrupt: Arc<Interrupt>,
        disk: D,
    ) -> (BlockWorker, DiskHandle) {
        let disk = Arc::new(Mutex::new(Disk::new(Box::new(disk), false, "t")));
        let worker = BlockWorker {
            mem,
            queue,
            interrupt,
            disk: disk.clone(),
        };
        (
            worker,
            DiskHandle {
                disk,
                id: "t".into(),
                wake: Arc::new(EventFd::new(libc::EFD_NONBLOCK).expect("eventfd")),
            },
        )
    }

    /// A worker over a mock queue, for tests.
    pub(in crate::devices::virtio::block) fn worker<D: DiskBackend + 'static>(
        mem: GuestMemoryMmap,
        queue: Queue,
        interrupt: Arc<Interrupt>,
        disk: D,
    ) -> BlockWorker {
        BlockWorker {
            mem,
            queue,
            interrupt,
            disk: Arc::new(Mutex::new(Disk::new(Box::new(disk), false, "t"))),
        }
    }
}
