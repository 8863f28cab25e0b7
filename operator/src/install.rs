//! The desired state of one install: which images (the operator's own registry and tag unless
//! the CR names others), every object of [`crate::manifests::render`] and of virt-api's
//! manifests, the certificates of [`crate::certs`], and a digest of those certificates on each
//! pod template so the components restart onto rotated certificates.
//!
//! Left out on purpose: the Namespace and the `kubevirts.kubevirt.io` CRD, which come with the
//! operator's own manifest (the operator runs in that namespace and reads that CRD; removing
//! them on uninstall would take the operator and the CR with them).
//!
//! The components read `spec.configuration` themselves: virt-controller and virt-handler watch
//! the KubeVirt CR (their ClusterRoles can read it), so a change to `useEmulation` applies to the
//! next VMI without a restart, as in KubeVirt.

use api::KubeVirt;
use serde_json::{json, Value};

pub use crate::certs::base64;
use crate::certs::{self, CertPlan};
use crate::manifests::{self, InstallConfig};

/// Finalizer on the KubeVirt CR, KubeVirt's name for it.
pub const FINALIZER: &str = "foregroundDeleteKubeVirt";
/// The field manager of every apply.
pub const FIELD_MANAGER: &str = "virt-operator";
/// Label selector of every object the operator creates.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=virt-operator";
/// Pod template annotation: digest of the certificates the pods mount.
pub const CERTS_DIGEST_ANNOTATION: &str = "kubevirt.io/certificates-digest";
/// The kubevirt.io CRD that ships with the operator, not with the install.
pub const KUBEVIRT_CRD: &str = "kubevirts.kubevirt.io";
/// The Secret with the token virt-api presented to virt-handler before mutual TLS; made while
/// a pod template still mounts it.
pub const HANDLER_TOKEN_SECRET: &str = "kubevirt-virt-handler-token";
/// Names of the three workloads whose readiness makes the install Available.
pub const DEPLOYMENTS: [&str; 2] = ["virt-api", "virt-controller"];
pub const DAEMONSET: &str = "virt-handler";

/// The operator's own image, split: `registry:5000/ferrovirt/virt-operator:devel-abc` gives
/// prefix `registry:5000/ferrovirt` and tag `devel-abc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorImage {
    pub prefix: String,
    pub tag: String,
}

impl OperatorImage {
    /// Parses an image reference; `None` when it has no repository path or no tag (a digest
    /// reference `@sha256:` has no tag to give the components).
    pub fn parse(image: &str) -> Option<OperatorImage> {
        if image.contains('@') {
            return None;
        }
        let (prefix, name_tag) = image.rsplit_once('/')?;
        let (_, tag) = name_tag.rsplit_once(':')?;
        (!prefix.is_empty() && !tag.is_empty()).then(|| OperatorImage {
            prefix: prefix.to_string(),
            tag: tag.to_string(),
        })
    }
}

/// Images and pull policy for a CR: its `imageRegistry`/`imageTag`/`imagePullPolicy` when set,
/// else the operator's.
pub fn install_config(kv: &KubeVirt, namespace: &str, own: &OperatorImage) -> InstallConfig {
    let spec = &kv.spec;
    InstallConfig {
        namespace: namespace.to_string(),
        image_prefix: spec
            .image_registry
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| own.prefix.clone()),
        image_tag: spec
            .image_tag
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| own.tag.clone()),
        image_pull_policy: spec
            .image_pull_policy
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "IfNotPresent".into()),
        ..InstallConfig::default()
    }
}

/// Whether the CR asks to keep the install while workloads exist.
pub fn blocks_uninstall(kv: &KubeVirt) -> bool {
    kv.spec.uninstall_strategy.as_deref() == Some("BlockUninstallIfWorkloadsExist")
}

fn virt_api_config(cfg: &InstallConfig, ca_bundle: &str) -> virt_api::manifests::InstallConfig {
    virt_api::manifests::InstallConfig {
        namespace: cfg.namespace.clone(),
        image: cfg.image("virt-api"),
        ca_bundle: ca_bundle.as_bytes().to_vec(),
        webhook_target: virt_api::manifests::WebhookTarget::Service,
    }
}

