//! The kinds of KubeVirt's sibling API groups (and the deprecated
//! `kubevirt.io/v1 VirtualMachineInstancePreset`) that Ferrovirt serves but does not implement.
//!
//! KubeVirt installs a CRD for each (`virt-operator`'s `components/crds.go`), and clients
//! (KubeVirt's own functional tests among them, which list and delete these after every spec)
//! expect them to exist. Ferrovirt serves each with KubeVirt's names, scope, versions, short
//! names, categories and printer columns, with a schema that keeps `spec` and `status` as they
//! are (nothing is validated because nothing is acted on), and virt-controller marks every
//! object with a condition saying the kind is not supported (see [`Sibling::condition`]).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};

/// The reason of the condition on an object of a kind Ferrovirt does not implement, and of the
/// Warning event about it.
pub const NOT_SUPPORTED_REASON: &str = "NotSupported";

/// Whether a kind's objects live in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Namespaced => "Namespaced",
            Scope::Cluster => "Cluster",
        }
    }
}

/// One served version of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub name: &'static str,
    pub storage: bool,
    /// KubeVirt's deprecation warning, for a deprecated version.
    pub deprecation_warning: Option<&'static str>,
}

/// A printer column (`kubectl get`), as KubeVirt's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub type_: &'static str,
    pub json_path: &'static str,
}

/// The condition that says Ferrovirt does not implement the kind: `type_` is KubeVirt's
/// condition type for the kind closest to "this will not happen", `status` its value then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnsupportedCondition {
    pub type_: &'static str,
    pub status: &'static str,
}

/// `Ready=False`: for the kinds whose KubeVirt conditions have a `Ready` type, and for those
/// that have no conditions at all.
const NOT_READY: UnsupportedCondition = UnsupportedCondition {
    type_: "Ready",
    status: "False",
};

/// A kind Ferrovirt serves and does not implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sibling {
    pub group: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub scope: Scope,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// In KubeVirt's order; exactly one is the storage version.
    pub versions: &'static [Version],
    pub columns: &'static [Column],
    pub condition: UnsupportedCondition,
}

impl Sibling {
    /// `<plural>.<group>`.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// The storage version, which virt-controller watches and names in its condition.
    pub fn storage_version(&self) -> &'static str {
        self.versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name)
            .unwrap_or(self.versions[0].name)
    }

    /// `<group>/<storage version>`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.storage_version())
    }

    /// The message of the condition and of the event.
    pub fn not_supported_message(&self) -> String {
        format!(
            "{} ({}) is not supported by Ferrovirt",
            self.kind,
            self.api_version()
        )
    }

    /// The CRD: every version with the same schema, the status subresource and the columns.
    pub fn crd(&self) -> CustomResourceDefinition {
        let kept = |what: &str| {
            json!({
                "type": "object",
                "description": format!("{what}; Ferrovirt keeps it as it is and does not act on it."),
                "x-kubernetes-preserve-unknown-fields": true,
            })
        };
        let schema = json!({
            "type": "object",
            "description": format!(
                "{} ({}): served so that KubeVirt clients work; not supported by Ferrovirt.",
                self.kind, self.group
            ),
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": kept("KubeVirt's spec of the kind"),
                "status": kept("KubeVirt's status of the kind, with Ferrovirt's NotSupported condition"),
            },
        });
        let columns: Vec<Value> = self
            .columns
            .iter()
            .map(|c| json!({"name": c.name, "type": c.type_, "jsonPath": c.json_path}))
            .collect();
        let versions: Vec<Value> = self
            .versions
            .iter()
            .map(|v| {
                let mut version = json!({
                    "name": v.name,
                    "served": true,
                    "storage": v.storage,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                });
                if !columns.is_empty() {
                    version["additionalPrinterColumns"] = json!(columns);
                }
                if let Some(warning) = v.deprecation_warning {
                    version["deprecated"] = json!(true);
                    version["deprecationWarning"] = json!(warning);
                }
                version
            })
            .collect();
        let mut names = json!({
            "plural": self.plural,
            "singular": self.singular,
            "kind": self.kind,
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            names["categories"] = json!(self.categories);
        }
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": self.crd_name()},
            "spec": {
                "group": self.group,
                "names": names,
                "scope": self.scope.as_str(),
                "versions": versions,
            },
        }))
        .expect("the sibling CRD is a CustomResourceDefinition")
    }
}

/// The CRDs of every sibling kind, in [`ALL`]'s order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    ALL.iter().map(Sibling::crd).collect()
}

