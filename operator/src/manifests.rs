//! Every object of a Ferrovirt install, rendered from an [`InstallConfig`]: the namespace, the
//! CRDs, one ServiceAccount with least-privilege RBAC per component, the virt-controller
//! Deployment and the virt-handler DaemonSet.
//!
//! Each object is plain JSON (`apiVersion`, `kind`, ...) so it can be printed as YAML or applied
//! with server-side apply; a test checks each one against its k8s-openapi type, so a misspelled
//! field fails the build's tests instead of being dropped by the API server.

use contract::layout;
use serde_json::{json, Value};

/// The Secret with the token virt-api used to present to virt-handler (`token`). Neither
/// mounts it any more (they use mutual TLS with the certificate Secrets); the name stays so
/// that an install from before can be recognised.
pub const HANDLER_TOKEN_SECRET: &str = "kubevirt-virt-handler-token";
/// Port of virt-handler's console, pause and reset server.
pub const HANDLER_PORT: i32 = 8186;

/// What to install and from where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallConfig {
    pub namespace: String,
    /// Registry and repository prefix of the component images (`registry:5000/ferrovirt`).
    pub image_prefix: String,
    pub image_tag: String,
    pub image_pull_policy: String,
    pub controller_replicas: u32,
}

impl Default for InstallConfig {
    fn default() -> Self {
        InstallConfig {
            namespace: "kubevirt".into(),
            image_prefix: "registry:5000/ferrovirt".into(),
            image_tag: "devel".into(),
            image_pull_policy: "IfNotPresent".into(),
            controller_replicas: 1,
        }
    }
}

impl InstallConfig {
    pub fn image(&self, component: &str) -> String {
        format!("{}/{component}:{}", self.image_prefix, self.image_tag)
    }
}

/// Labels on every object of the install.
fn labels(component: &str) -> Value {
    json!({
        "app.kubernetes.io/managed-by": "virt-operator",
        "app.kubernetes.io/part-of": "ferrovirt",
        "app.kubernetes.io/component": component,
        "kubevirt.io": component,
    })
}

/// All objects, in the order they must be created (namespace and CRDs first).
pub fn render(cfg: &InstallConfig) -> Vec<Value> {
    let mut objects = vec![json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": cfg.namespace, "labels": labels("ferrovirt")},
    })];
    for crd in api::crd::all() {
        objects.push(serde_json::to_value(crd).expect("a CRD serialises to JSON"));
    }
    objects.extend(controller_rbac(cfg));
    objects.extend(handler_rbac(cfg));
    objects.extend(crate::user_roles::objects());
    objects.push(controller_deployment(cfg));
    objects.push(handler_daemonset(cfg));
    objects
}

fn service_account(cfg: &InstallConfig, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels(name)},
    })
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels(name)},
        "rules": rules,
    })
}

fn cluster_role_binding(cfg: &InstallConfig, name: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": labels(name)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": cfg.namespace}],
    })
}

