//! Guest memory: anonymous mappings for the RAM ranges of the x86_64 layout, the one unsafe
//! step of handing them to KVM as memory slots, and dirty-page tracking for live migration.
//!
//! Two sources of dirty pages: KVM logs the pages vCPUs write once a slot has
//! `KVM_MEM_LOG_DIRTY_PAGES` ([`set_dirty_logging`], read and cleared with `KVM_GET_DIRTY_LOG`),
//! and every write the VMM itself makes through vm-memory (device emulation: used rings, blk
//! reads, net and vsock RX, rng) marks the region's [`AtomicBitmap`]. [`take_dirty_pages`] reads
//! and clears both and returns their union.

use kvm_bindings::{kvm_userspace_memory_region, KVM_MEM_LOG_DIRTY_PAGES};
use kvm_ioctls::VmFd;
use vm_memory::bitmap::AtomicBitmap;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryRegion, GuestRegionCollectionError};

/// Guest memory as the whole VMM uses it (defined in [`crate::guest_memory`], kept here where
/// it is created).
pub use crate::guest_memory::GuestMemoryMmap;

/// Page size of guest memory tracking and migration.
pub const PAGE_SIZE: u64 = 4096;

use crate::arch::ram_ranges;

/// Setting up guest memory failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("memory size {0} does not fit this host's address space")]
    TooLarge(u64),
    #[error("map guest memory")]
    Map(#[source] vm_memory::mmap::FromRangesError),
    #[error("region collection")]
    Collection(#[source] GuestRegionCollectionError),
    #[error("register memory slot {slot} with KVM")]
    SetUserMemoryRegion {
        slot: u32,
        #[source]
        source: kvm_ioctls::Error,
    },
}

/// Maps `size` bytes of guest RAM laid out as [`ram_ranges`] says.
pub fn create_guest_memory(size: u64) -> Result<GuestMemoryMmap, MemoryError> {
    let ranges = ram_ranges(size)
        .into_iter()
        .map(|(start, len)| {
            usize::try_from(len)
                .map(|len| (GuestAddress(start), len))
                .map_err(|_| MemoryError::TooLarge(size))
        })
        .collect::<Result<Vec<_>, _>>()?;
    GuestMemoryMmap::from_ranges(&ranges).map_err(MemoryError::Map)
}

/// Registers every region of `mem` with KVM, one slot each.
pub fn register_with_kvm(vm: &VmFd, mem: &GuestMemoryMmap) -> Result<(), MemoryError> {
    set_slots(vm, mem, 0)
}

/// Turns KVM's dirty-page logging on or off for every slot (re-registers the slots with or
/// without `KVM_MEM_LOG_DIRTY_PAGES`). Turning it on also clears the VMM's own dirty bitmaps, so
/// both sources start from "nothing written".
pub fn set_dirty_logging(vm: &VmFd, mem: &GuestMemoryMmap, on: bool) -> Result<(), MemoryError> {
    if on {
        for region in mem.iter() {
            own_bitmap(region).reset();
        }
    }
    set_slots(vm, mem, if on { KVM_MEM_LOG_DIRTY_PAGES } else { 0 })
}

/// Reading the dirty pages failed.
#[derive(Debug, thiserror::Error)]
#[error("KVM_GET_DIRTY_LOG for slot {slot}")]
pub struct DirtyLogError {
    pub slot: u32,
    #[source]
    pub source: kvm_ioctls::Error,
}

/// The pages written since the last call (or since [`set_dirty_logging`] turned logging on), by
/// vCPUs (KVM's log) or by the VMM (the regions' bitmaps), one bitmap per region in region
/// order: bit `i` of word `w` is page `w * 64 + i` of the region. Both logs are cleared.
pub fn take_dirty_pages(vm: &VmFd, mem: &GuestMemoryMmap) -> Result<Vec<Vec<u64>>, DirtyLogError> {
    let mut all = Vec::new();
    for (slot, region) in mem.iter().enumerate() {
        let slot = slot as u32;
        let mut kvm = vm
            .get_dirty_log(slot, region.len() as usize)
            .map_err(|source| DirtyLogError { slot, source })?;
        let own = own_bitmap(region).get_and_reset();
        for (word, extra) in kvm.iter_mut().zip(own) {
            *word |= extra;
        }
        all.push(kvm);
    }
    Ok(all)
}

/// The VMM's dirty bitmap of a region (the mapping's, not the slice view `GuestMemoryRegion`
/// gives).
fn own_bitmap(region: &vm_memory::GuestRegionMmap<AtomicBitmap>) -> &AtomicBitmap {
    std::ops::Deref::deref(region).bitmap()
}

fn set_slots(vm: &VmFd, mem: &GuestMemoryMmap, flags: u32) -> Result<(), MemoryError> {
    for (slot, region) in mem.iter().enumerate() {
        let slot = slot as u32;
        let host = region
            .get_host_address(vm_memory::MemoryRegionAddress(0))
            .map_err(|_| MemoryError::TooLarge(region.len()))?;
        let memory_region = kvm_userspace_memory_region {
            slot,
            flags,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host as u64,
        };
        // SAFETY: the region is a live anonymous mapping of exactly `memory_size` bytes owned by
        // `mem`, which the VM keeps alive for as long as the VM fd exists (the `Vmm` owns both
        // and drops the VM first); slots do not overlap since the ranges do not.
        unsafe { vm.set_user_memory_region(memory_region) }
            .map_err(|source| MemoryError::SetUserMemoryRegion { slot, source })?;
    }
    Ok(())
}

/// Bytes of guest memory the guest (or the VMM on its behalf) has touched: resident pages of
/// the guest mappings, counted with `mincore(2)`.
pub fn resident_bytes(mem: &GuestMemoryMmap) -> std::io::Result<u64> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = u64::try_from(page).map_err(|_| std::io::Error::last_os_error())?;
    let mut total = 0u64;
    for region in mem.iter() {
        let host = region
            .get_host_address(vm_memory::MemoryRegionAddress(0))
            .map_err(std::io::Error::other)?;
        let len = region.len();
        let mut vec = vec![0u8; len.div_ceil(page) as usize];
        // SAFETY: `host..host + len` is one live mapping owned by `mem` (page aligned, as mmap
        // returns it); `vec` has one byte per page of it, which is what mincore writes.
        let ret = unsafe { libc::mincore(host.cast(), len as usize, vec.as_mut_ptr()) };
        if ret < 0 {
            return Err(std::io::Error::last_os_error());
        }
        total += vec.iter().filter(|b| *b & 1 == 1).count() as u64 * page;
    }
    Ok(total)
}

