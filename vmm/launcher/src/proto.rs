//! The generated `launcher.v1` gRPC code (from `proto/launcher.proto`, compiled by `build.rs`),
//! and the unix-socket client the handler (and the tests) use.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("launcher.v1");
}

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

/// The API versions this launcher speaks.
pub const SUPPORTED_VERSIONS: &[&str] = &["v1"];

/// Longest unix socket path (`sun_path` is 108 bytes with the terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Checks that `path` fits in a unix socket address.
pub fn check_socket_path(path: &Path) -> Result<(), String> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        Err(format!(
            "socket path {} is {len} bytes, longer than the {MAX_SOCKET_PATH} a unix socket allows",
            path.display()
        ))
    } else {
        Ok(())
    }
}

/// A gRPC channel over the unix socket `path` (connected lazily, on first use).
pub fn unix_channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_path_buf();
    // The URI is required by tonic but unused: the connector dials the socket.
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

/// A `Launcher` client over the launcher's socket.
pub fn launcher_client(
    path: &Path,
) -> Result<v1::launcher_client::LauncherClient<Channel>, tonic::transport::Error> {
    Ok(v1::launcher_client::LauncherClient::new(unix_channel(
        path,
    )?))
}
