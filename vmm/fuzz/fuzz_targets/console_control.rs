//! Fuzzes the virtio-console control protocol: a control transmit chain built from the input
//! (`common::setup`: descriptor table, head, buffer bytes) read as the device's worker reads
//! it and handed to the protocol state; then the input again as a run of 9-byte operations
//! (a driver's message, a host client connecting or leaving, a receive buffer taking the next
//! message). The state must stay bounded and survive its migration encoding unchanged, whose
//! decoder also gets the raw input (a migration source's bytes are untrusted too).
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use virtio_queue::QueueT;
use vmm::devices::virtio::console::control::{ControlState, MAX_OUTGOING};
use vmm::devices::virtio::console::device::read_control_message;

fuzz_target!(|data: &[u8]| {
    let _ = ControlState::decode(data);
    let mut state = ControlState::default();
    if let Some((mem, mut queue)) = common::setup(data) {
        if let Some(chain) = queue.pop_descriptor_chain(&mem) {
            if let Ok(bytes) = read_control_message(&mem, chain) {
                let _ = state.handle_driver_message(&bytes);
            }
        }
    }
    for op in data.chunks(9) {
        match op[0] & 3 {
            0 | 1 => {
                let _ = state.handle_driver_message(&op[1..]);
            }
            2 => state.set_host_connected(true),
            _ => state.set_host_connected(false),
        }
        if op[0] & 0x80 != 0 {
            if let Some(message) = state.next_outgoing() {
                assert!(message.to_bytes().len() <= 64);
            }
            state.pop_outgoing();
        }
        assert!(state.outgoing() <= MAX_OUTGOING);
    }
    let bytes = state.encode();
    let back = ControlState::decode(&bytes).expect("the state decodes its own encoding");
    assert_eq!(back.encode(), bytes);
});
