//! grub.cfg, as Debian's and Ubuntu's `update-grub` and Fedora's `grub2-mkconfig` write it, and
//! the EFI stub configurations that `search` for the real one and `configfile` it.
//!
//! A careful, lenient extractor, not an interpreter:
//! 1. [`lexer`] turns the text into words with grub's quoting; [`parse`] into commands, blocks
//!    and `if` statements.
//! 2. Top-level commands run in order over a variable table seeded from grubenv (grub.cfg
//!    `load_env`s it first thing) and grub's feature variables (`feature_* = y`,
//!    `grub_platform = pc`): `set`, `unset`, `NAME=VALUE`, `search` (which sets its variable to
//!    the filesystem it names), `configfile` (recorded, and the rest of the file ignored, as grub
//!    would leave it), `blscfg` (recorded).
//! 3. `if` conditions of the `[ ... ]` forms grub.cfg uses (`-n`, `-z`, `=`, `!=`, a bare string)
//!    are evaluated when every variable is known; any other condition counts as true, and its
//!    `else` branches run too but cannot overwrite a variable the first branch set (Debian's
//!    `menuentry_id_option` dance ends as `--id`).
//! 4. `menuentry TITLE [--class X] [--id ID] ... { ... }` bodies run in a copy of the variables;
//!    `linux`/`linux16`/`linuxefi` give the kernel and arguments, `initrd*` the initrds, and the
//!    `root` variable (or a `(device)` prefix on the path) the filesystem. `submenu` nests, up to
//!    [`Limits::max_nesting`]. `function` bodies are skipped.
//! 5. `default` resolves as grub does: an index, `N>M` into a submenu, an id or a title
//!    (`Submenu>Entry` too), otherwise 0.
//!
//! [`Limits::max_nesting`]: crate::Limits::max_nesting

mod lexer;
mod parse;

use std::collections::BTreeSet;

use super::{lines, BootEntry, BootMenu, ConfigError, FsRef, Vars};
use crate::Limits;
use lexer::{Part, Word};
use parse::Parser;

/// A file named by grub.cfg: on which filesystem and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrubFile {
    pub fs: Option<FsRef>,
    pub path: String,
}

/// What a grub.cfg says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GrubConfig {
    /// The `menuentry`s that boot Linux and the default among them.
    pub menu: BootMenu,
    /// The `default` variable as the file left it (for matching BLS entries).
    pub default_spec: String,
    /// The file a top-level `configfile` loads instead (EFI stubs).
    pub configfile: Option<GrubFile>,
    /// `blscfg` was called: BLS entries are on this filesystem (`None`: grub.cfg's own).
    pub blscfg: Option<Option<FsRef>>,
    /// The variables at the end, for expanding `$kernelopts` in BLS entries.
    pub vars: Vars,
}

/// A menu item while running.
#[derive(Debug, Clone)]
enum Item {
    Entry(Option<BootEntry>),
    Submenu {
        title: String,
        id: String,
        items: Vec<Item>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    True,
    False,
    Unknown,
}

struct Exec<'a> {
    limits: &'a Limits,
    configfile: Option<GrubFile>,
    blscfg: Option<Option<FsRef>>,
    entries: usize,
    stopped: bool,
}

/// One variable scope: the table, and names a lenient `else` must not overwrite.
#[derive(Clone)]
struct Scope {
    vars: Vars,
    protected: BTreeSet<String>,
    assigned: BTreeSet<String>,
}

impl Scope {
    fn set(&mut self, name: &str, value: String) {
        if self.protected.contains(name) {
            return;
        }
        self.assigned.insert(name.to_string());
        self.vars.insert(name.to_string(), value);
    }
}

/// Parses grub.cfg `text`, with `env` the variables of the grubenv next to it.
pub fn parse_grub_cfg(text: &str, env: &Vars, limits: &Limits) -> Result<GrubConfig, ConfigError> {
    let _ = lines(text, limits.max_config_lines)?;
    let stmts = Parser::new(lexer::tokenize(text), limits.max_nesting).parse()?;
    let mut vars = env.clone();
    for (k, v) in [
        ("grub_platform", "pc"),
        ("grub_cpu", "i386"),
        ("feature_menuentry_id", "y"),
        ("feature_default_font_path", "y"),
        ("feature_all_video_module", "y"),
        ("feature_timeout_style", "y"),
        ("feature_platform_search_hint", "y"),
        ("feature_chainloader_bpb", "y"),
        ("feature_ntldr", "y"),
        ("menuentry_id_option", "--id"),
    ] {
        vars.entry(k.to_string()).or_insert_with(|| v.to_string());
    }
    let mut scope = Scope {
        vars,
        protected: BTreeSet::new(),
        assigned: BTreeSet::new(),
    };
    let mut ex = Exec {
        limits,
        configfile: None,
        blscfg: None,
        entries: 0,
        stopped: false,
    };
    let mut items = Vec::new();
    ex.run(&stmts, &mut scope, &mut items, 0, true)?;
    let default_spec = scope.vars.get("default").cloned().unwrap_or_default();
    let menu = flatten(&items, &default_spec);
    Ok(GrubConfig {
        menu,
        default_spec,
        configfile: ex.configfile,
        blscfg: ex.blscfg,
        vars: scope.vars,
    })
}

