//! A FAT12/16/32 image writer for tests: a tree of files and directories, long names where a
//! name is not a plain upper-case 8.3 name, a volume label entry.

use std::collections::BTreeMap;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FatType {
    Fat12,
    Fat16,
    Fat32,
}

enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<String, Node>),
}

pub struct FatBuilder {
    kind: FatType,
    total_sectors: u32,
    sectors_per_cluster: u8,
    root: BTreeMap<String, Node>,
    label: &'static str,
    volume_id: u32,
}

struct Layout {
    reserved: u32,
    fat_size: u32,
    root_entries: u32,
    clusters: u32,
}

fn short_checksum(name: &[u8; 11]) -> u8 {
    name.iter()
        .fold(0u8, |s, &b| (s >> 1 | (s & 1) << 7).wrapping_add(b))
}

impl FatBuilder {
    pub fn new(kind: FatType, total_sectors: u32, sectors_per_cluster: u8) -> Self {
        Self {
            kind,
            total_sectors,
            sectors_per_cluster,
            root: BTreeMap::new(),
            label: "TESTVOL",
            volume_id: 0x1234_ABCD,
        }
    }

    pub fn label(mut self, l: &'static str, id: u32) -> Self {
        self.label = l;
        self.volume_id = id;
        self
    }

    /// Adds a file at `path` (directories created as needed).
    pub fn file(mut self, path: &str, data: &[u8]) -> Self {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let mut dir = &mut self.root;
        for p in &parts[..parts.len() - 1] {
            let n = dir
                .entry(p.to_string())
                .or_insert_with(|| Node::Dir(BTreeMap::new()));
            dir = match n {
                Node::Dir(d) => d,
                Node::File(_) => panic!("{p} is a file"),
            };
        }
        dir.insert(
            parts[parts.len() - 1].to_string(),
            Node::File(data.to_vec()),
        );
        self
    }

    fn layout(&self) -> Layout {
        let (reserved, root_entries) = match self.kind {
            FatType::Fat32 => (32, 0),
            _ => (1, 512),
        };
        let root_sectors = root_entries * 32 / 512;
        let bits = match self.kind {
            FatType::Fat12 => 12,
            FatType::Fat16 => 16,
            FatType::Fat32 => 32,
        };
        let mut fat_size = 1;
        loop {
            let data = self.total_sectors - reserved - 2 * fat_size - root_sectors;
            let clusters = data / u32::from(self.sectors_per_cluster);
            if (clusters + 2) * bits / 8 < fat_size * 512 {
                return Layout {
                    reserved,
                    fat_size,
                    root_entries,
                    clusters,
                };
            }
            fat_size += 1;
        }
    }

