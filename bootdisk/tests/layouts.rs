//! find_boot and probe on whole disks laid out the way distributions ship their cloud images,
//! assembled from the fixtures: the exact kernel, initrd and command line chosen, and where
//! they came from.

mod common;

use bootdisk::find::FileRef;
use bootdisk::fs::FsKind;
use bootdisk::image::ImageFormat;
use bootdisk::partition::types;
use bootdisk::{find_boot, probe, BootMethod, BootSelection, DiskKind, FindBootError, Limits};
use common::fat::{FatBuilder, FatType};
use common::{fixture, gpt, gpt_total, mbr, pattern, Part};

const DEBIAN_UUID: &str = "6f1c2a5e-0d3b-4b8e-9a51-1c2d3e4f5a6b";
const FEDORA_MID: &str = "8f7e6d5c4b3a29181716151413121110";

fn boot(mut disk: Vec<u8>) -> Result<BootSelection, FindBootError> {
    find_boot(&mut disk, &Limits::default())
}

fn at(partition: u32, path: &str) -> FileRef {
    FileRef {
        partition: Some(partition),
        path: path.into(),
    }
}

/// Debian 12 genericcloud: GPT with root on 1, BIOS boot on 14, the ESP on 15 whose
/// EFI/debian/grub.cfg searches the root by UUID and configfiles /boot/grub/grub.cfg.
fn debian_disk(esp: Vec<u8>) -> Vec<u8> {
    let esp_sectors = (esp.len() / 512) as u64;
    gpt(
        gpt_total(8192),
        &[
            Part::new(1, 6144, fixture("ext4-debian-root.img")).sectors(2048),
            Part::new(14, 2048, vec![])
                .sectors(2048)
                .gpt_type(types::BIOS_BOOT),
            Part::new(15, 4096, esp)
                .sectors(esp_sectors)
                .gpt_type(types::ESP),
        ],
    )
}

#[test]
fn debian_genericcloud() {
    let sel = boot(debian_disk(fixture("vfat-esp.img"))).expect("boots");
    assert!(
        sel.kernel == pattern("vmlinuz-6.1.0-28-cloud-amd64", 6000),
        "kernel bytes"
    );
    assert!(
        sel.initrd == pattern("initrd.img-6.1.0-28-cloud-amd64", 9000),
        "initrd bytes"
    );
    assert_eq!(
        sel.cmdline,
        format!("root=UUID={DEBIAN_UUID} ro console=tty0 console=ttyS0,115200 earlyprintk=ttyS0,115200 consoleblank=0")
    );
    let s = &sel.source;
    assert_eq!(
        (s.method, s.partition, s.image),
        (BootMethod::Grub, Some(1), ImageFormat::Raw)
    );
    assert_eq!(s.config, Some(at(1, "/boot/grub/grub.cfg")));
    assert_eq!(s.via, [at(15, "/EFI/debian/grub.cfg")]);
    assert_eq!(s.entry_title, "Debian GNU/Linux");
    assert_eq!(s.initrd_paths, ["/boot/initrd.img-6.1.0-28-cloud-amd64"]);
    assert_eq!(
        s.to_string(),
        format!(
            "kernel /boot/vmlinuz-6.1.0-28-cloud-amd64 from partition 1 (ext4, UUID {DEBIAN_UUID}, label \"debian-root\") \
             per /boot/grub/grub.cfg on partition 1 (via /EFI/debian/grub.cfg on partition 15) entry 'Debian GNU/Linux'"
        )
    );
}

#[test]
fn debian_bios_only_and_stale_esp_config() {
    // No ESP: the root's grub.cfg directly.
    let disk = gpt(
        gpt_total(8192),
        &[
            Part::new(1, 6144, fixture("ext4-debian-root.img")).sectors(2048),
            Part::new(14, 2048, vec![])
                .sectors(2048)
                .gpt_type(types::BIOS_BOOT),
        ],
    );
    let sel = boot(disk).expect("boots");
    assert_eq!(
        (sel.source.config.clone(), sel.source.via.len()),
        (Some(at(1, "/boot/grub/grub.cfg")), 0)
    );
    // An ESP whose own grub.cfg names a kernel that is not there: the search goes on.
    let stale = FatBuilder::new(FatType::Fat12, 1024, 1)
        .file(
            "/EFI/debian/grub.cfg",
            b"menuentry 'old' {\n linux /vmlinuz-4.19 root=/dev/sda1\n}\n",
        )
        .build();
    let sel = boot(debian_disk(stale)).expect("boots");
    assert!(sel.kernel == pattern("vmlinuz-6.1.0-28-cloud-amd64", 6000));
    assert_eq!(sel.source.config, Some(at(1, "/boot/grub/grub.cfg")));
}

