//! extlinux.conf / syslinux.cfg.
//!
//! Keywords are case-insensitive, one per line: `DEFAULT name`, `UI module`, `LABEL name`
//! starts an entry, then `KERNEL`/`LINUX path`, `INITRD path[,path...]`, `APPEND args`
//! (`APPEND -` means none; an `initrd=` in it names initrds too and is taken out of the command
//! line), `MENU LABEL title`, `MENU DEFAULT`. Relative paths are relative to the configuration
//! file's directory. Entries whose kernel is a COM32 module (`.c32`) or that `LOCALBOOT` are not
//! Linux entries and are skipped.
//!
//! The default: with a menu UI (`UI menu.c32`, or `DEFAULT` naming a `.c32` module) the
//! `MENU DEFAULT` entry, else the `LABEL` that `DEFAULT` names; then the other of the two; then
//! the first entry. A `DEFAULT` that names no label but a kernel (`DEFAULT vmlinuz root=...`) is
//! an entry of its own.

use super::{join_path, lines, squash_spaces, BootEntry, BootMenu, ConfigError};
use crate::{LimitError, Limits};

#[derive(Default)]
struct Label {
    name: String,
    title: String,
    kernel: String,
    initrds: Vec<String>,
    append: String,
    menu_default: bool,
    localboot: bool,
}

/// Parses `text`, the configuration at directory `config_dir` (e.g. `/boot/extlinux`).
pub fn parse_extlinux(
    text: &str,
    config_dir: &str,
    limits: &Limits,
) -> Result<BootMenu, ConfigError> {
    let mut labels: Vec<Label> = Vec::new();
    let mut default = String::new();
    let mut ui_menu = false;
    for raw in lines(text, limits.max_config_lines)? {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, rest) = split_word(line);
        let key = key.to_ascii_lowercase();
        let cur = labels.last_mut();
        match (key.as_str(), cur) {
            ("default", _) => default = rest.to_string(),
            ("ui", _) => ui_menu = true,
            ("label", _) => {
                LimitError::check(
                    "extlinux labels",
                    labels.len() as u64 + 1,
                    limits.max_entries as u64,
                )?;
                labels.push(Label {
                    name: rest.to_string(),
                    ..Label::default()
                });
            }
            ("menu", cur) => {
                let (sub, arg) = split_word(rest);
                match (sub.to_ascii_lowercase().as_str(), cur) {
                    ("label", Some(l)) => l.title = arg.replace('^', ""),
                    ("default", Some(l)) => l.menu_default = true,
                    _ => {}
                }
            }
            ("kernel" | "linux", Some(l)) => l.kernel = rest.to_string(),
            ("initrd", Some(l)) => l.initrds.extend(
                rest.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            ),
            ("append", Some(l)) => l.append = rest.to_string(),
            ("localboot", Some(l)) => l.localboot = true,
            _ => {}
        }
    }
    let mut entries = Vec::new();
    let mut menu_default = None;
    let mut named_default = None;
    let (default_word, default_args) = split_word(&default);
    let default_is_module = default_word.to_ascii_lowercase().ends_with(".c32");
    for l in labels {
        if l.localboot || l.kernel.is_empty() || l.kernel.to_ascii_lowercase().ends_with(".c32") {
            continue;
        }
        if l.menu_default && menu_default.is_none() {
            menu_default = Some(entries.len());
        }
        if !default.is_empty() && l.name == default_word && named_default.is_none() {
            named_default = Some(entries.len());
        }
        entries.push(entry(&l, config_dir));
    }
    if named_default.is_none()
        && !default_word.is_empty()
        && !default_is_module
        && entries.iter().all(|e| e.id != default_word)
    {
        // `DEFAULT kernel args`: a command line, not a label.
        named_default = Some(entries.len());
        entries.push(entry(
            &Label {
                name: default_word.to_string(),
                title: default_word.to_string(),
                kernel: default_word.to_string(),
                append: default_args.to_string(),
                ..Label::default()
            },
            config_dir,
        ));
    }
    let chosen = if ui_menu || default_is_module {
        menu_default.or(named_default)
    } else {
        named_default.or(menu_default)
    };
    let default = if entries.is_empty() {
        None
    } else {
        Some(chosen.unwrap_or(0))
    };
    Ok(BootMenu { entries, default })
}

fn entry(l: &Label, dir: &str) -> BootEntry {
    let mut initrds: Vec<String> = l.initrds.iter().map(|p| join_path(dir, p)).collect();
    let mut args = Vec::new();
    if l.append.trim() != "-" {
        for a in l.append.split_whitespace() {
            match a.strip_prefix("initrd=") {
                Some(list) => initrds.extend(
                    list.split(',')
                        .filter(|s| !s.is_empty())
                        .map(|p| join_path(dir, p)),
                ),
                None => args.push(a),
            }
        }
    }
    BootEntry {
        title: if l.title.is_empty() {
            l.name.clone()
        } else {
            l.title.clone()
        },
        id: l.name.clone(),
        kernel: join_path(dir, &l.kernel),
        initrds,
        cmdline: squash_spaces(&args.join(" ")),
        fs: None,
    }
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim();
    match s.split_once(|c: char| c.is_ascii_whitespace()) {
        Some((a, b)) => (a, b.trim()),
        None => (s, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpine() {
        let text = "DEFAULT menu.c32\nPROMPT 0\nMENU TITLE Alpine/Linux Boot Menu\nMENU HIDDEN\n\
                    TIMEOUT 10\nLABEL lts\n  MENU LABEL Linux lts\n  LINUX vmlinuz-lts\n  \
                    INITRD initramfs-lts\n  APPEND root=UUID=1 quiet\nLABEL virt\n  MENU DEFAULT\n  \
                    MENU LABEL Linux virt\n  LINUX vmlinuz-virt\n  INITRD initramfs-virt\n  \
                    APPEND root=UUID=2 modules=sd-mod,ext4 quiet rootfstype=ext4\nMENU SEPARATOR\n";
        let m = parse_extlinux(text, "/boot", &Limits::default()).unwrap();
        let e = m.default_entry().unwrap();
        assert_eq!(e.title, "Linux virt");
        assert_eq!(e.kernel, "/boot/vmlinuz-virt");
        assert_eq!(e.initrds, ["/boot/initramfs-virt"]);
        assert_eq!(
            e.cmdline,
            "root=UUID=2 modules=sd-mod,ext4 quiet rootfstype=ext4"
        );
    }

    #[test]
    fn default_label_and_append_initrd() {
        let text = "default b\nlabel a\nkernel /a\nlabel b\nkernel ../vmlinuz\n\
                    append initrd=/initrd.img,/extra.img root=/dev/vda1 ro\n";
        let m = parse_extlinux(text, "/boot/extlinux", &Limits::default()).unwrap();
        let e = m.default_entry().unwrap();
        assert_eq!(e.kernel, "/boot/vmlinuz");
        assert_eq!(e.initrds, ["/initrd.img", "/extra.img"]);
        assert_eq!(e.cmdline, "root=/dev/vda1 ro");
    }

    #[test]
    fn default_is_a_command_line() {
        let m = parse_extlinux(
            "DEFAULT /vmlinuz root=/dev/sda ro\n",
            "/",
            &Limits::default(),
        )
        .unwrap();
        let e = m.default_entry().unwrap();
        assert_eq!(
            (e.kernel.as_str(), e.cmdline.as_str()),
            ("/vmlinuz", "root=/dev/sda ro")
        );
    }
}
