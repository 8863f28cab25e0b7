//! The search for a boot entry over the volumes of a disk (steps 3 to 5 of the parent module).

use super::volumes::{boot_order, error_chain, Volume};
use super::{BootMethod, BootSelection, BootSource, FileRef, FindBootError};
use crate::config::{bls, extlinux, grub, grubenv, BootEntry, ConfigError, FsRef, Vars};
use crate::fs::{FileKind, Filesystem, FsError};
use crate::image::ImageFormat;
use crate::source::{BlockSource, Window};
use crate::{LimitError, Limits};

const GRUB_PATHS: [&str; 4] = [
    "/boot/grub/grub.cfg",
    "/boot/grub2/grub.cfg",
    "/grub/grub.cfg",
    "/grub2/grub.cfg",
];
const BLS_DIRS: [&str; 2] = ["/loader/entries", "/boot/loader/entries"];
const EXTLINUX_PATHS: [&str; 8] = [
    "/boot/extlinux/extlinux.conf",
    "/boot/extlinux.conf",
    "/extlinux/extlinux.conf",
    "/extlinux.conf",
    "/boot/syslinux/syslinux.cfg",
    "/boot/syslinux/extlinux.conf",
    "/syslinux/syslinux.cfg",
    "/syslinux.cfg",
];

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

fn limit(context: impl Into<String>, source: LimitError) -> FindBootError {
    FindBootError::LimitExceeded {
        context: context.into(),
        source,
    }
}

fn config_limit(context: &str, e: ConfigError) -> FindBootError {
    match e {
        ConfigError::Limit(l) => limit(context, l),
    }
}

pub(super) struct Scan<'a, D> {
    img: &'a mut D,
    vols: &'a [Volume],
    limits: &'a Limits,
    format: ImageFormat,
    /// The first failure of a configuration whose entry could not be booted.
    first_error: Option<FindBootError>,
}

impl<'a, D: BlockSource> Scan<'a, D> {
    pub(super) fn new(
        img: &'a mut D,
        vols: &'a [Volume],
        limits: &'a Limits,
        format: ImageFormat,
    ) -> Self {
        Self {
            img,
            vols,
            limits,
            format,
            first_error: None,
        }
    }

    pub(super) fn run(&mut self) -> Result<BootSelection, FindBootError> {
        let order = boot_order(self.vols);
        for &v in &order {
            if let Some(sel) = self.configs(v)? {
                return Ok(sel);
            }
        }
        for &v in &order {
            if let Some(sel) = self.symlinks(v)? {
                return Ok(sel);
            }
        }
        if let Some(e) = self.first_error.take() {
            return Err(e);
        }
        let fs: Vec<String> = order.iter().map(|&v| self.vols[v].to_string()).collect();
        Err(FindBootError::NoKernel(fs.join(", ")))
    }

    fn soft(&mut self, e: FindBootError) {
        log::warn!("{}", error_chain(&e));
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }

    fn part_no(&self, v: usize) -> Option<u32> {
        self.vols[v].partition.as_ref().map(|p| p.index)
    }

    fn file_ref(&self, v: usize, path: &str) -> FileRef {
        FileRef {
            partition: self.part_no(v),
            path: path.to_string(),
        }
    }

    fn with_fs<T>(
        &mut self,
        v: usize,
        f: impl FnOnce(&mut Filesystem<Window<&mut D>>) -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        let vol = &self.vols[v];
        let w = Window::new(&mut *self.img, vol.start, vol.size);
        match Filesystem::open(w, self.limits)? {
            Some(mut fs) => f(&mut fs),
            None => Err(FsError::NotFound("/".into())),
        }
    }

