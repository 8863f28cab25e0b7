//! The gRPC server: `launcher.v1.Launcher` over the unix socket `launcher-sock` in the socket
//! directory shared with virt-handler, the serial console on `console-sock` beside it, and a
//! monitor that polls the VM every [`MONITOR_INTERVAL`] so that a VMM that dies shows up in
//! `GetDomain` (and as a domain event) without anyone asking.
//!
//! Each call runs the blocking [`launcher::Launcher`] operation on a blocking task; the service
//! only translates messages and errors ([`error`]).

pub mod error;
pub mod launcher;
pub mod notify;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use contract::proto::v1;
use contract::sockets::{check_socket_path, CONSOLE_SOCKET, LAUNCHER_SOCKET};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::console::ConsoleRelay;
use launcher::{Launcher, Settings};

/// How often the monitor polls the VM.
pub const MONITOR_INTERVAL: Duration = Duration::from_millis(250);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    SocketPath(String),
    #[error("cannot create the socket directory {0}")]
    SocketDir(PathBuf, #[source] std::io::Error),
    #[error("cannot listen on {0}")]
    Listen(PathBuf, #[source] std::io::Error),
    #[error("console")]
    Console(#[from] crate::console::ConsoleError),
    #[error("gRPC server")]
    Grpc(#[from] tonic::transport::Error),
}

/// The `Launcher` gRPC service.
#[derive(Clone)]
pub struct LauncherService {
    launcher: Arc<Launcher>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<Response<T>, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("launcher task failed: {e}")))?
        .map(Response::new)
}

fn domain_response(domain: v1::Domain) -> v1::DomainResponse {
    v1::DomainResponse {
        domain: Some(domain),
    }
}

impl LauncherService {
    /// Runs one launcher operation on a blocking task and answers with the domain it leaves;
    /// a failure is logged with its causes under the RPC's name and translated ([`error`]).
    async fn domain_call<E>(
        &self,
        rpc: &'static str,
        op: impl FnOnce(&Launcher) -> Result<v1::Domain, E> + Send + 'static,
    ) -> Result<Response<v1::DomainResponse>, Status>
    where
        E: std::error::Error + Into<Status>,
    {
        let launcher = Arc::clone(&self.launcher);
        blocking(move || {
            op(&launcher).map(domain_response).map_err(|e| {
                log::warn!("{rpc}: {}", error::chain(&e));
                e.into()
            })
        })
        .await
    }
}

#[tonic::async_trait]
impl v1::launcher_server::Launcher for LauncherService {
    async fn info(
        &self,
        _: Request<v1::InfoRequest>,
    ) -> Result<Response<v1::InfoResponse>, Status> {
        Ok(Response::new(contract::proto::info_response(env!(
            "CARGO_PKG_VERSION"
        ))))
    }

    async fn sync_vmi(
        &self,
        request: Request<v1::SyncVmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let request = request.into_inner();
        self.domain_call("SyncVMI", move |launcher| {
            launcher.sync_vmi(&request.vmi_json, &request.options.unwrap_or_default())
        })
        .await
    }

    async fn pause(
        &self,
        request: Request<v1::VmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let vmi = request.into_inner().vmi;
        self.domain_call("Pause", move |launcher| launcher.pause(&vmi))
            .await
    }

    async fn unpause(
        &self,
        request: Request<v1::VmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let vmi = request.into_inner().vmi;
        self.domain_call("Unpause", move |launcher| launcher.unpause(&vmi))
            .await
    }

    async fn shutdown(
        &self,
        request: Request<v1::ShutdownRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let request = request.into_inner();
        self.domain_call("Shutdown", move |launcher| {
            launcher.shutdown(&request.vmi, request.grace_period_seconds)
        })
        .await
    }

    async fn kill(
        &self,
        request: Request<v1::VmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let vmi = request.into_inner().vmi;
        self.domain_call("Kill", move |launcher| launcher.kill(&vmi))
            .await
    }

    async fn reset(
        &self,
        request: Request<v1::VmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let vmi = request.into_inner().vmi;
        self.domain_call("Reset", move |launcher| launcher.reset(&vmi))
            .await
    }

    async fn get_domain(
        &self,
        _: Request<v1::GetDomainRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let launcher = Arc::clone(&self.launcher);
        blocking(move || {
            Ok(v1::DomainResponse {
                domain: launcher.get_domain(),
            })
        })
        .await
    }

    async fn prepare_migration_target(
        &self,
        request: Request<v1::SyncVmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let request = request.into_inner();
        self.domain_call("PrepareMigrationTarget", move |launcher| {
            launcher
                .prepare_migration_target(&request.vmi_json, &request.options.unwrap_or_default())
        })
        .await
    }

    async fn migrate(
        &self,
        request: Request<v1::MigrateRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let request = request.into_inner();
        self.domain_call("Migrate", move |launcher| launcher.migrate(&request))
            .await
    }

    async fn cancel_migration(
        &self,
        request: Request<v1::VmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let vmi = request.into_inner().vmi;
        self.domain_call("CancelMigration", move |launcher| {
            launcher.cancel_migration(&vmi)
        })
        .await
    }

    async fn screenshot(
        &self,
        request: Request<v1::VmiRequest>,
    ) -> Result<Response<v1::ScreenshotResponse>, Status> {
        let vmi = request.into_inner().vmi;
        let launcher = Arc::clone(&self.launcher);
        blocking(move || {
            launcher
                .screenshot(&vmi)
                .map(|png| v1::ScreenshotResponse { png })
                .map_err(|e| {
                    log::warn!("Screenshot: {}", error::chain(&e));
                    e.into()
                })
        })
        .await
    }

    async fn soft_reboot(
        &self,
        request: Request<v1::VmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let vmi = request.into_inner().vmi;
        self.domain_call("SoftReboot", move |launcher| launcher.soft_reboot(&vmi))
            .await
    }

    async fn freeze(
        &self,
        request: Request<v1::FreezeRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let request = request.into_inner();
        let after = std::time::Duration::from_secs(request.unfreeze_timeout_seconds);
        self.domain_call("Freeze", move |launcher| {
            launcher.freeze(&request.vmi, after)
        })
        .await
    }

    async fn unfreeze(
        &self,
        request: Request<v1::VmiRequest>,
    ) -> Result<Response<v1::DomainResponse>, Status> {
        let vmi = request.into_inner().vmi;
        self.domain_call("Unfreeze", move |launcher| launcher.unfreeze(&vmi))
            .await
    }

    async fn ping(
        &self,
        _: Request<v1::PingRequest>,
    ) -> Result<Response<v1::PingResponse>, Status> {
        Ok(Response::new(v1::PingResponse {}))
    }
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let dir = settings.socket_dir.clone();
    let launcher_sock = dir.join(LAUNCHER_SOCKET);
    let console_sock = dir.join(CONSOLE_SOCKET);
    for socket in [&launcher_sock, &console_sock] {
        check_socket_path(socket).map_err(ServeError::SocketPath)?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| ServeError::SocketDir(dir.clone(), e))?;
    let relay = ConsoleRelay::start(&console_sock)?;
    let launcher = Arc::new(Launcher::new(settings, relay, notify::Notifier::start()));

    let monitored = Arc::clone(&launcher);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(MONITOR_INTERVAL);
        loop {
            tick.tick().await;
            let launcher = Arc::clone(&monitored);
            let _ = tokio::task::spawn_blocking(move || launcher.poll()).await;
        }
    });

    // Bound and listening under a name of its own, then renamed into place: whoever sees
    // launcher-sock (virt-handler, the tests) can connect. Bound in place, the file exists
    // between bind(2) and listen(2), and a client that came then was refused. The temporary
    // name is shorter, so it fits wherever launcher-sock does.
    let binding = dir.join(".new-sock");
    let _ = std::fs::remove_file(&binding);
    let listener =
        UnixListener::bind(&binding).map_err(|e| ServeError::Listen(binding.clone(), e))?;
    std::fs::rename(&binding, &launcher_sock)
        .map_err(|e| ServeError::Listen(launcher_sock.clone(), e))?;
    log::info!("listening on {}", launcher_sock.display());
    let service = LauncherService {
        launcher: Arc::clone(&launcher),
    };
    let served = tonic::transport::Server::builder()
        .add_service(v1::launcher_server::LauncherServer::new(service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await;
    // The VM does not outlive its launcher.
    let _ = tokio::task::spawn_blocking(move || launcher.stop_vm()).await;
    served?;
    Ok(())
}
