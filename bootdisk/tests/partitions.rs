//! MBR and GPT table tests on disks the test builds.

mod common;

use bootdisk::partition::gpt::GptCheck;
use bootdisk::partition::{read_partition_table, types, PartitionError, PartitionType, TableKind};
use bootdisk::Limits;
use common::fat::{FatBuilder, FatType};
use common::{add_extended, gpt, mbr, Part, SECTOR};

fn table(disk: &[u8]) -> Result<Option<bootdisk::partition::PartitionTable>, PartitionError> {
    read_partition_table(&mut &disk[..], &Limits::default())
}

#[test]
fn mbr_primaries_and_bootable_flag() {
    let disk = mbr(
        4096,
        &[
            Part::new(1, 2048, vec![1; 512]).sectors(1024).bootable(),
            Part::new(3, 3072, vec![2; 512])
                .sectors(1024)
                .mbr_type(0x0C),
        ],
    );
    let t = table(&disk).unwrap().expect("MBR");
    assert_eq!(
        t.kind,
        TableKind::Mbr {
            disk_signature: 0xC0FFEE00
        }
    );
    let got: Vec<_> = t
        .partitions
        .iter()
        .map(|p| (p.index, p.start, p.size, p.kind, p.bootable))
        .collect();
    assert_eq!(
        got,
        [
            (1, 2048 * 512, 1024 * 512, PartitionType::Mbr(0x83), true),
            (3, 3072 * 512, 1024 * 512, PartitionType::Mbr(0x0C), false)
        ]
    );
}

#[test]
fn mbr_logical_partitions_follow_the_chain() {
    let mut disk = mbr(8192, &[Part::new(1, 2048, vec![]).sectors(1024)]);
    let logical = [
        Part::new(5, 4097, vec![5; 512]).sectors(500),
        Part::new(6, 5001, vec![6; 512]).sectors(500),
        Part::new(7, 6001, vec![7; 512]).sectors(500),
    ];
    add_extended(&mut disk, 2, 4096, 4000, &logical);
    let t = table(&disk).unwrap().expect("MBR");
    let got: Vec<_> = t
        .partitions
        .iter()
        .map(|p| (p.index, p.start / SECTOR as u64, p.size / SECTOR as u64))
        .collect();
    assert_eq!(
        got,
        [
            (1, 2048, 1024),
            (5, 4097, 500),
            (6, 5001, 500),
            (7, 6001, 500)
        ]
    );

    // The last EBR links back to the first: a loop.
    let mut looped = disk.clone();
    let last_ebr = 6000 * SECTOR;
    let e = &mut looped[last_ebr + 446 + 16..last_ebr + 446 + 32];
    e[4] = 0x05;
    e[8..12].copy_from_slice(&1u32.to_le_bytes()); // relative to 4096: 4097 is not an EBR...
    e[8..12].copy_from_slice(&(5000u32 - 4096).to_le_bytes()); // ...the second EBR is.
    e[12..16].copy_from_slice(&501u32.to_le_bytes());
    assert!(
        matches!(table(&looped), Err(PartitionError::MbrLoop(5000))),
        "{:?}",
        table(&looped)
    );

    // A chain longer than the limit.
    let short = Limits {
        max_logical_partitions: 2,
        ..Limits::default()
    };
    let r = read_partition_table(&mut &disk[..], &short);
    assert!(matches!(r, Err(PartitionError::Limit(_))), "{r:?}");
}

#[test]
fn mbr_entry_outside_the_disk_is_corrupt() {
    let disk = mbr(1000, &[Part::new(1, 5000, vec![]).sectors(10)]);
    assert!(matches!(
        table(&disk),
        Err(PartitionError::MbrEntry { index: 1, .. })
    ));
}

#[test]
fn no_table_for_blank_disks_and_whole_disk_filesystems() {
    assert!(table(&[0u8; 4096]).unwrap().is_none());
    assert!(table(&[0u8; 100]).unwrap().is_none());
    // A FAT boot sector ends in 55 AA too, but it is not an MBR.
    let fat = FatBuilder::new(FatType::Fat16, 9000, 1)
        .file("/x", b"x")
        .build();
    assert!(table(&fat).unwrap().is_none());
    let ext = common::fixture("ext4-alpine.img");
    assert!(table(&ext).unwrap().is_none());
}

fn debian_like() -> Vec<u8> {
    gpt(
        common::gpt_total(6144),
        &[
            Part::new(1, 4096, vec![1; 512]).sectors(2048).name("root"),
            Part::new(14, 2048, vec![])
                .sectors(2048)
                .gpt_type(types::BIOS_BOOT),
            Part::new(15, 3072, vec![15; 512])
                .sectors(1024)
                .gpt_type(types::ESP)
                .name("EFI System")
                .bootable(),
        ],
    )
}

