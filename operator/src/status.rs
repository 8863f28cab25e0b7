//! The KubeVirt CR's status: how far virt-api, virt-controller and virt-handler are
//! ([`readiness`]), the phase, conditions and versions that follow from it ([`next_status`],
//! pure: tested without a cluster), and the patch that writes it.

use api::condition::Condition;
use api::kubevirt::KubeVirtPhase;
use api::{KubeVirt, KubeVirtStatus};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::context::{kube_error, Context, Error};
use crate::install;

/// How far the workloads are: (available, at target version).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    pub available: bool,
    pub updated: bool,
}

pub(crate) fn image_of(
    spec: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
) -> Option<String> {
    spec?.spec.as_ref()?.containers.first()?.image.clone()
}

pub(crate) async fn readiness(
    ctx: &Context,
    cfg: &crate::manifests::InstallConfig,
) -> Result<Readiness, Error> {
    let mut ready = Readiness {
        available: true,
        updated: true,
    };
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    for name in install::DEPLOYMENTS {
        let Some(d) =
            deployments
                .get_opt(name)
                .await
                .map_err(kube_error("reading", "Deployment", name))?
        else {
            return Ok(Readiness::default());
        };
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let status = d.status.clone().unwrap_or_default();
        let available = status.available_replicas.unwrap_or(0);
        ready.available &= available >= want.min(1) && available > 0;
        let target = image_of(d.spec.as_ref().map(|s| &s.template)) == Some(cfg.image(name));
        ready.updated &= target
            && status.observed_generation >= d.metadata.generation
            && status.updated_replicas.unwrap_or(0) == want
            && status.replicas.unwrap_or(0) == want
            && available == want;
    }
    let daemonsets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let Some(ds) = daemonsets
        .get_opt(install::DAEMONSET)
        .await
        .map_err(kube_error("reading", "DaemonSet", install::DAEMONSET))?
    else {
        return Ok(Readiness::default());
    };
    let status = ds.status.clone().unwrap_or_default();
    let target =
        image_of(ds.spec.as_ref().map(|s| &s.template)) == Some(cfg.image(install::DAEMONSET));
    ready.available &=
        status.desired_number_scheduled > 0 && status.number_available.unwrap_or(0) > 0;
    ready.updated &= target
        && status.observed_generation >= ds.metadata.generation
        && status.updated_number_scheduled.unwrap_or(0) == status.desired_number_scheduled
        && status.number_available.unwrap_or(0) == status.desired_number_scheduled;
    Ok(ready)
}

/// Sets a condition, keeping its transition time when its status did not change.
pub(crate) fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) {
    let previous = conditions.iter().position(|c| c.type_ == condition.type_);
    let now = Time(Timestamp::now());
    match previous {
        Some(i) => {
            let old = &conditions[i];
            condition.last_transition_time = if old.status == condition.status {
                old.last_transition_time.clone()
            } else {
                Some(now)
            };
            conditions[i] = condition;
        }
        None => {
            condition.last_transition_time = Some(now);
            conditions.push(condition);
        }
    }
}

/// Sets Available (with its own message), Progressing and Degraded (false: an install on its
/// way is not degraded), all for `reason`.
pub(crate) fn set_install_conditions(
    conditions: &mut Vec<Condition>,
    reason: &str,
    (available, available_message): (bool, &str),
    progressing: bool,
    message: &str,
) {
    set_condition(
        conditions,
        Condition::new("Available", available, reason, available_message),
    );
    set_condition(
        conditions,
        Condition::new("Progressing", progressing, reason, message),
    );
    set_condition(
        conditions,
        Condition::new("Degraded", false, reason, message),
    );
}

/// The status for where the install is (pure: tested without a cluster).
pub fn next_status(
    current: &KubeVirtStatus,
    generation: Option<i64>,
    cfg: &crate::manifests::InstallConfig,
    operator_tag: &str,
    ready: Readiness,
) -> KubeVirtStatus {
    let mut status = current.clone();
    status.operator_version = Some(operator_tag.to_string());
    status.target_kube_virt_version = Some(cfg.image_tag.clone());
    status.target_kube_virt_registry = Some(cfg.image_prefix.clone());
    status.observed_generation = generation;
    // KubeVirt's operator sets it (its suite's migration specs read it before they start).
    status.default_architecture = Some("amd64".into());
    let done = ready.available && ready.updated;
    let target = format!(
        "version {} with registry {}",
        cfg.image_tag, cfg.image_prefix
    );
    if done {
        status.phase = Some(KubeVirtPhase::Deployed);
        status.observed_kube_virt_version = Some(cfg.image_tag.clone());
        status.observed_kube_virt_registry = Some(cfg.image_prefix.clone());
        let message = "All components are ready.";
        set_install_conditions(
            &mut status.conditions,
            "AllComponentsReady",
            (true, message),
            false,
            message,
        );
    } else {
        status.phase = Some(KubeVirtPhase::Deploying);
        // As KubeVirt words it: an update names where it comes from.
        let previous = current
            .observed_kube_virt_version
            .as_ref()
            .zip(current.observed_kube_virt_registry.as_ref())
            .filter(|(version, _)| **version != cfg.image_tag);
        let (reason, message) = match previous {
            Some((version, registry)) => (
                "UpdateInProgress",
                format!(
                    "Transitioning from previous version {version} with registry {registry} \
                     to target {target}"
                ),
            ),
            None => ("DeploymentInProgress", format!("Deploying {target}")),
        };
        let available_message = if ready.available {
            "The previous version is serving while the new one rolls out."
        } else {
            "Not all components are ready yet."
        };
        set_install_conditions(
            &mut status.conditions,
            reason,
            (ready.available, available_message),
            true,
            &message,
        );
    }
    // Called after every object of the install was applied.
    set_condition(
        &mut status.conditions,
        Condition::new(
            "Created",
            true,
            "AllResourcesCreated",
            "All resources were created.",
        ),
    );
    status
}

pub(crate) async fn patch_status(
    ctx: &Context,
    kv: &KubeVirt,
    status: KubeVirtStatus,
) -> Result<(), Error> {
    if kv.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<KubeVirt> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    api.patch_status(
        &kv.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map_err(kube_error("updating status of", "KubeVirt", &kv.name_any()))?;
    Ok(())
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