fn fedora_disk() -> Vec<u8> {
    let stub = "search --no-floppy --root-dev-only --fs-uuid --set=dev 0e5f9c2a-7b41-4d6e-8f3a-2b1c0d9e8f7a\n\
         set prefix=($dev)/grub2\nexport $prefix\nconfigfile $prefix/grub.cfg\n";
    let esp = FatBuilder::new(FatType::Fat16, 9000, 1)
        .label("", 0xC0DE_0001)
        .file("/EFI/fedora/grub.cfg", stub.as_bytes())
        .file("/EFI/fedora/shimx64.efi", &pattern("shim", 2000))
        .file("/EFI/BOOT/BOOTX64.EFI", &pattern("shim", 2000))
        .build();
    // Fedora Cloud's root is btrfs: recognised, not read; /boot is what matters.
    let mut btrfs = vec![0u8; 128 * 1024];
    btrfs[0x10040..0x10048].copy_from_slice(b"_BHRfS_M");
    gpt(
        gpt_total(16384),
        &[
            Part::new(1, 2048, vec![])
                .sectors(2048)
                .gpt_type(types::BIOS_BOOT),
            Part::new(2, 4096, esp)
                .sectors(9000)
                .gpt_type(types::ESP)
                .name("EFI System Partition"),
            Part::new(3, 13312, fixture("ext4-fedora-boot.img"))
                .sectors(1536)
                .name("boot"),
            Part::new(4, 14848, btrfs)
                .sectors(1536)
                .gpt_type(types::LINUX_ROOT_X86_64)
                .name("root"),
        ],
    )
}

#[test]
fn fedora_cloud_bls_on_a_separate_boot() {
    let sel = boot(fedora_disk()).expect("boots");
    assert!(
        sel.kernel == pattern("vmlinuz-6.5.6-300.fc39.x86_64", 7000),
        "kernel bytes"
    );
    assert!(
        sel.initrd == pattern("initramfs-6.5.6-300.fc39.x86_64.img", 11000),
        "initrd bytes"
    );
    assert_eq!(
        sel.cmdline,
        "root=UUID=f0e1d2c3-b4a5-4968-8776-655443322110 ro rootflags=subvol=root no_timer_check net.ifnames=0 \
         console=ttyS0,115200"
    );
    let s = &sel.source;
    assert_eq!((s.method, s.partition), (BootMethod::Bls, Some(3)));
    assert_eq!(
        s.config,
        Some(at(
            3,
            &format!("/loader/entries/{FEDORA_MID}-6.5.6-300.fc39.x86_64.conf")
        ))
    );
    assert_eq!(
        s.via,
        [at(2, "/EFI/fedora/grub.cfg"), at(3, "/grub2/grub.cfg")]
    );
    assert_eq!(
        s.entry_title,
        "Fedora Linux (6.5.6-300.fc39.x86_64) 39 (Cloud Edition)"
    );
    assert_eq!(s.kernel_path, "/vmlinuz-6.5.6-300.fc39.x86_64");
    assert_eq!(s.fs.uuid, "0e5f9c2a-7b41-4d6e-8f3a-2b1c0d9e8f7a");

    let p = probe(&mut fedora_disk(), &Limits::default()).expect("probes");
    let DiskKind::Partitioned { volumes, .. } = p.kind else {
        panic!("not partitioned")
    };
    let kinds: Vec<_> = volumes
        .iter()
        .map(|v| v.fs.as_ref().map(|f| f.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(FsKind::Fat16),
            Some(FsKind::Ext4),
            Some(FsKind::Other("btrfs"))
        ]
    );
    assert_eq!(volumes[1].fs.as_ref().unwrap().uuid, "C0DE-0001");
}

