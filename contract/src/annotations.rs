//! Annotations the components write for each other.

/// On a launcher Pod: the VMI's name (KubeVirt's `kubevirt.io/domain`).
pub const DOMAIN: &str = "kubevirt.io/domain";
/// On a node: virt-handler's last heartbeat (RFC 3339); virt-controller fails the VMIs of a
/// node whose heartbeat is stale.
pub const HEARTBEAT: &str = "kubevirt.io/heartbeat";
/// On a node: why [`crate::labels::KVM`] has its value.
pub const KVM_REASON: &str = "ferrovirt.io/kvm-reason";
