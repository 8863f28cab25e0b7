//! A kubelet device plugin per node device that VMs need: `devices.kubevirt.io/kvm` for
//! `/dev/kvm` and `devices.kubevirt.io/tun` for `/dev/net/tun`.
//!
//! Protocol (kubelet device-plugin API v1beta1, gRPC over unix sockets):
//! 1. the plugin serves `DevicePlugin` on a socket in `/var/lib/kubelet/device-plugins/`;
//! 2. it calls `Registration.Register` on the kubelet's `kubelet.sock` there, naming its socket
//!    and resource;
//! 3. the kubelet calls `ListAndWatch` and keeps the stream open: the plugin sends the device list
//!    (many interchangeable "devices", since any number of Pods may share `/dev/kvm`) and sends
//!    it again when the device's health changes;
//! 4. for each Pod that requests the resource the kubelet calls `Allocate`, and the plugin
//!    answers with the device node to put in the container.
//!
//! When the kubelet restarts it deletes every plugin socket; the plugin notices its socket is
//! gone and starts over from step 1.

mod server;

pub use server::{run_device_plugin, DevicePluginServer};

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1beta1 {
    tonic::include_proto!("v1beta1");
}

/// One device the node shares with VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedDevice {
    /// Extended resource name Pods request.
    pub resource: &'static str,
    /// File name of the plugin's socket in the device-plugin directory.
    pub socket: &'static str,
    /// The device node, the same path on the host and in the container.
    pub path: &'static str,
    /// How many Pods may hold it at once.
    pub count: usize,
}

/// `/dev/kvm`, for the KVM VMM.
pub const KVM: SharedDevice = SharedDevice {
    resource: contract::resources::KVM,
    socket: "ferrovirt-kvm.sock",
    path: "/dev/kvm",
    count: 1000,
};

/// `/dev/net/tun`, for the VM's tap device.
pub const TUN: SharedDevice = SharedDevice {
    resource: contract::resources::TUN,
    socket: "ferrovirt-tun.sock",
    path: "/dev/net/tun",
    count: 1000,
};

/// The API version the plugins register with.
pub const API_VERSION: &str = "v1beta1";