#[test]
fn alpine_extlinux_on_mbr_and_in_qcow2() {
    let disk = mbr(
        4096,
        &[Part::new(1, 2048, fixture("ext4-alpine.img"))
            .sectors(1024)
            .bootable()],
    );
    let sel = boot(disk).expect("boots");
    let cmdline = "root=UUID=a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d modules=sd-mod,usb-storage,ext4 console=ttyS0 quiet rootfstype=ext4";
    assert!(
        sel.kernel == pattern("vmlinuz-virt", 5000)
            && sel.initrd == pattern("initramfs-virt", 8000)
    );
    assert_eq!(sel.cmdline, cmdline);
    assert_eq!(
        (sel.source.method, sel.source.partition),
        (BootMethod::Extlinux, Some(1))
    );
    assert_eq!(sel.source.config, Some(at(1, "/boot/extlinux.conf")));
    assert_eq!(sel.source.entry_title, "Linux virt");
    for q in ["alpine-v3-compressed.qcow2", "alpine-v2.qcow2"] {
        let sel = boot(fixture(q)).unwrap_or_else(|e| panic!("{q}: {e}"));
        assert!(sel.kernel == pattern("vmlinuz-virt", 5000), "{q}");
        assert_eq!(
            (sel.cmdline.as_str(), sel.source.partition),
            (cmdline, None),
            "{q}"
        );
        assert!(matches!(sel.source.image, ImageFormat::Qcow2(_)), "{q}");
    }
}

#[test]
fn debian_symlink_fallback_on_a_bare_filesystem() {
    let sel = boot(fixture("ext2-blockmap.img")).expect("boots");
    assert!(sel.kernel == pattern("vmlinuz-5.10.0-1-amd64", 307_200));
    assert!(sel.initrd == pattern("initrd.img-5.10.0-1-amd64", 20_000));
    assert_eq!(
        sel.cmdline,
        "root=UUID=11111111-2222-4333-8444-555555555555 ro"
    );
    let s = &sel.source;
    assert_eq!(
        (s.method, s.config.clone(), s.partition),
        (BootMethod::KernelSymlinks, None, None)
    );
    assert_eq!(s.kernel_path, "/boot/vmlinuz-5.10.0-1-amd64");
    assert!(s.to_string().ends_with("per the /vmlinuz symlink"), "{s}");
}

#[test]
fn systemd_boot_entries_on_the_esp() {
    let esp = |loader: Option<&str>| {
        let mut b = FatBuilder::new(FatType::Fat32, 3000, 1)
            .file("/loader/entries/fedora-6.4.0.conf", b"title Fedora 6.4\nversion 6.4.0\nlinux /k-6.4\noptions a=1\n")
            .file("/loader/entries/fedora-6.10.0.conf", b"title Fedora 6.10\nversion 6.10.0\nlinux /k-6.10\ninitrd /i-6.10\ninitrd /ucode\noptions b=2\n")
            .file("/k-6.4", b"K64")
            .file("/k-6.10", b"K610")
            .file("/i-6.10", b"I610")
            .file("/ucode", b"UC");
        if let Some(l) = loader {
            b = b.file("/loader/loader.conf", l.as_bytes());
        }
        gpt(
            gpt_total(5120),
            &[Part::new(1, 2048, b.build())
                .sectors(3000)
                .gpt_type(types::ESP)],
        )
    };
    let sel = boot(esp(None)).expect("boots");
    assert_eq!(
        (
            sel.kernel.as_slice(),
            sel.initrd.as_slice(),
            sel.cmdline.as_str()
        ),
        (&b"K610"[..], &b"I610UC"[..], "b=2")
    );
    let sel = boot(esp(Some("timeout 3\ndefault fedora-6.4*\n"))).expect("boots");
    assert_eq!(
        (sel.kernel.as_slice(), sel.source.entry_title.as_str()),
        (&b"K64"[..], "Fedora 6.4")
    );
    assert_eq!(
        sel.source.config,
        Some(at(1, "/loader/entries/fedora-6.4.0.conf"))
    );
}

