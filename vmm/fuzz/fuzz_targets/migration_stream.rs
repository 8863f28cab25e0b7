//! Fuzzes what a migration target reads from its source: the stream (preamble, HELLO, the
//! MEMORY, DISK and STATE sections up to END, with memory written into a 64 KiB guest) and the
//! decoders of the device state a STATE payload carries. The source is another host's process:
//! its bytes are untrusted, and no input may panic, hang or write outside guest memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vm_memory::GuestAddress;
use vmm::migration::{parse_stream, pci_state, state};
use vmm::vstate::memory::GuestMemoryMmap;

fuzz_target!(|data: &[u8]| {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("guest memory");
    let mut stream = data;
    let _ = parse_stream(&mut stream, &mem);
    // Each decoder of a STATE part on the whole input.
    let _ = state::decode_serial(data);
    let _ = state::decode_i8042(data);
    let _ = state::decode_transport(data, 0);
    let _ = pci_state::decode_pci_transport(data, 0);
    let _ = pci_state::decode_platform(data);
});
