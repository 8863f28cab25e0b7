//! Damaged inputs: every parser on truncated, zeroed and bit-flipped versions of the fixtures
//! returns a result or an error and never panics. The flips are pseudo-random but fixed
//! (a xorshift generator with a constant seed), so a failure reproduces.

mod common;

use bootdisk::config::{bls, extlinux, grub, grubenv, Vars};
use bootdisk::fs::Filesystem;
use bootdisk::image::DiskImage;
use bootdisk::partition::read_partition_table;
use bootdisk::{find_boot, probe, BlockSource, Limits};
use common::fat::{FatBuilder, FatType};
use common::{fixture, gpt, gpt_total, Part};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Small limits keep each damaged run cheap.
fn limits() -> Limits {
    Limits {
        max_file_size: 4 << 20,
        max_dir_size: 1 << 20,
        max_dir_entries: 10_000,
        ..Limits::default()
    }
}

/// Reads everything a boot search would from `img`, ignoring the outcome.
fn exercise(img: &[u8]) {
    let l = limits();
    let _ = find_boot(&mut img.to_vec(), &l);
    let _ = probe(&mut img.to_vec(), &l);
    let _ = read_partition_table(&mut &img[..], &l);
    if let Ok(Some(mut fs)) = Filesystem::open(img, &l) {
        let _ = fs.info();
        for p in [
            "/",
            "/boot",
            "/etc",
            "/EFI",
            "/usr/lib/modules",
            "/many",
            "/loader/entries",
        ] {
            let _ = fs.read_dir(p);
        }
        for p in [
            "/vmlinuz",
            "/initrd.img",
            "/boot/grub/grub.cfg",
            "/boot/extlinux.conf",
            "/etc/motd",
            "/fragmented",
            "/slowlink",
            "/loop-a",
        ] {
            let _ = fs.read_file(p, 1 << 20);
            let _ = fs.canonical_path(p);
        }
    }
    if let Ok(mut d) = DiskImage::open(img) {
        let mut buf = vec![0u8; 64 * 1024];
        let len = d.len();
        for off in [0, 4096, len / 2, len.saturating_sub(100)] {
            let n = (len.saturating_sub(off)).min(buf.len() as u64) as usize;
            let _ = d.read_at(off, &mut buf[..n]);
        }
    }
}

fn images() -> Vec<(&'static str, Vec<u8>)> {
    let mut v: Vec<(&'static str, Vec<u8>)> = [
        "ext4-debian-root.img",
        "ext4-fedora-boot.img",
        "ext4-alpine.img",
        "ext2-blockmap.img",
        "ext4-bare.img",
        "vfat-esp.img",
        "alpine-v3-compressed.qcow2",
        "alpine-v2.qcow2",
    ]
    .into_iter()
    .map(|n| (n, fixture(n)))
    .collect();
    let fat32 = FatBuilder::new(FatType::Fat32, 3000, 1)
        .file("/EFI/x/grub.cfg", b"menuentry a {\nlinux /k\n}\n")
        .file("/k", b"kernel")
        .build();
    v.push(("fat32", fat32.clone()));
    v.push((
        "gpt",
        gpt(
            gpt_total(2048 + 3000),
            &[Part::new(1, 2048, fat32)
                .sectors(3000)
                .gpt_type(bootdisk::partition::types::ESP)],
        ),
    ));
    v
}

/// Byte ranges where the metadata lives, so flips hit it often and not only file data.
fn hot(name: &str, len: usize) -> Vec<std::ops::Range<usize>> {
    let c = |a: usize, b: usize| a.min(len)..b.min(len);
    match name {
        n if n.ends_with(".qcow2") => vec![c(0, 512), c(0, 16 * 4096)],
        "gpt" => vec![
            c(0, 3 * 512),
            c(len - 34 * 512, len),
            c(2048 * 512, 2048 * 512 + 8 * 512),
        ],
        _ => vec![c(0, 8192), c(0, 64 * 1024), c(0, len)],
    }
}

