//! The `DevicePlugin` service for one shared device, and the serve-register-watch loop.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::v1beta1::device_plugin_server::{DevicePlugin, DevicePluginServer as Service};
use super::v1beta1::registration_client::RegistrationClient;
use super::v1beta1::*;
use super::{SharedDevice, API_VERSION};

/// How often the plugin checks the device's health and its own socket.
const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Serves one shared device to the kubelet.
#[derive(Clone)]
pub struct DevicePluginServer {
    device: SharedDevice,
    healthy: watch::Receiver<bool>,
}

impl DevicePluginServer {
    pub fn new(device: SharedDevice, healthy: watch::Receiver<bool>) -> Self {
        DevicePluginServer { device, healthy }
    }

    fn devices(&self, healthy: bool) -> Vec<Device> {
        let health = if healthy { "Healthy" } else { "Unhealthy" };
        (0..self.device.count)
            .map(|i| Device {
                id: format!("{}{i}", self.device.socket.trim_end_matches(".sock")),
                health: health.into(),
                topology: None,
            })
            .collect()
    }
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for DevicePluginServer {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions::default()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let plugin = self.clone();
        let mut healthy = self.healthy.clone();
        let stream = async_stream(move |tx| async move {
            loop {
                let state = *healthy.borrow_and_update();
                let response = ListAndWatchResponse {
                    devices: plugin.devices(state),
                };
                if tx.send(Ok(response)).await.is_err() || healthy.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        Ok(Response::new(PreferredAllocationResponse::default()))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|_| ContainerAllocateResponse {
                devices: vec![DeviceSpec {
                    container_path: self.device.path.into(),
                    host_path: self.device.path.into(),
                    permissions: "rw".into(),
                }],
                ..ContainerAllocateResponse::default()
            })
            .collect();
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// A stream fed by a task through a bounded channel.
fn async_stream<F, Fut>(body: F) -> DeviceStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<ListAndWatchResponse, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(body(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Why one round of serving and registering failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("binding {0}")]
    Bind(PathBuf, #[source] std::io::Error),
    #[error("connecting to the kubelet")]
    Connect(#[source] tonic::transport::Error),
    #[error("registering with the kubelet")]
    Register(#[source] Status),
}

/// Serves `device` in `dir` and registers it with the kubelet there, forever: after a kubelet
/// restart (our socket deleted) it serves and registers again. Health follows whether the device
/// node exists.
pub async fn run_device_plugin(device: SharedDevice, dir: PathBuf) {
    let (health_tx, health_rx) = watch::channel(Path::new(device.path).exists());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(CHECK_INTERVAL).await;
            let now = Path::new(device.path).exists();
            health_tx.send_if_modified(|h| std::mem::replace(h, now) != now);
        }
    });
    loop {
        match serve_once(device, &dir, health_rx.clone()).await {
            Ok(()) => log::info!(
                "{}: socket removed (kubelet restart?); registering again",
                device.resource
            ),
            Err(e) => log::warn!("{}: {e}: {}", device.resource, source_of(&e)),
        }
        tokio::time::sleep(CHECK_INTERVAL).await;
    }
}

/// Serves and registers once; returns when the socket disappears.
async fn serve_once(
    device: SharedDevice,
    dir: &Path,
    healthy: watch::Receiver<bool>,
) -> Result<(), PluginError> {
    let socket = dir.join(device.socket);
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket)
        .map_err(|e| PluginError::Bind(socket.clone(), e))?;
    let server = DevicePluginServer::new(device, healthy);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Service::new(server))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = stop_rx.await;
            }),
    );
    let result = register(device, dir).await;
    if result.is_ok() {
        log::info!("{}: registered with the kubelet", device.resource);
        let mut ticker =
            tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(CHECK_INTERVAL));
        while ticker.next().await.is_some() {
            if !socket.exists() {
                break;
            }
        }
    }
    // Open ListAndWatch streams would hold a graceful shutdown forever: give the server a
    // moment, then drop it.
    let _ = stop_tx.send(());
    if tokio::time::timeout(Duration::from_secs(1), &mut serving)
        .await
        .is_err()
    {
        serving.abort();
    }
    result
}

async fn register(device: SharedDevice, dir: &Path) -> Result<(), PluginError> {
    let channel =
        contract::client::unix_channel(&dir.join("kubelet.sock")).map_err(PluginError::Connect)?;
    let mut client = RegistrationClient::new(channel);
    client
        .register(RegisterRequest {
            version: API_VERSION.into(),
            endpoint: device.socket.into(),
            resource_name: device.resource.into(),
            options: Some(DevicePluginOptions::default()),
        })
        .await
        .map_err(PluginError::Register)?;
    Ok(())
}

fn source_of(error: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut source = error.source();
    while let Some(e) = source {
        parts.push(e.to_string());
        source = e.source();
    }
    parts.join(": ")
}
