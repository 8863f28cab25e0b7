//! Fuzzes the FAT12/16/32 reader.
#![no_main]

mod common;

use bootdisk::fs::fat::Fat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut fs) = Fat::open(data, &common::limits()) else { return };
    let _ = fs.info();
    for dir in ["/", "/EFI", "/EFI/debian", "/loader/entries"] {
        let _ = fs.read_dir(dir);
    }
    for path in ["/EFI/debian/grub.cfg", "/efi/boot/bootx64.efi", "/EFI/A file with a long name.txt"] {
        let _ = fs.read_file(path, 1 << 20);
    }
});
