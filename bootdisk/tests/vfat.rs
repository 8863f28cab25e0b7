//! vfat table tests: images built by the test's FAT writer (FAT12, FAT16, FAT32) and one made
//! by mkfs.vfat and mtools (`tests/fixtures/make.sh`).

mod common;

use bootdisk::fs::{FileKind, Filesystem, FsError, FsKind};
use bootdisk::Limits;
use common::fat::{FatBuilder, FatType};
use common::{fixture, pattern};

fn open(img: Vec<u8>) -> Filesystem<Vec<u8>> {
    Filesystem::open(img, &Limits::default())
        .expect("opens")
        .expect("is vfat")
}

fn esp(kind: FatType, sectors: u32, spc: u8) -> Vec<u8> {
    FatBuilder::new(kind, sectors, spc)
        .label("ESP", 0x5E1C_10AA)
        .file("/EFI/debian/grub.cfg", b"configfile /boot/grub/grub.cfg\n")
        .file("/EFI/BOOT/BOOTX64.EFI", &pattern("shim", 3000))
        .file(
            "/EFI/Linux/A Long File Name With Spaces.efi",
            &pattern("uki", 5000),
        )
        .file("/loader/entries/fedora-6.5.conf", b"linux /vmlinuz\n")
        .file("/empty", b"")
        .build()
}

#[test]
fn fat12_fat16_fat32_read_the_same_tree() {
    for (kind, sectors, spc, want) in [
        (FatType::Fat12, 2000, 1, FsKind::Fat12),
        (FatType::Fat16, 9000, 1, FsKind::Fat16),
        (FatType::Fat32, 3000, 1, FsKind::Fat32),
        (FatType::Fat32, 70_000, 1, FsKind::Fat32),
        (FatType::Fat16, 20_000, 4, FsKind::Fat16),
    ] {
        let mut fs = open(esp(kind, sectors, spc));
        let info = fs.info();
        assert_eq!(
            (info.kind, info.uuid.as_str(), info.label.as_str()),
            (want, "5E1C-10AA", "ESP"),
            "{kind:?}"
        );
        assert_eq!(
            fs.read_file("/EFI/debian/grub.cfg", 100).unwrap(),
            b"configfile /boot/grub/grub.cfg\n"
        );
        assert!(fs.read_file("/efi/boot/bootx64.efi", 1 << 20).unwrap() == pattern("shim", 3000));
        assert!(
            fs.read_file("/EFI/Linux/a long file name with spaces.EFI", 1 << 20)
                .unwrap()
                == pattern("uki", 5000)
        );
        assert!(fs.read_file("/empty", 10).unwrap().is_empty());
        let mut names: Vec<String> = fs
            .read_dir("/EFI")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        assert_eq!(names, ["BOOT", "Linux", "debian"], "{kind:?}");
        assert_eq!(
            fs.read_dir("/loader/entries").unwrap()[0].kind,
            FileKind::File
        );
    }
}

#[test]
fn mkfs_vfat_image_with_long_names() {
    let mut fs = open(fixture("vfat-esp.img"));
    let info = fs.info();
    assert_eq!(
        (info.kind, info.uuid.as_str(), info.label.as_str()),
        (FsKind::Fat12, "5E1C-10AA", "EFI-SYSTEM")
    );
    let cfg = String::from_utf8(fs.read_file("/EFI/debian/grub.cfg", 1000).unwrap()).unwrap();
    assert!(
        cfg.starts_with("search.fs_uuid 6f1c2a5e-0d3b-4b8e-9a51-1c2d3e4f5a6b root"),
        "{cfg}"
    );
    assert!(
        fs.read_file("/EFI/A file with a long name.txt", 1000)
            .unwrap()
            == pattern("A file with a long name", 700)
    );
    assert!(
        fs.read_file("/EFI/AFILEW~1.TXT", 1000).unwrap() == pattern("A file with a long name", 700)
    );
    assert!(fs.read_file("/efi/boot/BOOTX64.efi", 10_000).unwrap() == pattern("shimx64.efi", 3000));
}

#[test]
fn errors() {
    let mut fs = open(esp(FatType::Fat16, 9000, 1));
    assert!(
        matches!(fs.read_file("/EFI/missing", 10), Err(FsError::NotFound(p)) if p == "/EFI/missing")
    );
    assert!(matches!(
        fs.read_file("/EFI", 10),
        Err(FsError::NotAFile(_))
    ));
    assert!(matches!(
        fs.read_file("/empty/x", 10),
        Err(FsError::NotADirectory(_))
    ));
    assert!(matches!(
        fs.read_file("/EFI/BOOT/BOOTX64.EFI", 10),
        Err(FsError::Limit(_))
    ));
}

#[test]
fn cluster_chain_loop_is_an_error() {
    // FAT16, FAT at sector 1, the file in clusters 2..=9: the entry of cluster 3 is at 512 + 6.
    let mut img = FatBuilder::new(FatType::Fat16, 9000, 1)
        .file("/big", &pattern("big", 4000))
        .build();
    assert!(open(img.clone()).read_file("/big", 1 << 20).is_ok());
    img[518..520].copy_from_slice(&2u16.to_le_bytes());
    let r = open(img.clone()).read_file("/big", 1 << 20);
    assert!(matches!(r, Err(FsError::Corrupt { .. })), "{:?}", r.err());
    // A chain that ends early.
    img[518..520].copy_from_slice(&0xFFFFu16.to_le_bytes());
    let r = open(img).read_file("/big", 1 << 20);
    assert!(matches!(r, Err(FsError::Corrupt { .. })), "{:?}", r.err());
}
