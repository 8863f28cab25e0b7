//! Domain events to virt-handler: on every state change the launcher calls `Notify.DomainEvent`
//! on the handler's notify socket (named in `SyncVMI`). Events go through one queue and one task,
//! so they arrive in order; each call has a deadline, and a handler that is gone only costs a log
//! line: the VM keeps running.

use std::path::PathBuf;
use std::time::Duration;

use contract::client::notify_client;
use contract::proto::v1;
use tokio::sync::mpsc;

/// Deadline of one notification.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(3);

/// The sending side of the event queue.
#[derive(Clone, Debug)]
pub struct Notifier {
    queue: mpsc::UnboundedSender<(PathBuf, v1::Domain)>,
}

impl Notifier {
    /// Starts the task that delivers events; needs a tokio runtime.
    pub fn start() -> Notifier {
        let (queue, mut events) = mpsc::unbounded_channel::<(PathBuf, v1::Domain)>();
        tokio::spawn(async move {
            while let Some((socket, domain)) = events.recv().await {
                deliver(&socket, domain).await;
            }
        });
        Notifier { queue }
    }

    /// Queues an event for `socket`.
    pub fn send(&self, socket: PathBuf, domain: v1::Domain) {
        if self.queue.send((socket, domain)).is_err() {
            log::warn!("the domain event queue is closed");
        }
    }
}

async fn deliver(socket: &std::path::Path, domain: v1::Domain) {
    let state = domain.state;
    let result = tokio::time::timeout(NOTIFY_TIMEOUT, async {
        let mut client = notify_client(socket).map_err(|e| e.to_string())?;
        client
            .domain_event(v1::DomainEventRequest {
                domain: Some(domain),
            })
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    match result {
        Ok(Ok(_)) => log::debug!("notified {} of state {state}", socket.display()),
        Ok(Err(e)) => log::warn!("notify {}: {e}", socket.display()),
        Err(_) => log::warn!(
            "notify {}: no answer within {NOTIFY_TIMEOUT:?}",
            socket.display()
        ),
    }
}
