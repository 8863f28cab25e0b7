//! `KubeVirt`: the CR that virt-operator installs Ferrovirt from.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::other::Other;

/// What to install and how to configure it (`v1.KubeVirtSpec`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    derive = "PartialEq",
    doc = "The installation of Ferrovirt: virt-operator deploys the components from it (kubevirt.io/v1).",
    kind = "KubeVirt",
    plural = "kubevirts",
    singular = "kubevirt",
    namespaced,
    status = "KubeVirtStatus",
    shortname = "kv",
    shortname = "kvs",
    category = "all",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase")
)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<KubeVirtConfiguration>,
    /// Tag of the component images; the operator's own when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
    /// Registry of the component images; the operator's own when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_registry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// Lifetimes of the certificates virt-operator makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_rotate_strategy: Option<CertificateRotateStrategy>,
    /// `RemoveWorkloads` or `BlockUninstallIfWorkloadsExist`; empty (KubeVirt's default) blocks
    /// nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall_strategy: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// `v1.KubeVirtCertificateRotateStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateRotateStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_signed: Option<SelfSignConfiguration>,
    #[serde(flatten)]
    pub other: Other,
}

/// The self-signed CA and the certificates it signs (`v1.KubeVirtSelfSignConfiguration`).
/// KubeVirt's defaults: CA 168h, certificates 24h, each renewed with a fifth of its life left.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelfSignConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<CertConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<CertConfig>,
    #[serde(flatten)]
    pub other: Other,
}

/// One certificate's lifetime (`v1.CertConfig`), in Go's duration syntax (`24h`, `1h30m`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// How long before `notAfter` the certificate is renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_before: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

impl CertConfig {
    /// The shortest certificate lifetime virt-operator accepts: shorter ones would be renewed
    /// faster than the components restart onto them.
    pub const MIN_DURATION: std::time::Duration = std::time::Duration::from_secs(60);
}

/// Cluster-wide settings the components read (`v1.KubeVirtConfiguration`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub developer_configuration: Option<DeveloperConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrations: Option<MigrationConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instancetype: Option<InstancetypeConfiguration>,
    /// The SMBIOS system information of every VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smbios: Option<SmbiosConfiguration>,
    #[serde(flatten)]
    pub other: Other,
}

/// The SMBIOS system information every VM's guest reads in `/sys/class/dmi/id/`
/// (`v1.SMBiosConfiguration`); a VMI's own `firmware.uuid` and `firmware.serial` go with it.
/// Unset fields take KubeVirt's defaults ([`SmbiosConfiguration::in_force`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SmbiosConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

impl SmbiosConfiguration {
    /// KubeVirt's defaults (virt-config's `SmbiosConfigDefault*`).
    pub const DEFAULT_MANUFACTURER: &str = "KubeVirt";
    pub const DEFAULT_PRODUCT: &str = "None";
    pub const DEFAULT_FAMILY: &str = "KubeVirt";

    /// The settings in force: `configured`'s fields over KubeVirt's defaults.
    pub fn in_force(configured: Option<&SmbiosConfiguration>) -> SmbiosConfiguration {
        let given = configured.cloned().unwrap_or_default();
        let or = |value: Option<String>, default: &str| value.or_else(|| Some(default.into()));
        SmbiosConfiguration {
            manufacturer: or(given.manufacturer, Self::DEFAULT_MANUFACTURER),
            product: or(given.product, Self::DEFAULT_PRODUCT),
            family: or(given.family, Self::DEFAULT_FAMILY),
            version: given.version,
            sku: given.sku,
            other: Other::default(),
        }
    }

    /// The fields by their JSON names.
    pub fn fields(&self) -> [(&'static str, Option<&str>); 5] {
        [
            ("manufacturer", self.manufacturer.as_deref()),
            ("product", self.product.as_deref()),
            ("version", self.version.as_deref()),
            ("sku", self.sku.as_deref()),
            ("family", self.family.as_deref()),
        ]
    }
}

/// How VMs use instance types and preferences (`v1.InstancetypeConfiguration`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstancetypeConfiguration {
    /// `reference` (the default: VMs keep referring to ControllerRevisions), `expand` (a VM
    /// without stored revisions gets its instance type and preference written into its spec)
    /// or `expandAll` (every VM does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_policy: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// KubeVirt's reference policies.
pub const REFERENCE_POLICIES: [&str; 3] = ["reference", "expand", "expandAll"];

/// How live migrations run (`v1.MigrationConfiguration`). Unset fields take KubeVirt's
/// defaults, which [`MigrationConfiguration`]'s accessors return.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationConfiguration {
    /// Migrations under way in the whole cluster at most (5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_migrations_per_cluster: Option<u32>,
    /// Migrations leaving one node at most (2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_outbound_migrations_per_node: Option<u32>,
    /// Bytes per second one migration may send; 0 (the default) is unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_per_migration: Option<Quantity>,
    /// Seconds per GiB to migrate (guest memory and migrated disks) before the migration is
    /// cancelled (150).
    #[serde(
        default,
        rename = "completionTimeoutPerGiB",
        skip_serializing_if = "Option::is_none"
    )]
    pub completion_timeout_per_gib: Option<i64>,
    /// Seconds without a byte sent before the migration is cancelled (150).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_timeout: Option<i64>,
    /// The longest the guest may be paused at the switch-over, in milliseconds (QEMU's
    /// default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_downtime_ms: Option<i64>,
    /// Refused when true: Ferrovirt migrates by pre-copy only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_post_copy: Option<bool>,
    /// Refused when true: Ferrovirt does not throttle the guest's vCPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_auto_converge: Option<bool>,
    /// Refused when true: it only matters with post-copy or a paused switch-over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_workload_disruption: Option<bool>,
    /// Refused when true: Ferrovirt always carries migrations over mutual TLS.
    #[serde(
        default,
        rename = "disableTLS",
        skip_serializing_if = "Option::is_none"
    )]
    pub disable_tls: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

