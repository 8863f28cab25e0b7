//! The extended resources virt-handler's device plugins advertise and launcher Pods request.

/// `/dev/kvm`.
pub const KVM: &str = "devices.kubevirt.io/kvm";
/// `/dev/net/tun`.
pub const TUN: &str = "devices.kubevirt.io/tun";
