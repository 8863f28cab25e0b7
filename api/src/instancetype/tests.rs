use serde_json::json;

use super::*;

#[test]
fn the_crds_have_kubevirts_names_scope_and_short_names_and_no_status() {
    let want = [
        (
            "virtualmachineinstancetypes.instancetype.kubevirt.io",
            "Namespaced",
            vec!["vminstancetype", "vminstancetypes", "vmf", "vmfs"],
        ),
        (
            "virtualmachineclusterinstancetypes.instancetype.kubevirt.io",
            "Cluster",
            vec![
                "vmclusterinstancetype",
                "vmclusterinstancetypes",
                "vmcf",
                "vmcfs",
            ],
        ),
        (
            "virtualmachinepreferences.instancetype.kubevirt.io",
            "Namespaced",
            vec!["vmpref", "vmprefs", "vmp", "vmps"],
        ),
        (
            "virtualmachineclusterpreferences.instancetype.kubevirt.io",
            "Cluster",
            vec!["vmcp", "vmcps"],
        ),
    ];
    for (crd, (name, scope, short)) in crds().iter().zip(want) {
        let crd = serde_json::to_value(crd).unwrap();
        assert_eq!(crd["metadata"]["name"], name);
        assert_eq!(crd["spec"]["scope"], scope);
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(short));
        let versions = crd["spec"]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1);
        assert_eq!(versions[0]["name"], "v1beta1");
        assert_eq!(versions[0]["storage"], true);
        assert!(
            versions[0].get("subresources").is_none(),
            "{name} has no status"
        );
        let schema = &versions[0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["required"], json!(["spec"]));
    }
    let it = serde_json::to_value(Kind::Instancetype.crd()).unwrap();
    let spec = &it["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], json!(["cpu", "memory"]));
    assert_eq!(spec["properties"]["cpu"]["required"], json!(["guest"]));
    assert_eq!(spec["properties"]["memory"]["required"], json!(["guest"]));
}

#[test]
fn a_matchers_kind_is_read_in_any_case_and_empty_means_cluster_wide() {
    use Reference::{Instancetype as I, Preference as P};
    assert_eq!(Kind::of(I, None), Ok(Kind::ClusterInstancetype));
    assert_eq!(Kind::of(I, Some("")), Ok(Kind::ClusterInstancetype));
    assert_eq!(
        Kind::of(I, Some("virtualmachineinstancetype")),
        Ok(Kind::Instancetype)
    );
    assert_eq!(
        Kind::of(I, Some("VirtualMachineInstancetype")),
        Ok(Kind::Instancetype)
    );
    assert_eq!(
        Kind::of(I, Some("virtualmachineinstancetypes")),
        Ok(Kind::Instancetype)
    );
    assert_eq!(
        Kind::of(I, Some("VirtualMachineClusterInstancetype")),
        Ok(Kind::ClusterInstancetype)
    );
    assert_eq!(Kind::of(P, None), Ok(Kind::ClusterPreference));
    assert_eq!(
        Kind::of(P, Some("VirtualMachinePreference")),
        Ok(Kind::Preference)
    );
    assert_eq!(
        Kind::of(I, Some("VirtualMachinePreference")),
        Err("got unexpected kind in InstancetypeMatcher: VirtualMachinePreference".to_string())
    );
    assert_eq!(
        Kind::of(P, Some("foo")),
        Err("got unexpected kind in PreferenceMatcher: foo".to_string())
    );
}

#[test]
fn a_revision_is_named_labelled_and_filled_as_kubevirt_does() {
    let object = json!({
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineInstancetype",
        "metadata": {
            "name": "small", "namespace": "ns", "uid": "u-1", "generation": 3,
            "labels": {"a": "b"}, "annotations": {"c": "d"}, "managedFields": [{}],
            "resourceVersion": "7",
        },
        "spec": {"cpu": {"guest": 1}, "memory": {"guest": "1Mi"}},
    });
    assert_eq!(revision_name("vm1", &object), "vm1-small-v1beta1-u-1-3");
    let labels = revision_labels(Kind::Instancetype, &object);
    assert_eq!(labels[LABEL_OBJECT_GENERATION], "3");
    assert_eq!(labels[LABEL_OBJECT_KIND], "VirtualMachineInstancetype");
    assert_eq!(labels[LABEL_OBJECT_NAME], "small");
    assert_eq!(labels[LABEL_OBJECT_UID], "u-1");
    assert_eq!(labels[LABEL_OBJECT_VERSION], "v1beta1");
    let data = revision_data(Kind::Instancetype, &object);
    assert_eq!(data["spec"], object["spec"]);
    assert_eq!(data["metadata"]["resourceVersion"], "7");
    for gone in ["labels", "annotations", "managedFields"] {
        assert!(data["metadata"].get(gone).is_none(), "{gone}");
    }
    assert_eq!(
        spec_of_revision(Reference::Instancetype, &data),
        Ok(object["spec"].clone())
    );
    assert!(spec_of_revision(Reference::Preference, &data).is_err());
    assert!(spec_of_revision(Reference::Instancetype, &json!({"kind": "Pod"})).is_err());
}

