//! The device plugins against a kubelet stand-in that speaks the real v1beta1 gRPC API over unix
//! sockets: registration, the device list, allocation, and registering again after a kubelet
//! restart deletes the plugin's socket.

use std::time::Duration;

use handler::device_plugin::v1beta1::device_plugin_client::DevicePluginClient;
use handler::device_plugin::v1beta1::registration_server::{Registration, RegistrationServer};
use handler::device_plugin::v1beta1::*;
use handler::device_plugin::{run_device_plugin, SharedDevice, KVM};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

struct Kubelet(mpsc::UnboundedSender<RegisterRequest>);

#[tonic::async_trait]
impl Registration for Kubelet {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let _ = self.0.send(request.into_inner());
        Ok(Response::new(Empty {}))
    }
}

async fn next_registration(rx: &mut mpsc::UnboundedReceiver<RegisterRequest>) -> RegisterRequest {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the plugin registers within 20 s")
        .expect("kubelet stand-in alive")
}

#[tokio::test]
async fn registers_lists_allocates_and_reregisters() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let listener = tokio::net::UnixListener::bind(dir.path().join("kubelet.sock")).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(Kubelet(tx)))
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
    tokio::spawn(run_device_plugin(KVM, dir.path().to_path_buf()));

    let registration = next_registration(&mut rx).await;
    assert_eq!(registration.version, "v1beta1");
    assert_eq!(registration.resource_name, "devices.kubevirt.io/kvm");
    assert_eq!(registration.endpoint, "ferrovirt-kvm.sock");

    let socket = dir.path().join(&registration.endpoint);
    let mut plugin = DevicePluginClient::new(contract::client::unix_channel(&socket).unwrap());
    let mut devices = plugin.list_and_watch(Empty {}).await.unwrap().into_inner();
    let first = devices.next().await.unwrap().unwrap();
    assert_eq!(first.devices.len(), KVM.count);
    let health = if std::path::Path::new("/dev/kvm").exists() {
        "Healthy"
    } else {
        "Unhealthy"
    };
    assert!(first.devices.iter().all(|d| d.health == health));

    let allocation = plugin
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec![first.devices[0].id.clone()],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let spec = &allocation.container_responses[0].devices[0];
    assert_eq!(
        (
            spec.host_path.as_str(),
            spec.container_path.as_str(),
            spec.permissions.as_str()
        ),
        ("/dev/kvm", "/dev/kvm", "rw")
    );

    // A kubelet restart removes the plugin sockets; the plugin comes back and registers again.
    std::fs::remove_file(&socket).unwrap();
    let again = next_registration(&mut rx).await;
    assert_eq!(again.resource_name, "devices.kubevirt.io/kvm");
    assert!(socket.exists());
}

#[tokio::test]
async fn a_missing_device_is_unhealthy() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let listener = tokio::net::UnixListener::bind(dir.path().join("kubelet.sock")).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(Kubelet(tx)))
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
    let missing = SharedDevice {
        resource: "devices.kubevirt.io/none",
        socket: "none.sock",
        path: "/dev/does-not-exist",
        count: 3,
    };
    tokio::spawn(run_device_plugin(missing, dir.path().to_path_buf()));
    let registration = next_registration(&mut rx).await;
    let socket = dir.path().join(registration.endpoint);
    let mut plugin = DevicePluginClient::new(contract::client::unix_channel(&socket).unwrap());
    let list = plugin
        .list_and_watch(Empty {})
        .await
        .unwrap()
        .into_inner()
        .next()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(list.devices.len(), 3);
    assert!(list.devices.iter().all(|d| d.health == "Unhealthy"));
}
