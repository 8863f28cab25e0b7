//! virt-handler: the node DaemonSet that drives the launchers on its node over gRPC, reports VMI
//! status and advertises `/dev/kvm` and `/dev/net/tun` through a kubelet device plugin.
//! Not written yet (issue "virt-controller and virt-handler").
