//! Running grub.cfg statements (see the parent module's steps 2 to 5).

use super::{
    cmdline, condition, expand_all, head, search, split_device, Exec, GrubFile, Item, Scope, Truth,
};
use crate::config::{BootEntry, BootMenu};
use crate::LimitError;

use super::parse::Stmt;
use crate::config::ConfigError;

impl Exec<'_> {
    /// Runs `stmts` in `scope`, adding menu items to `items`. `top` is true outside entries.
    pub(super) fn run(
        &mut self,
        stmts: &[Stmt],
        scope: &mut Scope,
        items: &mut Vec<Item>,
        depth: usize,
        top: bool,
    ) -> Result<(), ConfigError> {
        LimitError::check("grub nesting", depth as u64, self.limits.max_nesting as u64)?;
        for s in stmts {
            if self.stopped {
                return Ok(());
            }
            match s {
                Stmt::Cmd(words) => {
                    let args = expand_all(words, &scope.vars);
                    self.command(&args, scope, top);
                }
                Stmt::If { arms, otherwise } => {
                    self.if_stmt(arms, otherwise, scope, items, depth, top)?
                }
                Stmt::Block { head: h, body } => {
                    let args = expand_all(h, &scope.vars);
                    match args.first().map(String::as_str) {
                        Some("menuentry") => {
                            self.count_entry()?;
                            let (title, id) = head(&args);
                            let mut inner = scope.clone();
                            inner.protected.clear();
                            let mut entry = Draft::default();
                            self.entry_body(body, &mut inner, &mut entry, depth + 1)?;
                            items.push(Item::Entry(entry.finish(title, id)));
                        }
                        Some("submenu") => {
                            self.count_entry()?;
                            let (title, id) = head(&args);
                            let mut inner = scope.clone();
                            let mut sub = Vec::new();
                            self.run(body, &mut inner, &mut sub, depth + 1, true)?;
                            items.push(Item::Submenu {
                                title,
                                id,
                                items: sub,
                            });
                        }
                        // `function` bodies and unknown blocks do not run.
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn count_entry(&mut self) -> Result<(), LimitError> {
        self.entries += 1;
        LimitError::check(
            "grub menu entries",
            self.entries as u64,
            self.limits.max_entries as u64,
        )
    }

    fn if_stmt(
        &mut self,
        arms: &[(Vec<super::Word>, Vec<Stmt>)],
        otherwise: &[Stmt],
        scope: &mut Scope,
        items: &mut Vec<Item>,
        depth: usize,
        top: bool,
    ) -> Result<(), ConfigError> {
        let outer_protected = scope.protected.clone();
        let outer_assigned = std::mem::take(&mut scope.assigned);
        let mut taken = false;
        for (cond, body) in arms {
            let truth = condition(&expand_all(cond, &scope.vars));
            if truth == Truth::False {
                continue;
            }
            self.run(body, scope, items, depth + 1, top)?;
            if truth == Truth::True {
                taken = true;
                break;
            }
            // Unknown: the later branches run too, without overwriting what this one set.
            scope.protected.extend(scope.assigned.iter().cloned());
        }
        if !taken {
            self.run(otherwise, scope, items, depth + 1, top)?;
        }
        scope.protected = outer_protected;
        let inner = std::mem::replace(&mut scope.assigned, outer_assigned);
        scope.assigned.extend(inner);
        Ok(())
    }

    /// A command outside menu entries.
    fn command(&mut self, args: &[String], scope: &mut Scope, top: bool) {
        let Some(cmd) = args.first() else { return };
        match cmd.as_str() {
            "set" => {
                for a in &args[1..] {
                    if let Some((k, v)) = a.split_once('=') {
                        scope.set(k, v.to_string());
                    }
                }
            }
            "unset" => {
                for a in &args[1..] {
                    scope.set(a, String::new());
                    scope.vars.remove(a);
                }
            }
            c if c.starts_with("search") => {
                if let Some((var, value)) = search(c, &args[1..]) {
                    scope.set(&var, value);
                }
            }
            "configfile" if top => {
                if let Some(p) = args.get(1) {
                    let (fs, path) = split_device(p, scope.vars.get("root"));
                    self.configfile = Some(GrubFile { fs, path });
                    self.stopped = true;
                }
            }
            "blscfg" if top => {
                if self.blscfg.is_none() {
                    let (fs, _) = split_device("/", scope.vars.get("root"));
                    self.blscfg = Some(fs);
                }
            }
            c => {
                if let Some((k, v)) = c.split_once('=') {
                    if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        scope.set(k, v.to_string());
                    }
                }
            }
        }
    }

    /// Runs a `menuentry` body, collecting `linux`, `initrd` and the root filesystem.
    fn entry_body(
        &mut self,
        stmts: &[Stmt],
        scope: &mut Scope,
        entry: &mut Draft,
        depth: usize,
    ) -> Result<(), ConfigError> {
        LimitError::check("grub nesting", depth as u64, self.limits.max_nesting as u64)?;
        for s in stmts {
            match s {
                Stmt::Cmd(words) => {
                    let args = expand_all(words, &scope.vars);
                    let Some(cmd) = args.first().map(String::as_str) else {
                        continue;
                    };
                    match cmd {
                        "linux" | "linux16" | "linuxefi" => {
                            if let Some(p) = args.get(1) {
                                let (fs, path) = split_device(p, scope.vars.get("root"));
                                entry.linux = Some((fs, path, cmdline(&args[2..])));
                            }
                        }
                        "initrd" | "initrd16" | "initrdefi" => {
                            entry.initrds = args[1..]
                                .iter()
                                .filter(|a| !a.starts_with("--"))
                                .map(|p| split_device(p, scope.vars.get("root")).1)
                                .collect();
                        }
                        "chainloader" | "multiboot" | "multiboot2" | "kfreebsd" | "knetbsd" => {
                            entry.other = true;
                        }
                        _ => self.command(&args, scope, false),
                    }
                }
                Stmt::If { arms, otherwise } => {
                    // Entries are lenient: the first branch that may be true, else `else`.
                    let mut ran = false;
                    for (cond, body) in arms {
                        if condition(&expand_all(cond, &scope.vars)) != Truth::False {
                            self.entry_body(body, scope, entry, depth + 1)?;
                            ran = true;
                            break;
                        }
                    }
                    if !ran {
                        self.entry_body(otherwise, scope, entry, depth + 1)?;
                    }
                }
                Stmt::Block { .. } => {}
            }
        }
        Ok(())
    }
}

/// A menu entry being collected.
#[derive(Default)]
struct Draft {
    linux: Option<(Option<crate::config::FsRef>, String, String)>,
    initrds: Vec<String>,
    other: bool,
}

impl Draft {
    fn finish(self, title: String, id: String) -> Option<BootEntry> {
        let (fs, kernel, cmdline) = self.linux.filter(|_| !self.other)?;
        Some(BootEntry {
            title,
            id,
            kernel,
            initrds: self.initrds,
            cmdline,
            fs,
        })
    }
}

/// Finds the item `spec` names (see the module docs): the path of indexes to it.
fn resolve(items: &[Item], spec: &str) -> Option<Vec<usize>> {
    let mut path = Vec::new();
    let mut level = items;
    for part in spec.split('>') {
        let part = part.trim();
        let i = part
            .parse::<usize>()
            .ok()
            .filter(|&i| i < level.len())
            .or_else(|| {
                level.iter().position(|it| match it {
                    Item::Entry(Some(e)) => e.id == part || e.title == part,
                    Item::Entry(None) => false,
                    Item::Submenu { title, id, .. } => id == part || title == part,
                })
            })?;
        path.push(i);
        level = match level.get(i)? {
            Item::Submenu { items, .. } => items,
            Item::Entry(_) => &[],
        };
    }
    Some(path)
}

/// The Linux entries depth-first, titles prefixed with their submenus, and the default.
pub(super) fn flatten(items: &[Item], default_spec: &str) -> BootMenu {
    fn walk(
        items: &[Item],
        prefix: &str,
        path: &mut Vec<usize>,
        out: &mut Vec<(Vec<usize>, BootEntry)>,
    ) {
        for (i, it) in items.iter().enumerate() {
            path.push(i);
            match it {
                Item::Entry(Some(e)) => {
                    let mut e = e.clone();
                    e.title = format!("{prefix}{}", e.title);
                    out.push((path.clone(), e));
                }
                Item::Entry(None) => {}
                // Nesting was bounded while running, so this recursion is too.
                Item::Submenu { title, items, .. } => {
                    walk(items, &format!("{prefix}{title}>"), path, out)
                }
            }
            path.pop();
        }
    }
    let mut flat = Vec::new();
    walk(items, "", &mut Vec::new(), &mut flat);
    let want = resolve(items, default_spec).unwrap_or_else(|| vec![0]);
    // The first Linux entry at or under the item named; else the first Linux entry.
    let default = flat
        .iter()
        .position(|(p, _)| p.starts_with(&want))
        .or(if flat.is_empty() { None } else { Some(0) });
    BootMenu {
        entries: flat.into_iter().map(|(_, e)| e).collect(),
        default,
    }
}
