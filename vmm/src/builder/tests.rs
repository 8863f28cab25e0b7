//! The machine's boot payloads, without /dev/kvm: only guest memory is written.

use vm_memory::{Bytes, GuestAddress};

use super::*;
use crate::config::MIN_MEMORY_BYTES;

/// A guestless payload loads the idle code and the long-mode tables, nothing of a kernel: no
/// command line, no zero page (no /dev/kvm needed: only guest memory is written).
#[test]
fn a_guestless_payload_is_the_idle_code() {
    use crate::arch::{CMDLINE_START, PML4_START, ZERO_PAGE_START};
    let mem = crate::vstate::memory::create_guest_memory(MIN_MEMORY_BYTES).unwrap();
    let entry = load_payload(
        &mem,
        &PayloadConfig::guestless(),
        MIN_MEMORY_BYTES,
        &Platform::Mmio { slots: Vec::new() },
    )
    .expect("load the guestless payload");
    assert_eq!(entry, loader::IDLE_CODE_START);
    let mut code = [0u8; 3];
    mem.read_slice(&mut code, GuestAddress(entry)).unwrap();
    assert_eq!(code, loader::IDLE_CODE);
    let pml4: u64 = mem.read_obj(GuestAddress(PML4_START)).unwrap();
    assert_ne!(pml4, 0, "the long-mode page tables are written");
    let cmdline: u8 = mem.read_obj(GuestAddress(CMDLINE_START)).unwrap();
    let mut zero_page = [0u8; 512];
    mem.read_slice(&mut zero_page, GuestAddress(ZERO_PAGE_START))
        .unwrap();
    assert_eq!(cmdline, 0, "no command line");
    assert!(zero_page.iter().all(|b| *b == 0), "no zero page");
}
