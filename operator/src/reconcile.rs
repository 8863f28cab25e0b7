//! The KubeVirt CR controller. For each CR in the operator's namespace:
//!
//! 1. adds the finalizer `foregroundDeleteKubeVirt`;
//! 2. plans the certificates from the Secrets in the cluster ([`crate::certs::plan`]);
//! 3. server-side applies every object of [`crate::install::desired`] with field manager
//!    `virt-operator` and `force`, which also takes back fields someone else changed (a
//!    Deployment scaled to 0) and recreates deleted objects; the children are watched by label,
//!    so an edit or a deletion brings the CR back here;
//! 4. reads virt-api, virt-controller and virt-handler and reports `status` ([`crate::status`]):
//!    phase Deploying until all three run the target version, then Deployed, with conditions
//!    Available, Progressing and Degraded as KubeVirt sets them, and the observed/target
//!    versions.
//!
//! On deletion (phase Deleting): with `uninstallStrategy: BlockUninstallIfWorkloadsExist` it
//! keeps everything while VMs or VMIs exist (condition Degraded, reason DeletionBlocked, and a
//! Warning event); else it deletes the workload CRDs (and with them every VM and VMI, while
//! virt-controller still runs to finish them), waits for them to go, deletes the rest, and
//! removes the finalizer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use api::condition::Condition;
use api::kubevirt::KubeVirtPhase;
use api::{KubeVirt, VirtualMachine, VirtualMachineInstance};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};

use crate::certs::{self, Lifetimes, StoredSecret};
use crate::context::kube_error;
pub use crate::context::{Context, Error};
use crate::install::{self, FIELD_MANAGER, FINALIZER};
use crate::status::{next_status, patch_status, readiness, set_condition};

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The API resource of each kind the install has: group, version, plural, namespaced.
fn api_resource(kind: &str) -> Option<(ApiResource, bool)> {
    let (group, version, plural, namespaced) = match kind {
        "CustomResourceDefinition" => (
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            false,
        ),
        "ServiceAccount" => ("", "v1", "serviceaccounts", true),
        "Secret" => ("", "v1", "secrets", true),
        "ConfigMap" => ("", "v1", "configmaps", true),
        "Service" => ("", "v1", "services", true),
        "ClusterRole" => ("rbac.authorization.k8s.io", "v1", "clusterroles", false),
        "ClusterRoleBinding" => (
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            false,
        ),
        "Role" => ("rbac.authorization.k8s.io", "v1", "roles", true),
        "RoleBinding" => ("rbac.authorization.k8s.io", "v1", "rolebindings", true),
        "Deployment" => ("apps", "v1", "deployments", true),
        "DaemonSet" => ("apps", "v1", "daemonsets", true),
        "APIService" => ("apiregistration.k8s.io", "v1", "apiservices", false),
        "MutatingWebhookConfiguration" => (
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            false,
        ),
        "ValidatingWebhookConfiguration" => (
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            false,
        ),
        _ => return None,
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Some((ApiResource::from_gvk_with_plural(&gvk, plural), namespaced))
}

fn dynamic_api(client: &Client, object: &Value) -> Result<(Api<DynamicObject>, String), Error> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (resource, namespaced) =
        api_resource(kind).ok_or_else(|| Error::UnknownKind(kind.to_string()))?;
    let api = match object["metadata"]["namespace"].as_str() {
        Some(ns) if namespaced => Api::namespaced_with(client.clone(), ns, &resource),
        _ => Api::all_with(client.clone(), &resource),
    };
    Ok((api, name))
}

/// Server-side applies one object, taking every field it sets.
async fn apply(client: &Client, object: &Value) -> Result<(), Error> {
    let (api, name) = dynamic_api(client, object)?;
    let kind = object["kind"].as_str().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(kube_error("applying", kind, &name))?;
    Ok(())
}

/// The kinds the operator installs, in the order to delete them.
const PRUNED_KINDS: [&str; 14] = [
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
    "DaemonSet",
    "Deployment",
    "Service",
    "ConfigMap",
    "Secret",
    "RoleBinding",
    "ClusterRoleBinding",
    "Role",
    "ClusterRole",
    "ServiceAccount",
    "CustomResourceDefinition",
];