impl MigrationConfiguration {
    /// KubeVirt's default `parallelMigrationsPerCluster`.
    pub const PARALLEL_MIGRATIONS_PER_CLUSTER: u32 = 5;
    /// KubeVirt's default `parallelOutboundMigrationsPerNode`.
    pub const PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE: u32 = 2;
    /// KubeVirt's default `completionTimeoutPerGiB`.
    pub const COMPLETION_TIMEOUT_PER_GIB: i64 = 150;
    /// KubeVirt's default `progressTimeout`.
    pub const PROGRESS_TIMEOUT: i64 = 150;

    /// The migration settings of a KubeVirt CR (all defaults without one).
    pub fn of(kv: Option<&KubeVirt>) -> MigrationConfiguration {
        kv.and_then(|kv| kv.spec.configuration.as_ref()?.migrations.clone())
            .unwrap_or_default()
    }

    pub fn per_cluster(&self) -> usize {
        self.parallel_migrations_per_cluster
            .unwrap_or(Self::PARALLEL_MIGRATIONS_PER_CLUSTER) as usize
    }

    pub fn outbound_per_node(&self) -> usize {
        self.parallel_outbound_migrations_per_node
            .unwrap_or(Self::PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE) as usize
    }

    /// `bandwidthPerMigration` in bytes per second; 0 is unlimited (and what a quantity that
    /// validation would refuse gives).
    pub fn bandwidth_bytes_per_second(&self) -> u64 {
        self.bandwidth_per_migration
            .as_ref()
            .and_then(|q| crate::quantity::to_u64(q).ok())
            .unwrap_or(0)
    }

    pub fn completion_timeout_per_gib(&self) -> u64 {
        positive(
            self.completion_timeout_per_gib,
            Self::COMPLETION_TIMEOUT_PER_GIB,
        )
    }

    pub fn progress_timeout(&self) -> u64 {
        positive(self.progress_timeout, Self::PROGRESS_TIMEOUT)
    }

    /// `maxDowntimeMs`; 0 leaves the backend's default.
    pub fn max_downtime_ms(&self) -> u64 {
        positive(self.max_downtime_ms, 0)
    }
}

fn positive(value: Option<i64>, default: i64) -> u64 {
    u64::try_from(value.unwrap_or(default)).unwrap_or(0)
}

/// `v1.DeveloperConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeveloperConfiguration {
    /// Run every VM with QEMU TCG (software emulation) instead of KVM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_emulation: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feature_gates: Vec<String>,
    /// Beta gates turned off (KubeVirt's beta gates are on by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_feature_gates: Vec<String>,
    /// A percentage: a new VMI that requests no memory itself requests `memory.guest x 100 /
    /// memoryOvercommit` (KubeVirt's default 100: its whole guest memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_overcommit: Option<i64>,
    #[serde(flatten)]
    pub other: Other,
}

impl DeveloperConfiguration {
    /// KubeVirt's default `memoryOvercommit`.
    pub const DEFAULT_MEMORY_OVERCOMMIT: u32 = 100;

    /// The `memoryOvercommit` of the CR in force (`None`: no CR), KubeVirt's 100 where unset.
    pub fn memory_overcommit_in_force(kubevirt: Option<&KubeVirt>) -> u32 {
        kubevirt
            .and_then(|kv| {
                kv.spec
                    .configuration
                    .as_ref()?
                    .developer_configuration
                    .as_ref()
            })
            .and_then(|d| d.memory_overcommit)
            .and_then(|percent| u32::try_from(percent).ok())
            .filter(|&percent| percent > 0)
            .unwrap_or(Self::DEFAULT_MEMORY_OVERCOMMIT)
    }
}

/// Phases of an install, as KubeVirt names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum KubeVirtPhase {
    Deploying,
    Deployed,
    Deleting,
    Deleted,
}

/// `v1.KubeVirtStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<KubeVirtPhase>,
    /// Available, Progressing, Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_kube_virt_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_kube_virt_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_kube_virt_registry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_kube_virt_registry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The architecture VMIs get when they name none: `amd64`, the one Ferrovirt runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_architecture: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// Of the KubeVirt CRs a component has read (a reflector's listing, in no particular order),
/// the one whose configuration it applies: the oldest, then by namespace and name. Every
/// reader of the same listing picks the same CR, so the configuration a component uses and the
/// resourceVersion its `/healthz` reports (the `healthz` module) are of one object.
pub fn in_force<K: AsRef<KubeVirt>>(kubevirts: &[K]) -> Option<&KubeVirt> {
    kubevirts.iter().map(AsRef::as_ref).min_by(|a, b| {
        let key = |kv: &KubeVirt| {
            (
                kv.metadata.creation_timestamp.clone(),
                kv.metadata.namespace.clone(),
                kv.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    })
}
