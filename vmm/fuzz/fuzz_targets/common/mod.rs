//! Turns fuzz input into guest memory with one available descriptor chain.
//!
//! Input layout: bytes 0..256 are the descriptor table (16 entries of 16 bytes: addr, len,
//! flags, next), bytes 256..258 the head index put in the avail ring, the rest is copied into
//! guest memory at `DATA` (where in-bounds descriptors can point). Guest memory is 64 KiB; the
//! queue's rings live below `DATA`.

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};
use vmm::vstate::memory::GuestMemoryMmap;

pub const MEM_SIZE: usize = 0x10000;
pub const QUEUE_SIZE: u16 = 16;
const DESC_TABLE: u64 = 0;
const AVAIL_RING: u64 = 0x100;
const USED_RING: u64 = 0x200;
pub const DATA: u64 = 0x1000;
const TABLE_BYTES: usize = 16 * QUEUE_SIZE as usize;

pub fn setup(input: &[u8]) -> Option<(GuestMemoryMmap, Queue)> {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).ok()?;
    let table = &input[..input.len().min(TABLE_BYTES)];
    mem.write_slice(table, GuestAddress(DESC_TABLE)).ok()?;
    let head = match input.get(TABLE_BYTES..TABLE_BYTES + 2) {
        Some(b) => u16::from_le_bytes([b[0], b[1]]),
        None => 0,
    };
    mem.write_obj(0u16, GuestAddress(AVAIL_RING)).ok()?;
    mem.write_obj(1u16, GuestAddress(AVAIL_RING + 2)).ok()?;
    mem.write_obj(head, GuestAddress(AVAIL_RING + 4)).ok()?;
    if let Some(rest) = input.get(TABLE_BYTES + 2..) {
        let n = rest.len().min(MEM_SIZE - DATA as usize);
        mem.write_slice(&rest[..n], GuestAddress(DATA)).ok()?;
    }
    let mut queue = Queue::new(QUEUE_SIZE).ok()?;
    queue.set_size(QUEUE_SIZE);
    queue.set_ready(true);
    queue.set_desc_table_address(Some(DESC_TABLE as u32), Some(0));
    queue.set_avail_ring_address(Some(AVAIL_RING as u32), Some(0));
    queue.set_used_ring_address(Some(USED_RING as u32), Some(0));
    Some((mem, queue))
}
