//! The pure parts of the migration controller: whether a VMI can migrate, the target Pod, the
//! limits, and which launcher Pod is the VMI's current one while it migrates.

use std::collections::BTreeMap;

use api::condition::Condition;
use api::{VirtualMachineInstance, VmiPhase};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};

use super::{
    MIGRATION_JOB_LABEL, PARALLEL_MIGRATIONS_PER_CLUSTER, PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE,
};
use crate::config::ClusterConfig;
use crate::pod::{render_launcher_pod, RenderError};

/// Why a VMI cannot be live-migrated: the `LiveMigratable` condition's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotMigratable {
    pub reason: &'static str,
    pub message: String,
}

/// Checks that `vmi` can be live-migrated. `pvc_access_modes`: the access modes of the PVCs
/// it uses, by claim name (a missing claim is not migratable).
pub fn check_migratable(
    vmi: &VirtualMachineInstance,
    pvc_access_modes: &BTreeMap<String, Vec<String>>,
) -> Result<(), NotMigratable> {
    for volume in &vmi.spec.volumes {
        if let Some(pvc) = &volume.persistent_volume_claim {
            let shared = pvc_access_modes
                .get(&pvc.claim_name)
                .is_some_and(|modes| modes.iter().any(|m| m == "ReadWriteMany"));
            if !shared {
                return Err(NotMigratable {
                    reason: "DisksNotLiveMigratable",
                    message: format!(
                        "cannot migrate VMI: PVC {} is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)",
                        pvc.claim_name
                    ),
                });
            }
        }
        if volume.other.contains_key("hostDisk") {
            return Err(NotMigratable {
                reason: "HostDiskNotLiveMigratable",
                message: format!(
                    "cannot migrate VMI: volume {} is a hostDisk, which stays on its node",
                    volume.name
                ),
            });
        }
    }
    let kvm = vmi
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "SoftwareEmulation"))
        .is_some_and(|c| !c.is_true());
    if kvm {
        return Err(NotMigratable {
            reason: "InterfaceNotLiveMigratable",
            message: "cannot migrate VMI: it runs on the KVM VMM, whose launcher cannot live-migrate yet (only the QEMU TCG backend can)".into(),
        });
    }
    Ok(())
}

/// The `LiveMigratable` condition for the result of [`check_migratable`].
pub fn migratable_condition(result: &Result<(), NotMigratable>) -> Condition {
    match result {
        Ok(()) => Condition::new("LiveMigratable", true, "", ""),
        Err(e) => Condition::new("LiveMigratable", false, e.reason, &e.message),
    }
}

/// Why a migration must wait, given the source nodes of the migrations under way.
pub fn over_limits(running_sources: &[String], source_node: &str) -> Option<String> {
    if running_sources.len() >= PARALLEL_MIGRATIONS_PER_CLUSTER {
        return Some(format!(
            "{} migrations run in the cluster (parallelMigrationsPerCluster {PARALLEL_MIGRATIONS_PER_CLUSTER})",
            running_sources.len()
        ));
    }
    let outbound = running_sources.iter().filter(|n| *n == source_node).count();
    (outbound >= PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE).then(|| {
        format!(
            "{outbound} migrations leave node {source_node} (parallelOutboundMigrationsPerNode {PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE})"
        )
    })
}

