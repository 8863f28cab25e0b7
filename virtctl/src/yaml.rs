//! Objects printed as KubeVirt's virtctl prints them: YAML as `sigs.k8s.io/yaml` writes it
//! (through go-yaml v2), JSON as `json.MarshalIndent(v, "", " ")` writes it.
//!
//! [`serde_yaml`] writes a [`Value`] as go-yaml does (keys sorted, sequences in a mapping not
//! indented, no `---`, strings with a newline as literal blocks), except for strings that
//! written plain would read back as something else: go-yaml double-quotes them, serde_yaml
//! single-quotes numbers, `true`, `null` and `""` and leaves YAML 1.1 booleans (`yes`, `off`)
//! and timestamps (`creationTimestamp`) plain. [`to_yaml`] double-quotes these values.
//!
//! Differences left (none for the manifests `create` writes with sensible flags):
//! - Long strings are not folded at column 80.
//! - Keys are in code-point order; go-yaml compares runs of digits by value (`a2` before
//!   `a10`) and puts other characters before letters (`_x` before `A`). Keys that look like
//!   numbers are single-quoted (go-yaml: double quotes).
//! - `1:20` and `1_000` (sexagesimal, underscores) are plain (go-yaml: double quotes); dates
//!   that do not exist (`2024-02-30`), or followed by text after `T` or a space, are
//!   double-quoted (go-yaml: plain).
//! - Characters outside the Basic Multilingual Plane, and strings starting with a byte order
//!   mark, are written as they are (go-yaml: escaped in double quotes).
//! - Floats: `1000000.0` (go-yaml: `1e+06`).
//! - JSON: keys other than `kind` and `apiVersion` are sorted (KubeVirt: in the order of its Go
//!   structs); `<`, `>`, `&` are not escaped as `\u003c`, `\u003e`, `\u0026`; floats are
//!   written as serde_json writes them (`1e21` for `1e+21`).

use serde::Serialize;
use serde_json::Value;

/// Strings go-yaml v2 reads as a boolean or null.
const NON_STRINGS: &[&str] = &[
    "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
    "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
    ".nan", ".NaN", ".NAN",
];

/// Whether go-yaml writes `text` in double quotes because, plain, it would read back as a
/// boolean, null, number or timestamp.
fn double_quoted(text: &str) -> bool {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let lower = unsigned.to_ascii_lowercase();
    let number = matches!(unsigned.bytes().next(), Some(b'0'..=b'9' | b'.'))
        && (!lower.contains(|c: char| c.is_ascii_alphabetic() && c != 'e')
            && text.parse::<f64>().is_ok()
            || [("0x", 16), ("0o", 8), ("0b", 2)]
                .into_iter()
                .any(|(prefix, radix)| {
                    lower
                        .strip_prefix(prefix)
                        .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_digit(radix)))
                }));
    let date: Vec<&str> = text
        .split(['T', 't', ' '])
        .next()
        .unwrap_or(text)
        .split('-')
        .collect();
    let date = date.len() == 3
        && date[0].len() == 4
        && date[1..].iter().all(|part| (1..=2).contains(&part.len()))
        && date
            .iter()
            .all(|part| part.bytes().all(|b| b.is_ascii_digit()));
    NON_STRINGS.contains(&text) || [".inf", ".Inf", ".INF"].contains(&unsigned) || number || date
}

/// Marks each string to be double-quoted with a placeholder serde_yaml writes plain.
fn mark(value: &mut Value, quoted: &mut Vec<String>) {
    match value {
        Value::String(text) if double_quoted(text) => {
            let text = std::mem::replace(text, format!("\u{e000}{}\u{e001}", quoted.len()));
            quoted.push(text);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| mark(v, quoted)),
        Value::Object(map) => map.values_mut().for_each(|v| mark(v, quoted)),
        _ => {}
    }
}

/// `value` as `sigs.k8s.io/yaml.Marshal` writes it (ends with a newline).
pub fn to_yaml(value: &Value) -> String {
    let mut value = value.clone();
    let mut quoted = Vec::new();
    mark(&mut value, &mut quoted);
    // A JSON value always serializes.
    let mut text = serde_yaml::to_string(&value).unwrap_or_default();
    for (i, original) in quoted.iter().enumerate().rev() {
        text = text.replacen(
            &format!("\u{e000}{i}\u{e001}"),
            &format!("\"{original}\""),
            1,
        );
    }
    text
}

/// `value` as `json.MarshalIndent(value, "", " ")` writes it (no newline at the end).
pub fn to_json(value: &impl Serialize) -> String {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    // Serializing to memory fails only for maps with non-string keys, which JSON has none of.
    let _ = value.serialize(&mut serializer);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