#[test]
fn instance_types_are_validated_by_kubevirts_rules_and_what_ferrovirt_runs() {
    use super::validation::{validate_instancetype, validate_preference};
    let fields = |errors: Vec<crate::FieldError>| -> Vec<String> {
        errors
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    };
    assert!(validate_instancetype(&json!({"cpu": {"guest": 2}, "memory": {"guest": "1Gi", "overcommitPercent": 10}, "nodeSelector": {"a": "b"}})).is_empty());
    assert_eq!(
        fields(validate_instancetype(&json!({"cpu": {}, "memory": {"guest": "1Gi", "overcommitPercent": 101}}))),
        vec![
            "spec.cpu.guest: Required value".to_string(),
            "spec.memory.overcommitPercent: spec.memory.overcommitPercent '101': must be in range between 0 and 100.".to_string(),
        ]
    );
    assert_eq!(
        fields(validate_instancetype(&json!({"cpu": {"guest": 1, "dedicatedCPUPlacement": true}, "memory": {"guest": "1Gi"}, "gpus": [{"name": "g"}]}))),
        vec![
            "spec.cpu.dedicatedCPUPlacement: not supported by ferrovirt: the VMM does not pin vCPUs or expose host NUMA".to_string(),
            "spec.gpus: not supported by ferrovirt: no device passthrough".to_string(),
        ]
    );
    assert_eq!(
        fields(validate_instancetype(&json!({"cpu": {"guest": 1}}))),
        vec!["spec.memory: Required value".to_string()]
    );
    assert!(validate_preference(&json!({"cpu": {"preferredCPUTopology": "cores"}})).is_empty());
    assert_eq!(
        fields(validate_preference(
            &json!({"cpu": {"preferredCPUTopology": "diagonal"}})
        )),
        vec!["spec.cpu.preferredCPUTopology: unknown preferredCPUTopology diagonal".to_string()]
    );
    assert_eq!(
        fields(validate_preference(
            &json!({"cpu": {"preferredCPUTopology": "spread", "spreadOptions": {"across": "Nodes"}}})
        )),
        vec!["spec.cpu.spreadOptions.across: across Nodes is not supported".to_string()]
    );
    assert_eq!(
        fields(validate_preference(&json!({"cpu": {"preferredCPUTopology": "spread", "spreadOptions": {"across": "CoresThreads", "ratio": 4}}}))),
        vec!["spec.cpu.spreadOptions.ratio: only a ratio of 2 (1 core 2 threads) is allowed when spreading vCPUs over cores and threads".to_string()]
    );
}

#[test]
fn an_expanded_vm_has_both_applied_and_no_references() {
    let vm: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "v"},
        "spec": {
            "instancetype": {"name": "small"},
            "preference": {"name": "linux"},
            "template": {"spec": {"domain": {"devices": {}}, "volumes": [{"name": "root", "containerDisk": {"image": "x"}}]}},
        },
        "status": {"instancetypeRef": {"name": "small", "controllerRevisionRef": {"name": "r"}}},
    }))
    .unwrap();
    let it = json!({"cpu": {"guest": 2}, "memory": {"guest": "64Mi"}});
    let pref = json!({"cpu": {"preferredCPUTopology": "cores"}, "devices": {"preferredDiskBus": "virtio"}});
    let expanded = expand_vm(&vm, Some(&it), Some(&pref)).unwrap();
    assert!(expanded.spec.instancetype.is_none() && expanded.spec.preference.is_none());
    assert!(expanded.status.unwrap().instancetype_ref.is_none());
    let spec = expanded.spec.template.spec.unwrap();
    let cpu = spec.domain.cpu.unwrap();
    assert_eq!(
        (cpu.sockets, cpu.cores, cpu.threads),
        (Some(1), Some(2), Some(1))
    );
    assert_eq!(spec.domain.devices.disks[0].name, "root");
    assert_eq!(
        spec.domain.devices.disks[0]
            .disk
            .as_ref()
            .unwrap()
            .bus
            .as_deref(),
        Some("virtio")
    );
    assert_eq!(spec.termination_grace_period_seconds, Some(30));

    let conflicting: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "v"},
        "spec": {"instancetype": {"name": "small"}, "template": {"spec": {"domain": {"cpu": {"cores": 1}, "devices": {}}}}},
    }))
    .unwrap();
    assert_eq!(
        expand_vm(&conflicting, Some(&it), None),
        Err(
            "VM field(s) spec.template.spec.domain.cpu.cores conflicts with selected instance type"
                .into()
        )
    );
}