/// Deletes the objects with the operator's label that are not in `keep`: what an earlier
/// version installed and this one does not (a Secret no component mounts any more). Only in the
/// install's namespace, kube-system (virt-api's RoleBinding) and cluster-scoped (other tests
/// and tools may use the same label in namespaces of their own); never the KubeVirt CRD.
async fn prune(ctx: &Context, keep: &[Value]) -> Result<(), Error> {
    let kept = |kind: &str, namespace: Option<&str>, name: &str| {
        keep.iter().any(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == name
                && o["metadata"]["namespace"].as_str() == namespace
        })
    };
    let selector = ListParams::default().labels(install::MANAGED_SELECTOR);
    for kind in PRUNED_KINDS {
        let Some((resource, namespaced)) = api_resource(kind) else {
            continue;
        };
        // The operator may list namespaced kinds in its namespace only (and RoleBindings in
        // kube-system, where virt-api's is).
        let mut scopes: Vec<Option<&str>> = vec![None];
        if namespaced {
            scopes = vec![Some(ctx.namespace.as_str())];
            if kind == "RoleBinding" {
                scopes.push(Some("kube-system"));
            }
        }
        for scope in scopes {
            let api: Api<DynamicObject> = match scope {
                Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &resource),
                None => Api::all_with(ctx.client.clone(), &resource),
            };
            let list = api.list_metadata(&selector).await.map_err(kube_error(
                "listing",
                kind,
                scope.unwrap_or_default(),
            ))?;
            for object in list.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                if name == install::KUBEVIRT_CRD || kept(kind, scope, &name) {
                    continue;
                }
                log::info!("removing {kind} {name}: not part of this install");
                let mut target = json!({"kind": kind, "metadata": {"name": name}});
                if let Some(ns) = scope {
                    target["metadata"]["namespace"] = json!(ns);
                }
                delete(&ctx.client, &target).await?;
            }
        }
    }
    Ok(())
}

/// Deletes one object; gone already is fine.
async fn delete(client: &Client, object: &Value) -> Result<(), Error> {
    let (api, name) = dynamic_api(client, object)?;
    let kind = object["kind"].as_str().unwrap_or_default();
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        Err(e) => Err(kube_error("deleting", kind, &name)(e)),
    }
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The certificate Secrets and CA bundle as they are in the cluster.
async fn existing_certs(
    ctx: &Context,
) -> Result<(BTreeMap<String, StoredSecret>, Option<String>, String), Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let mut found = BTreeMap::new();
    let mut token = None;
    let list = secrets
        .list(&ListParams::default())
        .await
        .map_err(kube_error("listing", "Secret", &ctx.namespace))?;
    for secret in &list.items {
        let name = secret.name_any();
        let stored = StoredSecret::from_secret(secret);
        if name == install::HANDLER_TOKEN_SECRET {
            token = stored.data.get("token").cloned();
        } else if name.starts_with("kubevirt-") {
            found.insert(name, stored);
        }
    }
    let maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let bundle = maps
        .get_opt(certs::CA_NAME)
        .await
        .map_err(kube_error("reading", "ConfigMap", certs::CA_NAME))?
        .and_then(|m| m.data?.get(certs::CA_BUNDLE_KEY).cloned());
    let token = token.filter(|t| !t.is_empty()).unwrap_or_else(random_token);
    Ok((found, bundle, token))
}

fn random_token() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    // SystemRandom reads the OS generator; failing it, the token is still unique per install
    // but guessable, which the log says.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        log::error!("no OS randomness for the handler token");
    }
    install::base64(&bytes)
}

