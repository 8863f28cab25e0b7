//! Fuzzes the ext2/3/4 reader: open, list and read the paths a boot search reads.
#![no_main]

mod common;

use bootdisk::fs::ext4::Ext4;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut fs) = Ext4::open(data, &common::limits()) else { return };
    let _ = fs.info();
    for dir in ["/", "/boot", "/usr/lib/modules"] {
        let _ = fs.read_dir(dir);
    }
    for path in ["/vmlinuz", "/boot/grub/grub.cfg", "/boot/extlinux.conf", "/etc/motd", "/fragmented", "/loop-a"] {
        let _ = fs.read_file(path, 1 << 20);
        let _ = fs.canonical_path(path);
    }
});
