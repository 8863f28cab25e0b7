//! Applies the VMI plan: status with optimistic concurrency, then the one action.

use std::sync::Arc;
use std::time::Duration;

use api::{VirtualMachineInstance, VmiPhase};
use contract::labels;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::plan::{plan, set_condition, VmiAction};
use crate::context::Context;
use crate::migration::plan::refresh_live_migratable;
use crate::migration::reconcile::pvc_access_modes;
use crate::pod::render_launcher_pod;
use crate::Error;

/// One pass over a VMI: read its Pods, plan, apply.
pub async fn reconcile(
    vmi: Arc<VirtualMachineInstance>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = vmi.namespace().ok_or(Error::NotNamespaced)?;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = vmi.uid().ok_or(Error::NoUid)?;
    // A direct list, not a cache: a Pod created by the previous pass must be seen.
    let owned = pods
        .list(&ListParams::default().labels(&format!("{}={uid}", labels::CREATED_BY)))
        .await?
        .items;
    // While the VMI migrates its target Pod is not yet its launcher (nor, after, the source's).
    let owned = if vmi.metadata.deletion_timestamp.is_none() {
        crate::migration::visible_pods(&vmi, owned)
    } else {
        owned
    };
    let mut plan = plan(&vmi, &owned, Timestamp::now());
    let old_phase = vmi.status.as_ref().and_then(|s| s.phase);

    // As KubeVirt does, every VMI with a node says whether it could live-migrate.
    let mut status = plan
        .status
        .clone()
        .or_else(|| vmi.status.clone())
        .unwrap_or_default();
    let placed = matches!(status.phase, Some(VmiPhase::Scheduled | VmiPhase::Running));
    if placed && vmi.metadata.deletion_timestamp.is_none() {
        let modes = pvc_access_modes(&ctx.client, &namespace, &vmi).await?;
        if refresh_live_migratable(&vmi, &mut status, &modes).1 || plan.status.is_some() {
            plan.status = Some(status);
        }
    }

    if let Some(status) = plan.status.clone() {
        write_status(&vmis, &vmi, &status).await?;
        if status.phase != old_phase {
            if let Some(phase) = status.phase {
                let reason = status.reason.as_ref();
                match phase.entered_event() {
                    Some((warning, event, message)) => {
                        let note = match reason {
                            Some(reason) => format!("{message} ({reason})"),
                            None => message.to_string(),
                        };
                        ctx.event(vmi.as_ref(), warning, event, note).await;
                    }
                    None => {
                        let note = match reason {
                            Some(reason) => format!("phase {} ({reason})", phase.as_str()),
                            None => format!("phase {}", phase.as_str()),
                        };
                        ctx.event(vmi.as_ref(), false, phase.as_str(), note).await;
                    }
                }
            }
        }
    }

    let name = vmi.name_any();
    // virt-handler watches the VMIs of its node by this label. It goes on as soon as the
    // launcher Pod is bound, so that the handler already has the VMI when it becomes Scheduled
    // (its Scheduled status then reaches the handler without a PATCH in between).
    let node = plan
        .status
        .as_ref()
        .or(vmi.status.as_ref())
        .and_then(|s| s.node_name.clone())
        .or_else(|| plan.bound_node.clone());
    if let Some(node) = node {
        if vmi.labels().get(labels::NODE_NAME) != Some(&node)
            && vmi.metadata.deletion_timestamp.is_none()
        {
            let patch = json!({"metadata": {"labels": {labels::NODE_NAME: node}}});
            vmis.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
    }
    match plan.action {
        VmiAction::Nothing => {}
        VmiAction::AddFinalizer => {
            let mut finalizers = vmi.finalizers().to_vec();
            finalizers.push(contract::finalizers::VMI.into());
            patch_finalizers(&vmis, &vmi, finalizers).await?;
        }
        VmiAction::RemoveFinalizer => {
            let finalizers = vmi
                .finalizers()
                .iter()
                .filter(|f| *f != contract::finalizers::VMI)
                .cloned()
                .collect();
            patch_finalizers(&vmis, &vmi, finalizers).await?;
        }
        VmiAction::CreatePod => {
            let created = match render_launcher_pod(&vmi, &ctx.config()) {
                Ok(pod) => pods
                    .create(&PostParams::default(), &pod)
                    .await
                    .map_err(Error::from),
                Err(e) => Err(Error::Render(e)),
            };
            match created {
                Ok(pod) => {
                    ctx.event(
                        vmi.as_ref(),
                        false,
                        "SuccessfulCreate",
                        format!("created launcher Pod {}", pod.name_any()),
                    )
                    .await;
                }
                Err(e) => {
                    // Say why on the VMI, then retry.
                    let mut status = plan
                        .status
                        .clone()
                        .or(vmi.status.clone())
                        .unwrap_or_default();
                    set_condition(
                        &mut status,
                        api::Condition::new("Synchronized", false, "FailedCreate", &e.to_string()),
                    );
                    let fresh = vmis.get(&name).await?;
                    write_status(&vmis, &fresh, &status).await?;
                    ctx.event(vmi.as_ref(), true, "FailedCreate", e.to_string())
                        .await;
                    return Err(e);
                }
            }
        }
        VmiAction::DeletePods(names) => {
            let grace = vmi
                .spec
                .termination_grace_period_seconds
                .unwrap_or(30)
                .max(0) as u32
                + 15;
            for pod in names {
                let params = DeleteParams {
                    grace_period_seconds: Some(grace),
                    ..DeleteParams::default()
                };
                match pods.delete(&pod, &params).await {
                    Ok(_) => {
                        ctx.event(
                            vmi.as_ref(),
                            false,
                            "SuccessfulDelete",
                            format!("deleted launcher Pod {pod}"),
                        )
                        .await
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Replaces the status subresource, guarded by the resourceVersion we read (409 on a race with
/// virt-handler, and the pass is retried).
async fn write_status(
    vmis: &Api<VirtualMachineInstance>,
    vmi: &VirtualMachineInstance,
    status: &api::VirtualMachineInstanceStatus,
) -> Result<(), Error> {
    let mut updated = vmi.clone();
    updated.status = Some(status.clone());
    vmis.replace_status(&vmi.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}

async fn patch_finalizers(
    vmis: &Api<VirtualMachineInstance>,
    vmi: &VirtualMachineInstance,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let patch = json!({
        "metadata": {"resourceVersion": vmi.resource_version(), "finalizers": finalizers},
    });
    vmis.patch(
        &vmi.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}
