//! qcow2 tests: images made by qemu-img (`tests/fixtures/make.sh`) read back equal to the raw
//! image; images built here for each refusal and each kind of L2 entry.

mod common;

use std::io::Write;

use bootdisk::image::{DiskImage, ImageError, ImageFormat};
use bootdisk::qcow2::{Qcow2, Qcow2Error};
use bootdisk::{BlockSource, SourceError};
use common::fixture;

fn read_all(src: &mut impl BlockSource) -> Vec<u8> {
    let mut out = vec![0u8; src.len() as usize];
    // Odd-sized reads that cross cluster boundaries.
    let mut off = 0;
    while off < out.len() {
        let n = 3001.min(out.len() - off);
        src.read_at(off as u64, &mut out[off..off + n])
            .expect("read");
        off += n;
    }
    out
}

#[test]
fn qemu_img_images_read_as_the_raw_image() {
    let raw = fixture("ext4-alpine.img");
    for (name, version, cluster) in [
        ("alpine-v3-compressed.qcow2", 3, 4096),
        ("alpine-v2.qcow2", 2, 65536),
    ] {
        let mut img = DiskImage::open(fixture(name)).expect("opens");
        let ImageFormat::Qcow2(info) = img.format() else {
            panic!("{name}: not qcow2")
        };
        assert_eq!(
            (info.version, info.cluster_size, info.virtual_size),
            (version, cluster, raw.len() as u64)
        );
        assert!(read_all(&mut img) == raw, "{name}: contents differ");
    }
}

const CLUSTER_BITS: u32 = 12;
const CS: usize = 1 << CLUSTER_BITS;

/// A version 3 image of `clusters` guest clusters: header, L1 at cluster 1, one L2 at
/// cluster 2, then data clusters; `l2` gives each guest cluster's L2 entry.
fn build(
    size: u64,
    l2: &[u64],
    data: &[(usize, Vec<u8>)],
    tweak: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let mut img = vec![0u8; 3 * CS];
    img[0..4].copy_from_slice(b"QFI\xfb");
    img[4..8].copy_from_slice(&3u32.to_be_bytes());
    img[20..24].copy_from_slice(&CLUSTER_BITS.to_be_bytes());
    img[24..32].copy_from_slice(&size.to_be_bytes());
    img[36..40].copy_from_slice(&1u32.to_be_bytes());
    img[40..48].copy_from_slice(&(CS as u64).to_be_bytes());
    img[96..100].copy_from_slice(&4u32.to_be_bytes());
    img[100..104].copy_from_slice(&104u32.to_be_bytes());
    img[CS..CS + 8].copy_from_slice(&((2 * CS as u64) | (1 << 63)).to_be_bytes());
    for (i, e) in l2.iter().enumerate() {
        img[2 * CS + 8 * i..2 * CS + 8 * i + 8].copy_from_slice(&e.to_be_bytes());
    }
    for (off, bytes) in data {
        if img.len() < off + bytes.len() {
            img.resize(off + bytes.len(), 0);
        }
        img[*off..off + bytes.len()].copy_from_slice(bytes);
    }
    tweak(&mut img);
    img
}

#[test]
fn l2_entry_kinds() {
    let plain = vec![0xAB; CS];
    let mut packed = vec![0u8; CS];
    for (i, b) in packed.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&packed).unwrap();
    let deflated = z.finish().unwrap();
    let zoff = 4 * CS + 100; // Compressed data need not be aligned.
    let x = 62 - (CLUSTER_BITS - 8);
    let sectors = ((zoff % 512 + deflated.len()).div_ceil(512) - 1) as u64;
    let entries = [
        (3 * CS as u64) | (1 << 63), // 0: standard, data at cluster 3
        0,                           // 1: unallocated
        (3 * CS as u64) | 1,         // 2: zero flag (data ignored)
        (1 << 62) | (sectors << x) | zoff as u64, // 3: compressed
    ];
    let img = build(
        4 * CS as u64,
        &entries,
        &[(3 * CS, plain.clone()), (zoff, deflated)],
        |_| {},
    );
    let mut q = Qcow2::open(img).expect("opens");
    let all = read_all(&mut q);
    assert!(all[..CS] == plain[..]);
    assert!(all[CS..3 * CS].iter().all(|&b| b == 0));
    assert!(all[3 * CS..] == packed[..]);
    let mut past = [0u8; 2];
    assert!(matches!(
        q.read_at(4 * CS as u64 - 1, &mut past),
        Err(SourceError::OutOfRange { .. })
    ));
}