    pub fn build(self) -> Vec<u8> {
        let l = self.layout();
        let cluster_bytes = 512 * usize::from(self.sectors_per_cluster);
        let mut img = vec![0u8; self.total_sectors as usize * 512];
        let mut fat = vec![0u32; l.clusters as usize + 2];
        fat[0] = 0x0FFF_FFF8;
        fat[1] = 0x0FFF_FFFF;
        let first_data = l.reserved + 2 * l.fat_size + l.root_entries * 32 / 512;
        let mut next_free = 2u32;
        let mut alloc = |len: usize, fat: &mut Vec<u32>| -> u32 {
            let n = len.div_ceil(cluster_bytes).max(1) as u32;
            let first = next_free;
            for c in first..first + n {
                fat[c as usize] = if c + 1 < first + n {
                    c + 1
                } else {
                    0x0FFF_FFFF
                };
            }
            next_free += n;
            first
        };
        // Directory contents are written after their children have clusters.
        #[allow(clippy::too_many_arguments)]
        fn write_dir(
            dir: &BTreeMap<String, Node>,
            own: u32,
            parent: u32,
            is_root: bool,
            label: &str,
            img: &mut Vec<u8>,
            fat: &mut Vec<u32>,
            alloc: &mut dyn FnMut(usize, &mut Vec<u32>) -> u32,
            place: &dyn Fn(u32) -> usize,
        ) -> Vec<u8> {
            let mut entries: Vec<u8> = Vec::new();
            if is_root {
                let mut e = [0u8; 32];
                let mut name = [b' '; 11];
                name[..label.len()].copy_from_slice(label.as_bytes());
                e[..11].copy_from_slice(&name);
                e[11] = 0x08;
                entries.extend_from_slice(&e);
            } else {
                for (n, c) in [(".", own), ("..", parent)] {
                    let mut e = [0u8; 32];
                    let mut name = [b' '; 11];
                    name[..n.len()].copy_from_slice(n.as_bytes());
                    e[..11].copy_from_slice(&name);
                    e[11] = 0x10;
                    e[20..22].copy_from_slice(&((c >> 16) as u16).to_le_bytes());
                    e[26..28].copy_from_slice(&(c as u16).to_le_bytes());
                    entries.extend_from_slice(&e);
                }
            }
            for (i, (name, node)) in dir.iter().enumerate() {
                let (cluster, size, attr) = match node {
                    Node::File(data) => {
                        if data.is_empty() {
                            (0, 0, 0x20)
                        } else {
                            let c = alloc(data.len(), fat);
                            let off = place(c);
                            img[off..off + data.len()].copy_from_slice(data);
                            (c, data.len() as u32, 0x20)
                        }
                    }
                    Node::Dir(sub) => {
                        // Size the directory first: entries are 32 bytes, long names 13 chars each.
                        let size =
                            32 * (2 + sub.keys().map(|k| 1 + k.len().div_ceil(13)).sum::<usize>());
                        let c = alloc(size, fat);
                        let parent_ref = if is_root { 0 } else { own };
                        let content =
                            write_dir(sub, c, parent_ref, false, label, img, fat, alloc, place);
                        let off = place(c);
                        img[off..off + content.len()].copy_from_slice(&content);
                        (c, 0, 0x10)
                    }
                };
                let upper = name.to_ascii_uppercase();
                let (base, ext) = upper.rsplit_once('.').unwrap_or((&upper, ""));
                let plain = name == &upper
                    && base.len() <= 8
                    && ext.len() <= 3
                    && !base.is_empty()
                    && !name.contains(' ')
                    && name.matches('.').count() <= 1;
                let mut short = [b' '; 11];
                if plain {
                    short[..base.len()].copy_from_slice(base.as_bytes());
                    short[8..8 + ext.len()].copy_from_slice(ext.as_bytes());
                } else {
                    let b: Vec<u8> = base
                        .bytes()
                        .filter(u8::is_ascii_alphanumeric)
                        .take(6)
                        .collect();
                    let tag = format!("~{}", i + 1);
                    short[..b.len()].copy_from_slice(&b);
                    short[b.len()..b.len() + tag.len()].copy_from_slice(tag.as_bytes());
                    let e: Vec<u8> = ext
                        .bytes()
                        .filter(u8::is_ascii_alphanumeric)
                        .take(3)
                        .collect();
                    short[8..8 + e.len()].copy_from_slice(&e);
                    let units: Vec<u16> = name.encode_utf16().collect();
                    let n = units.len().div_ceil(13);
                    let sum = short_checksum(&short);
                    for seq in (1..=n).rev() {
                        let mut e = [0u8; 32];
                        e[0] = seq as u8 | if seq == n { 0x40 } else { 0 };
                        e[11] = 0x0F;
                        e[13] = sum;
                        let slots = [1, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30];
                        for (k, off) in slots.iter().enumerate() {
                            let idx = (seq - 1) * 13 + k;
                            let u = match idx.cmp(&units.len()) {
                                std::cmp::Ordering::Less => units[idx],
                                std::cmp::Ordering::Equal => 0,
                                std::cmp::Ordering::Greater => 0xFFFF,
                            };
                            e[*off..*off + 2].copy_from_slice(&u.to_le_bytes());
                        }
                        entries.extend_from_slice(&e);
                    }
                }
                let mut e = [0u8; 32];
                e[..11].copy_from_slice(&short);
                e[11] = attr;
                e[20..22].copy_from_slice(&((cluster >> 16) as u16).to_le_bytes());
                e[26..28].copy_from_slice(&(cluster as u16).to_le_bytes());
                e[28..32].copy_from_slice(&size.to_le_bytes());
                entries.extend_from_slice(&e);
            }
            entries
        }
        let spc = u32::from(self.sectors_per_cluster);
        let place = move |c: u32| ((first_data + (c - 2) * spc) * 512) as usize;
        let root_size = 32
            * (1 + self
                .root
                .keys()
                .map(|k| 1 + k.len().div_ceil(13))
                .sum::<usize>());
        let root_cluster = if self.kind == FatType::Fat32 {
            alloc(root_size, &mut fat)
        } else {
            0
        };
        let root = write_dir(
            &self.root,
            root_cluster,
            0,
            true,
            self.label,
            &mut img,
            &mut fat,
            &mut alloc,
            &place,
        );
        if self.kind == FatType::Fat32 {
            let off = place(root_cluster);
            img[off..off + root.len()].copy_from_slice(&root);
        } else {
            let off = ((l.reserved + 2 * l.fat_size) * 512) as usize;
            img[off..off + root.len()].copy_from_slice(&root);
        }
        // Boot sector.
        let b = &mut img[..512];
        b[0..3].copy_from_slice(&[0xEB, 0x3C, 0x90]);
        b[3..11].copy_from_slice(b"MSWIN4.1");
        b[11..13].copy_from_slice(&512u16.to_le_bytes());
        b[13] = self.sectors_per_cluster;
        b[14..16].copy_from_slice(&(l.reserved as u16).to_le_bytes());
        b[16] = 2;
        b[17..19].copy_from_slice(&(l.root_entries as u16).to_le_bytes());
        if self.total_sectors < 65536 {
            b[19..21].copy_from_slice(&(self.total_sectors as u16).to_le_bytes());
        } else {
            b[32..36].copy_from_slice(&self.total_sectors.to_le_bytes());
        }
        b[21] = 0xF8;
        let mut label = [b' '; 11];
        label[..self.label.len()].copy_from_slice(self.label.as_bytes());
        if self.kind == FatType::Fat32 {
            b[36..40].copy_from_slice(&l.fat_size.to_le_bytes());
            b[44..48].copy_from_slice(&root_cluster.to_le_bytes());
            b[66] = 0x29;
            b[67..71].copy_from_slice(&self.volume_id.to_le_bytes());
            b[71..82].copy_from_slice(&label);
            b[82..90].copy_from_slice(b"FAT32   ");
        } else {
            b[22..24].copy_from_slice(&(l.fat_size as u16).to_le_bytes());
            b[38] = 0x29;
            b[39..43].copy_from_slice(&self.volume_id.to_le_bytes());
            b[43..54].copy_from_slice(&label);
            b[54..62].copy_from_slice(if self.kind == FatType::Fat12 {
                b"FAT12   "
            } else {
                b"FAT16   "
            });
        }
        b[510] = 0x55;
        b[511] = 0xAA;
        // Both FATs.
        let mut table = vec![0u8; l.fat_size as usize * 512];
        for (c, &v) in fat.iter().enumerate() {
            match self.kind {
                FatType::Fat12 => {
                    let v = (v & 0xFFF) as u16;
                    let off = c + c / 2;
                    let cur = u16::from_le_bytes([table[off], table[off + 1]]);
                    let new = if c % 2 == 1 {
                        (cur & 0x000F) | (v << 4)
                    } else {
                        (cur & 0xF000) | v
                    };
                    table[off..off + 2].copy_from_slice(&new.to_le_bytes());
                }
                FatType::Fat16 => {
                    table[2 * c..2 * c + 2].copy_from_slice(&((v & 0xFFFF) as u16).to_le_bytes())
                }
                FatType::Fat32 => {
                    table[4 * c..4 * c + 4].copy_from_slice(&(v & 0x0FFF_FFFF).to_le_bytes())
                }
            }
        }
        for i in 0..2 {
            let off = ((l.reserved + i * l.fat_size) * 512) as usize;
            img[off..off + table.len()].copy_from_slice(&table);
        }
        img
    }
}
