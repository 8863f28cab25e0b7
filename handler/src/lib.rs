//! virt-handler: the node DaemonSet that drives the launchers on its node over gRPC, reports VMI
//! status, and advertises `/dev/kvm` and `/dev/net/tun` through kubelet device plugins.
#![forbid(unsafe_code)]

pub mod cgroup;
pub mod device_plugin;
pub mod events;
pub mod launcher_socket;
pub mod metrics;
pub mod migration;
pub mod node;
pub mod notify;
pub mod ownership;
pub mod podnet;
pub mod run;
pub mod server;
pub mod sockets;
pub mod sync_options;
pub mod vmi;

/// An error and its causes, on one line (`a: b: c`), for logs and messages.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