    /// A configuration file's text; `None` when it is missing or unreadable (logged).
    fn read_text(&mut self, v: usize, path: &str) -> Result<Option<String>, FindBootError> {
        let max = self.limits.max_config_size;
        match self.with_fs(v, |fs| fs.read_file(path, max)) {
            Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
            Err(FsError::Limit(l)) => Err(limit(format!("{}", self.file_ref(v, path)), l)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => {
                log::warn!("{}: {}", self.file_ref(v, path), error_chain(&e));
                Ok(None)
            }
        }
    }

    fn list(&mut self, v: usize, dir: &str) -> Vec<crate::fs::DirEntry> {
        self.with_fs(v, |fs| fs.read_dir(dir)).unwrap_or_default()
    }

    fn is_file(&mut self, v: usize, path: &str) -> bool {
        self.with_fs(v, |fs| fs.is_file(path)).unwrap_or(false)
    }

    /// The volume a configuration's filesystem reference names.
    fn resolve(&mut self, r: &FsRef) -> Option<usize> {
        let vols = self.vols;
        let readable = |i: &usize| vols[*i].is_readable();
        let info = |i: usize| {
            vols[i].fs.clone().unwrap_or_else(|| crate::fs::FsInfo {
                kind: crate::fs::FsKind::Other(""),
                uuid: String::new(),
                label: String::new(),
            })
        };
        let found = match r {
            FsRef::Uuid(u) => (0..vols.len())
                .filter(readable)
                .find(|&i| info(i).uuid.eq_ignore_ascii_case(u)),
            FsRef::Label(l) => (0..vols.len())
                .filter(readable)
                .find(|&i| info(i).label == *l),
            FsRef::Partition(n) => (0..vols.len())
                .filter(readable)
                .find(|&i| vols[i].partition.as_ref().is_some_and(|p| p.index == *n)),
            FsRef::HasFile(p) => (0..vols.len())
                .filter(readable)
                .find(|&i| self.is_file(i, p)),
        };
        if found.is_none() {
            log::warn!("no readable filesystem is {r}; using the configuration's own");
        }
        found
    }

    /// Every configuration on volume `v`, in order.
    fn configs(&mut self, v: usize) -> Result<Option<BootSelection>, FindBootError> {
        let mut grub_paths = Vec::new();
        if self.vols[v].is_esp() {
            let mut dirs: Vec<String> = self
                .list(v, "/EFI")
                .into_iter()
                .filter(|e| e.kind == FileKind::Directory)
                .map(|e| e.name)
                .collect();
            dirs.sort_by_key(|d| (d.eq_ignore_ascii_case("boot"), d.to_ascii_lowercase()));
            grub_paths.extend(dirs.iter().take(64).map(|d| format!("/EFI/{d}/grub.cfg")));
        }
        grub_paths.extend(GRUB_PATHS.iter().map(|p| p.to_string()));
        for p in grub_paths {
            if let Some(sel) = self.grub(v, &p, Vec::new(), 0)? {
                return Ok(Some(sel));
            }
        }
        let default = match self.read_text(v, "/loader/loader.conf")? {
            Some(t) => bls::loader_conf_default(&t, self.limits)
                .map_err(|e| config_limit("loader.conf", e))?,
            None => None,
        };
        let mut vars = Vars::new();
        for env in ["/boot/grub2/grubenv", "/grub2/grubenv"] {
            if let Some(t) = self.read_text(v, env)? {
                vars = grubenv::parse_grubenv(&t);
                break;
            }
        }
        if let Some(sel) = self.bls(v, default.as_deref(), &vars, Vec::new())? {
            return Ok(Some(sel));
        }
        for p in EXTLINUX_PATHS {
            let Some(text) = self.read_text(v, p)? else {
                continue;
            };
            let menu = extlinux::parse_extlinux(&text, parent(p), self.limits)
                .map_err(|e| config_limit(p, e))?;
            if let Some(e) = menu.default_entry() {
                let here = self.file_ref(v, p);
                if let Some(sel) = self.boot(v, e, BootMethod::Extlinux, here, Vec::new())? {
                    return Ok(Some(sel));
                }
            }
        }
        Ok(None)
    }

    fn grub(
        &mut self,
        v: usize,
        path: &str,
        mut via: Vec<FileRef>,
        hops: u32,
    ) -> Result<Option<BootSelection>, FindBootError> {
        let Some(text) = self.read_text(v, path)? else {
            return Ok(None);
        };
        let env = match self.read_text(v, &format!("{}/grubenv", parent(path)))? {
            Some(t) => grubenv::parse_grubenv(&t),
            None => Vars::new(),
        };
        let here = self.file_ref(v, path);
        let cfg = grub::parse_grub_cfg(&text, &env, self.limits)
            .map_err(|e| config_limit(&here.to_string(), e))?;
        if let Some(next) = &cfg.configfile {
            if hops >= self.limits.max_config_hops {
                self.soft(limit(
                    here.to_string(),
                    LimitError {
                        what: "configfile hops",
                        value: u64::from(hops) + 1,
                        limit: u64::from(self.limits.max_config_hops),
                    },
                ));
                return Ok(None);
            }
            let target = next.fs.as_ref().and_then(|r| self.resolve(r)).unwrap_or(v);
            via.push(here);
            return self.grub(target, &next.path, via, hops + 1);
        }
        if let Some(bls_fs) = &cfg.blscfg {
            let target = bls_fs.as_ref().and_then(|r| self.resolve(r)).unwrap_or(v);
            let mut bls_via = via.clone();
            bls_via.push(here.clone());
            if let Some(sel) = self.bls(target, Some(&cfg.default_spec), &cfg.vars, bls_via)? {
                return Ok(Some(sel));
            }
        }
        let Some(entry) = cfg.menu.default_entry() else {
            return Ok(None);
        };
        let target = entry.fs.as_ref().and_then(|r| self.resolve(r)).unwrap_or(v);
        self.boot(target, entry, BootMethod::Grub, here, via)
    }

    fn bls(
        &mut self,
        v: usize,
        default: Option<&str>,
        vars: &Vars,
        via: Vec<FileRef>,
    ) -> Result<Option<BootSelection>, FindBootError> {
        for dir in BLS_DIRS {
            let mut names: Vec<String> = self
                .list(v, dir)
                .into_iter()
                .filter(|e| e.kind == FileKind::File && e.name.ends_with(".conf"))
                .map(|e| e.name)
                .collect();
            if names.is_empty() {
                continue;
            }
            LimitError::check(
                "BLS entries",
                names.len() as u64,
                self.limits.max_entries as u64,
            )
            .map_err(|l| limit(dir, l))?;
            names.sort();
            let mut entries = Vec::new();
            for n in names {
                let path = format!("{dir}/{n}");
                let Some(text) = self.read_text(v, &path)? else {
                    continue;
                };
                if let Some(e) =
                    bls::parse_entry(&n, &text, self.limits).map_err(|e| config_limit(&path, e))?
                {
                    entries.push(e);
                }
            }
            let menu = bls::menu(entries, default, vars);
            if let Some(e) = menu.default_entry() {
                let here = self.file_ref(v, &format!("{dir}/{}.conf", e.id));
                return self.boot(v, e, BootMethod::Bls, here, via);
            }
        }
        Ok(None)
    }

    /// `path` on volume `v`, or with `/boot` removed or added when that is where it is.
    fn locate(&mut self, v: usize, path: &str) -> Option<String> {
        let alt = match path.strip_prefix("/boot/") {
            Some(rest) => format!("/{rest}"),
            None => format!("/boot{path}"),
        };
        [path.to_string(), alt]
            .into_iter()
            .find(|p| self.is_file(v, p))
    }

    fn read_boot_file(
        &mut self,
        v: usize,
        path: &str,
        entry: &BootEntry,
        config: &FileRef,
        budget: &mut u64,
    ) -> Result<Option<Vec<u8>>, FindBootError> {
        let max = self.limits.max_file_size.min(*budget);
        match self.with_fs(v, |fs| fs.read_file(path, max)) {
            Ok(b) => {
                *budget -= b.len() as u64;
                Ok(Some(b))
            }
            Err(FsError::Limit(l)) => Err(limit(
                format!("{config} entry '{}': {path}", entry.title),
                l,
            )),
            Err(source) => {
                self.soft(FindBootError::ReadBootFile {
                    config: config.to_string(),
                    entry: entry.title.clone(),
                    path: path.to_string(),
                    source,
                });
                Ok(None)
            }
        }
    }

    /// Reads `entry`'s kernel and initrds from volume `v`.
    fn boot(
        &mut self,
        v: usize,
        entry: &BootEntry,
        method: BootMethod,
        config: FileRef,
        via: Vec<FileRef>,
    ) -> Result<Option<BootSelection>, FindBootError> {
        let mut paths = Vec::new();
        for p in std::iter::once(&entry.kernel).chain(&entry.initrds) {
            match self.locate(v, p) {
                Some(found) => paths.push(found),
                None => {
                    self.soft(FindBootError::KernelMissing {
                        config: config.to_string(),
                        entry: entry.title.clone(),
                        path: format!("{}", self.file_ref(v, p)),
                    });
                    return Ok(None);
                }
            }
        }
        let mut budget = self.limits.max_boot_size;
        let mut files = Vec::new();
        for p in &paths {
            match self.read_boot_file(v, p, entry, &config, &mut budget)? {
                Some(b) => files.push(b),
                None => return Ok(None),
            }
        }
        let mut files = files.into_iter();
        let kernel = files.next().unwrap_or_default();
        let initrd = files.flatten().collect();
        let canonical = |s: &mut Self, p: &str| {
            s.with_fs(v, |fs| fs.canonical_path(p))
                .unwrap_or_else(|_| p.to_string())
        };
        let kernel_path = canonical(self, &paths[0]);
        let initrd_paths = paths[1..].iter().map(|p| canonical(self, p)).collect();
        Ok(Some(BootSelection {
            kernel,
            initrd,
            cmdline: entry.cmdline.clone(),
            source: BootSource {
                image: self.format,
                method,
                partition: self.part_no(v),
                fs: self.vols[v]
                    .fs
                    .clone()
                    .unwrap_or_else(|| crate::fs::FsInfo {
                        kind: crate::fs::FsKind::Other("unknown"),
                        uuid: String::new(),
                        label: String::new(),
                    }),
                config: (method != BootMethod::KernelSymlinks).then_some(config),
                via,
                entry_title: entry.title.clone(),
                kernel_path,
                initrd_paths,
            },
        }))
    }

    /// Debian's `/vmlinuz` and `/initrd.img` symlinks on volume `v`.
    fn symlinks(&mut self, v: usize) -> Result<Option<BootSelection>, FindBootError> {
        for (k, i) in [
            ("/vmlinuz", "/initrd.img"),
            ("/boot/vmlinuz", "/boot/initrd.img"),
        ] {
            if !self.is_file(v, k) {
                continue;
            }
            let uuid = self.vols[v]
                .fs
                .as_ref()
                .map(|f| f.uuid.clone())
                .unwrap_or_default();
            let entry = BootEntry {
                kernel: k.to_string(),
                initrds: if self.is_file(v, i) {
                    vec![i.to_string()]
                } else {
                    Vec::new()
                },
                cmdline: if uuid.is_empty() {
                    "ro".into()
                } else {
                    format!("root=UUID={uuid} ro")
                },
                ..BootEntry::default()
            };
            let here = self.file_ref(v, k);
            if let Some(sel) = self.boot(v, &entry, BootMethod::KernelSymlinks, here, Vec::new())? {
                return Ok(Some(sel));
            }
        }
        Ok(None)
    }
}
