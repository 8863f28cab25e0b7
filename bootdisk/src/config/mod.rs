//! Boot loader configurations, parsed from text: pure functions, no I/O.
//!
//! - [`bls`]: Boot Loader Specification Type #1 entries (`loader/entries/*.conf`), sorted as
//!   systemd-boot and grub's `blscfg` sort them, with `$kernelopts` from grubenv.
//! - [`grub`]: a lenient extractor of `menuentry`/`submenu` blocks, `set default`, `search` and
//!   `configfile` from grub.cfg as Debian, Ubuntu and Fedora write it. Not a grub interpreter.
//! - [`grubenv`]: the 1 KiB grub environment block (`saved_entry`, `next_entry`, `kernelopts`).
//! - [`extlinux`]: extlinux.conf / syslinux.cfg.
//! - [`version`]: rpm-style version comparison, for sorting BLS entries.
//!
//! Every parser returns a [`BootMenu`]: the entries that boot a Linux kernel, in menu order, and
//! the index of the default one. Paths are as written (grub and BLS: absolute on the
//! filesystem named by [`BootEntry::fs`] or the configuration's own; extlinux: made absolute
//! against the configuration's directory).

pub mod bls;
pub mod extlinux;
pub mod grub;
pub mod grubenv;
pub mod version;

use std::collections::BTreeMap;
use std::fmt;

use crate::LimitError;

/// Variables (grubenv, grub.cfg `set`).
pub type Vars = BTreeMap<String, String>;

/// Which filesystem a configuration says its paths are on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsRef {
    /// `search --fs-uuid`, `root=UUID=`-style: compared case-insensitively.
    Uuid(String),
    /// `search --label`.
    Label(String),
    /// `set root='hd0,gpt2'` / `(hd0,msdos1)`: the partition number.
    Partition(u32),
    /// `search --file PATH`: the filesystem that has this file.
    HasFile(String),
}

impl fmt::Display for FsRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Uuid(u) => write!(f, "UUID {u}"),
            Self::Label(l) => write!(f, "label {l:?}"),
            Self::Partition(n) => write!(f, "partition {n}"),
            Self::HasFile(p) => write!(f, "the filesystem with {p}"),
        }
    }
}

/// One bootable entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BootEntry {
    /// As the menu shows it; grub entries in a submenu are `Submenu>Entry`.
    pub title: String,
    /// BLS: the file name without `.conf`; grub: `--id`; extlinux: the `LABEL`.
    pub id: String,
    /// Kernel path.
    pub kernel: String,
    /// Initrd paths, in order (they are concatenated).
    pub initrds: Vec<String>,
    /// Kernel command line.
    pub cmdline: String,
    /// The filesystem the paths are on, when the configuration names one.
    pub fs: Option<FsRef>,
}

/// The entries of one configuration and which one boots by default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BootMenu {
    pub entries: Vec<BootEntry>,
    /// Index into `entries`; `None` only when there are no entries.
    pub default: Option<usize>,
}

impl BootMenu {
    pub fn default_entry(&self) -> Option<&BootEntry> {
        self.default.and_then(|i| self.entries.get(i))
    }
}

/// Why a configuration cannot be parsed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// Splits `text` into lines, refusing more than `max` of them.
pub(crate) fn lines(text: &str, max: usize) -> Result<std::str::Lines<'_>, LimitError> {
    let n = text.lines().count();
    LimitError::check("config lines", n as u64, max as u64)?;
    Ok(text.lines())
}

/// Expands `$name` and `${name}` from `vars` (unknown names expand to nothing).
pub fn expand_vars(s: &str, vars: &Vars) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut name = String::new();
        if chars.peek() == Some(&'{') {
            chars.next();
            for c in chars.by_ref() {
                if c == '}' {
                    break;
                }
                name.push(c);
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    name.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            if name.is_empty() {
                out.push('$');
                continue;
            }
        }
        out.push_str(vars.get(&name).map(String::as_str).unwrap_or(""));
    }
    out
}

/// Collapses runs of whitespace to single spaces and trims.
pub(crate) fn squash_spaces(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Shell-style glob match with `*` and `?` (no recursion: one backtrack point).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `path` made absolute against directory `dir`, with `.` and `..` folded.
pub fn join_path(dir: &str, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let full = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{dir}/{path}")
    };
    for c in full.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_and_globs() {
        let vars = Vars::from([("a".to_string(), "x y".to_string())]);
        assert_eq!(expand_vars("1 $a ${a}2 $ $b.", &vars), "1 x y x y2 $ .");
        assert!(glob_match("fedora-*", "fedora-6.5.conf"));
        assert!(glob_match("*6.?*", "abc-6.5"));
        assert!(!glob_match("a*b", "acbc"));
        assert!(glob_match("a*b*", "acbc"));
        assert_eq!(join_path("/boot", "vmlinuz"), "/boot/vmlinuz");
        assert_eq!(join_path("/boot/x", "../../vmlinuz"), "/vmlinuz");
        assert_eq!(join_path("/boot", "/vmlinuz"), "/vmlinuz");
    }
}
