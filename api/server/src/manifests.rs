//! The objects that install virt-api, as Rust values the operator can apply and the
//! `virt-api-manifests` binary prints: ServiceAccount and RBAC (its own ClusterRole,
//! `system:auth-delegator` for TokenReviews and SubjectAccessReviews, and the
//! `extension-apiserver-authentication-reader` Role in kube-system for the requestheader
//! ConfigMap), the Deployment and Service, the APIService of `subresources.kubevirt.io/v1`,
//! and the mutating and validating webhook configurations, both trusting `ca_bundle`.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde_json::{json, Value};

use crate::admission::{webhook_target, RESOURCES};
use crate::routes::{GROUP, VERSION};

/// Name of virt-api's ServiceAccount, Deployment, Service and ClusterRole.
pub const NAME: &str = "virt-api";
/// Secret with the serving certificate (`tls.crt`, `tls.key`).
pub const CERT_SECRET: &str = "kubevirt-virt-api-certs";
/// Secret with the client certificate virt-api presents to virt-handler (`tls.crt`, `tls.key`)
/// and the CA virt-handler's certificate must chain to (`ca.crt`).
pub const HANDLER_CLIENT_CERT_SECRET: &str = "kubevirt-virt-handler-certs";
/// Port virt-api listens on in its Pod.
pub const PORT: i32 = 8443;

/// Where kube-apiserver reaches the webhooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookTarget {
    /// The `virt-api` Service in the install namespace (the normal case).
    Service,
    /// A URL base such as `https://127.0.0.1:8443` (virt-api run outside the cluster, in tests).
    Url(String),
}

/// What the manifests depend on.
#[derive(Clone, Debug)]
pub struct InstallConfig {
    pub namespace: String,
    pub image: String,
    /// PEM of the CA that signed virt-api's serving certificate.
    pub ca_bundle: Vec<u8>,
    pub webhook_target: WebhookTarget,
}

impl InstallConfig {
    /// The username virt-api's ServiceAccount authenticates as.
    pub fn service_account_user(&self) -> String {
        format!("system:serviceaccount:{}:{NAME}", self.namespace)
    }
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a static manifest matches its Kubernetes type")
}

fn labels() -> Value {
    json!({"kubevirt.io": NAME, "app.kubernetes.io/managed-by": "virt-operator"})
}

pub fn service_account(c: &InstallConfig) -> ServiceAccount {
    typed(json!({"metadata": {"name": NAME, "namespace": c.namespace, "labels": labels()}}))
}

