//! What the manifest tests share: where the manifests live, and the check of each manifest
//! against its expected outcome.
//!
//! Two directories are checked the same way: `testdata/manifests/` (the project's own, written
//! for these tests, so `cargo test` needs nothing beside the repository) and, in the
//! compatibility tier (`--features compat`), KubeVirt's own example manifests and OpenAPI
//! document, from the directory `FERROVIRT_FIXTURES` names.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use api::object::{KubeVirtObject, ParseError};
use serde_json::Value;

/// The project's own manifests.
pub fn testdata_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/manifests")
}

/// KubeVirt's fixtures for the compatibility tier: `$FERROVIRT_FIXTURES`, a directory with
/// `kubevirt-examples/` (KubeVirt's example manifests) and `kubevirt-openapi/swagger.json`; a
/// relative path is taken from the repository's root (cargo runs tests in the package's).
pub fn kubevirt_fixtures_dir() -> PathBuf {
    let Some(dir) = std::env::var_os("FERROVIRT_FIXTURES").map(PathBuf::from) else {
        panic!(
            "the compatibility tier needs KubeVirt's fixtures: set FERROVIRT_FIXTURES=DIR, a \
             directory holding kubevirt-examples/ and kubevirt-openapi/swagger.json"
        )
    };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(dir);
    assert!(
        dir.join("kubevirt-examples").is_dir(),
        "FERROVIRT_FIXTURES={} has no kubevirt-examples/",
        dir.display()
    );
    dir
}

/// KubeVirt's OpenAPI document, from the compatibility tier's fixtures.
pub fn swagger() -> Value {
    let path = kubevirt_fixtures_dir().join("kubevirt-openapi/swagger.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("swagger.json is JSON")
}

/// What should happen to a manifest.
pub enum Outcome {
    Accepted,
    /// Refused, with these field paths (sorted).
    Refused(&'static [&'static str]),
    /// A kind Ferrovirt does not serve.
    NotServed,
}

/// The manifest `name` in `dir`, parsed.
pub fn load(dir: &Path, name: &str) -> Value {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
}

/// Every `.yaml` in `dir` has a row in `table`, and no row names a file that is not there.
pub fn table_covers_the_directory(dir: &Path, table: &[(&str, Outcome)]) {
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| {
            e.expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    let in_table: BTreeSet<String> = table.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        on_disk, in_table,
        "every manifest needs an expected outcome"
    );
}

/// Each manifest parses, a round trip through the Rust types loses nothing, and after
/// defaulting it is accepted or refused with exactly the expected field paths.
pub fn every_manifest_has_its_outcome(dir: &Path, table: &[(&str, Outcome)]) {
    let mut failures = Vec::new();
    for (name, outcome) in table {
        let value = load(dir, name);
        let parsed = KubeVirtObject::from_value(value.clone());
        match (outcome, parsed) {
            (Outcome::NotServed, Err(ParseError::KindNotServed { .. })) => {}
            (Outcome::NotServed, other) => {
                failures.push(format!("{name}: expected a kind not served, got {other:?}"))
            }
            (_, Err(e)) => failures.push(format!("{name}: does not parse: {e}")),
            (expected, Ok(mut object)) => {
                let round_trip = object.to_value().expect("serialises");
                if round_trip != value {
                    failures.push(format!(
                        "{name}: round trip is lossy:\n  in:  {value}\n  out: {round_trip}"
                    ));
                }
                object.apply_defaults();
                let result = object.validate();
                let mut paths: Vec<String> = match &result {
                    Ok(()) => Vec::new(),
                    Err(errors) => errors.iter().map(|e| e.field.clone()).collect(),
                };
                paths.sort();
                let want: Vec<String> = match expected {
                    Outcome::Accepted => Vec::new(),
                    Outcome::Refused(paths) => paths.iter().map(|p| p.to_string()).collect(),
                    Outcome::NotServed => unreachable!("handled above"),
                };
                if paths != want {
                    failures.push(format!("{name}: expected {want:?}, got {result:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Defaulting an accepted manifest is idempotent and survives a second round trip.
pub fn defaults_survive_a_second_round_trip(dir: &Path, table: &[(&str, Outcome)]) {
    for (name, outcome) in table {
        if !matches!(outcome, Outcome::Accepted) {
            continue;
        }
        let mut object = KubeVirtObject::from_value(load(dir, name)).expect("parses");
        object.apply_defaults();
        let defaulted = object.to_value().expect("serialises");
        let again = KubeVirtObject::from_value(defaulted.clone()).expect("parses again");
        assert_eq!(again.to_value().expect("serialises"), defaulted, "{name}");
        let mut twice = again.clone();
        twice.apply_defaults();
        assert_eq!(twice, again, "{name}: defaulting is not idempotent");
    }
}

/// The refusal of `field` in manifest `name` says "not supported by ferrovirt".
pub fn refusal_says_not_supported(dir: &Path, name: &str, field: &str) {
    let object = KubeVirtObject::from_value(load(dir, name)).expect("parses");
    let errors = object.validate().expect_err("refused");
    let error = errors
        .iter()
        .find(|e| e.field == field)
        .unwrap_or_else(|| panic!("{name}: no error at {field}: {errors:?}"));
    assert_eq!(error.message, "not supported by ferrovirt");
    assert_eq!(error.kind, api::FieldErrorKind::NotSupported);
}