/// Secrets named by a pod template's volumes.
fn referenced_secrets(objects: &[Value]) -> Vec<String> {
    let mut names = Vec::new();
    for object in objects {
        let volumes = &object["spec"]["template"]["spec"]["volumes"];
        for volume in volumes.as_array().into_iter().flatten() {
            if let Some(name) = volume["secret"]["secretName"].as_str() {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// Every object of the install, in the order to apply it (CRDs and RBAC first, then
/// certificates, workloads, and last what points at virt-api: APIService and webhooks).
/// `handler_token`: the token Secret's value when the manifests still mount one.
pub fn desired(
    cfg: &InstallConfig,
    plan: &CertPlan,
    handler_token: &str,
) -> Result<Vec<Value>, serde_json::Error> {
    let mut objects: Vec<Value> = manifests::render(cfg)
        .into_iter()
        .filter(|o| o["kind"] != "Namespace" && o["metadata"]["name"] != KUBEVIRT_CRD)
        .collect();
    objects.extend(virt_api::manifests::all(&virt_api_config(
        cfg,
        &plan.ca_bundle,
    ))?);
    let labels = json!({"app.kubernetes.io/managed-by": "virt-operator",
                        "app.kubernetes.io/part-of": "ferrovirt"});
    let mut secrets = certs::objects(&cfg.namespace, plan, &labels);
    let cert_names: Vec<&str> = plan.secrets.keys().map(String::as_str).collect();
    for name in referenced_secrets(&objects) {
        if !cert_names.contains(&name.as_str()) {
            // Not a certificate: the token virt-api presents to virt-handler.
            secrets.push(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels},
                "type": "Opaque",
                "data": {"token": base64(handler_token.as_bytes())},
            }));
        }
    }
    let digest = plan.digest();
    for object in &mut objects {
        if object["spec"]["template"]["metadata"].is_object() {
            object["spec"]["template"]["metadata"]["annotations"][CERTS_DIGEST_ANNOTATION] =
                json!(digest);
        }
        // Every object carries the label the operator watches its children by.
        object["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("virt-operator");
    }
    objects.extend(secrets);
    objects.sort_by_key(apply_rank);
    Ok(objects)
}

/// Where a kind goes in the apply order (stable within a kind).
fn apply_rank(object: &Value) -> u8 {
    match object["kind"].as_str().unwrap_or_default() {
        "CustomResourceDefinition" => 0,
        "ServiceAccount" => 1,
        "ClusterRole" | "Role" => 2,
        "ClusterRoleBinding" | "RoleBinding" => 3,
        // The trust bundle goes out before the certificates a new CA signed, so a client
        // trusts a rotated CA before any server presents a certificate from it.
        "ConfigMap" => 4,
        "Secret" => 5,
        "Service" => 6,
        "Deployment" | "DaemonSet" => 7,
        _ => 8,
    }
}

/// The workload CRDs (every kubevirt.io CRD but the KubeVirt one): deleted first on uninstall,
/// which deletes every VM and VMI while virt-controller still runs to clean up after them.
pub fn workload_crds() -> Vec<String> {
    api::crd::all()
        .into_iter()
        .filter_map(|crd| crd.metadata.name)
        .filter(|name| name != KUBEVIRT_CRD)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::certs::{plan, Lifetimes};

    fn kv(spec: Value) -> KubeVirt {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn own() -> OperatorImage {
        OperatorImage::parse("registry:5000/ferrovirt/virt-operator:devel-abc").unwrap()
    }

    #[test]
    fn the_operator_image_gives_registry_and_tag() {
        assert_eq!(
            own(),
            OperatorImage {
                prefix: "registry:5000/ferrovirt".into(),
                tag: "devel-abc".into()
            }
        );
        assert_eq!(OperatorImage::parse("virt-operator:v1"), None);
        assert_eq!(OperatorImage::parse("quay.io/x/virt-operator"), None);
        assert_eq!(
            OperatorImage::parse("quay.io/x/virt-operator@sha256:00"),
            None
        );
    }

    #[test]
    fn the_cr_can_name_other_images() {
        let cfg = install_config(&kv(json!({})), "kubevirt", &own());
        assert_eq!(
            cfg.image("virt-handler"),
            "registry:5000/ferrovirt/virt-handler:devel-abc"
        );
        let cfg = install_config(
            &kv(
                json!({"imageTag": "v2", "imageRegistry": "quay.io/me", "imagePullPolicy": "Always"}),
            ),
            "kubevirt",
            &own(),
        );
        assert_eq!(cfg.image("virt-api"), "quay.io/me/virt-api:v2");
        assert_eq!(cfg.image_pull_policy, "Always");
        assert!(!blocks_uninstall(&kv(json!({}))));
        assert!(blocks_uninstall(&kv(
            json!({"uninstallStrategy": "BlockUninstallIfWorkloadsExist"})
        )));
    }

    #[test]
    fn the_desired_state_has_every_component_and_certificate_in_order() {
        let cfg = install_config(&kv(json!({})), "kubevirt", &own());
        let certs = plan(
            "kubevirt",
            &BTreeMap::new(),
            None,
            1_800_000_000,
            Lifetimes::default(),
        )
        .unwrap();
        let objects = desired(&cfg, &certs, "secret-token").unwrap();
        let names: Vec<String> = objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        let at = |name: &str| {
            names
                .iter()
                .position(|n| n == name)
                .unwrap_or_else(|| panic!("{name} missing from {names:?}"))
        };
        assert!(!names.iter().any(|n| n.starts_with("Namespace/")));
        assert!(!names.contains(&format!("CustomResourceDefinition/{KUBEVIRT_CRD}")));
        for crd in workload_crds() {
            assert!(at(&format!("CustomResourceDefinition/{crd}")) < at("Secret/kubevirt-ca"));
        }
        assert!(at("ClusterRole/virt-api") < at("Secret/kubevirt-ca"));
        assert!(at("Secret/kubevirt-virt-api-certs") < at("Deployment/virt-api"));
        assert!(at("ConfigMap/kubevirt-ca") < at("Secret/kubevirt-ca"));
        assert!(at("ConfigMap/kubevirt-ca") < at("Secret/kubevirt-virt-api-certs"));
        assert!(at("ConfigMap/kubevirt-ca") < at("DaemonSet/virt-handler"));
        assert!(at("Deployment/virt-api") < at("APIService/v1.subresources.kubevirt.io"));
        assert!(
            at("Deployment/virt-controller")
                < at("ValidatingWebhookConfiguration/virt-api-validator")
        );
        at("MutatingWebhookConfiguration/virt-api-mutator");
        at("Secret/kubevirt-virt-handler-server-certs");
        at("Secret/kubevirt-virt-handler-certs");
        for object in &objects {
            assert_eq!(
                object["metadata"]["labels"]["app.kubernetes.io/managed-by"], "virt-operator",
                "{object}"
            );
        }
        // The webhooks and the APIService trust the generated CA.
        let webhook = &objects[at("ValidatingWebhookConfiguration/virt-api-validator")];
        assert_eq!(
            webhook["webhooks"][0]["clientConfig"]["caBundle"],
            base64(certs.ca_bundle.as_bytes())
        );
        // Pods restart onto new certificates.
        let handler = &objects[at("DaemonSet/virt-handler")];
        assert_eq!(
            handler["spec"]["template"]["metadata"]["annotations"][CERTS_DIGEST_ANNOTATION],
            certs.digest()
        );
        assert_eq!(
            handler["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry:5000/ferrovirt/virt-handler:devel-abc"
        );
        // Every Secret a pod mounts is part of the install.
        for name in referenced_secrets(&objects) {
            at(&format!("Secret/{name}"));
        }
    }

    #[test]
    fn uninstall_removes_every_workload_crd_but_not_the_kubevirt_one() {
        let crds = workload_crds();
        assert!(crds.contains(&"virtualmachineinstances.kubevirt.io".to_string()));
        assert!(crds.contains(&"virtualmachines.kubevirt.io".to_string()));
        assert!(!crds.contains(&KUBEVIRT_CRD.to_string()));
    }
}
