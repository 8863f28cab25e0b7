//! The target launcher Pod: what it is ([`render_target_pod`]), what it is called
//! ([`target_pod_name`]), and when it becomes the VMI's launcher ([`visible_pods`]).

use api::{VirtualMachineInstance, VmiPhase};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};

use crate::config::ClusterConfig;
use crate::pod::{hardware_kvm, render_launcher_pod, RenderError};

/// The characters of the suffix the API server gives a generated name (Kubernetes' `utilrand`
/// alphabet: no vowels, no digits that pass for letters).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SUFFIX_LENGTH: usize = 5;
/// The API server cuts a `generateName` to this, so that with the suffix it fits a DNS label.
const MAX_PREFIX: usize = 63 - SUFFIX_LENGTH;

/// The target Pod's name: what the API server would make of the launcher Pod's
/// `generateName`, but with a suffix that comes from the migration's UID instead of chance. The
/// plan can then record the Pod in the VMI's `migrationState` before it creates it, and a pass
/// that repeats the start names the same Pod.
pub fn target_pod_name(generate_name: &str, migration_uid: &str) -> String {
    let mut name: String = generate_name.chars().take(MAX_PREFIX).collect();
    // FNV-1a: stable across builds and platforms, unlike the standard library's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in migration_uid.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let base = SUFFIX_ALPHABET.len() as u64;
    for _ in 0..SUFFIX_LENGTH {
        name.push(char::from(SUFFIX_ALPHABET[(hash % base) as usize]));
        hash /= base;
    }
    name
}

/// The target launcher Pod: the VMI's launcher Pod, labelled with the migration and named by
/// [`target_pod_name`], that the scheduler must put on another node than `source_node`, and
/// where the source's backend runs (each backend reads only its own migration stream): a VM on
/// the KVM VMM needs a node labelled `ferrovirt.io/kvm=hardware`; a VM on QEMU TCG runs on QEMU
/// TCG wherever the target lands, so its Pod loses the launcher Pod's preference for such nodes.
pub fn render_target_pod(
    vmi: &VirtualMachineInstance,
    cfg: &ClusterConfig,
    migration_uid: &str,
    source_node: &str,
) -> Result<Pod, RenderError> {
    let mut pod = render_launcher_pod(vmi, cfg)?;
    let generate_name = pod.metadata.generate_name.take().unwrap_or_default();
    pod.metadata.name = Some(target_pod_name(&generate_name, migration_uid));
    pod.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(contract::labels::MIGRATION_JOB.into(), migration_uid.into());
    let away = NodeSelectorRequirement {
        key: "kubernetes.io/hostname".into(),
        operator: "NotIn".into(),
        values: Some(vec![source_node.to_string()]),
    };
    let mut required = vec![away];
    let emulated = api::vmi::software_emulation(vmi.status.as_ref());
    if emulated == Some(false) {
        required.push(hardware_kvm());
    }
    if let Some(spec) = pod.spec.as_mut() {
        let affinity = spec.affinity.get_or_insert_with(Affinity::default);
        let node = affinity
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        if emulated == Some(true) {
            if let Some(preferred) = node
                .preferred_during_scheduling_ignored_during_execution
                .as_mut()
            {
                preferred.retain(|term| {
                    term.preference.match_expressions.as_deref() != Some(&[hardware_kvm()][..])
                });
            }
        }
        let selector = node
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: vec![],
            });
        if selector.node_selector_terms.is_empty() {
            selector
                .node_selector_terms
                .push(NodeSelectorTerm::default());
        }
        // Terms are ORed: each gets the target's requirements.
        for term in &mut selector.node_selector_terms {
            term.match_expressions
                .get_or_insert_with(Vec::new)
                .extend(required.iter().cloned());
        }
    }
    Ok(pod)
}

