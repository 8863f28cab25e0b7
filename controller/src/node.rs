//! Fails the VMIs of nodes whose virt-handler stopped sending heartbeats: the VM may still run
//! there, but nobody can drive or report it. KubeVirt's threshold, 5 minutes, is the default.

use std::time::Duration;

use api::{VirtualMachineInstance, VmiPhase};
use contract::{annotations, labels};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::vmi::plan::{set_condition, set_phase};

pub const STALE_AFTER: SignedDuration = SignedDuration::from_secs(300);
const CHECK_EVERY: Duration = Duration::from_secs(30);

/// Nodes whose heartbeat is older than `stale_after` (nodes that never had one are not ours).
pub fn stale_nodes(nodes: &[Node], now: Timestamp, stale_after: SignedDuration) -> Vec<String> {
    nodes
        .iter()
        .filter(|node| {
            node.annotations()
                .get(annotations::HEARTBEAT)
                .and_then(|t| t.parse::<Timestamp>().ok())
                .is_some_and(|beat| beat + stale_after < now)
        })
        .map(|node| node.name_any())
        .collect()
}

/// Checks the heartbeats forever.
pub async fn watch_heartbeats(client: Client) {
    loop {
        if let Err(e) = check_once(&client).await {
            log::warn!("heartbeat check: {e}");
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

async fn check_once(client: &Client) -> Result<(), kube::Error> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    for node in stale_nodes(&nodes, Timestamp::now(), STALE_AFTER) {
        let vmis = Api::<VirtualMachineInstance>::all(client.clone())
            .list(&ListParams::default().labels(&format!("{}={node}", labels::NODE_NAME)))
            .await?;
        for mut vmi in vmis.items {
            let status = vmi.status.get_or_insert_with(Default::default);
            if status.phase.is_some_and(VmiPhase::is_final) {
                continue;
            }
            set_phase(status, VmiPhase::Failed, Timestamp::now());
            status.reason = Some("NodeUnresponsive".into());
            set_condition(
                status,
                api::Condition::new(
                    "Ready",
                    false,
                    "NodeUnresponsive",
                    &format!("virt-handler on {node} stopped sending heartbeats"),
                ),
            );
            let namespace = vmi.namespace().unwrap_or_default();
            let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace);
            if let Err(e) = api
                .replace_status(&vmi.name_any(), &PostParams::default(), &vmi)
                .await
            {
                log::warn!("failing VMI {namespace}/{} on {node}: {e}", vmi.name_any());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, beat: Option<&str>) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        if let Some(beat) = beat {
            node.metadata.annotations =
                Some([(annotations::HEARTBEAT.to_string(), beat.to_string())].into());
        }
        node
    }

    #[test]
    fn only_old_heartbeats_are_stale() {
        let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let nodes = [
            node("fresh", Some("2026-11-29T11:59:00Z")),
            node("stale", Some("2026-11-29T11:50:00Z")),
            node("never", None),
            node("garbage", Some("yesterday")),
        ];
        assert_eq!(stale_nodes(&nodes, now, STALE_AFTER), ["stale"]);
    }
}
