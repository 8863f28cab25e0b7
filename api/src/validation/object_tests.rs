//! Table tests of validation beyond the VMI: VMs, replica sets, migrations, the KubeVirt CR,
//! updates, messages and the limits of the contract, on the helpers of `tests.rs`.

use serde_json::json;

use super::*;

#[test]
fn vm_rules() {
    check(vec![
        (
            "bad runStrategy",
            vm(json!({"runStrategy": "Sometimes"})),
            vec![("spec.runStrategy", Invalid)],
        ),
        (
            "running and runStrategy",
            vm(json!({"runStrategy": "Always", "running": true})),
            vec![("spec.running", Invalid)],
        ),
        ("running alone", vm(json!({"running": true})), vec![]),
        (
            "template errors are under spec.template.spec",
            vm(json!({"template": {"spec": {"terminationGracePeriodSeconds": -1}}})),
            vec![("spec.template.spec.terminationGracePeriodSeconds", Invalid)],
        ),
        (
            // As in KubeVirt: an instance type or a later edit may give it; the VMI made of
            // the template is refused (`vmi_rules`).
            "a template without memory",
            vm(json!({"template": {"spec": {"domain": {"memory": null}}}})),
            vec![],
        ),
        (
            "a template with 0 bytes of memory and 0 sockets",
            vm(
                json!({"template": {"spec": {"domain": {"memory": {"guest": "0"}, "cpu": {"sockets": 0}}}}}),
            ),
            vec![],
        ),
        (
            "template without spec",
            vm(json!({"template": {"spec": null}})),
            vec![("spec.template.spec", Required)],
        ),
        (
            "an instancetype by name",
            vm(
                json!({"instancetype": {"name": "u1.small"}, "preference": {"name": "p", "kind": "VirtualMachinePreference"}}),
            ),
            vec![],
        ),
        (
            "an instancetype inferred from a volume, a matcher naming nothing, a bad kind",
            vm(
                json!({"instancetype": {"inferFromVolume": "disk0"}, "preference": {"kind": "Pod"}}),
            ),
            vec![
                ("spec.instancetype.inferFromVolume", NotSupported),
                ("spec.preference", Required),
                ("spec.preference.kind", Invalid),
            ],
        ),
    ]);
}