#[test]
fn gpt_entries_names_guids_and_attributes() {
    let disk = debian_like();
    let t = table(&disk).unwrap().expect("GPT");
    assert_eq!(
        t.kind,
        TableKind::Gpt {
            disk_guid: common::DISK_GUID,
            sector_size: 512,
            used_backup: None
        }
    );
    let got: Vec<_> = t
        .partitions
        .iter()
        .map(|p| {
            (
                p.index,
                p.start / 512,
                p.size / 512,
                p.kind,
                p.name.as_str(),
                p.bootable,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                1,
                4096,
                2048,
                PartitionType::Gpt(types::LINUX_FS),
                "root",
                false
            ),
            (
                14,
                2048,
                2048,
                PartitionType::Gpt(types::BIOS_BOOT),
                "",
                false
            ),
            (
                15,
                3072,
                1024,
                PartitionType::Gpt(types::ESP),
                "EFI System",
                true
            ),
        ]
    );
    assert!(t.partitions[2].kind.is_esp());
    assert_eq!(t.partitions[0].unique_guid.unwrap().0[0], 1);
    assert_eq!(
        types::ESP.to_string(),
        "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
    );
}

#[test]
fn gpt_falls_back_to_the_backup_header() {
    for (what, off, want) in [
        ("header", 512 + 40, "HeaderCrc"),
        ("entries", 2 * 512 + 3, "EntriesCrc"),
        ("signature", 512, "Signature"),
    ] {
        let mut disk = debian_like();
        disk[off] ^= 0x01;
        let t = table(&disk)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .expect("GPT");
        let TableKind::Gpt {
            used_backup: Some(check),
            ..
        } = &t.kind
        else {
            panic!("{what}: primary used")
        };
        assert!(format!("{check:?}").starts_with(want), "{what}: {check:?}");
        assert_eq!(t.partitions.len(), 3, "{what}");
    }
}

#[test]
fn gpt_with_both_headers_corrupt_says_which_checks_failed() {
    let mut disk = debian_like();
    disk[512 + 40] ^= 1;
    let last = disk.len() - 512;
    disk[last + 13] = 0xFF; // Backup header size 0xFF5C.
    let err = table(&disk).unwrap_err();
    let PartitionError::Gpt { primary, backup } = &err else {
        panic!("{err}")
    };
    assert!(matches!(primary, GptCheck::HeaderCrc { .. }), "{primary}");
    assert!(matches!(backup, GptCheck::HeaderSize(_)), "{backup}");
    assert!(err.to_string().contains("header CRC32"), "{err}");
}

#[test]
fn gpt_limits_entry_count() {
    let disk = debian_like();
    let r = read_partition_table(
        &mut &disk[..],
        &Limits {
            max_partitions: 16,
            ..Limits::default()
        },
    );
    assert!(
        matches!(
            r,
            Err(PartitionError::Gpt {
                primary: GptCheck::EntryCount(128),
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn gpt_on_4k_sectors() {
    // The same layout with 4096-byte sectors: header at byte 4096.
    let mut disk = vec![0u8; 64 * 4096];
    disk[446 + 4] = 0xEE;
    disk[510] = 0x55;
    disk[511] = 0xAA;
    let mut array = vec![0u8; 4 * 128];
    array[0..16].copy_from_slice(&types::LINUX_FS.0);
    array[32..40].copy_from_slice(&10u64.to_le_bytes());
    array[40..48].copy_from_slice(&19u64.to_le_bytes());
    let mut h = vec![0u8; 92];
    h[0..8].copy_from_slice(b"EFI PART");
    h[12..16].copy_from_slice(&92u32.to_le_bytes());
    h[24..32].copy_from_slice(&1u64.to_le_bytes());
    h[72..80].copy_from_slice(&2u64.to_le_bytes());
    h[80..84].copy_from_slice(&4u32.to_le_bytes());
    h[84..88].copy_from_slice(&128u32.to_le_bytes());
    h[88..92].copy_from_slice(&bootdisk::crc32(&array).to_le_bytes());
    let crc = bootdisk::crc32(&h);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    disk[4096..4096 + 92].copy_from_slice(&h);
    disk[8192..8192 + array.len()].copy_from_slice(&array);
    let t = table(&disk).unwrap().expect("GPT");
    assert_eq!(
        (t.partitions[0].start, t.partitions[0].size),
        (10 * 4096, 10 * 4096)
    );
}
