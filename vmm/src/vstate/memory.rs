//! Guest memory: anonymous mappings for the RAM ranges of the x86_64 layout, and the one unsafe
//! step of handing them to KVM as memory slots.

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;
use vm_memory::{
    GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    GuestRegionCollectionError,
};

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
    for (slot, region) in mem.iter().enumerate() {
        let slot = slot as u32;
        let host = region
            .get_host_address(vm_memory::MemoryRegionAddress(0))
            .map_err(|_| MemoryError::TooLarge(region.len()))?;
        let memory_region = kvm_userspace_memory_region {
            slot,
            flags: 0,
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
