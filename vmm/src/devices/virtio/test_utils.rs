//! Helpers for device tests against `virtio_queue::mock`: guest memory and raw descriptors.
//! Queues built by `MockSplitQueue::new` live at guest address 0; buffers go at 1 MiB and up.

use crate::guest_memory::GuestMemoryMmap;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::desc::RawDescriptor;
use vm_memory::GuestAddress;

pub const NEXT: u16 = 1;
pub const WRITE: u16 = 2;
/// Guest memory size in tests: 2 MiB.
pub const MEM_SIZE: u64 = 2 << 20;
/// Where test buffers start.
pub const BUF: u64 = 0x10_0000;

pub fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap()
}

pub fn desc(addr: u64, len: u32, flags: u16, next: u16) -> RawDescriptor {
    RawDescriptor::from(Descriptor::new(addr, len, flags, next))
}
