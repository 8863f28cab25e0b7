//! What the contract promises, checked against this launcher and the `vmm` crate: the limits
//! virt-api enforces are no more than what the VMM attaches, a VMI at the limit converts, and
//! virt-api's validation accepts exactly the base64 the launcher decodes.

use api::VirtualMachineInstance;
use contract::limits::{MAX_DEVICES, MAX_VCPUS, MIN_GUEST_MEMORY_BYTES};
use serde_json::{json, Value};

use crate::converter::host::{test_facts, test_facts_for};
use crate::converter::{admit_vmi, convert};
use crate::volumes::plan::{plan_volume, VolumeSource};

/// Checked when the tests compile: a contract limit past what the VMM can do does not build.
#[test]
fn limits_are_within_what_the_vmm_can_do() {
    const {
        assert!(
            // One slot more: the guest agent channel.
            MAX_DEVICES < vmm::MAX_VIRTIO_DEVICES,
            "contract::limits::MAX_DEVICES and the guest agent channel need more virtio devices \
             than the VMM has slots for"
        );
        assert!(
            MAX_VCPUS <= vmm::config::MAX_VCPUS as u32,
            "contract::limits::MAX_VCPUS admits more vCPUs than the VMM runs"
        );
        assert!(
            MIN_GUEST_MEMORY_BYTES >= vmm::config::MIN_MEMORY_BYTES,
            "contract::limits::MIN_GUEST_MEMORY_BYTES is below the VMM's minimum"
        );
    }
}

/// A VMI with `disks` emptyDisks and the default pod interface (added by the defaults).
fn vmi_with_disks(disks: usize) -> Value {
    let names: Vec<String> = (0..disks).map(|i| format!("disk{i}")).collect();
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "many", "namespace": "ns", "uid": "u1"},
        "spec": {
            "domain": {
                "memory": {"guest": "128Mi"},
                "devices": {
                    "disks": names.iter().map(|n| json!({"name": n, "disk": {"bus": "virtio"}})).collect::<Vec<_>>(),
                }
            },
            "volumes": names.iter().map(|n| json!({"name": n, "emptyDisk": {"capacity": "1Mi"}})).collect::<Vec<_>>(),
        }
    })
}

#[test]
fn a_vmi_at_the_device_limit_converts_within_the_vmm_slots() {
    // MAX_DEVICES - 1 disks + the default pod interface.
    let json = serde_json::to_vec(&vmi_with_disks(MAX_DEVICES - 1)).unwrap();
    let vmi = admit_vmi(&json).expect("a VMI at the limit is admitted");
    let config = convert(&vmi, &test_facts_for(&vmi))
        .expect("and converts")
        .config;
    let devices = config.disks.len()
        + config.net.len()
        + usize::from(config.rng.is_some())
        + usize::from(config.vsock.is_some());
    assert_eq!(devices, MAX_DEVICES);
    assert!(
        config.agent.is_some(),
        "every VM has the guest agent channel"
    );
    assert!(
        devices < vmm::MAX_VIRTIO_DEVICES,
        "a slot is left for the agent channel"
    );

    let json = serde_json::to_vec(&vmi_with_disks(MAX_DEVICES)).unwrap();
    let err = admit_vmi(&json).expect_err("one past the limit is refused");
    assert!(err.to_string().contains("spec.domain.devices"), "{err}");
}

/// A VMI whose cloud-init volume (`spec.volumes[1]`) has `userDataBase64: text`.
fn vmi_with_user_data_base64(text: &str) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvmi", "namespace": "ns"},
        "spec": {
            "domain": {
                "memory": {"guest": "128Mi"},
                "devices": {"disks": [
                    {"name": "root", "disk": {"bus": "virtio"}},
                    {"name": "cloudinit", "disk": {"bus": "virtio"}}
                ]}
            },
            "volumes": [
                {"name": "root", "emptyDisk": {"capacity": "1Mi"}},
                {"name": "cloudinit", "cloudInitNoCloud": {"userDataBase64": text}}
            ]
        }
    }))
    .unwrap()
}

#[test]
fn api_validation_and_the_launcher_agree_on_base64() {
    const FIELD: &str = "spec.volumes[1].cloudInitNoCloud.userDataBase64";
    // (text, what it decodes to; None: refused)
    let cases: &[(&str, Option<&[u8]>)] = &[
        ("aGVsbG8=", Some(b"hello")),
        ("aGVsbG8", Some(b"hello")),
        ("aGk=", Some(b"hi")),
        ("aGk", Some(b"hi")),
        ("aGVsbG8=\n", Some(b"hello")),
        ("aGVs\nbG8h\n", Some(b"hello!")),
        ("aGVs\r\nbG8h", Some(b"hello!")),
        (" aGVs bG8h\t", Some(b"hello!")),
        (
            "IyEvYmluL3NoCmVjaG8g\n  aGkK\n",
            Some(b"#!/bin/sh\necho hi\n"),
        ),
        ("aGk==", None),
        ("aG=k", None),
        ("aGVsbG8*", None),
        ("aGVs-G8_", None),
        ("!!", None),
        ("a", None),
    ];
    let facts = test_facts();
    for (text, decoded) in cases {
        let vmi = vmi_with_user_data_base64(text);
        let api_errors: Vec<String> = match api::validation::validate_vmi(&vmi) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.iter().map(|e| e.to_string()).collect(),
        };
        let api_accepts = !api_errors.iter().any(|e| e.starts_with(FIELD));
        assert!(
            api_errors.iter().all(|e| e.starts_with(FIELD)),
            "{text:?}: unrelated errors {api_errors:?}"
        );
        let launcher = plan_volume(&vmi, 1, &vmi.spec.volumes[1], &facts);
        assert_eq!(
            api_accepts,
            launcher.is_ok(),
            "{text:?}: the API says {api_errors:?}, the launcher {launcher:?}"
        );
        assert_eq!(api_accepts, decoded.is_some(), "{text:?}");
        match launcher {
            Ok(plan) => {
                let VolumeSource::CloudInitNoCloud(seed) = plan.source else {
                    panic!("{text:?}: not a cloud-init plan");
                };
                assert_eq!(Some(seed.user_data.as_slice()), *decoded, "{text:?}");
            }
            Err(problem) => assert_eq!(problem.path, FIELD, "{text:?}"),
        }
    }
}
