//! The guest memory type the whole VMM uses, at the bottom of the crate: devices, the boot code
//! (`arch`, `loader`, `acpi`) and KVM state (`vstate`) all read and write the guest through it.
//! Creating it and handing it to KVM is `vstate::memory`'s job.

use vm_memory::bitmap::AtomicBitmap;

/// Guest memory as the whole VMM uses it: mmap'ed regions whose bitmaps record the pages the VMM
/// writes (one bit per 4 KiB page).
pub type GuestMemoryMmap = vm_memory::GuestMemoryMmap<AtomicBitmap>;
