//! Fuzzes the whole boot search (image format, partitions, filesystems, configurations) and
//! probe on one disk image.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = common::limits();
    let _ = bootdisk::probe(&mut &data[..], &limits);
    if let Ok(sel) = bootdisk::find_boot(&mut &data[..], &limits) {
        assert!(sel.kernel.len() as u64 <= limits.max_file_size);
        let _ = sel.source.to_string();
    }
});
