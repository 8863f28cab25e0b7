//! Fuzzes the grub.cfg extractor (and grubenv parsing of the same text).
#![no_main]

mod common;

use bootdisk::config::{grub, grubenv};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let env = grubenv::parse_grubenv(&text);
    let _ = grub::parse_grub_cfg(&text, &env, &common::limits());
});