/// The launcher Pods the VMI controller follows while and after the VMI migrates: the target
/// Pod the recorded migration names only once it completed (and then no longer the source Pod);
/// the target Pod of an earlier migration while it is not being deleted (it became the VMI's
/// launcher, or its migration failed and it goes).
pub fn visible_pods(vmi: &VirtualMachineInstance, pods: Vec<Pod>) -> Vec<Pod> {
    let state = vmi.status.as_ref().and_then(|s| s.migration_state.as_ref());
    let running = vmi.status.as_ref().and_then(|s| s.phase) == Some(VmiPhase::Running);
    let completed = running && state.is_some_and(|s| s.completed == Some(true));
    let current = state.and_then(|s| s.migration_uid.clone());
    let source = state.and_then(|s| s.source_pod.clone());
    let target = state.and_then(|s| s.target_pod.clone());
    pods.into_iter()
        .filter(|pod| {
            let job = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(contract::labels::MIGRATION_JOB).cloned());
            match job {
                Some(job) if Some(&job) == current.as_ref() => {
                    completed && pod.metadata.name.is_some() && pod.metadata.name == target
                }
                Some(_) => pod.metadata.deletion_timestamp.is_none(),
                None => !(completed && pod.metadata.name.is_some() && pod.metadata.name == source),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::migration::fixtures::vmi;

    fn pod(name: &str, target: bool) -> Pod {
        let mut labels = BTreeMap::new();
        if target {
            labels.insert(contract::labels::MIGRATION_JOB.to_string(), "m".to_string());
        }
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.labels = Some(labels);
        pod
    }
    #[test]
    fn the_target_pod_name_is_a_generated_name_the_migration_picks() {
        let name = target_pod_name("virt-launcher-v-", "0b7c1f0e-uid");
        assert_eq!(name, target_pod_name("virt-launcher-v-", "0b7c1f0e-uid"));
        assert_ne!(name, target_pod_name("virt-launcher-v-", "another-uid"));
        let suffix = name.strip_prefix("virt-launcher-v-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix.bytes().all(|b| SUFFIX_ALPHABET.contains(&b)),
            "{name}"
        );
        // A long VMI name is cut as the API server cuts a generateName: a DNS label.
        let long = format!("virt-launcher-{}-", "x".repeat(100));
        assert_eq!(target_pod_name(&long, "u").len(), 63);
    }

    #[test]
    fn target_pod_avoids_the_source_node_and_names_its_migration() {
        let pod = render_target_pod(
            &vmi(json!([])),
            &ClusterConfig::default(),
            "mig-1",
            "node-a",
        )
        .unwrap();
        assert_eq!(pod.metadata.generate_name, None);
        assert_eq!(
            pod.metadata.name.as_deref(),
            Some(target_pod_name("virt-launcher-v-", "mig-1").as_str())
        );
        assert_eq!(
            pod.metadata
                .labels
                .as_ref()
                .unwrap()
                .get(contract::labels::MIGRATION_JOB),
            Some(&"mig-1".to_string())
        );
        let terms = pod
            .spec
            .unwrap()
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        let expr = &terms[0].match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (
                expr.operator.as_str(),
                expr.values.as_ref().unwrap()[0].as_str()
            ),
            ("NotIn", "node-a")
        );
    }

    /// The target Pod's required node terms and preferred terms for a source VMI that
    /// virt-handler reported with `SoftwareEmulation` `emulated` (none: not reported).
    fn target_affinity(
        emulated: Option<bool>,
    ) -> (
        Vec<NodeSelectorTerm>,
        Vec<k8s_openapi::api::core::v1::PreferredSchedulingTerm>,
    ) {
        let mut source = vmi(json!([]));
        if let Some(emulated) = emulated {
            let condition = api::condition::Condition::new("SoftwareEmulation", emulated, "", "");
            source.status.as_mut().unwrap().conditions.push(condition);
        }
        let pod = render_target_pod(&source, &ClusterConfig::default(), "m", "node-a").unwrap();
        let node = pod.spec.unwrap().affinity.unwrap().node_affinity.unwrap();
        (
            node.required_during_scheduling_ignored_during_execution
                .unwrap()
                .node_selector_terms,
            node.preferred_during_scheduling_ignored_during_execution
                .unwrap_or_default(),
        )
    }

    fn prefers_hardware_kvm(
        preferred: &[k8s_openapi::api::core::v1::PreferredSchedulingTerm],
    ) -> bool {
        preferred
            .iter()
            .any(|t| t.preference.match_expressions.as_deref() == Some(&[hardware_kvm()][..]))
    }

    #[test]
    fn the_target_pod_goes_where_the_sources_backend_runs() {
        let keys = |terms: &[NodeSelectorTerm]| -> Vec<(String, String)> {
            terms[0]
                .match_expressions
                .iter()
                .flatten()
                .map(|e| (e.key.clone(), e.operator.clone()))
                .collect()
        };
        let away = ("kubernetes.io/hostname".to_string(), "NotIn".to_string());
        let kvm = (contract::labels::KVM.to_string(), "In".to_string());
        // On the KVM VMM: only a node with hardware KVM can receive it.
        let (required, preferred) = target_affinity(Some(false));
        assert_eq!(keys(&required), vec![away.clone(), kvm]);
        assert_eq!(
            required[0].match_expressions.as_ref().unwrap()[1],
            hardware_kvm()
        );
        assert!(prefers_hardware_kvm(&preferred));
        // On QEMU TCG: anywhere but the source node, without the pull towards KVM nodes.
        let (required, preferred) = target_affinity(Some(true));
        assert_eq!(keys(&required), vec![away.clone()]);
        assert!(!prefers_hardware_kvm(&preferred), "{preferred:?}");
        // Not reported yet: the launcher Pod's own preference stays.
        let (required, preferred) = target_affinity(None);
        assert_eq!(keys(&required), vec![away]);
        assert!(prefers_hardware_kvm(&preferred));
    }

    #[test]
    fn the_target_pod_becomes_current_only_after_completion() {
        let pods = vec![
            pod("source", false),
            pod("target", true),
            pod("extra", true),
        ];
        let mut migrating = vmi(json!([]));
        migrating.status.as_mut().unwrap().migration_state = Some(api::vmi::MigrationState {
            migration_uid: Some("m".into()),
            source_pod: Some("source".into()),
            target_pod: Some("target".into()),
            ..Default::default()
        });
        let names = |pods: Vec<Pod>| -> Vec<String> {
            pods.into_iter().filter_map(|p| p.metadata.name).collect()
        };
        assert_eq!(names(visible_pods(&migrating, pods.clone())), ["source"]);
        migrating
            .status
            .as_mut()
            .unwrap()
            .migration_state
            .as_mut()
            .unwrap()
            .completed = Some(true);
        assert_eq!(names(visible_pods(&migrating, pods.clone())), ["target"]);
        // A second migration: the first one's target Pod is the launcher until it completes.
        let mut again = migrating.clone();
        again.status.as_mut().unwrap().migration_state = Some(api::vmi::MigrationState {
            migration_uid: Some("m2".into()),
            source_pod: Some("target".into()),
            ..Default::default()
        });
        let mut second = pod("target2", true);
        second
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(contract::labels::MIGRATION_JOB.into(), "m2".into());
        let all = vec![pods[1].clone(), second];
        assert_eq!(names(visible_pods(&again, all)), ["target"]);
    }
}
