//! This node's labels and heartbeat: whether it can run VMs and how well its KVM runs them.
//!
//! Labels: `kubevirt.io/schedulable=true` (the launcher Pods select it), `ferrovirt.io/kvm` =
//! `hardware`, `pvm` or `none`. Annotations: `kubevirt.io/heartbeat` (RFC 3339, renewed every
//! `HEARTBEAT` seconds; virt-controller fails the VMIs of a node whose heartbeat is stale) and
//! `ferrovirt.io/kvm-reason`.

use std::time::Duration;

use contract::capability::KvmCapability;
use contract::{annotations, labels};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// The label value and reason for a KVM capability.
pub fn kvm_label(capability: &KvmCapability) -> (&'static str, String) {
    match capability {
        KvmCapability::Hardware => (
            labels::KVM_HARDWARE,
            "hardware virtualization (vmx/svm)".into(),
        ),
        KvmCapability::PvmOnly => (
            "pvm",
            "/dev/kvm is PVM: standard guests run on QEMU TCG, test guests on KVM".into(),
        ),
        KvmCapability::Unavailable(reason) => ("none", reason.clone()),
    }
}

/// Writes the labels and a fresh heartbeat.
pub async fn mark_node(
    client: &Client,
    node: &str,
    capability: &KvmCapability,
) -> Result<(), kube::Error> {
    let (kvm, reason) = kvm_label(capability);
    let patch = json!({
        "metadata": {
            "labels": {labels::SCHEDULABLE: "true", labels::KVM: kvm},
            "annotations": {
                annotations::HEARTBEAT: Timestamp::now().to_string(),
                annotations::KVM_REASON: reason,
            }
        }
    });
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Renews the heartbeat forever.
pub async fn heartbeat(client: Client, node: String, capability: KvmCapability) {
    loop {
        if let Err(e) = mark_node(&client, &node, &capability).await {
            log::warn!("heartbeat on node {node}: {e}");
        }
        tokio::time::sleep(HEARTBEAT).await;
    }
}