/// virt-controller: VMs and VMIs (with status and finalizers), launcher Pods, nodes (heartbeat
/// check), events, the KubeVirt CR (read), pools and the ControllerRevisions of pools and VMs,
/// instance types and preferences (read, to store them for VMs), snapshots, their contents,
/// restores and clones (with status, and VMs created by restores), migration policies and
/// namespaces (read, to pick a migration's policy), the kinds it marks not supported (read,
/// and their status), and its leader Lease in its own namespace.
fn controller_rbac(cfg: &InstallConfig) -> Vec<Value> {
    let name = "virt-controller";
    let mut unsupported: Vec<(&str, Vec<&str>)> = Vec::new();
    for sibling in api::siblings::ALL {
        match unsupported.iter_mut().find(|(g, _)| *g == sibling.group) {
            Some((_, plurals)) => plurals.push(sibling.plural),
            None => unsupported.push((sibling.group, vec![sibling.plural])),
        }
    }
    let unsupported_rules = unsupported.into_iter().flat_map(|(group, plurals)| {
        let status: Vec<String> = plurals.iter().map(|p| format!("{p}/status")).collect();
        [
            json!({"apiGroups": [group], "resources": plurals, "verbs": ["get", "list", "watch"]}),
            json!({"apiGroups": [group], "resources": status, "verbs": ["get", "patch"]}),
        ]
    });
    let instancetypes: Vec<&str> = api::instancetype::Kind::ALL
        .iter()
        .map(|k| k.plural())
        .collect();
    let snapshot_kinds: Vec<&str> = api::snapshot::Kind::ALL
        .iter()
        .map(|k| k.sibling().plural)
        .collect();
    let snapshot_status: Vec<String> = snapshot_kinds
        .iter()
        .map(|p| format!("{p}/status"))
        .collect();
    // The rules below, and those of the kinds it marks not supported.
    let with_unsupported = |mut rules: Value| {
        if let Some(list) = rules.as_array_mut() {
            list.extend(unsupported_rules);
        }
        rules
    };
    vec![
        service_account(cfg, name),
        cluster_role(
            name,
            with_unsupported(json!([
                {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines", "virtualmachineinstances"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                {"apiGroups": ["kubevirt.io"],
                 "resources": ["virtualmachines/status", "virtualmachineinstances/status", "virtualmachineinstances/finalizers"],
                 "verbs": ["get", "update", "patch"]},
                {"apiGroups": ["kubevirt.io"], "resources": ["kubevirts"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstancereplicasets"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstancereplicasets/status"],
                 "verbs": ["get", "update", "patch"]},
                {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstancemigrations"],
                 "verbs": ["get", "list", "watch", "update", "patch"]},
                {"apiGroups": ["pool.kubevirt.io"], "resources": ["virtualmachinepools"],
                 "verbs": ["get", "list", "watch", "update", "patch"]},
                {"apiGroups": ["pool.kubevirt.io"], "resources": ["virtualmachinepools/status", "virtualmachinepools/finalizers"],
                 "verbs": ["get", "update", "patch"]},
                {"apiGroups": ["apps"], "resources": ["controllerrevisions"],
                 "verbs": ["get", "list", "watch", "create", "delete"]},
                {"apiGroups": [api::instancetype::GROUP], "resources": instancetypes,
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": [api::snapshot::GROUP], "resources": snapshot_kinds,
                 "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                {"apiGroups": [api::snapshot::GROUP], "resources": snapshot_status,
                 "verbs": ["get", "update", "patch"]},
                {"apiGroups": [api::clone::GROUP], "resources": ["virtualmachineclones"],
                 "verbs": ["get", "list", "watch", "update", "patch", "delete"]},
                {"apiGroups": [api::clone::GROUP], "resources": ["virtualmachineclones/status"],
                 "verbs": ["get", "update", "patch"]},
                {"apiGroups": ["migrations.kubevirt.io"], "resources": ["migrationpolicies"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["kubevirt.io"],
                 "resources": ["virtualmachineinstancemigrations/status", "virtualmachineinstancemigrations/finalizers"],
                 "verbs": ["get", "update", "patch"]},
                // Claims for restores into new VMs (the copy of a snapshot's volume data).
                {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch", "create"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                // A running VM is paused or frozen while its volume data is backed up.
                {"apiGroups": ["subresources.kubevirt.io"],
                 "resources": ["virtualmachineinstances/pause", "virtualmachineinstances/unpause",
                               "virtualmachineinstances/freeze", "virtualmachineinstances/unfreeze"],
                 "verbs": ["update"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
            ])),
        ),
        cluster_role_binding(cfg, name),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels(name)},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": ["get", "create", "update"]}],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels(name)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": cfg.namespace}],
        }),
    ]
}

