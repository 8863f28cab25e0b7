//! Fuzzes reading a virtio-vsock TX packet (header + payload) from a chain.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use virtio_queue::QueueT;
use vmm::devices::virtio::vsock::packet::read_tx_packet;

fuzz_target!(|data: &[u8]| {
    let Some((mem, mut queue)) = common::setup(data) else {
        return;
    };
    if let Some(chain) = queue.pop_descriptor_chain(&mem) {
        let _ = read_tx_packet(&mem, chain);
    }
});
