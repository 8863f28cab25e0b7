//! Fuzzes virtio-blk request parsing and execution against an in-memory disk.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use virtio_queue::QueueT;
use vmm::devices::virtio::block::request::{disk_id, DiskBackend, DiskView, Request};

struct MemDisk(Vec<u8>);

impl DiskBackend for MemDisk {
    fn size_bytes(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let o = offset as usize;
        buf.copy_from_slice(&self.0[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&mut self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let o = offset as usize;
        self.0[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((mem, mut queue)) = common::setup(data) else {
        return;
    };
    let readonly = data.last().is_some_and(|b| b & 1 == 1);
    let Some(chain) = queue.pop_descriptor_chain(&mem) else {
        return;
    };
    if let Ok(request) = Request::parse(&mem, chain) {
        let mut disk = MemDisk(vec![0u8; 64 * 512]);
        let id = disk_id("fuzz");
        let _ = request.execute(
            &mem,
            DiskView {
                backend: &mut disk,
                readonly,
                id: &id,
            },
        );
    }
});