/// Expands a word into fields: unquoted variables split on whitespace.
fn expand(word: &Word, vars: &Vars) -> Vec<String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut keep = word.quoted;
    for p in &word.parts {
        match p {
            Part::Lit(s) => cur.push_str(s),
            Part::Var { name, quoted } => {
                let v = vars.get(name).map(String::as_str).unwrap_or("");
                if *quoted {
                    cur.push_str(v);
                    continue;
                }
                for (i, piece) in v.split_whitespace().enumerate() {
                    let starts_ws = i == 0 && v.starts_with(char::is_whitespace);
                    if (i > 0 || starts_ws) && (!cur.is_empty() || keep) {
                        fields.push(std::mem::take(&mut cur));
                        keep = false;
                    }
                    cur.push_str(piece);
                }
            }
        }
    }
    if !cur.is_empty() || keep {
        fields.push(cur);
    }
    fields
}

fn expand_all(words: &[Word], vars: &Vars) -> Vec<String> {
    words.iter().flat_map(|w| expand(w, vars)).collect()
}

/// A grub device (`hd0,gpt2`, `(hd0,msdos1)`, or what `search` stored) as a filesystem.
fn device_ref(dev: &str) -> Option<FsRef> {
    let dev = dev.trim().trim_start_matches('(').trim_end_matches(')');
    if let Some(u) = dev.strip_prefix("uuid=") {
        return Some(FsRef::Uuid(u.to_string()));
    }
    if let Some(l) = dev.strip_prefix("label=") {
        return Some(FsRef::Label(l.to_string()));
    }
    if let Some(f) = dev.strip_prefix("file=") {
        return Some(FsRef::HasFile(f.to_string()));
    }
    let (disk, part) = dev.split_once(',')?;
    if !disk.starts_with("hd") {
        return None;
    }
    let part = part.split(',').next()?;
    let digits = part.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    digits.parse().ok().map(FsRef::Partition)
}

/// Splits `(dev)/path` into the device's filesystem and the path.
fn split_device(path: &str, root: Option<&String>) -> (Option<FsRef>, String) {
    if let Some(rest) = path.strip_prefix('(') {
        if let Some((dev, p)) = rest.split_once(')') {
            let p = if p.is_empty() { "/" } else { p };
            return (device_ref(dev), p.to_string());
        }
    }
    (root.and_then(|r| device_ref(r)), path.to_string())
}

/// Parses `search` / `search.fs_uuid` / `search.fs_label` / `search.file` arguments into the
/// variable it sets and the value to store.
fn search(cmd: &str, args: &[String]) -> Option<(String, String)> {
    let mut kind = match cmd {
        "search.fs_uuid" => "uuid",
        "search.fs_label" => "label",
        "search.file" => "file",
        _ => "file",
    };
    let mut var = None;
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--fs-uuid" | "-u" => kind = "uuid",
            "--label" | "-l" => kind = "label",
            "--file" | "-f" => kind = "file",
            "--set" | "-s" => var = Some("root".to_string()),
            a if a.starts_with("--set=") => var = a.get(6..).map(String::from),
            a if a.starts_with("--hint") && !a.contains('=') => {
                it.next();
            }
            a if a.starts_with('-') => {}
            a => positional.push(a.to_string()),
        }
    }
    let key = positional.first()?.clone();
    if cmd != "search" {
        var = Some(positional.get(1).cloned().unwrap_or_else(|| "root".into()));
    }
    Some((
        var.unwrap_or_else(|| "root".into()),
        format!("{kind}={key}"),
    ))
}

/// Evaluates a `[ ... ]` / `test ...` condition.
fn condition(words: &[String]) -> Truth {
    let mut w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.first() {
        Some(&"[") if w.last() == Some(&"]") => {
            w.pop();
            w.remove(0);
        }
        Some(&"test") => {
            w.remove(0);
        }
        _ => return Truth::Unknown,
    }
    let mut negate = false;
    if w.first() == Some(&"!") {
        negate = true;
        w.remove(0);
    }
    let t = match w.as_slice() {
        [s] => !s.is_empty(),
        ["-n", s] => !s.is_empty(),
        ["-z", s] => s.is_empty(),
        [a, "=" | "==", b] => a == b,
        [a, "!=", b] => a != b,
        _ => return Truth::Unknown,
    };
    if t != negate {
        Truth::True
    } else {
        Truth::False
    }
}

/// Parsed `menuentry`/`submenu` head: title and id.
fn head(words: &[String]) -> (String, String) {
    let (mut title, mut id) = (None, String::new());
    let mut it = words.iter().skip(1);
    while let Some(w) = it.next() {
        match w.as_str() {
            "--class" | "--users" | "--hotkey" | "--source" => {
                it.next();
            }
            "--id" => id = it.next().cloned().unwrap_or_default(),
            w if w.starts_with("--") => {}
            w if title.is_none() => title = Some(w.to_string()),
            _ => {}
        }
    }
    (title.unwrap_or_default(), id)
}

/// Joins kernel arguments as grub does: one space, arguments with spaces quoted.
fn cmdline(args: &[String]) -> String {
    args.iter()
        .filter(|a| !a.is_empty())
        .map(|a| {
            if a.contains(char::is_whitespace) {
                format!("\"{}\"", a.replace('\\', "\\\\").replace('"', "\\\""))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

mod run;
use run::flatten;

#[cfg(test)]
mod tests;
