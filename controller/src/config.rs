//! What the controllers need to know about the cluster: images, emulation, overheads. Read
//! from the environment that virt-operator gives virt-controller, and from the KubeVirt CR.

use api::kubevirt::MigrationConfiguration;
use api::KubeVirt;

/// KubeVirt's feature gate that runs launchers as root.
pub const ROOT_FEATURE_GATE: &str = "Root";

/// Cluster-wide settings for rendering launcher Pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Image of virt-launcher (also carries QEMU, the default guest kernel and a static busybox).
    pub launcher_image: String,
    pub image_pull_policy: String,
    /// `spec.configuration.developerConfiguration.useEmulation`: QEMU TCG everywhere, no
    /// `/dev/kvm` requested.
    pub use_emulation: bool,
    /// Reserve memory for QEMU TCG even without useEmulation, because a node whose KVM cannot
    /// run standard guests (PVM) falls back to it.
    pub assume_tcg_possible: bool,
    /// Memory of the launcher process itself.
    pub launcher_overhead_bytes: u64,
    /// Memory of QEMU with its translation cache.
    pub tcg_overhead_bytes: u64,
    /// CPU request of the compute container when the VMI asks for none.
    pub cpu_request: String,
    /// `spec.configuration.migrations.parallelMigrationsPerCluster`.
    pub parallel_migrations_per_cluster: usize,
    /// `spec.configuration.migrations.parallelOutboundMigrationsPerNode`.
    pub parallel_outbound_migrations_per_node: usize,
    /// `spec.configuration.instancetype.referencePolicy`: `reference`, `expand` or
    /// `expandAll`.
    pub instancetype_reference_policy: String,
    /// KubeVirt's `Root` feature gate: launchers run as root instead of the non-root user
    /// `contract::layout::LAUNCHER_USER_ID`.
    pub root_launcher: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            launcher_image: "registry:5000/ferrovirt/virt-launcher:devel".into(),
            image_pull_policy: "IfNotPresent".into(),
            use_emulation: false,
            assume_tcg_possible: true,
            launcher_overhead_bytes: 16 << 20,
            tcg_overhead_bytes: 96 << 20,
            cpu_request: "100m".into(),
            parallel_migrations_per_cluster: MigrationConfiguration::PARALLEL_MIGRATIONS_PER_CLUSTER
                as usize,
            parallel_outbound_migrations_per_node:
                MigrationConfiguration::PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE as usize,
            instancetype_reference_policy: "reference".into(),
            root_launcher: false,
        }
    }
}

impl ClusterConfig {
    /// Reads `LAUNCHER_IMAGE` and `IMAGE_PULL_POLICY` from the environment.
    pub fn from_env() -> Self {
        let mut cfg = ClusterConfig::default();
        if let Ok(image) = std::env::var("LAUNCHER_IMAGE") {
            cfg.launcher_image = image;
        }
        if let Ok(policy) = std::env::var("IMAGE_PULL_POLICY") {
            cfg.image_pull_policy = policy;
        }
        cfg
    }

    /// Applies the KubeVirt CR's configuration.
    pub fn apply_kubevirt(&mut self, kv: &KubeVirt) {
        self.use_emulation = kv
            .spec
            .configuration
            .as_ref()
            .and_then(|c| c.developer_configuration.as_ref())
            .and_then(|d| d.use_emulation)
            .unwrap_or(false);
        self.instancetype_reference_policy = kv
            .spec
            .configuration
            .as_ref()
            .and_then(|c| c.instancetype.as_ref())
            .and_then(|i| i.reference_policy.clone())
            .unwrap_or_else(|| "reference".into());
        self.root_launcher = kv
            .spec
            .configuration
            .as_ref()
            .and_then(|c| c.developer_configuration.as_ref())
            .is_some_and(|d| d.feature_gates.iter().any(|g| g == ROOT_FEATURE_GATE));
        let migrations = MigrationConfiguration::of(Some(kv));
        self.parallel_migrations_per_cluster = migrations.per_cluster();
        self.parallel_outbound_migrations_per_node = migrations.outbound_per_node();
    }
}
