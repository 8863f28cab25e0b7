//! Fuzzes BLS entry parsing, sorting and default selection: the input is split into entry
//! files at NUL bytes; the first part is the default pattern.
#![no_main]

mod common;

use bootdisk::config::{bls, Vars};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let default = parts.next().unwrap_or_default().to_string();
    let limits = common::limits();
    let mut entries = Vec::new();
    for (i, part) in parts.take(64).enumerate() {
        if let Ok(Some(e)) = bls::parse_entry(&format!("entry-{i}.conf"), part, &limits) {
            entries.push(e);
        }
    }
    let vars = Vars::from([("kernelopts".to_string(), default.clone())]);
    let menu = bls::menu(entries, Some(&default), &vars);
    assert!(menu.entries.is_empty() == menu.default.is_none());
    let _ = bls::loader_conf_default(&text, &limits);
});
