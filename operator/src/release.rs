//! What a user installs, as KubeVirt ships it: `ferrovirt-operator.yaml` (the namespace, the
//! `kubevirts.kubevirt.io` CRD, the operator's ServiceAccount and RBAC, and its Deployment) and
//! `kubevirt-cr.yaml` (the KubeVirt CR). The operator installs the rest from the CR. Generated
//! by `ferrovirt-release`, never edited by hand.

use serde_json::{json, Value};

use crate::install::KUBEVIRT_CRD;
use crate::manifests::InstallConfig;

/// Name of the operator's ServiceAccount, ClusterRole, Role and bindings (KubeVirt's).
pub const OPERATOR_ACCOUNT: &str = "kubevirt-operator";
/// Name of the operator's Deployment and container.
pub const OPERATOR: &str = "virt-operator";

fn labels() -> Value {
    json!({"kubevirt.io": OPERATOR, "app.kubernetes.io/part-of": "ferrovirt",
           "app.kubernetes.io/component": OPERATOR})
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

const ALL: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
const READ: &[&str] = &["get", "list", "watch"];

/// Cluster-wide: the objects of an install that are cluster-scoped (and the RoleBinding virt-api
/// needs in kube-system), granting and binding the components' roles (`escalate`, `bind`: the
/// operator grants what it does not use itself), the KubeVirt CR and its status, reading VMs
/// and VMIs (for BlockUninstallIfWorkloadsExist), and events.
fn cluster_rules() -> Value {
    let rbac_verbs = [ALL, &["escalate", "bind"]].concat();
    json!([
        rule(
            &["apiextensions.k8s.io"],
            &["customresourcedefinitions"],
            ALL
        ),
        rule(
            &["rbac.authorization.k8s.io"],
            &[
                "clusterroles",
                "clusterrolebindings",
                "roles",
                "rolebindings"
            ],
            &rbac_verbs
        ),
        rule(&["apiregistration.k8s.io"], &["apiservices"], ALL),
        rule(
            &["admissionregistration.k8s.io"],
            &[
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations"
            ],
            ALL
        ),
        rule(
            &["kubevirt.io"],
            &["kubevirts"],
            &["get", "list", "watch", "patch", "update"]
        ),
        rule(
            &["kubevirt.io"],
            &["kubevirts/status"],
            &["get", "patch", "update"]
        ),
        rule(&["kubevirt.io"], &["kubevirts/finalizers"], &["update"]),
        rule(
            &["kubevirt.io"],
            &["virtualmachines", "virtualmachineinstances"],
            READ
        ),
        rule(
            &["", "events.k8s.io"],
            &["events"],
            &["create", "patch", "update"]
        ),
    ])
}

/// In its own namespace: the namespaced objects of an install, and its own Pod (for its image).
fn namespace_rules() -> Value {
    json!([
        rule(
            &[""],
            &["serviceaccounts", "services", "secrets", "configmaps"],
            ALL
        ),
        rule(&["apps"], &["deployments", "daemonsets"], ALL),
        rule(&[""], &["pods"], &["get"]),
        // The operator's leader Lease (virt-operator.rs).
        rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "create", "update"]
        ),
    ])
}

/// The objects of `ferrovirt-operator.yaml`, in the order to create them.
pub fn operator_manifest(cfg: &InstallConfig) -> Vec<Value> {
    let ns = &cfg.namespace;
    let kubevirt_crd = api::crd::all()
        .into_iter()
        .find(|crd| crd.metadata.name.as_deref() == Some(KUBEVIRT_CRD))
        .map(|crd| serde_json::to_value(crd).expect("a CRD serialises to JSON"))
        .expect("api::crd::all has the KubeVirt CRD");
    let subject = json!([{"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT, "namespace": ns}]);
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": ns, "labels": {"kubevirt.io": ""}}}),
        kubevirt_crd,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": OPERATOR_ACCOUNT, "namespace": ns, "labels": labels()}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": OPERATOR_ACCOUNT, "labels": labels()},
               "rules": cluster_rules()}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": OPERATOR_ACCOUNT, "labels": labels()},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": OPERATOR_ACCOUNT},
               "subjects": subject}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": OPERATOR_ACCOUNT, "namespace": ns, "labels": labels()},
               "rules": namespace_rules()}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": OPERATOR_ACCOUNT, "namespace": ns, "labels": labels()},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": OPERATOR_ACCOUNT},
               "subjects": subject}),
        operator_deployment(cfg),
    ]
}

