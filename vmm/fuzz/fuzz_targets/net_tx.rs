//! Fuzzes gathering a virtio-net TX chain into a frame.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use virtio_queue::QueueT;
use vmm::devices::virtio::net::frame::read_tx_frame;

fuzz_target!(|data: &[u8]| {
    let Some((mem, mut queue)) = common::setup(data) else {
        return;
    };
    if let Some(chain) = queue.pop_descriptor_chain(&mem) {
        let mut frame = Vec::new();
        let _ = read_tx_frame(&mem, chain, &mut frame);
    }
});