/// What virt-api does with the API: read VMs and VMIs, change run strategies, add state
/// change requests, set a VMI grace period, create migrations, find virt-handler Pods, read
/// instance types and preferences and the ControllerRevisions that store them (to admit and
/// expand VMs), ask SubjectAccessReviews, and read the KubeVirt CR (whose resourceVersion
/// `/healthz` reports).
pub fn cluster_role() -> ClusterRole {
    let instancetypes: Vec<&str> = api::instancetype::Kind::ALL
        .iter()
        .map(|k| k.plural())
        .collect();
    typed(json!({
        "metadata": {"name": NAME, "labels": labels()},
        "rules": [
            {"apiGroups": ["kubevirt.io"],
             "resources": ["virtualmachines", "virtualmachineinstances"],
             "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines/status"],
             "verbs": ["get", "patch", "update"]},
            {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstancemigrations"],
             "verbs": ["get", "list", "create"]},
            {"apiGroups": ["kubevirt.io"], "resources": ["kubevirts"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": [api::instancetype::GROUP], "resources": instancetypes,
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["get"]},
            {"apiGroups": [api::snapshot::GROUP],
             "resources": ["virtualmachinesnapshots", "virtualmachinesnapshotcontents", "virtualmachinerestores"],
             "verbs": ["get", "list"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
             "verbs": ["create"]},
        ]
    }))
}

fn binding_subjects(c: &InstallConfig) -> Value {
    json!([{"kind": "ServiceAccount", "name": NAME, "namespace": c.namespace}])
}

/// Binds virt-api's ClusterRole and `system:auth-delegator`.
pub fn cluster_role_bindings(c: &InstallConfig) -> Vec<ClusterRoleBinding> {
    [
        (NAME.to_string(), NAME),
        (format!("{NAME}-auth-delegator"), "system:auth-delegator"),
    ]
    .into_iter()
    .map(|(name, role)| {
        typed(json!({
            "metadata": {"name": name, "labels": labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": binding_subjects(c),
        }))
    })
    .collect()
}

/// Lets virt-api read `extension-apiserver-authentication` in kube-system.
pub fn auth_reader_binding(c: &InstallConfig) -> RoleBinding {
    typed(json!({
        "metadata": {"name": format!("{NAME}-auth-reader"), "namespace": "kube-system",
                     "labels": labels()},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "extension-apiserver-authentication-reader"},
        "subjects": binding_subjects(c),
    }))
}

pub fn service(c: &InstallConfig) -> Service {
    typed(json!({
        "metadata": {"name": NAME, "namespace": c.namespace, "labels": labels()},
        "spec": {"selector": {"kubevirt.io": NAME},
                 "ports": [{"name": "https", "port": 443, "targetPort": PORT}]}
    }))
}

/// How long the kubelet waits for virt-api's `/healthz`: longer than `/healthz` waits for the
/// API server.
const READINESS_TIMEOUT_SECONDS: u64 = api::healthz::APISERVER_TIMEOUT.as_secs() + 1;

pub fn deployment(c: &InstallConfig) -> Deployment {
    typed(json!({
        "metadata": {"name": NAME, "namespace": c.namespace, "labels": labels()},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"kubevirt.io": NAME}},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "serviceAccountName": NAME,
                    "containers": [{
                        "name": NAME,
                        "image": c.image,
                        "command": ["virt-api"],
                        "args": [
                            "--listen", format!("0.0.0.0:{PORT}"),
                            "--tls-cert-file", "/etc/virt-api/certs/tls.crt",
                            "--tls-key-file", "/etc/virt-api/certs/tls.key",
                            "--handler-cert-dir", crate::tls::DEFAULT_HANDLER_CERT_DIR,
                            "--handler-namespace", c.namespace,
                        ],
                        "ports": [{"name": "https", "containerPort": PORT}],
                        // `/healthz` asks the API server for its version, which may take up
                        // to api::healthz::APISERVER_TIMEOUT on a busy node: the probe waits for
                        // that answer rather than the kubelet's 1 s default.
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": PORT,
                                                       "scheme": "HTTPS"},
                                           "timeoutSeconds": READINESS_TIMEOUT_SECONDS},
                        "volumeMounts": [
                            {"name": "certs", "mountPath": "/etc/virt-api/certs", "readOnly": true},
                            // mutual TLS to virt-handler's console and action server.
                            {"name": "handler-certs",
                             "mountPath": crate::tls::DEFAULT_HANDLER_CERT_DIR, "readOnly": true},
                        ],
                    }],
                    "volumes": [
                        {"name": "certs", "secret": {"secretName": CERT_SECRET}},
                        {"name": "handler-certs",
                         "secret": {"secretName": HANDLER_CLIENT_CERT_SECRET}},
                    ],
                }
            }
        }
    }))
}

