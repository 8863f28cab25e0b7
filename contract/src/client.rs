//! gRPC over a unix socket: the channel both sides open (the handler to `launcher-sock`, the
//! launcher to the handler's notify socket, the handler to the kubelet's device-plugin socket).

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::proto::v1;

/// A gRPC channel over the unix socket `path`, connected lazily (on first use, and again after
/// the launcher restarted).
pub fn unix_channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_path_buf();
    // tonic requires a URI but does not use it: the connector dials the socket.
    Ok(
        Endpoint::try_from("http://[::]:50051")?.connect_with_connector_lazy(tower::service_fn(
            move |_| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            },
        )),
    )
}

/// A `Launcher` client over the launcher's socket (`<socket dir>/launcher-sock`).
pub fn launcher_client(
    path: &Path,
) -> Result<v1::launcher_client::LauncherClient<Channel>, tonic::transport::Error> {
    Ok(v1::launcher_client::LauncherClient::new(unix_channel(
        path,
    )?))
}

/// A `Notify` client over the handler's notify socket.
pub fn notify_client(
    path: &Path,
) -> Result<v1::notify_client::NotifyClient<Channel>, tonic::transport::Error> {
    Ok(v1::notify_client::NotifyClient::new(unix_channel(path)?))
}
