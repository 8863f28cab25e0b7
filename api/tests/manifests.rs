//! The project's own manifests (`testdata/manifests/`): each parses, a round trip through the
//! Rust types loses nothing, and after defaulting it is accepted or refused with exactly the
//! field paths of what Ferrovirt does not support. KubeVirt's own examples get the same check
//! in the compatibility tier (`tests/kubevirt_examples.rs`).

mod common;

use common::Outcome;

const TABLE: &[(&str, Outcome)] = &[
    ("migration-demo.yaml", Outcome::Accepted),
    ("vm-demo.yaml", Outcome::Accepted),
    ("vm-instancetype.yaml", Outcome::Accepted),
    ("vm-pool.yaml", Outcome::Accepted),
    ("vmi-demo.yaml", Outcome::Accepted),
    ("vmi-kernel-boot.yaml", Outcome::Accepted),
    (
        "vmi-unsupported.yaml",
        Outcome::Refused(&[
            "spec.domain.clock",
            "spec.domain.devices.interfaces[0].model",
            "spec.domain.devices.tpm",
        ]),
    ),
    ("vmirs-demo.yaml", Outcome::Accepted),
];

#[test]
fn the_table_covers_every_manifest() {
    common::table_covers_the_directory(&common::testdata_dir(), TABLE);
}

#[test]
fn every_manifest_has_its_expected_outcome() {
    common::every_manifest_has_its_outcome(&common::testdata_dir(), TABLE);
}

#[test]
fn refusals_say_not_supported() {
    common::refusal_says_not_supported(
        &common::testdata_dir(),
        "vmi-unsupported.yaml",
        "spec.domain.devices.tpm",
    );
}

#[test]
fn defaults_survive_a_second_round_trip() {
    common::defaults_survive_a_second_round_trip(&common::testdata_dir(), TABLE);
}
