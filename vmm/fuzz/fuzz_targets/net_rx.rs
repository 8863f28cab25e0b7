//! Fuzzes scattering a received frame into a virtio-net RX chain.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use virtio_queue::QueueT;
use vmm::devices::virtio::net::frame::write_rx_frame;

fuzz_target!(|data: &[u8]| {
    let Some((mem, mut queue)) = common::setup(data) else {
        return;
    };
    // The frame is the input's tail, up to 2 KiB.
    let frame = &data[data.len().saturating_sub(2048)..];
    if let Some(chain) = queue.pop_descriptor_chain(&mem) {
        let _ = write_rx_frame(&mem, chain, frame);
    }
});