#[test]
fn replica_set_migration_and_kubevirt_rules() {
    let rs = |selector: Value| {
        json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstanceReplicaSet",
            "metadata": {"name": "rs"},
            "spec": {
                "replicas": 2,
                "selector": selector,
                "template": {"metadata": {"labels": {"app": "a"}}, "spec": vmi()["spec"].clone()}
            }
        })
    };
    let migration = |spec: Value| {
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
               "metadata": {"name": "m"}, "spec": spec})
    };
    let kubevirt = |spec: Value| {
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
               "metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": spec})
    };
    check(vec![
        (
            "matching selector",
            rs(json!({"matchLabels": {"app": "a"}})),
            vec![],
        ),
        (
            "selector that does not match the template",
            rs(json!({"matchLabels": {"app": "b"}})),
            vec![("spec.selector.matchLabels", Invalid)],
        ),
        (
            "matchExpressions",
            rs(json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["b"]}]})),
            vec![("spec.selector.matchExpressions[0]", Invalid)],
        ),
        (
            "empty selector",
            rs(json!({})),
            vec![("spec.selector", Required)],
        ),
        (
            "migration",
            migration(json!({"vmiName": "testvmi"})),
            vec![],
        ),
        (
            "migration without a VMI",
            migration(json!({})),
            vec![("spec.vmiName", Required)],
        ),
        (
            "KubeVirt's own example CR",
            kubevirt(json!({
                "certificateRotateStrategy": {},
                "configuration": {"developerConfiguration": {"featureGates": []}},
                "customizeComponents": {},
                "imagePullPolicy": "IfNotPresent",
                "workloadUpdateStrategy": {}
            })),
            vec![],
        ),
        (
            "useEmulation",
            kubevirt(json!({"configuration": {"developerConfiguration": {"useEmulation": true}}})),
            vec![],
        ),
        (
            "memoryOvercommit",
            kubevirt(
                json!({"configuration": {"developerConfiguration": {"memoryOvercommit": 150}}}),
            ),
            vec![],
        ),
        (
            "memoryOvercommit of 0",
            kubevirt(json!({"configuration": {"developerConfiguration": {"memoryOvercommit": 0}}})),
            vec![(
                "spec.configuration.developerConfiguration.memoryOvercommit",
                Invalid,
            )],
        ),
        (
            "feature gate Ferrovirt does not know",
            kubevirt(
                json!({"configuration": {"developerConfiguration": {"featureGates": ["GPU"]}}}),
            ),
            vec![(
                "spec.configuration.developerConfiguration.featureGates[0]",
                NotSupported,
            )],
        ),
        (
            "ImageVolume disabled: Ferrovirt has no image volumes",
            kubevirt(json!({"configuration": {"developerConfiguration":
                {"disabledFeatureGates": ["ImageVolume"]}}})),
            vec![],
        ),
        (
            "ImageVolume enabled",
            kubevirt(json!({"configuration": {"developerConfiguration":
                {"featureGates": ["Snapshot", "ImageVolume"]}}})),
            vec![(
                "spec.configuration.developerConfiguration.featureGates[1]",
                NotSupported,
            )],
        ),
        (
            "SMBIOS settings",
            kubevirt(json!({"configuration": {"smbios": {
                "manufacturer": "Acme", "product": "P", "version": "1", "sku": "S", "family": "F"
            }}})),
            vec![],
        ),
        (
            "an SMBIOS string with a NUL",
            kubevirt(json!({"configuration": {"smbios": {"family": "a\u{0}b"}}})),
            vec![("spec.configuration.smbios.family", Invalid)],
        ),
        (
            "customised components",
            kubevirt(json!({"customizeComponents": {"patches": [{"resourceName": "virt-api"}]}})),
            vec![("spec.customizeComponents", NotSupported)],
        ),
        (
            "bad uninstall strategy",
            kubevirt(json!({"uninstallStrategy": "Never"})),
            vec![("spec.uninstallStrategy", Invalid)],
        ),
        (
            "certificate lifetimes",
            kubevirt(json!({"certificateRotateStrategy": {"selfSigned": {
                "ca": {"duration": "48h", "renewBefore": "12h"},
                "server": {"duration": "1h30m"}
            }}})),
            vec![],
        ),
        (
            "certificate lifetimes that cannot work",
            kubevirt(json!({"certificateRotateStrategy": {"selfSigned": {
                "ca": {"duration": "2h", "renewBefore": "3h"},
                "server": {"duration": "30s", "renewBefore": "a while"},
                "caRotateInterval": "24h"
            }}})),
            vec![
                (
                    "spec.certificateRotateStrategy.selfSigned.caRotateInterval",
                    NotSupported,
                ),
                (
                    "spec.certificateRotateStrategy.selfSigned.ca.renewBefore",
                    Invalid,
                ),
                (
                    "spec.certificateRotateStrategy.selfSigned.server.renewBefore",
                    Invalid,
                ),
                (
                    "spec.certificateRotateStrategy.selfSigned.server.duration",
                    Invalid,
                ),
            ],
        ),
        (
            "migration settings Ferrovirt applies",
            kubevirt(json!({"configuration": {"migrations": {
                "parallelMigrationsPerCluster": 3, "parallelOutboundMigrationsPerNode": 1,
                "bandwidthPerMigration": "64Mi", "completionTimeoutPerGiB": 800,
                "progressTimeout": 150, "maxDowntimeMs": 300, "allowPostCopy": false,
                "disableTLS": false
            }}})),
            vec![],
        ),
        (
            "migration settings out of range or not supported",
            kubevirt(json!({"configuration": {"migrations": {
                "parallelMigrationsPerCluster": 0, "bandwidthPerMigration": "fast",
                "progressTimeout": 0, "allowPostCopy": true, "disableTLS": true,
                "network": "migration-net"
            }}})),
            vec![
                ("spec.configuration.migrations.network", NotSupported),
                (
                    "spec.configuration.migrations.parallelMigrationsPerCluster",
                    Invalid,
                ),
                ("spec.configuration.migrations.progressTimeout", Invalid),
                (
                    "spec.configuration.migrations.bandwidthPerMigration",
                    Invalid,
                ),
                ("spec.configuration.migrations.allowPostCopy", Forbidden),
                ("spec.configuration.migrations.disableTLS", Forbidden),
            ],
        ),
    ]);
}

