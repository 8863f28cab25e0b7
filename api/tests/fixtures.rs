//! Every KubeVirt example manifest in `shared/fixtures/kubevirt-examples/`: it parses, a round
//! trip through the Rust types loses nothing, and after defaulting it is either accepted or
//! refused with exactly the field paths of what Ferrovirt does not support.

mod common;

use std::collections::BTreeSet;

use api::object::{KubeVirtObject, ParseError};
use serde_json::Value;

/// What should happen to each fixture.
enum Outcome {
    Accepted,
    /// Refused, with these field paths.
    Refused(&'static [&'static str]),
    /// A kind Ferrovirt does not serve.
    NotServed,
}

const TABLE: &[(&str, Outcome)] = &[
    ("migration-job.yaml", Outcome::Accepted),
    (
        "vm-cirros-clarge.yaml",
        Outcome::Refused(&["spec.instancetype"]),
    ),
    ("vm-cirros.yaml", Outcome::Accepted),
    ("vm-pool-cirros.yaml", Outcome::NotServed),
    ("vmi-ephemeral.yaml", Outcome::Accepted),
    ("vmi-fedora.yaml", Outcome::Accepted),
    ("vmi-kernel-boot.yaml", Outcome::Accepted),
    ("vmi-masquerade.yaml", Outcome::Accepted),
    ("vmi-migratable.yaml", Outcome::Accepted),
    ("vmi-nocloud.yaml", Outcome::Accepted),
    ("vmi-pvc.yaml", Outcome::Accepted),
    ("vmi-replicaset-cirros.yaml", Outcome::Accepted),
    (
        "vmi-sriov.yaml",
        Outcome::Refused(&[
            "spec.domain.devices.interfaces[1].sriov",
            "spec.networks[1].multus",
        ]),
    ),
    (
        "vmi-windows.yaml",
        Outcome::Refused(&[
            "spec.domain.clock",
            "spec.domain.devices.interfaces[0].model",
            "spec.domain.devices.tpm",
            "spec.domain.features",
            "spec.domain.firmware.bootloader",
            "spec.domain.firmware.uuid",
        ]),
    ),
];

fn load(name: &str) -> Value {
    let path = common::shared_dir()
        .join("fixtures/kubevirt-examples")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
}

#[test]
fn the_table_covers_every_fixture() {
    let dir = common::shared_dir().join("fixtures/kubevirt-examples");
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("fixtures directory is readable")
        .map(|e| {
            e.expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    let in_table: BTreeSet<String> = TABLE.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(on_disk, in_table, "every fixture needs an expected outcome");
}

#[test]
fn every_fixture_has_its_expected_outcome() {
    let mut failures = Vec::new();
    for (name, outcome) in TABLE {
        let value = load(name);
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
                let paths: Vec<String> = match &result {
                    Ok(()) => Vec::new(),
                    Err(errors) => errors.iter().map(|e| e.field.clone()).collect(),
                };
                let want: Vec<String> = match expected {
                    Outcome::Accepted => Vec::new(),
                    Outcome::Refused(paths) => paths.iter().map(|p| p.to_string()).collect(),
                    Outcome::NotServed => unreachable!("handled above"),
                };
                let mut sorted = paths.clone();
                sorted.sort();
                if sorted != want {
                    failures.push(format!("{name}: expected {want:?}, got {result:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn refusals_say_not_supported() {
    let object = KubeVirtObject::from_value(load("vmi-sriov.yaml")).expect("parses");
    let errors = object.validate().expect_err("sriov is refused");
    let sriov = errors
        .iter()
        .find(|e| e.field == "spec.domain.devices.interfaces[1].sriov")
        .expect("sriov error");
    assert_eq!(sriov.message, "not supported by ferrovirt");
    assert_eq!(sriov.kind, api::FieldErrorKind::NotSupported);
}

#[test]
fn defaults_survive_a_second_round_trip() {
    for (name, outcome) in TABLE {
        if !matches!(outcome, Outcome::Accepted) {
            continue;
        }
        let mut object = KubeVirtObject::from_value(load(name)).expect("parses");
        object.apply_defaults();
        let defaulted = object.to_value().expect("serialises");
        let again = KubeVirtObject::from_value(defaulted.clone()).expect("parses again");
        assert_eq!(again.to_value().expect("serialises"), defaulted, "{name}");
        let mut twice = again.clone();
        twice.apply_defaults();
        assert_eq!(twice, again, "{name}: defaulting is not idempotent");
    }
}
