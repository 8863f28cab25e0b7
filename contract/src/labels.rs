//! Labels the components set and select by (KubeVirt's names where KubeVirt has them).

/// On every launcher Pod: [`APP`] = [`LAUNCHER_APP`] (virt-controller watches Pods by it).
pub const APP: &str = "kubevirt.io";
/// The value of [`APP`] on launcher Pods.
pub const LAUNCHER_APP: &str = "virt-launcher";
/// On a launcher Pod: the UID of its VMI (virt-controller and virt-handler find a VMI's Pods
/// by it).
pub const CREATED_BY: &str = "kubevirt.io/created-by";
/// On a launcher Pod and on the VMI of a VM: the VMI's (the VM's) name.
pub const VMI_NAME: &str = "vm.kubevirt.io/name";
/// On a VMI once it is scheduled: its node (virt-handler watches the VMIs of its node by it).
pub const NODE_NAME: &str = "kubevirt.io/nodeName";
/// On a node whose virt-handler runs: `true` (launcher Pods select it).
pub const SCHEDULABLE: &str = "kubevirt.io/schedulable";
/// On a node: what its KVM can do, `hardware`, `pvm` or `none` (virt-handler, from
/// [`crate::capability::probe`]).
pub const KVM: &str = "ferrovirt.io/kvm";
/// The value of [`KVM`] on a node whose `/dev/kvm` runs standard guests (launcher Pods prefer
/// such nodes unless the cluster asks for emulation).
pub const KVM_HARDWARE: &str = "hardware";
/// On a migration target launcher Pod: the UID of its migration.
pub const MIGRATION_JOB: &str = "kubevirt.io/migrationJobUID";
/// On a VMI while it migrates: the target node.
pub const MIGRATION_TARGET_NODE: &str = "kubevirt.io/migrationTargetNodeName";