#[test]
fn refusals_name_their_reason() {
    let name_off = 3 * CS;
    type Case = (
        &'static str,
        Box<dyn Fn(&mut [u8])>,
        fn(&Qcow2Error) -> bool,
    );
    let cases: Vec<Case> = vec![
        (
            "backing file",
            Box::new(move |h: &mut [u8]| {
                h[8..16].copy_from_slice(&(name_off as u64).to_be_bytes());
                h[16..20].copy_from_slice(&8u32.to_be_bytes());
                h[name_off..name_off + 8].copy_from_slice(b"base.img");
            }),
            |e| matches!(e, Qcow2Error::BackingFile { name } if name == "base.img"),
        ),
        ("encryption", Box::new(|h: &mut [u8]| h[35] = 2), |e| {
            matches!(e, Qcow2Error::Encrypted(2))
        }),
        (
            "external data file",
            Box::new(|h: &mut [u8]| h[79] = 4),
            |e| matches!(e, Qcow2Error::ExternalDataFile),
        ),
        ("extended L2", Box::new(|h: &mut [u8]| h[79] = 16), |e| {
            matches!(e, Qcow2Error::ExtendedL2)
        }),
        (
            "zstd",
            Box::new(|h: &mut [u8]| {
                h[79] = 8;
                h[100..104].copy_from_slice(&112u32.to_be_bytes());
                h[104] = 1;
            }),
            |e| matches!(e, Qcow2Error::CompressionType(1)),
        ),
        ("unknown feature", Box::new(|h: &mut [u8]| h[78] = 1), |e| {
            matches!(e, Qcow2Error::IncompatibleFeatures(0x100))
        }),
        ("version", Box::new(|h: &mut [u8]| h[7] = 4), |e| {
            matches!(e, Qcow2Error::Version(4))
        }),
        ("cluster bits", Box::new(|h: &mut [u8]| h[23] = 30), |e| {
            matches!(e, Qcow2Error::ClusterBits(30))
        }),
        (
            "L1 too small",
            Box::new(|h: &mut [u8]| h[24..32].copy_from_slice(&(1u64 << 40).to_be_bytes())),
            |e| matches!(e, Qcow2Error::L1TooSmall { .. }),
        ),
    ];
    for (what, tweak, check) in cases {
        let img = build(4 * CS as u64, &[], &[(3 * CS, vec![0; 16])], |h| tweak(h));
        match DiskImage::open(img) {
            Err(ImageError::Qcow2(e)) => assert!(check(&e), "{what}: {e}"),
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }
}

#[test]
fn corrupt_mappings_are_read_errors() {
    for (what, entry) in [
        ("unaligned data", 3 * CS as u64 + 512),
        ("data past the end", 1000 * CS as u64),
        ("compressed past the end", (1 << 62) | (1000 * CS as u64)),
        ("compressed garbage", (1 << 62) | (2 * CS as u64)),
    ] {
        let mut q = Qcow2::open(build(
            4 * CS as u64,
            &[entry],
            &[(3 * CS, vec![0; CS])],
            |_| {},
        ))
        .unwrap();
        let mut buf = [0u8; 16];
        assert!(q.read_at(0, &mut buf).is_err(), "{what}");
    }
}

#[test]
fn foreign_formats_are_refused_by_name() {
    for (magic, name) in [
        (&b"KDMV"[..], "vmdk"),
        (b"vhdxfile", "vhdx"),
        (b"QFI\0", "qed"),
    ] {
        let mut img = vec![0u8; 1024];
        img[..magic.len()].copy_from_slice(magic);
        assert!(matches!(DiskImage::open(img), Err(ImageError::UnsupportedFormat(n)) if n == name));
    }
    assert!(matches!(
        DiskImage::open(vec![0u8; 1024]).unwrap().format(),
        ImageFormat::Raw
    ));
}
