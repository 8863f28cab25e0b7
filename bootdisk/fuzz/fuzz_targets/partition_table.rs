//! Fuzzes MBR and GPT parsing.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = bootdisk::partition::read_partition_table(&mut &data[..], &common::limits());
});
