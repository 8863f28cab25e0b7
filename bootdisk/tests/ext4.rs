//! ext2/ext4 table tests over the fixtures made by `tests/fixtures/make.sh`.

mod common;

use bootdisk::fs::{FileKind, Filesystem, FsError, FsKind};
use bootdisk::{LimitError, Limits};
use common::{fixture, pattern};

fn open(name: &str) -> Filesystem<Vec<u8>> {
    Filesystem::open(fixture(name), &Limits::default())
        .expect("opens")
        .expect("is a filesystem")
}

#[test]
fn identity_of_each_fixture() {
    for (name, kind, uuid, label) in [
        (
            "ext4-debian-root.img",
            FsKind::Ext4,
            "6f1c2a5e-0d3b-4b8e-9a51-1c2d3e4f5a6b",
            "debian-root",
        ),
        (
            "ext4-fedora-boot.img",
            FsKind::Ext4,
            "0e5f9c2a-7b41-4d6e-8f3a-2b1c0d9e8f7a",
            "boot",
        ),
        (
            "ext4-alpine.img",
            FsKind::Ext4,
            "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
            "alpine-root",
        ),
        (
            "ext2-blockmap.img",
            FsKind::Ext2,
            "11111111-2222-4333-8444-555555555555",
            "legacy",
        ),
        (
            "ext4-bare.img",
            FsKind::Ext4,
            "99999999-8888-4777-8666-555555555555",
            "bare",
        ),
    ] {
        let info = open(name).info();
        assert_eq!(
            (info.kind, info.uuid.as_str(), info.label.as_str()),
            (kind, uuid, label),
            "{name}"
        );
    }
}

#[test]
fn reads_files_with_extents_block_maps_and_inline_data() {
    for (image, path, name, len) in [
        // Extents, 1 KiB blocks, 64bit, metadata_csum.
        (
            "ext4-debian-root.img",
            "/boot/vmlinuz-6.1.0-28-cloud-amd64",
            "vmlinuz-6.1.0-28-cloud-amd64",
            6000,
        ),
        (
            "ext4-debian-root.img",
            "/boot/initrd.img-6.1.0-27-cloud-amd64",
            "initrd.img-6.1.0-27-cloud-amd64",
            9000,
        ),
        // Block map: direct, indirect and double indirect blocks.
        (
            "ext2-blockmap.img",
            "/boot/vmlinuz-5.10.0-1-amd64",
            "vmlinuz-5.10.0-1-amd64",
            307_200,
        ),
        // An extent tree of depth 1 (20 fragments), 4 KiB blocks.
        ("ext4-bare.img", "/fragmented", "fragmented", 81_920),
        // Inline data: 60 bytes in i_block, 60 in the system.data xattr.
        ("ext4-alpine.img", "/etc/motd", "motd", 120),
        (
            "ext4-alpine.img",
            "/boot/vmlinuz-virt",
            "vmlinuz-virt",
            5000,
        ),
    ] {
        let got = open(image)
            .read_file(path, 1 << 20)
            .unwrap_or_else(|e| panic!("{image}:{path}: {e}"));
        assert!(got == pattern(name, len), "{image}:{path}: content differs");
    }
    assert_eq!(
        open("ext4-alpine.img")
            .read_file("/etc/alpine-release", 100)
            .unwrap(),
        b"3.19.0\n"
    );
    assert_eq!(
        open("ext4-alpine.img")
            .read_file("/etc/apk/arch", 100)
            .unwrap(),
        b"x86_64\n"
    );
}