/// Sets the CR's finalizers to `finalizers`, only if it is still the version read (`action`
/// names the change in the error).
async fn patch_finalizers(
    ctx: &Context,
    kv: &KubeVirt,
    finalizers: Vec<String>,
    action: &'static str,
) -> Result<(), Error> {
    let api: Api<KubeVirt> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let patch = json!({"metadata": {"finalizers": finalizers,
                                     "resourceVersion": kv.resource_version()}});
    api.patch(
        &kv.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map_err(kube_error(action, "KubeVirt", &kv.name_any()))?;
    Ok(())
}

async fn add_finalizer(ctx: &Context, kv: &KubeVirt) -> Result<(), Error> {
    let mut finalizers = kv.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    patch_finalizers(ctx, kv, finalizers, "adding the finalizer to").await
}

/// Installs or upgrades, and reports how far it got.
async fn deploy(kv: &KubeVirt, ctx: &Context) -> Result<Action, Error> {
    let cfg = install::install_config(kv, &ctx.namespace, &ctx.image);
    let (existing, bundle, token) = existing_certs(ctx).await?;
    let plan = certs::plan(
        &ctx.namespace,
        &existing,
        bundle.as_deref(),
        now_unix(),
        Lifetimes::of(kv),
    )?;
    if plan.changed {
        log::info!("issuing certificates (digest {})", plan.digest());
    }
    let objects = install::desired(&cfg, &plan, &token)?;
    for object in &objects {
        apply(&ctx.client, object).await?;
    }
    prune(ctx, &objects).await?;
    let ready = readiness(ctx, &cfg).await?;
    let current = kv.status.clone().unwrap_or_default();
    let status = next_status(
        &current,
        kv.metadata.generation,
        &cfg,
        &ctx.image.tag,
        ready,
    );
    let deployed_now = status.phase == Some(KubeVirtPhase::Deployed)
        && current.phase != Some(KubeVirtPhase::Deployed);
    patch_status(ctx, kv, status).await?;
    if deployed_now {
        ctx.event(
            kv,
            false,
            "Deployed",
            format!("Ferrovirt {} is deployed", cfg.image_tag),
        )
        .await;
    }
    let until_renewal = u64::try_from(plan.renew_at - now_unix())
        .unwrap_or(0)
        .max(5);
    let wait = if ready.available && ready.updated {
        Duration::from_secs(until_renewal.min(3600))
    } else {
        Duration::from_secs(5)
    };
    Ok(Action::requeue(wait))
}

/// How many VMs and VMIs exist, in every namespace (0 when their CRDs are gone).
async fn workloads(client: &Client) -> Result<usize, Error> {
    let mut count = 0;
    let vms: Api<VirtualMachine> = Api::all(client.clone());
    match vms.list_metadata(&ListParams::default()).await {
        Ok(list) => count += list.items.len(),
        Err(e) if not_found(&e) => {}
        Err(e) => return Err(kube_error("listing", "VirtualMachine", "")(e)),
    }
    let vmis: Api<VirtualMachineInstance> = Api::all(client.clone());
    match vmis.list_metadata(&ListParams::default()).await {
        Ok(list) => count += list.items.len(),
        Err(e) if not_found(&e) => {}
        Err(e) => return Err(kube_error("listing", "VirtualMachineInstance", "")(e)),
    }
    Ok(count)
}

/// Removes the install; the finalizer goes last.
async fn uninstall(kv: &KubeVirt, ctx: &Context) -> Result<Action, Error> {
    if !kv.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let mut status = kv.status.clone().unwrap_or_default();
    status.phase = Some(KubeVirtPhase::Deleting);
    if install::blocks_uninstall(kv) {
        let count = workloads(&ctx.client).await?;
        if count > 0 {
            let message = format!(
                "uninstallStrategy BlockUninstallIfWorkloadsExist: {count} VirtualMachine(s) and \
                 VirtualMachineInstance(s) exist; delete them to uninstall"
            );
            let first = !status
                .conditions
                .iter()
                .any(|c| c.reason.as_deref() == Some("DeletionBlocked"));
            set_condition(
                &mut status.conditions,
                Condition::new("Degraded", true, "DeletionBlocked", &message),
            );
            patch_status(ctx, kv, status).await?;
            if first {
                ctx.event(kv, true, "DeletionBlocked", message).await;
            }
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
    }
    set_condition(
        &mut status.conditions,
        Condition::new(
            "Degraded",
            false,
            "DeletionInProgress",
            "Removing Ferrovirt",
        ),
    );
    set_condition(
        &mut status.conditions,
        Condition::new(
            "Available",
            false,
            "DeletionInProgress",
            "Removing Ferrovirt",
        ),
    );
    status.conditions.retain(|c| c.type_ != "Created");
    patch_status(ctx, kv, status).await?;

    // 1. The workload CRDs, which deletes every VM and VMI; wait until they are gone.
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    let mut remaining = 0;
    for name in install::workload_crds() {
        let crd = crds
            .get_opt(&name)
            .await
            .map_err(kube_error("reading", "CRD", &name))?;
        if let Some(crd) = crd {
            remaining += 1;
            if crd.metadata.deletion_timestamp.is_none() {
                log::info!("deleting CRD {name}");
                delete(
                    &ctx.client,
                    &json!({"kind": "CustomResourceDefinition", "metadata": {"name": name}}),
                )
                .await?;
            }
        }
    }
    if remaining > 0 {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    // 2. Everything else, in the reverse order of install.
    let cfg = install::install_config(kv, &ctx.namespace, &ctx.image);
    let plan = certs::plan(
        &ctx.namespace,
        &BTreeMap::new(),
        None,
        now_unix(),
        Lifetimes::of(kv),
    )?;
    let mut objects = install::desired(&cfg, &plan, "")?;
    objects.reverse();
    for object in &objects {
        delete(&ctx.client, object).await?;
    }
    // And whatever an earlier version installed that this one does not.
    prune(ctx, &[]).await?;
    // 3. The finalizer.
    let finalizers: Vec<String> = kv
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    patch_finalizers(ctx, kv, finalizers, "removing the finalizer of").await?;
    log::info!("Ferrovirt removed");
    Ok(Action::await_change())
}

pub async fn reconcile(kv: Arc<KubeVirt>, ctx: Arc<Context>) -> Result<Action, Error> {
    if kv.metadata.deletion_timestamp.is_some() {
        return uninstall(&kv, &ctx).await;
    }
    if !kv.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(&ctx, &kv).await?;
        // The change brings the CR back.
        return Ok(Action::await_change());
    }
    deploy(&kv, &ctx).await
}

fn error_policy(kv: Arc<KubeVirt>, error: &Error, _: Arc<Context>) -> Action {
    let conflict = matches!(error, Error::Kube { source, .. } if matches!(**source, kube::Error::Api(ref e) if e.code == 409));
    if conflict {
        return Action::requeue(Duration::from_millis(500));
    }
    let mut chain = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        chain.push_str(": ");
        chain.push_str(&e.to_string());
        source = e.source();
    }
    log::warn!("{}: {chain}", kv.name_any());
    Action::requeue(Duration::from_secs(5))
}

/// Every kind of child, watched by the operator's label; a change to any maps to every CR.
macro_rules! watch_children {
    ($controller:expr, $client:expr, $ns:expr, $store:expr, [$($ty:ty: $scope:ident),* $(,)?]) => {{
        let mut c = $controller;
        $(
            let store = $store.clone();
            let api: Api<$ty> = watch_children!(@api $scope, $client, $ns);
            c = c.watches(
                api,
                watcher::Config::default().labels(install::MANAGED_SELECTOR),
                move |_| {
                    store
                        .state()
                        .iter()
                        .map(|kv| ObjectRef::from_obj(&**kv))
                        .collect::<Vec<_>>()
                },
            );
        )*
        c
    }};
    (@api all, $client:expr, $ns:expr) => { Api::all($client.clone()) };
    (@api ns, $client:expr, $ns:expr) => { Api::namespaced($client.clone(), $ns) };
}

/// Runs the controller until a shutdown signal.
pub async fn run(ctx: Arc<Context>) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use k8s_openapi::api::core::v1::{Service, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;

    let client = ctx.client.clone();
    let ns = ctx.namespace.clone();
    let controller = Controller::new(
        Api::<KubeVirt>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
    );
    let store = controller.store();
    let controller = watch_children!(controller, client, &ns, store, [
        Deployment: ns, DaemonSet: ns, Service: ns, ServiceAccount: ns, Secret: ns,
        ConfigMap: ns, Role: ns, RoleBinding: all, ClusterRole: all, ClusterRoleBinding: all,
        APIService: all, MutatingWebhookConfiguration: all, ValidatingWebhookConfiguration: all,
        CustomResourceDefinition: all,
    ]);
    controller
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(e) = result {
                log::debug!("reconcile: {e}");
            }
            futures::future::ready(())
        })
        .await;
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