/// virt-handler: read VMIs and write their status, read launcher Pods, label its node, events,
/// the KubeVirt CR (read).
fn handler_rbac(cfg: &InstallConfig) -> Vec<Value> {
    let name = "virt-handler";
    vec![
        service_account(cfg, name),
        cluster_role(
            name,
            json!([
                {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances/status"],
                 "verbs": ["get", "update", "patch"]},
                {"apiGroups": ["kubevirt.io"], "resources": ["kubevirts"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
            ]),
        ),
        cluster_role_binding(cfg, name),
    ]
}

fn pod_identity_env() -> Value {
    json!([
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ])
}

fn controller_deployment(cfg: &InstallConfig) -> Value {
    let name = "virt-controller";
    let mut env = pod_identity_env();
    if let Some(list) = env.as_array_mut() {
        list.push(json!({"name": "LAUNCHER_IMAGE", "value": cfg.image("virt-launcher")}));
        list.push(json!({"name": "IMAGE_PULL_POLICY", "value": cfg.image_pull_policy}));
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels(name)},
        "spec": {
            "replicas": cfg.controller_replicas,
            "selector": {"matchLabels": {"kubevirt.io": name}},
            "template": {
                "metadata": {"labels": labels(name)},
                "spec": {
                    "serviceAccountName": name,
                    "containers": [{
                        "name": name,
                        "image": cfg.image(name),
                        "imagePullPolicy": cfg.image_pull_policy,
                        "command": ["/usr/bin/virt-controller"],
                        "env": env,
                        // `healthz`: KubeVirt's 8443, where its tests read which KubeVirt CR
                        // the replica applied (KubeVirt calls it `metrics`, the name of 8080 here).
                        "ports": [
                            {"name": "metrics", "containerPort": 8080},
                            {"name": "healthz", "containerPort": api::healthz::PORT},
                        ],
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                    }],
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                },
            },
        },
    })
}

fn handler_daemonset(cfg: &InstallConfig) -> Value {
    let name = "virt-handler";
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels(name)},
        "spec": {
            "selector": {"matchLabels": {"kubevirt.io": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels(name)},
                "spec": {
                    "serviceAccountName": name,
                    // The launchers' processes (their smaps) for the memory overhead metric.
                    "hostPID": true,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": name,
                        "image": cfg.image(name),
                        "imagePullPolicy": cfg.image_pull_policy,
                        "command": ["/usr/bin/virt-handler"],
                        "env": pod_identity_env(),
                        // The device plugins, the launcher sockets and the KVM probe need the
                        // node's devices and directories.
                        "securityContext": {"privileged": true},
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                        // virt-api reaches the console, pause and reset server on
                        // `subresources`; `healthz` as for virt-controller.
                        "ports": [
                            {"name": "subresources", "containerPort": HANDLER_PORT},
                            {"name": "metrics", "containerPort": 8080},
                            {"name": "healthz", "containerPort": api::healthz::PORT},
                        ],
                        "volumeMounts": [
                            {"name": "kubevirt-run", "mountPath": layout::HOST_RUN_DIR},
                            // Launcher Pod memory for kubevirt_vmi_launcher_memory_overhead_bytes.
                            {"name": "host-cgroup", "mountPath": "/host/sys/fs/cgroup", "readOnly": true},
                            {"name": "device-plugins", "mountPath": layout::DEVICE_PLUGIN_DIR},
                            // The launcher Pods' socket emptyDirs, at the node's path, where
                            // the symlinks in kubevirt-run/sockets point. HostToContainer: the
                            // kubelet's unmounts of Pod volumes reach this copy too, so that
                            // it never holds a mount the kubelet is removing.
                            {"name": "kubelet-pods", "mountPath": layout::KUBELET_PODS_DIR, "mountPropagation": "HostToContainer"},
                            // Mutual TLS of the console/action server (virt-api is the client)
                            // and of the migration stream between handlers.
                            {"name": "server-certificates", "mountPath": "/etc/virt-handler/servercertificates", "readOnly": true},
                        ],
                    }],
                    "volumes": [
                        {"name": "kubevirt-run", "hostPath": {"path": layout::HOST_RUN_DIR, "type": "DirectoryOrCreate"}},
                        {"name": "host-cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}},
                        {"name": "device-plugins", "hostPath": {"path": layout::DEVICE_PLUGIN_DIR, "type": "Directory"}},
                        {"name": "kubelet-pods", "hostPath": {"path": layout::KUBELET_PODS_DIR, "type": "Directory"}},
                        // Optional: without it virt-handler runs, and consoles and migrations fail
                        // saying so.
                        {"name": "server-certificates", "secret": {"secretName": "kubevirt-virt-handler-server-certs", "optional": true}},
                    ],
                },
            },
        },
    })
}

