//! What every reconciler shares: the client, the event recorder and the cluster config, which
//! follows the KubeVirt CR without a restart.

use std::sync::Arc;

use api::KubeVirt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Client, Resource};

use crate::config::ClusterConfig;

pub struct Context {
    pub client: Client,
    recorder: Recorder,
    /// The KubeVirt CRs (normally one), watched.
    kubevirts: Store<KubeVirt>,
    base: ClusterConfig,
}

impl Context {
    pub fn new(client: Client, kubevirts: Store<KubeVirt>, base: ClusterConfig) -> Arc<Self> {
        let reporter = Reporter {
            controller: "virt-controller".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Arc::new(Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            kubevirts,
            base,
        })
    }

    /// The config in force now: the environment's, with the KubeVirt CR's configuration.
    pub fn config(&self) -> ClusterConfig {
        let mut cfg = self.base.clone();
        if let Some(kv) = api::kubevirt::in_force(&self.kubevirts.state()) {
            cfg.apply_kubevirt(kv);
        }
        cfg
    }

    /// The KubeVirt CR's `spec.configuration.migrations`, as of now (KubeVirt's defaults
    /// without a CR).
    pub fn migration_config(&self) -> api::kubevirt::MigrationConfiguration {
        api::kubevirt::MigrationConfiguration::of(api::kubevirt::in_force(&self.kubevirts.state()))
    }

    /// Records an event on `object`; a failure to record is logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        self.event_on(&object.object_ref(&()), warning, reason, note)
            .await;
    }

    /// Records an event on the object `reference` names (for objects without a static type).
    pub async fn event_on(
        &self,
        reference: &ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
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
        if let Err(e) = self.recorder.publish(&event, reference).await {
            log::warn!("cannot record event {reason}: {e}");
        }
    }
}