/// `v1.subresources.kubevirt.io`, served by the virt-api Service.
pub fn api_service(c: &InstallConfig) -> APIService {
    typed(json!({
        "metadata": {"name": format!("{VERSION}.{GROUP}"), "labels": labels()},
        "spec": {
            "group": GROUP,
            "version": VERSION,
            "service": {"namespace": c.namespace, "name": NAME, "port": 443},
            "caBundle": base64_of(&c.ca_bundle),
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
        }
    }))
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn client_config(c: &InstallConfig, path: &str) -> Value {
    let mut config = match &c.webhook_target {
        WebhookTarget::Service => json!({
            "service": {"namespace": c.namespace, "name": NAME, "port": 443, "path": path}
        }),
        WebhookTarget::Url(base) => json!({"url": format!("{}{path}", base.trim_end_matches('/'))}),
    };
    config["caBundle"] = json!(base64_of(&c.ca_bundle));
    config
}

/// One webhook per kind; `prefix` is `mutate` or `validate`. A VMI is defaulted on CREATE
/// only (its spec never changes after).
fn webhooks(c: &InstallConfig, prefix: &str, role: &str) -> Value {
    let hooks: Vec<Value> = RESOURCES
        .iter()
        .filter_map(|(plural, _)| {
            let (group, versions, validator, mutates) = webhook_target(plural);
            if prefix == "mutate" && !mutates {
                return None;
            }
            let operations = if prefix == "mutate" && *plural == "virtualmachineinstances" {
                json!(["CREATE"])
            } else {
                json!(["CREATE", "UPDATE"])
            };
            let name = if prefix == "validate" {
                validator
            } else {
                format!("{plural}-{role}.kubevirt.io")
            };
            Some(json!({
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": client_config(c, &format!("/{prefix}-{plural}")),
                "rules": [{"apiGroups": [group], "apiVersions": versions,
                           "operations": operations, "resources": [plural]}],
            }))
        })
        .collect();
    json!(hooks)
}

pub fn mutating_webhook_configuration(c: &InstallConfig) -> MutatingWebhookConfiguration {
    typed(json!({
        "metadata": {"name": "virt-api-mutator", "labels": labels()},
        "webhooks": webhooks(c, "mutate", "mutator"),
    }))
}

pub fn validating_webhook_configuration(c: &InstallConfig) -> ValidatingWebhookConfiguration {
    typed(json!({
        "metadata": {"name": "virt-api-validator", "labels": labels()},
        "webhooks": webhooks(c, "validate", "validator"),
    }))
}

/// Every object, in the order to apply them, as JSON with apiVersion and kind.
pub fn all(c: &InstallConfig) -> Result<Vec<Value>, serde_json::Error> {
    use k8s_openapi::Resource;
    fn with_type<T: serde::Serialize + Resource>(o: &T) -> Result<Value, serde_json::Error> {
        let mut v = serde_json::to_value(o)?;
        v["apiVersion"] = json!(T::API_VERSION);
        v["kind"] = json!(T::KIND);
        Ok(v)
    }
    let mut out = vec![with_type(&service_account(c))?, with_type(&cluster_role())?];
    for b in cluster_role_bindings(c) {
        out.push(with_type(&b)?);
    }
    out.push(with_type(&auth_reader_binding(c))?);
    out.push(with_type(&service(c))?);
    out.push(with_type(&deployment(c))?);
    out.push(with_type(&api_service(c))?);
    out.push(with_type(&mutating_webhook_configuration(c))?);
    out.push(with_type(&validating_webhook_configuration(c))?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(target: WebhookTarget) -> InstallConfig {
        InstallConfig {
            namespace: "kubevirt".into(),
            image: "registry.local/virt-api:dev".into(),
            ca_bundle: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
            webhook_target: target,
        }
    }

    #[test]
    fn every_kind_has_a_mutating_and_a_validating_webhook() {
        let c = config(WebhookTarget::Service);
        let m = mutating_webhook_configuration(&c);
        let v = validating_webhook_configuration(&c);
        let mutating = RESOURCES
            .iter()
            .filter(|(plural, _)| webhook_target(plural).3)
            .count();
        assert_eq!(m.webhooks.as_ref().unwrap().len(), mutating);
        let vw = v.webhooks.unwrap();
        assert_eq!(vw.len(), RESOURCES.len());
        let vm = &vw[0];
        assert_eq!(vm.name, "virtualmachines-validator.kubevirt.io");
        for (plural, name) in [
            (
                "virtualmachineinstancetypes",
                "virtualmachineinstancetype-validator.instancetype.kubevirt.io",
            ),
            (
                "virtualmachineclusterinstancetypes",
                "virtualmachineclusterinstancetype-validator.instancetype.kubevirt.io",
            ),
            (
                "virtualmachinepreferences",
                "virtualmachinepreference-validator.instancetype.kubevirt.io",
            ),
            (
                "virtualmachineclusterpreferences",
                "virtualmachineclusterpreference-validator.instancetype.kubevirt.io",
            ),
        ] {
            let hook = vw.iter().find(|h| h.name == name).expect(name);
            let rule = &hook.rules.as_ref().unwrap()[0];
            assert_eq!(
                rule.api_groups.as_deref(),
                Some(&["instancetype.kubevirt.io".to_string()][..])
            );
            assert_eq!(
                rule.api_versions.as_deref(),
                Some(&["v1beta1".to_string()][..])
            );
            assert_eq!(
                rule.operations.as_deref(),
                Some(&["CREATE".to_string(), "UPDATE".to_string()][..])
            );
            assert_eq!(rule.resources.as_deref(), Some(&[plural.to_string()][..]));
            let path = hook.client_config.service.as_ref().unwrap().path.as_deref();
            assert_eq!(path, Some(format!("/validate-{plural}").as_str()));
            assert!(m
                .webhooks
                .as_ref()
                .unwrap()
                .iter()
                .all(|h| !h.name.contains(plural)));
        }
        let svc = vm.client_config.service.as_ref().unwrap();
        assert_eq!(svc.path.as_deref(), Some("/validate-virtualmachines"));
        assert_eq!(vm.client_config.ca_bundle.as_ref().unwrap().0, c.ca_bundle);
    }

    /// The readiness probe outwaits `/healthz`'s own wait for the API server, so a slow API
    /// server makes a 500 the kubelet reads, not a probe timeout.
    #[test]
    fn readiness_probe_outwaits_the_api_server_check() {
        let d = deployment(&config(WebhookTarget::Service));
        let container = &d.spec.unwrap().template.spec.unwrap().containers[0];
        let probe = container.readiness_probe.as_ref().unwrap();
        assert_eq!(
            probe.http_get.as_ref().unwrap().path.as_deref(),
            Some("/healthz")
        );
        let timeout = probe.timeout_seconds.unwrap() as u64;
        assert!(
            timeout > api::healthz::APISERVER_TIMEOUT.as_secs(),
            "{timeout}"
        );
    }

    #[test]
    fn url_target_for_out_of_cluster_runs() {
        let c = config(WebhookTarget::Url("https://10.0.0.1:8443/".into()));
        let m = mutating_webhook_configuration(&c);
        let hook = &m.webhooks.unwrap()[1];
        assert_eq!(
            hook.client_config.url.as_deref(),
            Some("https://10.0.0.1:8443/mutate-virtualmachineinstances")
        );
        assert_eq!(
            hook.rules.as_ref().unwrap()[0].operations,
            Some(vec!["CREATE".to_string()])
        );
    }

    #[test]
    fn api_service_and_rbac() {
        let c = config(WebhookTarget::Service);
        let a = api_service(&c);
        assert_eq!(
            a.metadata.name.as_deref(),
            Some("v1.subresources.kubevirt.io")
        );
        let spec = a.spec.unwrap();
        assert_eq!(spec.service.unwrap().name.as_deref(), Some("virt-api"));
        let bindings = cluster_role_bindings(&c);
        assert!(bindings
            .iter()
            .any(|b| b.role_ref.name == "system:auth-delegator"));
        assert_eq!(
            auth_reader_binding(&c).role_ref.name,
            "extension-apiserver-authentication-reader"
        );
        let all = all(&c).unwrap();
        assert!(all
            .iter()
            .all(|o| o["kind"].is_string() && o["apiVersion"].is_string()));
        assert_eq!(
            c.service_account_user(),
            "system:serviceaccount:kubevirt:virt-api"
        );
        let rules = cluster_role().rules.unwrap();
        let allows = |group: &str, resource: &str, verb: &str| {
            rules.iter().any(|r| {
                r.api_groups.iter().flatten().any(|g| g == group)
                    && r.resources.iter().flatten().any(|x| x == resource)
                    && r.verbs.iter().any(|v| v == verb)
            })
        };
        for kind in api::instancetype::Kind::ALL {
            for verb in ["get", "list", "watch"] {
                assert!(allows("instancetype.kubevirt.io", kind.plural(), verb));
            }
            assert!(!allows("instancetype.kubevirt.io", kind.plural(), "create"));
        }
        assert!(allows("apps", "controllerrevisions", "get"));
        assert!(!allows("apps", "controllerrevisions", "create"));
        // The KubeVirt CR whose resourceVersion /healthz reports: read and watched only.
        for verb in ["get", "list", "watch"] {
            assert!(allows("kubevirt.io", "kubevirts", verb));
        }
        assert!(!allows("kubevirt.io", "kubevirts", "update"));
    }
}
