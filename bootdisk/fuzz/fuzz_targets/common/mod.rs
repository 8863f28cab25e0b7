//! Shared by the fuzz targets: small limits, so one input stays cheap.

use bootdisk::Limits;

pub fn limits() -> Limits {
    Limits {
        max_file_size: 1 << 20,
        max_boot_size: 2 << 20,
        max_config_size: 256 << 10,
        max_dir_size: 256 << 10,
        max_dir_entries: 4096,
        ..Limits::default()
    }
}
