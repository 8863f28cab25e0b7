//! The `launcher.v1.Notify` service: each launcher pushes its domain's state changes here, on a
//! socket in that VMI's socket directory (the only directory the launcher Pod shares with the
//! node). Every event makes the VMI's reconciler run at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use contract::proto::v1::notify_server::{Notify, NotifyServer};
use contract::proto::v1::{DomainEventRequest, DomainEventResponse};
use contract::sockets::NOTIFY_SOCKET;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::UnboundedSender;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use api::VirtualMachineInstance;

struct Listener {
    object: ObjectRef<VirtualMachineInstance>,
    events: UnboundedSender<ObjectRef<VirtualMachineInstance>>,
}

#[tonic::async_trait]
impl Notify for Listener {
    async fn domain_event(
        &self,
        request: Request<DomainEventRequest>,
    ) -> Result<Response<DomainEventResponse>, Status> {
        let state = request
            .into_inner()
            .domain
            .map(|d| d.state)
            .unwrap_or_default();
        log::debug!("{}: domain event, state {state}", self.object);
        let _ = self.events.send(self.object.clone());
        Ok(Response::new(DomainEventResponse {}))
    }
}

/// The notify sockets this handler serves, one per VMI directory.
pub struct NotifyServers {
    events: UnboundedSender<ObjectRef<VirtualMachineInstance>>,
    serving: Mutex<BTreeMap<PathBuf, tokio::task::JoinHandle<()>>>,
}

impl NotifyServers {
    pub fn new(events: UnboundedSender<ObjectRef<VirtualMachineInstance>>) -> Self {
        NotifyServers {
            events,
            serving: Mutex::new(BTreeMap::new()),
        }
    }

    /// Serves the notify socket in `dir` for `object` unless it is served already.
    pub fn ensure(
        &self,
        dir: &Path,
        object: ObjectRef<VirtualMachineInstance>,
    ) -> std::io::Result<()> {
        let socket = dir.join(NOTIFY_SOCKET);
        let mut serving = self.serving.lock().unwrap_or_else(|e| e.into_inner());
        if serving.get(&socket).is_some_and(|task| !task.is_finished()) && socket.exists() {
            return Ok(());
        }
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket)?;
        crate::sockets::hand_to_launcher(&socket)?;
        let service = NotifyServer::new(Listener {
            object,
            events: self.events.clone(),
        });
        let task = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await;
            if let Err(e) = served {
                log::warn!("notify socket: {e}");
            }
        });
        serving.insert(socket, task);
        Ok(())
    }

    /// Stops serving the notify socket in `dir`.
    pub fn forget(&self, dir: &Path) {
        let socket = dir.join(NOTIFY_SOCKET);
        let mut serving = self.serving.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = serving.remove(&socket) {
            task.abort();
        }
        let _ = std::fs::remove_file(socket);
    }
}
