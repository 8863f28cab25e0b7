use super::*;

/// (CRD name, kind, scope, served versions with the storage one marked `*`, short names),
/// from KubeVirt's `pkg/virt-operator/resource/generate/components/crds.go`.
#[allow(clippy::type_complexity)]
const KUBEVIRT: &[(&str, &str, &str, &[&str], &[&str])] = &[
    (
        "virtualmachineinstancepresets.kubevirt.io",
        "VirtualMachineInstancePreset",
        "Namespaced",
        &["v1*"],
        &["vmipreset", "vmipresets"],
    ),
    (
        "virtualmachineexports.export.kubevirt.io",
        "VirtualMachineExport",
        "Namespaced",
        &["v1beta1", "v1*"],
        &["vmexport", "vmexports"],
    ),
    (
        "virtualmachinebackups.backup.kubevirt.io",
        "VirtualMachineBackup",
        "Namespaced",
        &["v1alpha1*"],
        &["vmbackup", "vmbackups"],
    ),
    (
        "virtualmachinebackuptrackers.backup.kubevirt.io",
        "VirtualMachineBackupTracker",
        "Namespaced",
        &["v1alpha1*"],
        &["vmbackuptracker", "vmbackuptrackers"],
    ),
    (
        "plugins.plugin.kubevirt.io",
        "Plugin",
        "Cluster",
        &["v1alpha1*"],
        &[],
    ),
];

fn json(crd: &CustomResourceDefinition) -> Value {
    serde_json::to_value(crd).unwrap()
}

#[test]
fn names_scopes_versions_and_short_names_are_kubevirts() {
    let crds: Vec<Value> = crds().iter().map(json).collect();
    assert_eq!(crds.len(), KUBEVIRT.len());
    for (crd, (name, kind, scope, versions, short)) in crds.iter().zip(KUBEVIRT) {
        assert_eq!(crd["metadata"]["name"], *name);
        let (plural, group) = name.split_once('.').unwrap();
        assert_eq!(crd["spec"]["group"], group, "{name}");
        assert_eq!(crd["spec"]["names"]["plural"], plural, "{name}");
        assert_eq!(
            crd["spec"]["names"]["singular"],
            kind.to_lowercase(),
            "{name}"
        );
        assert_eq!(crd["spec"]["names"]["kind"], *kind, "{name}");
        assert_eq!(crd["spec"]["scope"], *scope, "{name}");
        let served: Vec<String> = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                assert_eq!(v["served"], true, "{name}");
                let star = if v["storage"] == true { "*" } else { "" };
                format!("{}{star}", v["name"].as_str().unwrap())
            })
            .collect();
        assert_eq!(served, *versions, "{name}");
        let shorts = crd["spec"]["names"]
            .get("shortNames")
            .cloned()
            .unwrap_or(json!([]));
        assert_eq!(shorts, json!(short), "{name}");
    }
}

#[test]
fn every_version_has_the_status_subresource_and_keeps_spec_and_status() {
    for crd in crds().iter().map(json) {
        let name = crd["metadata"]["name"].as_str().unwrap().to_string();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            assert_eq!(version["subresources"], json!({"status": {}}), "{name}");
            let schema = &version["schema"]["openAPIV3Schema"];
            assert_eq!(schema["type"], "object");
            for field in ["spec", "status"] {
                let node = &schema["properties"][field];
                assert_eq!(node["type"], "object", "{name}.{field}");
                assert_eq!(
                    node["x-kubernetes-preserve-unknown-fields"], true,
                    "{name}.{field}"
                );
            }
        }
    }
}

#[test]
fn deprecated_versions_carry_kubevirts_warning() {
    let preset = json(&ALL[0].crd());
    let v1 = &preset["spec"]["versions"][0];
    assert_eq!(v1["deprecated"], true);
    assert!(v1["deprecationWarning"]
        .as_str()
        .unwrap()
        .contains("VirtualMachineInstancePresets is now deprecated and will be removed in v2"));
    let export = json(
        &find("export.kubevirt.io", "VirtualMachineExport")
            .unwrap()
            .crd(),
    );
    assert_eq!(export["spec"]["versions"][0]["deprecated"], true);
    assert!(export["spec"]["versions"][1].get("deprecated").is_none());
}

#[test]
fn the_condition_names_the_kind_and_its_stored_version() {
    let backup = find("backup.kubevirt.io", "VirtualMachineBackup").unwrap();
    assert_eq!(backup.api_version(), "backup.kubevirt.io/v1alpha1");
    assert_eq!(
        backup.not_supported_message(),
        "VirtualMachineBackup (backup.kubevirt.io/v1alpha1) is not supported by Ferrovirt"
    );
    let export = find("export.kubevirt.io", "VirtualMachineExport").unwrap();
    assert_eq!(export.storage_version(), "v1");
    for sibling in ALL {
        assert_eq!(sibling.versions.iter().filter(|v| v.storage).count(), 1);
        assert!(["True", "False"].contains(&sibling.condition.status));
    }
}