#[test]
fn bit_flips_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (name, img) in images() {
        let ranges = hot(name, img.len());
        for round in 0..150 {
            let mut bad = img.clone();
            for _ in 0..1 + rng.below(8) {
                let r = &ranges[rng.below(ranges.len())];
                if r.is_empty() {
                    continue;
                }
                let at = r.start + rng.below(r.len());
                bad[at] ^= 1 << rng.below(8);
            }
            let result = std::panic::catch_unwind(|| exercise(&bad));
            assert!(result.is_ok(), "{name}: round {round} panicked");
        }
    }
}

#[test]
fn truncated_and_zeroed_never_panic() {
    let mut rng = Rng(12345);
    for (name, img) in images() {
        for cut in [
            0,
            1,
            511,
            512,
            1024,
            1100,
            2048,
            4096,
            8192,
            img.len() / 3,
            img.len() / 2,
            img.len() - 1,
        ] {
            let cut = cut.min(img.len());
            assert!(
                std::panic::catch_unwind(|| exercise(&img[..cut])).is_ok(),
                "{name}: cut at {cut}"
            );
        }
        for round in 0..30 {
            let mut bad = img.clone();
            let start = rng.below(img.len().min(128 * 1024));
            let len = 1 + rng.below(4096);
            let end = (start + len).min(bad.len());
            bad[start..end].fill(if round % 2 == 0 { 0 } else { 0xFF });
            assert!(
                std::panic::catch_unwind(|| exercise(&bad)).is_ok(),
                "{name}: zeroed {start}..{end}"
            );
        }
    }
}

#[test]
fn config_parsers_never_panic_on_mangled_text() {
    let texts = [
        include_str!("../src/config/grub/tests.rs"),
        "title a\nlinux /k\ninitrd /i\noptions $kernelopts ${x}\n",
        "DEFAULT menu.c32\nLABEL a\n MENU DEFAULT\n LINUX k\n APPEND initrd=a,b x\n",
        "# GRUB Environment Block\nsaved_entry=x\\\nkernelopts=a\\\\\n",
    ];
    let l = Limits::default();
    let mut rng = Rng(777);
    for text in texts {
        let bytes = text.as_bytes();
        for _ in 0..300 {
            let mut b = bytes.to_vec();
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(b.len());
                match rng.below(3) {
                    0 => b[at] = b"{}'\"\\$;\n#[]=>"[rng.below(13)],
                    1 => {
                        b.remove(at);
                    }
                    _ => b.truncate(at),
                }
                if b.is_empty() {
                    break;
                }
            }
            let s = String::from_utf8_lossy(&b);
            let ok = std::panic::catch_unwind(|| {
                let _ = grub::parse_grub_cfg(&s, &Vars::new(), &l);
                let _ = bls::parse_entry("x.conf", &s, &l);
                let _ = extlinux::parse_extlinux(&s, "/boot", &l);
                let _ = grubenv::parse_grubenv(&s);
                let _ = bls::loader_conf_default(&s, &l);
            });
            assert!(ok.is_ok(), "panicked on {s:?}");
        }
    }
}

#[test]
fn fuzz_seeds_are_meaningful() {
    let seed = |name: &str| {
        let path = format!("{}/fuzz/seeds/{name}.gz", env!("CARGO_MANIFEST_DIR"));
        let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz.as_slice()), &mut out)
            .expect("gunzip");
        out
    };
    for name in ["find_boot/gpt-ext4", "find_boot/qcow2"] {
        let sel = find_boot(&mut seed(name), &Limits::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(sel.kernel == common::pattern("vmlinuz-1", 14000), "{name}");
    }
    let p = probe(&mut seed("find_boot/mbr-logical-vfat"), &Limits::default()).expect("probes");
    let bootdisk::DiskKind::Partitioned { volumes, .. } = p.kind else {
        panic!("{:?}", p.kind)
    };
    assert_eq!(volumes.len(), 1);
    assert_eq!(volumes[0].partition.as_ref().map(|p| p.index), Some(5));
    assert!(volumes[0].is_readable());
    let t = read_partition_table(
        &mut &seed("partition_table/gpt-head")[..],
        &Limits::default(),
    );
    assert_eq!(t.expect("reads").expect("GPT").partitions.len(), 1);
}