#[test]
fn outcomes_when_nothing_boots() {
    // A bare root filesystem: the launcher's own kernel will boot it.
    let err = boot(fixture("ext4-bare.img")).unwrap_err();
    assert!(
        matches!(&err, FindBootError::NoKernel(fs) if fs.contains("ext4")),
        "{err}"
    );
    // Nothing at all.
    assert!(matches!(
        boot(vec![0; 1 << 20]),
        Err(FindBootError::NoFilesystem)
    ));
    let empty = gpt(gpt_total(4096), &[Part::new(1, 2048, vec![]).sectors(2048)]);
    assert!(matches!(boot(empty), Err(FindBootError::NoFilesystem)));
    // Only filesystems this crate does not read.
    let mut xfs = vec![0u8; 64 * 1024];
    xfs[..4].copy_from_slice(b"XFSB");
    let err = boot(gpt(
        gpt_total(2048 + 128),
        &[Part::new(1, 2048, xfs).sectors(128)],
    ))
    .unwrap_err();
    assert!(
        matches!(&err, FindBootError::NoReadableFilesystem(s) if s == "partition 1 (xfs)"),
        "{err}"
    );
    // A configuration whose kernel is missing, and nothing else.
    let esp = FatBuilder::new(FatType::Fat12, 1024, 1)
        .file(
            "/EFI/debian/grub.cfg",
            b"menuentry 'gone' {\n linux /vmlinuz-4.19 root=/dev/sda1\n}\n",
        )
        .build();
    let err = boot(gpt(
        gpt_total(3072),
        &[Part::new(1, 2048, esp).sectors(1024).gpt_type(types::ESP)],
    ))
    .unwrap_err();
    assert!(
        matches!(&err, FindBootError::KernelMissing { entry, path, .. } if entry == "gone" && path == "/vmlinuz-4.19 on partition 1"),
        "{err}"
    );
    // A corrupt partition table.
    let mut disk = debian_disk(fixture("vfat-esp.img"));
    disk[512 + 40] ^= 1;
    let last = disk.len() - 512;
    disk[last + 40] ^= 1;
    let err = boot(disk).unwrap_err();
    assert!(
        matches!(err, FindBootError::CorruptPartitionTable(_)),
        "{err}"
    );
}

#[test]
fn limits_exceeded_is_its_own_outcome() {
    let mut disk = debian_disk(fixture("vfat-esp.img"));
    let small = Limits {
        max_file_size: 4096,
        ..Limits::default()
    };
    let err = find_boot(&mut disk, &small).unwrap_err();
    assert!(
        matches!(&err, FindBootError::LimitExceeded { source, .. } if source.value == 6000),
        "{err}"
    );
    let total = Limits {
        max_boot_size: 10_000,
        ..Limits::default()
    };
    let err = find_boot(&mut disk, &total).unwrap_err();
    assert!(matches!(err, FindBootError::LimitExceeded { .. }), "{err}");
}

#[test]
fn probe_reports_layouts() {
    let p = probe(&mut fixture("ext4-alpine.img"), &Limits::default()).unwrap();
    let DiskKind::Filesystem(v) = p.kind else {
        panic!("{:?}", p.kind)
    };
    let fs = v.fs.unwrap();
    assert_eq!(
        (fs.kind, fs.uuid.as_str()),
        (FsKind::Ext4, "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d")
    );
    let p = probe(
        &mut fixture("alpine-v3-compressed.qcow2"),
        &Limits::default(),
    )
    .unwrap();
    assert!(matches!(p.format, ImageFormat::Qcow2(q) if q.version == 3));
    assert!(matches!(
        probe(&mut vec![0u8; 4096], &Limits::default())
            .unwrap()
            .kind,
        DiskKind::Unknown
    ));
    let p = probe(
        &mut debian_disk(fixture("vfat-esp.img")),
        &Limits::default(),
    )
    .unwrap();
    let DiskKind::Partitioned { volumes, .. } = p.kind else {
        panic!()
    };
    let shown: Vec<String> = volumes.iter().map(|v| v.to_string()).collect();
    assert_eq!(
        shown,
        [
            format!("partition 1 (ext4, UUID {DEBIAN_UUID}, label \"debian-root\")"),
            "partition 14 (no filesystem)".to_string(),
            "partition 15 (vfat, UUID 5E1C-10AA, label \"EFI-SYSTEM\")".to_string(),
        ]
    );
}

#[test]
fn file_and_cursor_sources() {
    let path = std::env::temp_dir().join(format!("bootdisk-alpine-{}.qcow2", std::process::id()));
    std::fs::write(&path, fixture("alpine-v3-compressed.qcow2")).expect("write temp image");
    let mut file = bootdisk::FileSource::open(&path).expect("open");
    let sel = find_boot(&mut file, &Limits::default());
    std::fs::remove_file(&path).expect("remove temp image");
    assert!(sel.expect("boots").kernel == pattern("vmlinuz-virt", 5000));
    let mut cursor =
        bootdisk::ReadSeekSource::new(std::io::Cursor::new(fixture("ext2-blockmap.img")))
            .expect("cursor");
    let sel = find_boot(&mut cursor, &Limits::default()).expect("boots");
    assert_eq!(sel.source.method, BootMethod::KernelSymlinks);
}