/// The objects as one multi-document YAML stream.
pub fn to_yaml(objects: &[Value]) -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(object)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use serde::de::DeserializeOwned;
    use serde::Serialize;

    use super::*;

    /// Deserialising into the typed object drops unknown fields; serialising back must give the
    /// same JSON, or a field was misspelled.
    fn same_through<T: DeserializeOwned + Serialize>(object: &Value) -> bool {
        let typed: T = serde_json::from_value(object.clone()).unwrap();
        serde_json::to_value(typed).unwrap() == *object
    }

    #[test]
    fn every_object_is_a_well_formed_kubernetes_object() {
        let objects = render(&InstallConfig::default());
        let mut kinds = Vec::new();
        for object in &objects {
            let kind = object["kind"].as_str().unwrap();
            kinds.push(kind.to_string());
            let ok = match kind {
                "Namespace" => same_through::<Namespace>(object),
                "CustomResourceDefinition" => same_through::<CustomResourceDefinition>(object),
                "ServiceAccount" => same_through::<ServiceAccount>(object),
                "ClusterRole" => same_through::<ClusterRole>(object),
                "ClusterRoleBinding" => same_through::<ClusterRoleBinding>(object),
                "Role" => same_through::<Role>(object),
                "RoleBinding" => same_through::<RoleBinding>(object),
                "Deployment" => same_through::<Deployment>(object),
                "DaemonSet" => same_through::<DaemonSet>(object),
                other => panic!("unexpected kind {other}"),
            };
            assert!(
                ok,
                "{kind} {} has a field its type does not know",
                object["metadata"]["name"]
            );
        }
        assert_eq!(kinds[0], "Namespace", "the namespace comes first");
        assert_eq!(
            kinds
                .iter()
                .filter(|k| *k == "CustomResourceDefinition")
                .count(),
            api::crd::all().len()
        );
    }

    /// KubeVirt's tests port-forward to 8443 of every virt-controller and virt-handler Pod for
    /// `/healthz`; the port is declared as KubeVirt declares it.
    #[test]
    fn controller_and_handler_declare_the_healthz_port() {
        let objects = render(&InstallConfig::default());
        for kind in ["Deployment", "DaemonSet"] {
            let object = objects.iter().find(|o| o["kind"] == kind).unwrap();
            let ports = &object["spec"]["template"]["spec"]["containers"][0]["ports"];
            let healthz = ports
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == "healthz")
                .unwrap();
            assert_eq!(healthz["containerPort"], 8443, "{kind}");
            assert!(object["spec"]["template"]["spec"]["hostNetwork"].is_null());
        }
    }

    #[test]
    fn images_and_namespace_follow_the_config() {
        let cfg = InstallConfig {
            namespace: "ferrovirt".into(),
            image_prefix: "quay.io/example".into(),
            image_tag: "v2".into(),
            ..InstallConfig::default()
        };
        let objects = render(&cfg);
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        assert_eq!(deployment["metadata"]["namespace"], "ferrovirt");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "quay.io/example/virt-controller:v2");
        let launcher = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "LAUNCHER_IMAGE")
            .unwrap();
        assert_eq!(launcher["value"], "quay.io/example/virt-launcher:v2");
        let daemonset = objects.iter().find(|o| o["kind"] == "DaemonSet").unwrap();
        assert_eq!(
            daemonset["spec"]["template"]["spec"]["containers"][0]["image"],
            "quay.io/example/virt-handler:v2"
        );
    }

    #[test]
    fn handler_cannot_create_pods_or_touch_vm_specs() {
        let objects = render(&InstallConfig::default());
        let role = objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "virt-handler")
            .unwrap();
        for rule in role["rules"].as_array().unwrap() {
            let resources: Vec<_> = rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            let verbs: Vec<_> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            if resources.contains(&"pods") || resources.contains(&"virtualmachineinstances") {
                assert!(
                    !verbs.contains(&"create")
                        && !verbs.contains(&"delete")
                        && !verbs.contains(&"update"),
                    "{rule}"
                );
            }
        }
    }

    /// Whether virt-controller's ClusterRole allows `verb` on `group`/`resource`.
    fn controller_allows(group: &str, resource: &str, verb: &str) -> bool {
        let objects = render(&InstallConfig::default());
        let role = objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "virt-controller")
            .unwrap();
        role["rules"].as_array().unwrap().iter().any(|rule| {
            let has =
                |key: &str, want: &str| rule[key].as_array().unwrap().iter().any(|v| v == want);
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    }

    #[test]
    fn the_controller_can_copy_volume_data_for_snapshots() {
        for action in ["pause", "unpause", "freeze", "unfreeze"] {
            let resource = format!("virtualmachineinstances/{action}");
            assert!(
                controller_allows("subresources.kubevirt.io", &resource, "update"),
                "{action}"
            );
        }
        assert!(controller_allows("", "persistentvolumeclaims", "create"));
        assert!(controller_allows("", "pods", "delete"));
    }

    #[test]
    fn the_controller_can_mark_every_unsupported_kind() {
        let allows = controller_allows;
        for sibling in api::siblings::ALL {
            for verb in ["get", "list", "watch"] {
                assert!(
                    allows(sibling.group, sibling.plural, verb),
                    "{verb} {}",
                    sibling.plural
                );
            }
            let status = format!("{}/status", sibling.plural);
            assert!(allows(sibling.group, &status, "patch"), "patch {status}");
            assert!(
                !allows(sibling.group, sibling.plural, "patch"),
                "{} spec",
                sibling.plural
            );
            assert!(
                !allows(sibling.group, sibling.plural, "delete"),
                "{}",
                sibling.plural
            );
        }
    }

    #[test]
    fn the_controller_writes_snapshots_contents_restores_and_their_status() {
        let allows = controller_allows;
        for kind in api::snapshot::Kind::ALL {
            let plural = kind.sibling().plural;
            for verb in [
                "get", "list", "watch", "create", "update", "patch", "delete",
            ] {
                assert!(
                    allows(api::snapshot::GROUP, plural, verb),
                    "{verb} {plural}"
                );
            }
            let status = format!("{plural}/status");
            assert!(allows(api::snapshot::GROUP, &status, "update"), "{status}");
        }
        assert!(allows("kubevirt.io", "virtualmachines/status", "patch"));
        for verb in ["get", "list", "watch", "delete"] {
            assert!(
                allows(api::clone::GROUP, "virtualmachineclones", verb),
                "{verb}"
            );
        }
        assert!(allows(
            api::clone::GROUP,
            "virtualmachineclones/status",
            "update"
        ));
    }

    #[test]
    fn the_controller_reads_instancetypes_and_stores_them_in_revisions() {
        let allows = controller_allows;
        for kind in api::instancetype::Kind::ALL {
            for verb in ["get", "list", "watch"] {
                assert!(allows(api::instancetype::GROUP, kind.plural(), verb));
            }
            for verb in ["create", "update", "patch", "delete"] {
                assert!(!allows(api::instancetype::GROUP, kind.plural(), verb));
            }
        }
        for verb in ["create", "get", "list", "watch", "delete"] {
            assert!(allows("apps", "controllerrevisions", verb), "{verb}");
        }
    }
}