/// The sibling kind of a group and kind.
pub fn find(group: &str, kind: &str) -> Option<&'static Sibling> {
    ALL.iter().find(|s| s.group == group && s.kind == kind)
}

const ALL_CATEGORY: &[&str] = &["all"];

const fn only(name: &'static str) -> Version {
    Version {
        name,
        storage: true,
        deprecation_warning: None,
    }
}

const fn column(name: &'static str, type_: &'static str, json_path: &'static str) -> Column {
    Column {
        name,
        type_,
        json_path,
    }
}

const V1ALPHA1: &[Version] = &[only("v1alpha1")];

const BACKUP: &str = "backup.kubevirt.io";

const PHASE: Column = column("Phase", "string", ".status.phase");
const SOURCE_KIND: Column = column("SourceKind", "string", ".spec.source.kind");
const SOURCE_NAME: Column = column("SourceName", "string", ".spec.source.name");

/// Every sibling kind, in the order of KubeVirt's install strategy
/// (`GenerateCurrentInstallStrategy`), names and versions as in its `components/crds.go`.
pub const ALL: &[Sibling] = &[
    Sibling {
        group: "kubevirt.io",
        kind: "VirtualMachineInstancePreset",
        plural: "virtualmachineinstancepresets",
        singular: "virtualmachineinstancepreset",
        scope: Scope::Namespaced,
        short_names: &["vmipreset", "vmipresets"],
        categories: ALL_CATEGORY,
        // KubeVirt also serves (and stores) v1alpha3; Ferrovirt serves kubevirt.io at v1 only.
        versions: &[Version {
            name: "v1",
            storage: true,
            deprecation_warning: Some(
                "kubevirt.io/v1 VirtualMachineInstancePresets is now deprecated and will be removed in v2.",
            ),
        }],
        columns: &[],
        condition: NOT_READY,
    },
    Sibling {
        group: "export.kubevirt.io",
        kind: "VirtualMachineExport",
        plural: "virtualmachineexports",
        singular: "virtualmachineexport",
        scope: Scope::Namespaced,
        short_names: &["vmexport", "vmexports"],
        categories: ALL_CATEGORY,
        versions: &[
            Version {
                name: "v1beta1",
                storage: false,
                deprecation_warning: Some(
                    "export.kubevirt.io/v1beta1 VirtualMachineExport is now deprecated and will be removed in a future version.",
                ),
            },
            only("v1"),
        ],
        columns: &[SOURCE_KIND, SOURCE_NAME, PHASE],
        condition: NOT_READY,
    },
    Sibling {
        group: BACKUP,
        kind: "VirtualMachineBackup",
        plural: "virtualmachinebackups",
        singular: "virtualmachinebackup",
        scope: Scope::Namespaced,
        short_names: &["vmbackup", "vmbackups"],
        categories: ALL_CATEGORY,
        versions: V1ALPHA1,
        columns: &[
            SOURCE_KIND,
            SOURCE_NAME,
            column("Type", "string", ".status.type"),
            column("CheckpointName", "string", ".status.checkpointName"),
        ],
        // KubeVirt's backup conditions are Progressing, Complete, Failed and Quiesced, no
        // Ready: Failed is its terminal "this backup will not happen".
        condition: UnsupportedCondition {
            type_: "Failed",
            status: "True",
        },
    },
    Sibling {
        group: BACKUP,
        kind: "VirtualMachineBackupTracker",
        plural: "virtualmachinebackuptrackers",
        singular: "virtualmachinebackuptracker",
        scope: Scope::Namespaced,
        short_names: &["vmbackuptracker", "vmbackuptrackers"],
        categories: ALL_CATEGORY,
        versions: V1ALPHA1,
        columns: &[
            SOURCE_KIND,
            SOURCE_NAME,
            column("LatestCheckpoint", "string", ".status.latestCheckpoint.name"),
            column(
                "CheckpointTime",
                "date",
                ".status.latestCheckpoint.creationTime",
            ),
        ],
        // KubeVirt's tracker status has no conditions.
        condition: NOT_READY,
    },
    Sibling {
        group: "plugin.kubevirt.io",
        kind: "Plugin",
        plural: "plugins",
        singular: "plugin",
        scope: Scope::Cluster,
        short_names: &[],
        categories: &[],
        versions: V1ALPHA1,
        columns: &[],
        // KubeVirt's PluginStatus is empty.
        condition: NOT_READY,
    },
];

#[cfg(test)]
#[path = "siblings_tests.rs"]
mod tests;
