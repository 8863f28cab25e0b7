//! Boot Loader Specification Type #1 entries.
//!
//! Each `loader/entries/<id>.conf` holds `key value` lines (`#` comments): `title`,
//! `version`, `machine-id`, `sort-key`, `linux`, `initrd` (repeatable), `options` (repeatable,
//! joined with spaces), and others that are ignored (`efi`, `devicetree`, `grub_*`). Paths are
//! absolute on the partition holding the entries. `$name` in `options` expands from the grub
//! environment (Fedora writes `options $kernelopts` and keeps `kernelopts` in grubenv).
//!
//! Order (systemd-boot's, and grub blscfg's for entries without `sort-key`): entries with a
//! `sort-key` first, ascending by it, then `machine-id`; then by `version` newest first; then by
//! id newest first ([`vercmp`]). The default is the entry named by `default_spec` (grub's
//! `saved_entry`, or loader.conf's `default` glob): an id, `id.conf`, a glob over ids, a title
//! or an index; otherwise the first.

use std::cmp::Ordering;

use super::version::vercmp;
use super::{
    expand_vars, glob_match, lines, squash_spaces, BootEntry, BootMenu, ConfigError, Vars,
};
use crate::Limits;

/// One parsed entry file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlsEntry {
    /// The file name without `.conf`.
    pub id: String,
    pub title: String,
    pub version: String,
    pub machine_id: String,
    pub sort_key: String,
    pub linux: String,
    pub initrds: Vec<String>,
    pub options: Vec<String>,
}

/// Parses one entry file named `id` (`.conf` stripped); `None` when it has no `linux` line.
pub fn parse_entry(id: &str, text: &str, limits: &Limits) -> Result<Option<BlsEntry>, ConfigError> {
    let mut e = BlsEntry {
        id: id.strip_suffix(".conf").unwrap_or(id).to_string(),
        ..BlsEntry::default()
    };
    for line in lines(text, limits.max_config_lines)? {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once(|c: char| c.is_ascii_whitespace())
            .map(|(k, v)| (k, v.trim()))
            .unwrap_or((line, ""));
        match key {
            "title" => e.title = value.to_string(),
            "version" => e.version = value.to_string(),
            "machine-id" => e.machine_id = value.to_string(),
            "sort-key" => e.sort_key = value.to_string(),
            "linux" => e.linux = value.to_string(),
            "initrd" => e.initrds.extend(value.split_whitespace().map(String::from)),
            "options" => e.options.push(value.to_string()),
            _ => {}
        }
    }
    Ok((!e.linux.is_empty()).then_some(e))
}

/// The BLS order of two entries (see the module docs).
pub fn order(a: &BlsEntry, b: &BlsEntry) -> Ordering {
    match (a.sort_key.is_empty(), b.sort_key.is_empty()) {
        (false, true) => return Ordering::Less,
        (true, false) => return Ordering::Greater,
        (false, false) => {
            let o = a
                .sort_key
                .cmp(&b.sort_key)
                .then_with(|| a.machine_id.cmp(&b.machine_id));
            if o != Ordering::Equal {
                return o;
            }
        }
        (true, true) => {}
    }
    vercmp(&b.version, &a.version).then_with(|| vercmp(&b.id, &a.id))
}

/// Sorts `entries`, expands their options from `vars` and picks the default by `default_spec`.
pub fn menu(mut entries: Vec<BlsEntry>, default_spec: Option<&str>, vars: &Vars) -> BootMenu {
    entries.sort_by(order);
    let default = default_spec
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .and_then(|spec| find_default(&entries, spec));
    let entries: Vec<BootEntry> = entries
        .into_iter()
        .map(|e| BootEntry {
            title: if e.title.is_empty() {
                e.id.clone()
            } else {
                e.title.clone()
            },
            kernel: e.linux,
            initrds: e.initrds,
            cmdline: squash_spaces(&expand_vars(&e.options.join(" "), vars)),
            id: e.id,
            fs: None,
        })
        .collect();
    let default = if entries.is_empty() {
        None
    } else {
        Some(default.unwrap_or(0))
    };
    BootMenu { entries, default }
}

fn find_default(entries: &[BlsEntry], spec: &str) -> Option<usize> {
    let spec_id = spec.strip_suffix(".conf").unwrap_or(spec);
    entries
        .iter()
        .position(|e| e.id == spec_id)
        .or_else(|| entries.iter().position(|e| glob_match(spec_id, &e.id)))
        .or_else(|| entries.iter().position(|e| e.title == spec))
        .or_else(|| spec.parse::<usize>().ok().filter(|&i| i < entries.len()))
}

/// The `default` pattern of a systemd-boot `loader/loader.conf`.
pub fn loader_conf_default(text: &str, limits: &Limits) -> Result<Option<String>, ConfigError> {
    for line in lines(text, limits.max_config_lines)? {
        let mut words = line.split_whitespace();
        if words.next() == Some("default") {
            if let Some(v) = words.next().filter(|v| !v.starts_with('@')) {
                return Ok(Some(v.to_string()));
            }
        }
    }
    Ok(None)
}
