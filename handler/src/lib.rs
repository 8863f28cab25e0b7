//! virt-handler: the node DaemonSet that drives the launchers on its node over gRPC, reports VMI
//! status, and advertises `/dev/kvm` and `/dev/net/tun` through kubelet device plugins.
#![forbid(unsafe_code)]

pub mod cgroup;
pub mod device_plugin;
pub mod events;
pub mod metrics;
pub mod migration;
pub mod node;
pub mod notify;
pub mod podnet;
pub mod run;
pub mod server;
pub mod sockets;
pub mod vmi;
