//! Fuzzes the qcow2 header and cluster mapping (including deflate of compressed clusters).
#![no_main]

use bootdisk::qcow2::Qcow2;
use bootdisk::BlockSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut q) = Qcow2::open(data) else { return };
    let len = q.len();
    let mut buf = vec![0u8; 8192];
    for off in [0, 512, 4096, 65536, len / 2, len.saturating_sub(8192)] {
        let n = len.saturating_sub(off).min(buf.len() as u64) as usize;
        let _ = q.read_at(off, &mut buf[..n]);
    }
});
