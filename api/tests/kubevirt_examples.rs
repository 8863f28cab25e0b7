//! The compatibility tier: every KubeVirt example manifest (`kubevirt-examples/` in the directory
//! `FERROVIRT_FIXTURES` names; `--features compat`) parses, a round trip through the Rust types
//! loses nothing, and after defaulting it is either accepted or refused with exactly the field
//! paths of what Ferrovirt does not support.

mod common;

use common::Outcome;

fn dir() -> std::path::PathBuf {
    common::kubevirt_fixtures_dir().join("kubevirt-examples")
}

const TABLE: &[(&str, Outcome)] = &[
    ("migration-job.yaml", Outcome::Accepted),
    ("vm-cirros-clarge.yaml", Outcome::Accepted),
    ("vm-cirros.yaml", Outcome::Accepted),
    ("vm-pool-cirros.yaml", Outcome::Accepted),
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
            "spec.domain.firmware.bootloader.efi.secureBoot",
        ]),
    ),
];

#[test]
fn the_table_covers_every_example() {
    common::table_covers_the_directory(&dir(), TABLE);
}

#[test]
fn every_example_has_its_expected_outcome() {
    common::every_manifest_has_its_outcome(&dir(), TABLE);
}

#[test]
fn refusals_say_not_supported() {
    common::refusal_says_not_supported(
        &dir(),
        "vmi-sriov.yaml",
        "spec.domain.devices.interfaces[1].sriov",
    );
}

#[test]
fn defaults_survive_a_second_round_trip() {
    common::defaults_survive_a_second_round_trip(&dir(), TABLE);
}
