//! The grub environment block (`/boot/grub/grubenv`, `/boot/grub2/grubenv`): a 1024-byte file
//! that starts with `# GRUB Environment Block`, holds `name=value` lines (a backslash escapes a
//! backslash or a newline in a value) and is padded with `#`.

use super::Vars;

/// Parses a grubenv block into its variables; lines that are not `name=value` are skipped.
pub fn parse_grubenv(text: &str) -> Vars {
    let mut vars = Vars::new();
    let mut logical = String::new();
    for line in text.split('\n').take(4096) {
        // A trailing backslash escapes the newline: the value goes on.
        if let Some(stripped) = line.strip_suffix('\\') {
            if !stripped.ends_with('\\') {
                logical.push_str(stripped);
                logical.push('\n');
                continue;
            }
        }
        logical.push_str(line);
        let full = std::mem::take(&mut logical);
        if full.starts_with('#') {
            continue;
        }
        if let Some((name, value)) = full.split_once('=') {
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                vars.insert(name.to_string(), unescape(value));
            }
        }
    }
    vars
}

fn unescape(v: &str) -> String {
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fedora_block() {
        let mut text = String::from(
            "# GRUB Environment Block\nsaved_entry=abc-6.5.6\nkernelopts=root=UUID=1 ro \
             rhgb\nboot_success=0\n",
        );
        while text.len() < 1024 {
            text.push('#');
        }
        let v = parse_grubenv(&text);
        assert_eq!(v["saved_entry"], "abc-6.5.6");
        assert_eq!(v["kernelopts"], "root=UUID=1 ro rhgb");
        assert_eq!(v.len(), 3);
    }
}