/// The KVM tier (`--features kvm`): these read KVM's dirty log from /dev/kvm.
#[cfg(all(test, feature = "kvm"))]
mod tests {
    use super::*;
    use vm_memory::Bytes;

    /// Needs /dev/kvm: KVM's log is read with the VMM's writes merged in, and both are cleared.
    #[test]
    fn vmm_writes_show_in_the_dirty_pages() {
        assert!(
            std::path::Path::new("/dev/kvm").exists(),
            "/dev/kvm is missing: this test reads KVM's dirty log"
        );
        let mem = create_guest_memory(2 << 20).unwrap();
        let vm = crate::vstate::vm::Vm::new(&mem).unwrap();
        mem.write_obj(1u64, GuestAddress(0x5000)).unwrap();
        set_dirty_logging(&vm.fd, &mem, true).unwrap();
        assert!(take_dirty_pages(&vm.fd, &mem).unwrap()[0]
            .iter()
            .all(|w| *w == 0));
        mem.write_obj(2u64, GuestAddress(0x5008)).unwrap();
        mem.write_slice(&[7u8; 8192], GuestAddress(0x4_0000))
            .unwrap();
        let dirty = take_dirty_pages(&vm.fd, &mem).unwrap();
        assert_eq!(dirty.len(), 1);
        assert_eq!(dirty[0][0], 1 << 5);
        assert_eq!(dirty[0][1], 0b11, "pages 0x40 and 0x41");
        assert!(take_dirty_pages(&vm.fd, &mem).unwrap()[0]
            .iter()
            .all(|w| *w == 0));
        set_dirty_logging(&vm.fd, &mem, false).unwrap();
    }
}