#[test]
fn symlinks_fast_slow_relative_absolute_and_loops() {
    let mut fs = open("ext2-blockmap.img");
    let kernel = pattern("vmlinuz-5.10.0-1-amd64", 307_200);
    let initrd = pattern("initrd.img-5.10.0-1-amd64", 20_000);
    assert!(fs.read_file("/vmlinuz", 1 << 20).unwrap() == kernel);
    assert!(fs.read_file("/slowlink", 1 << 20).unwrap() == kernel);
    assert!(fs.read_file("/initrd.img", 1 << 20).unwrap() == initrd);
    assert!(fs.read_file("/sub/deeper/relative", 1 << 20).unwrap() == initrd);
    assert_eq!(
        fs.canonical_path("/vmlinuz").unwrap(),
        "/boot/vmlinuz-5.10.0-1-amd64"
    );
    assert_eq!(
        fs.canonical_path("/sub/deeper/relative").unwrap(),
        "/boot/initrd.img-5.10.0-1-amd64"
    );
    assert!(matches!(
        fs.read_file("/loop-a", 100),
        Err(FsError::SymlinkLoop { .. })
    ));
    assert!(matches!(
        fs.read_file("/vmlinuz/x", 100),
        Err(FsError::NotADirectory(_))
    ));
    let mut deb = open("ext4-debian-root.img");
    assert_eq!(
        deb.canonical_path("/initrd.img.old").unwrap(),
        "/boot/initrd.img-6.1.0-27-cloud-amd64"
    );
}

#[test]
fn htree_directories_find_every_name() {
    let mut fs = open("ext4-bare.img");
    let names = fs.read_dir("/usr/lib/modules").unwrap();
    assert_eq!(names.len(), 1000);
    for i in [0, 1, 499, 998, 999] {
        assert!(
            fs.is_file(&format!("/usr/lib/modules/module-number-{i}.ko"))
                .unwrap(),
            "{i}"
        );
    }
    assert!(!fs
        .is_file("/usr/lib/modules/module-number-1000.ko")
        .unwrap());
    let mut fs = open("ext2-blockmap.img");
    assert_eq!(fs.read_dir("/many").unwrap().len(), 300);
    assert_eq!(
        fs.read_file("/many/file-with-a-longish-name-299.txt", 100)
            .unwrap(),
        b"file 299\n"
    );
}

#[test]
fn read_dir_kinds() {
    let mut fs = open("ext4-debian-root.img");
    let mut root = fs.read_dir("/").unwrap();
    root.sort_by(|a, b| a.name.cmp(&b.name));
    let kind = |n: &str| root.iter().find(|e| e.name == n).map(|e| e.kind);
    assert_eq!(kind("boot"), Some(FileKind::Directory));
    assert_eq!(kind("vmlinuz"), Some(FileKind::Symlink));
    assert_eq!(kind("lost+found"), Some(FileKind::Directory));
    assert!(kind(".").is_none() && kind("..").is_none());
    let mut alpine = open("ext4-alpine.img");
    let etc = alpine.read_dir("/etc").unwrap();
    assert!(
        etc.iter()
            .any(|e| e.name == "apk" && e.kind == FileKind::Directory),
        "{etc:?}"
    );
}

#[test]
fn limits_and_missing_files() {
    let mut fs = open("ext2-blockmap.img");
    let err = fs
        .read_file("/boot/vmlinuz-5.10.0-1-amd64", 1000)
        .unwrap_err();
    assert!(
        matches!(
            err,
            FsError::Limit(LimitError {
                value: 307_200,
                limit: 1000,
                ..
            })
        ),
        "{err}"
    );
    assert!(matches!(fs.read_file("/nope", 10), Err(FsError::NotFound(p)) if p == "/nope"));
    assert!(matches!(
        fs.read_file("/boot", 10),
        Err(FsError::NotAFile(_))
    ));
    let tight = Limits {
        max_symlink_hops: 0,
        ..Limits::default()
    };
    let mut fs = Filesystem::open(fixture("ext2-blockmap.img"), &tight)
        .unwrap()
        .unwrap();
    assert!(matches!(
        fs.read_file("/vmlinuz", 1 << 20),
        Err(FsError::SymlinkLoop { .. })
    ));
}

#[test]
fn refuses_unknown_incompatible_features_and_bad_geometry() {
    let mut img = fixture("ext4-debian-root.img");
    img[1024 + 96 + 3] |= 0x80; // An incompat bit nobody defines.
    let err = Filesystem::open(img, &Limits::default()).unwrap_err();
    assert!(matches!(err, FsError::Unsupported { .. }), "{err}");
    let mut img = fixture("ext4-debian-root.img");
    img.truncate(512 * 1024); // The superblock says 1024 blocks.
    let err = Filesystem::open(img, &Limits::default()).unwrap_err();
    assert!(matches!(err, FsError::Superblock { .. }), "{err}");
}
