//! What the KubeVirt CR controller shares between its steps: the [`Context`] every reconcile
//! gets (the client, the operator's namespace and image, the event recorder) and the [`Error`]
//! a failed reconcile returns. Both the reconciler (`reconcile`) and the status writer
//! (`status`) use them.

use std::sync::Arc;

use api::KubeVirt;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

use crate::certs;
use crate::install::OperatorImage;

/// What the reconciler shares.
pub struct Context {
    pub client: Client,
    /// The namespace the operator runs in and installs into.
    pub namespace: String,
    pub image: OperatorImage,
    recorder: Recorder,
}

impl Context {
    pub fn new(client: Client, namespace: String, image: OperatorImage) -> Arc<Context> {
        let reporter = Reporter {
            controller: "virt-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Arc::new(Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            namespace,
            image,
        })
    }

    /// Publishes an event about `kv` (Warning when `warning`, else Normal); a failure is
    /// only logged.
    pub(crate) async fn event(&self, kv: &KubeVirt, warning: bool, reason: &str, note: String) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &kv.object_ref(&())).await {
            log::warn!("cannot record event {reason}: {e}");
        }
    }
}

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {kind} {name}")]
    Kube {
        action: &'static str,
        kind: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("unknown kind {0} in the install")]
    UnknownKind(String),
    #[error("certificates")]
    Certs(#[from] certs::CertError),
    #[error("rendering the install")]
    Render(#[from] serde_json::Error),
}

pub(crate) fn kube_error(
    action: &'static str,
    kind: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> Error {
    let (kind, name) = (kind.to_string(), name.to_string());
    move |source| Error::Kube {
        action,
        kind,
        name,
        source: Box::new(source),
    }
}
