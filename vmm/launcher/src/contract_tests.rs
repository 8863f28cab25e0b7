//! What the contract promises, checked against this launcher: virt-api's validation accepts
//! exactly the base64 the launcher decodes.

use api::VirtualMachineInstance;
use serde_json::json;

use crate::converter::host::test_facts;
use crate::volumes::plan::{plan_volume, VolumeSource};

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