/// The target launcher Pod: the VMI's launcher Pod, labelled with the migration, that the
/// scheduler must put on another node than `source_node`.
pub fn render_target_pod(
    vmi: &VirtualMachineInstance,
    cfg: &ClusterConfig,
    migration_uid: &str,
    source_node: &str,
) -> Result<Pod, RenderError> {
    let mut pod = render_launcher_pod(vmi, cfg)?;
    pod.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(MIGRATION_JOB_LABEL.into(), migration_uid.into());
    let away = NodeSelectorRequirement {
        key: "kubernetes.io/hostname".into(),
        operator: "NotIn".into(),
        values: Some(vec![source_node.to_string()]),
    };
    if let Some(spec) = pod.spec.as_mut() {
        let affinity = spec.affinity.get_or_insert_with(Affinity::default);
        let node = affinity
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        let required = node
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: vec![],
            });
        if required.node_selector_terms.is_empty() {
            required
                .node_selector_terms
                .push(NodeSelectorTerm::default());
        }
        // Terms are ORed: the source node is excluded from each.
        for term in &mut required.node_selector_terms {
            term.match_expressions
                .get_or_insert_with(Vec::new)
                .push(away.clone());
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
                .and_then(|l| l.get(MIGRATION_JOB_LABEL).cloned());
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
    use serde_json::json;

    use super::*;

    fn vmi(volumes: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {}, "memory": {"guest": "128Mi"}}, "volumes": volumes},
            "status": {"phase": "Running", "nodeName": "node-a"}
        }))
        .unwrap()
    }

    fn pod(name: &str, target: bool) -> Pod {
        let mut labels = BTreeMap::new();
        if target {
            labels.insert(MIGRATION_JOB_LABEL.to_string(), "m".to_string());
        }
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.labels = Some(labels);
        pod
    }

    #[test]
    fn rwo_pvcs_and_host_disks_are_not_migratable() {
        let ok = vmi(json!([
            {"name": "c", "containerDisk": {"image": "x"}},
            {"name": "e", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "i", "cloudInitNoCloud": {"userData": "#!/bin/sh\n"}},
            {"name": "p", "persistentVolumeClaim": {"claimName": "shared"}}
        ]));
        let modes = BTreeMap::from([
            ("shared".to_string(), vec!["ReadWriteMany".to_string()]),
            ("local".to_string(), vec!["ReadWriteOnce".to_string()]),
        ]);
        assert_eq!(check_migratable(&ok, &modes), Ok(()));
        let rwo = vmi(json!([{"name": "p", "persistentVolumeClaim": {"claimName": "local"}}]));
        let err = check_migratable(&rwo, &modes).unwrap_err();
        assert_eq!(err.reason, "DisksNotLiveMigratable");
        assert!(
            err.message.contains("PVC local is not shared"),
            "{}",
            err.message
        );
        let missing = vmi(json!([{"name": "p", "persistentVolumeClaim": {"claimName": "gone"}}]));
        assert!(check_migratable(&missing, &modes).is_err());
        let condition = migratable_condition(&Err(err));
        assert!(!condition.is_true());
        assert_eq!(condition.reason.as_deref(), Some("DisksNotLiveMigratable"));
    }

    #[test]
    fn a_vmi_on_the_kvm_vmm_is_not_migratable() {
        let mut kvm = vmi(json!([]));
        kvm.status.as_mut().unwrap().conditions.push(Condition::new(
            "SoftwareEmulation",
            false,
            "Kvm",
            "",
        ));
        let err = check_migratable(&kvm, &BTreeMap::new()).unwrap_err();
        assert!(err.message.contains("KVM"), "{}", err.message);
    }

    #[test]
    fn kubevirt_default_limits() {
        let two_from_a = vec!["a".to_string(), "a".to_string()];
        assert!(over_limits(&two_from_a, "a").is_some());
        assert_eq!(over_limits(&two_from_a, "b"), None);
        let five: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        assert!(over_limits(&five, "f")
            .unwrap()
            .contains("parallelMigrationsPerCluster"));
        assert_eq!(over_limits(&[], "a"), None);
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
        assert_eq!(
            pod.metadata
                .labels
                .as_ref()
                .unwrap()
                .get(MIGRATION_JOB_LABEL),
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
            .insert(MIGRATION_JOB_LABEL.into(), "m2".into());
        let all = vec![pods[1].clone(), second];
        assert_eq!(names(visible_pods(&again, all)), ["target"]);
    }
}