#[test]
fn vmi_spec_is_immutable() {
    let parse = |v: Value| -> crate::VirtualMachineInstance { serde_json::from_value(v).unwrap() };
    let old = parse(vmi());
    let mut same_spec = parse(vmi());
    same_spec.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    assert_eq!(super::super::validate_vmi_update(&old, &same_spec), Ok(()));
    let changed = parse(with(vmi(), "/spec/domain/memory/guest", json!("256Mi")));
    let errors = super::super::validate_vmi_update(&old, &changed).unwrap_err();
    assert_eq!(errors[0].field, "spec");
    assert_eq!(errors[0].kind, Forbidden);
}

#[test]
fn error_messages_name_path_and_reason() {
    let errors = KubeVirtObject::from_value(with(
        vmi(),
        "/spec/domain/devices/disks/0/disk/bus",
        json!("sata"),
    ))
    .unwrap()
    .validate()
    .unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        "spec.domain.devices.disks[0].disk.bus: \"sata\" is not supported by ferrovirt: a microVM has only the virtio bus"
    );
    assert_eq!(errors[0].kind.cause_type(), "FieldValueNotSupported");
}

/// The base VMI with `extra` more emptyDisks, each a disk and its volume.
fn vmi_with_extra_disks(extra: usize) -> Value {
    let mut vmi = vmi();
    for i in 0..extra {
        let name = format!("extra{i}");
        vmi["spec"]["domain"]["devices"]["disks"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "disk": {"bus": "virtio"}}));
        vmi["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "emptyDisk": {"capacity": "1Mi"}}));
    }
    vmi
}

#[test]
fn the_device_limit_is_the_contracts() {
    use contract::limits::MAX_DEVICES;
    // The base VMI has 5 virtio devices: 3 disks, 1 interface and the rng.
    let base = 5;
    assert_eq!(errors_of(vmi_with_extra_disks(MAX_DEVICES - base)), vec![]);
    let devices = ("spec.domain.devices".to_string(), Invalid);
    assert_eq!(
        errors_of(vmi_with_extra_disks(MAX_DEVICES - base + 1)),
        vec![devices.clone()]
    );
    // vsock is a device too.
    let with_vsock = with(
        vmi_with_extra_disks(MAX_DEVICES - base),
        "/spec/domain/devices/autoattachVSOCK",
        json!(true),
    );
    assert_eq!(errors_of(with_vsock), vec![devices]);

    let past = KubeVirtObject::from_value(vmi_with_extra_disks(MAX_DEVICES - base + 1))
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(
        past[0].to_string(),
        format!(
            "spec.domain.devices: {} virtio devices (disks + interfaces + rng + vsock), at most {MAX_DEVICES} fit a microVM",
            MAX_DEVICES + 1
        )
    );
}

#[test]
fn user_data_base64_follows_the_contracts_rule() {
    let field = "spec.volumes[1].cloudInitNoCloud.userDataBase64";
    let user_data = |text: &str| {
        with(
            vmi(),
            "/spec/volumes/1/cloudInitNoCloud",
            json!({ "userDataBase64": text }),
        )
    };
    // Pasted with newlines, or without padding: accepted, as the launcher decodes it.
    for text in ["aGk=", "aGk", "IyEvYmluL3NoCmVjaG8g\naGkK\n", " aGk= "] {
        assert_eq!(errors_of(user_data(text)), vec![], "{text:?}");
    }
    for text in ["aGk==", "aG=k", "aGk-", "a"] {
        assert_eq!(
            errors_of(user_data(text)),
            vec![(field.to_string(), Invalid)],
            "{text:?}"
        );
    }
}
