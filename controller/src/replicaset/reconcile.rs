//! Applies the replica set plan: adoption, creates and deletes (with KubeVirt's events), then
//! the status, replaced with optimistic concurrency.

use std::sync::Arc;
use std::time::Duration;

use api::{VirtualMachineInstance, VirtualMachineInstanceReplicaSet};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::plan::{owner_reference, plan, status, vmi_from_template};
use crate::context::Context;
use crate::Error;

/// One pass over a replica set.
pub async fn reconcile(
    rs: Arc<VirtualMachineInstanceReplicaSet>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = rs.namespace().ok_or(Error::NotNamespaced)?;
    let sets: Api<VirtualMachineInstanceReplicaSet> =
        Api::namespaced(ctx.client.clone(), &namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut listed = vmis.list(&ListParams::default()).await?.items;
    let plan = match plan(&rs, &listed) {
        Ok(plan) => plan,
        Err(invalid) => {
            log::warn!("{}: {invalid}; left alone", rs.name_any());
            return Ok(Action::await_change());
        }
    };

    let mut scale_error: Option<(&str, String)> = None;
    if let Some(owner) = owner_reference(&rs) {
        for name in &plan.adopt {
            let patch = serde_json::json!({ "metadata": { "ownerReferences": [owner] } });
            match vmis
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(adopted) => {
                    if let Some(v) = listed.iter_mut().find(|v| v.name_any() == *name) {
                        *v = adopted;
                    }
                }
                Err(e) => log::info!("{}: adopting VMI {name}: {e}", rs.name_any()),
            }
        }
    }
    if plan.create > 0 {
        match vmi_from_template(&rs) {
            Some(new) => {
                for _ in 0..plan.create {
                    match vmis.create(&PostParams::default(), &new).await {
                        Ok(created) => {
                            let note = format!(
                                "Started the virtual machine by creating the new virtual machine instance {}",
                                created.name_any()
                            );
                            ctx.event(rs.as_ref(), false, "SuccessfulCreate", note)
                                .await;
                        }
                        Err(e) => {
                            let note = format!("Error creating virtual machine instance: {e}");
                            ctx.event(rs.as_ref(), true, "FailedCreate", note).await;
                            scale_error = Some(("FailedCreate", e.to_string()));
                            break;
                        }
                    }
                }
            }
            None => scale_error = Some(("FailedCreate", "the template has no spec".into())),
        }
    }
    let deletes = plan
        .delete
        .iter()
        .map(|n| (n, false))
        .chain(plan.delete_finished.iter().map(|n| (n, true)));
    for (name, finished) in deletes {
        let uid = listed
            .iter()
            .find(|v| v.name_any() == *name)
            .and_then(|v| v.uid());
        let params = DeleteParams {
            preconditions: uid.map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match vmis.delete(name, &params).await {
            Ok(_) => {
                let note = if finished {
                    format!("Deleted finished virtual machine: {name}")
                } else {
                    format!(
                        "Stopped the virtual machine by deleting the virtual machine instance {name}"
                    )
                };
                ctx.event(rs.as_ref(), false, "SuccessfulDelete", note)
                    .await;
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                let note = format!("Error deleting virtual machine instance {name}: {e}");
                ctx.event(rs.as_ref(), true, "FailedDelete", note).await;
                scale_error.get_or_insert(("FailedDelete", e.to_string()));
            }
        }
    }

    let failure = scale_error.as_ref().map(|(r, m)| (*r, m.as_str()));
    let new_status = status(&rs, &listed, failure, Timestamp::now());
    if rs.status.as_ref() != Some(&new_status) {
        let was_paused = rs
            .status
            .as_ref()
            .is_some_and(|s| api::condition::find(&s.conditions, "ReplicaPaused").is_some());
        let paused = rs.spec.paused == Some(true);
        let mut updated = (*rs).clone();
        updated.status = Some(new_status);
        sets.replace_status(&rs.name_any(), &PostParams::default(), &updated)
            .await?;
        if paused != was_paused {
            let (reason, note) = if paused {
                ("SuccessfulPaused", "Paused")
            } else {
                ("SuccessfulResumed", "Resumed")
            };
            ctx.event(rs.as_ref(), false, reason, note.into()).await;
        }
    }
    // Creates and deletes show up as VMI events, which bring the next pass; a failure retries.
    let requeue = if scale_error.is_some() {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(60)
    };
    Ok(Action::requeue(requeue))
}
