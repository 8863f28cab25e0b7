//! Applies the pool plan: finalizers, the revision, creates, deletes, rewrites, VMI restarts
//! and relabels, revision pruning (with KubeVirt's events), then the status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::pool::{VirtualMachinePoolSpec, FINALIZER, REVISION_LABEL};
use api::{VirtualMachine, VirtualMachineInstance, VirtualMachinePool};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::plan::{owner_reference, plan, revision_name, status, vm_from_template, World};
use crate::context::Context;
use crate::Error;

/// One pass over a pool.
pub async fn reconcile(pool: Arc<VirtualMachinePool>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = pool.namespace().ok_or(Error::NotNamespaced)?;
    let client = ctx.client.clone();
    let pools: Api<VirtualMachinePool> = Api::namespaced(client.clone(), &namespace);
    let vms_api: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace);
    let vmis_api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace);
    let revisions_api: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let vms = vms_api.list(&ListParams::default()).await?.items;
    let vmis = vmis_api.list(&ListParams::default()).await?.items;
    let uid = pool.uid().unwrap_or_default();
    let mut revisions: BTreeMap<String, VirtualMachinePoolSpec> = BTreeMap::new();
    for revision in revisions_api.list(&ListParams::default()).await?.items {
        let ours = revision.owner_references().iter().any(|o| o.uid == uid);
        let spec = revision
            .data
            .as_ref()
            .and_then(|d| serde_json::from_value::<VirtualMachinePoolSpec>(d.0.clone()).ok());
        if let (true, Some(spec)) = (ours, spec) {
            revisions.insert(revision.name_any(), spec);
        }
    }
    let world = World {
        vms: &vms,
        vmis: &vmis,
        revisions: &revisions,
    };
    let seed = Timestamp::now().as_nanosecond() as u64;
    let plan = match plan(&pool, &world, seed) {
        Ok(plan) => plan,
        Err(invalid) => {
            log::warn!("pool {}: {invalid}; left alone", pool.name_any());
            return Ok(Action::await_change());
        }
    };

    let mut failure: Option<(&str, String)> = None;
    for name in &plan.release_vms {
        if let Some(vm) = vms.iter().find(|v| v.name_any() == *name) {
            let kept: Vec<&String> = vm.finalizers().iter().filter(|f| *f != FINALIZER).collect();
            let patch = finalizers_patch(&kept, vm.resource_version());
            match vms_api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => log::info!("pool {}: VM {name} leaves the pool", pool.name_any()),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    if plan.remove_pool_finalizer || plan.add_pool_finalizer {
        let mut next: Vec<String> = pool
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        if plan.add_pool_finalizer {
            next.push(FINALIZER.to_string());
        }
        let patch = finalizers_patch(&next, pool.resource_version());
        match pools
            .patch(
                &pool.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        if plan.remove_pool_finalizer {
            prune(&revisions_api, &plan.prune).await;
            return Ok(Action::await_change());
        }
    }

    let current = revision_name(&pool);
    if let Some((name, number)) = &plan.create_revision {
        let revision = ControllerRevision {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                owner_references: owner_reference(&pool).map(|o| vec![o]),
                ..Default::default()
            },
            data: Some(RawExtension(
                serde_json::to_value(&pool.spec).unwrap_or_default(),
            )),
            revision: *number,
        };
        match revisions_api
            .create(&PostParams::default(), &revision)
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Ok(_) => {}
            Err(e) => {
                failure = Some(("FailedCreate", format!("error during scale out: {e}")));
            }
        }
    }
    if failure.is_none() {
        for (name, _) in &plan.create {
            let Some(vm) = vm_from_template(&pool, name, &current, None) else {
                break;
            };
            match vms_api.create(&PostParams::default(), &vm).await {
                Ok(created) => {
                    let note = format!("Created VM {namespace}/{}", created.name_any());
                    ctx.event(pool.as_ref(), false, "SuccessfulCreate", note)
                        .await;
                }
                Err(e) => {
                    let note = format!("Error creating VM: {e}");
                    ctx.event(pool.as_ref(), true, "FailedCreate", note).await;
                    failure = Some(("FailedScaleOut", format!("error during scale out: {e}")));
                    break;
                }
            }
        }
    }
    for name in &plan.delete {
        let vm = vms.iter().find(|v| v.name_any() == *name);
        let params = DeleteParams {
            preconditions: vm.and_then(|v| v.uid()).map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match vms_api.delete(name, &params).await {
            Ok(_) => {
                let uid = vm.and_then(|v| v.uid()).unwrap_or_default();
                let note = format!("Deleted VM {namespace}/{name} with uid {uid} from pool");
                ctx.event(pool.as_ref(), false, "SuccessfulDelete", note)
                    .await;
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                let note = format!("Error deleting virtual machine {namespace}/{name}: {e}");
                ctx.event(pool.as_ref(), true, "FailedDelete", note).await;
                failure.get_or_insert(("FailedScaleIn", format!("error during scale in: {e}")));
            }
        }
    }
    if failure.is_none() {
        for name in &plan.rewrite {
            let Some(old) = vms.iter().find(|v| v.name_any() == *name) else {
                continue;
            };
            let Some(vm) = vm_from_template(&pool, name, &current, Some(old)) else {
                continue;
            };
            match vms_api.replace(name, &PostParams::default(), &vm).await {
                Ok(_) => {
                    let note = format!("Updated VM {namespace}/{name}");
                    ctx.event(pool.as_ref(), false, "SuccessfulUpdate", note)
                        .await;
                }
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
                Err(e) => {
                    let note = format!("Error updating virtual machine {namespace}/{name}: {e}");
                    ctx.event(pool.as_ref(), true, "FailedUpdate", note).await;
                    failure = Some(("FailedUpdate", format!("error during VM update: {e}")));
                    break;
                }
            }
        }
    }
    for name in &plan.restart {
        match vmis_api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                let note = format!("Successfully updated resource {namespace}/{name}");
                ctx.event(pool.as_ref(), false, "SuccessfulDelete", note)
                    .await;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                let note = format!("Error updating resource {namespace}/{name}: {e}");
                ctx.event(pool.as_ref(), true, "FailedUpdate", note).await;
                failure.get_or_insert(("FailedUpdate", format!("error during VMI update: {e}")));
            }
        }
    }
    for (name, revision) in &plan.relabel {
        let patch = json!({"metadata": {"labels": {REVISION_LABEL: revision}}});
        if let Err(e) = vmis_api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            log::info!("pool {}: relabelling VMI {name}: {e}", pool.name_any());
        }
    }
    prune(&revisions_api, &plan.prune).await;

    let failure_ref = failure.as_ref().map(|(r, m)| (*r, m.as_str()));
    let new_status = status(&pool, &vms, failure_ref, Timestamp::now());
    if pool.status.as_ref() != Some(&new_status) {
        let was_paused = pool
            .status
            .as_ref()
            .is_some_and(|s| api::condition::find(&s.conditions, "ReplicaPaused").is_some());
        let paused = pool.spec.paused == Some(true);
        // `conditions` always, also empty: a merge patch keeps a list it does not name.
        let mut status = serde_json::to_value(&new_status).unwrap_or_else(|_| json!({}));
        status["conditions"] = json!(new_status.conditions);
        let patch = json!({ "status": status });
        pools
            .patch_status(
                &pool.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        if let Some((reason, message)) = &failure {
            ctx.event(pool.as_ref(), true, reason, message.clone())
                .await;
        }
        if paused != was_paused {
            let (reason, note) = if paused {
                ("SuccessfulPaused", "Pool is paused")
            } else {
                ("SuccessfulResumed", "Pool is unpaused")
            };
            ctx.event(pool.as_ref(), false, reason, note.into()).await;
        }
    }
    // VM changes bring the next pass; a failure, a held-back update or VMIs still settling are
    // looked at again soon.
    let settling = !plan.restart.is_empty() || plan.waiting || !plan.rewrite.is_empty();
    let requeue = if failure.is_some() || settling {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(60)
    };
    Ok(Action::requeue(requeue))
}

async fn prune(revisions: &Api<ControllerRevision>, names: &[String]) {
    for name in names {
        if let Err(e) = revisions.delete(name, &DeleteParams::default()).await {
            if !matches!(&e, kube::Error::Api(r) if r.code == 404) {
                log::info!("pruning revision {name}: {e}");
            }
        }
    }
}

/// A merge patch of the finalizers, refused with 409 when the object changed since it was read
/// (its resourceVersion), so that a finalizer another writer added in between is not lost.
fn finalizers_patch<T: serde::Serialize>(
    finalizers: &[T],
    resource_version: Option<String>,
) -> serde_json::Value {
    json!({"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}})
}

/// The pool a VMI of one of its VMs belongs to, from the revision label (`<pool>-<generation>`)
/// the pool puts on its VMs' VMI template: a VMI restart or readiness change brings the pool's
/// next pass.
pub fn pool_of_vmi(vmi: &VirtualMachineInstance) -> Option<ObjectRef<VirtualMachinePool>> {
    let revision = vmi.meta().labels.as_ref()?.get(REVISION_LABEL)?;
    let (pool, generation) = revision.rsplit_once('-')?;
    generation.parse::<i64>().ok()?;
    Some(ObjectRef::new(pool).within(&vmi.namespace()?))
}
