//! Fuzzes extlinux.conf / syslinux.cfg parsing.
#![no_main]

mod common;

use bootdisk::config::extlinux;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(menu) = extlinux::parse_extlinux(&text, "/boot/extlinux", &common::limits()) {
        assert!(menu.default.is_none_or(|d| d < menu.entries.len()));
    }
});