fn operator_deployment(cfg: &InstallConfig) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": OPERATOR, "namespace": cfg.namespace, "labels": labels()},
        "spec": {
            "replicas": 1,
            // One operator at a time: an old and a new one must not apply two versions at once.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"kubevirt.io": OPERATOR}},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "serviceAccountName": OPERATOR_ACCOUNT,
                    "containers": [{
                        "name": OPERATOR,
                        "image": cfg.image(OPERATOR),
                        "imagePullPolicy": cfg.image_pull_policy,
                        "command": ["/usr/bin/virt-operator"],
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        ],
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                    }],
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                },
            },
        },
    })
}

/// `kubevirt-cr.yaml`: KubeVirt's example CR.
pub fn kubevirt_cr(cfg: &InstallConfig) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": cfg.namespace},
        "spec": {
            "configuration": {"developerConfiguration": {"featureGates": []}},
            "imagePullPolicy": cfg.image_pull_policy,
        },
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::rbac::v1::{ClusterRole, Role};

    use super::*;

    #[test]
    fn the_operator_manifest_runs_the_operator_image_of_the_tag() {
        let cfg = InstallConfig {
            image_tag: "devel-1".into(),
            ..InstallConfig::default()
        };
        let objects = operator_manifest(&cfg);
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "CustomResourceDefinition",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Deployment"
            ]
        );
        assert_eq!(objects[1]["metadata"]["name"], KUBEVIRT_CRD);
        let deployment: Deployment = serde_json::from_value(objects[7].clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&deployment).unwrap(),
            objects[7],
            "unknown field"
        );
        let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some("registry:5000/ferrovirt/virt-operator:devel-1")
        );
        let cluster: ClusterRole = serde_json::from_value(objects[3].clone()).unwrap();
        assert_eq!(serde_json::to_value(&cluster).unwrap(), objects[3]);
        let role: Role = serde_json::from_value(objects[5].clone()).unwrap();
        assert_eq!(serde_json::to_value(&role).unwrap(), objects[5]);
    }

    /// Whatever the operator applies, its RBAC lets it (kind by kind).
    #[test]
    fn the_operator_may_write_every_kind_it_installs() {
        let plan = crate::certs::plan(
            "kubevirt",
            &Default::default(),
            None,
            1_800_000_000,
            crate::certs::Lifetimes::default(),
        )
        .unwrap();
        let rules: Vec<Value> = [cluster_rules(), namespace_rules()]
            .iter()
            .flat_map(|r| r.as_array().unwrap().clone())
            .collect();
        for object in crate::install::desired(&InstallConfig::default(), &plan, "t").unwrap() {
            let group = object["apiVersion"]
                .as_str()
                .unwrap()
                .rsplit_once('/')
                .map_or("", |(g, _)| g);
            let kind = object["kind"].as_str().unwrap().to_lowercase();
            let allowed = rules.iter().any(|r| {
                r["apiGroups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|g| g == group)
                    && r["resources"].as_array().unwrap().iter().any(|res| {
                        res.as_str().unwrap().trim_end_matches('s') == kind
                            || res.as_str().unwrap() == format!("{kind}es")
                    })
                    && ["patch", "delete"]
                        .iter()
                        .all(|v| r["verbs"].as_array().unwrap().iter().any(|x| x == v))
            });
            assert!(
                allowed,
                "{} {} is not allowed",
                object["kind"], object["metadata"]["name"]
            );
        }
    }

    #[test]
    fn the_cr_is_a_kubevirt() {
        let cr = kubevirt_cr(&InstallConfig::default());
        let kv: api::KubeVirt = serde_json::from_value(cr).unwrap();
        assert_eq!(kv.metadata.namespace.as_deref(), Some("kubevirt"));
        assert_eq!(kv.spec.image_pull_policy.as_deref(), Some("IfNotPresent"));
    }
}
