//! One pass over a `VirtualMachineInstanceMigration`: read what [`plan::needs`] says, plan
//! ([`plan::plan`]), apply the steps in order.
//!
//! Passes come from the watches (see [`super::watch`]), not from polling: the action returned
//! is `await_change` unless the plan asks for a timed look ([`plan::Plan::requeue_after`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use api::migration::VirtualMachineInstanceMigration;
use api::VirtualMachineInstance;
use contract::labels;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tokio::sync::Mutex;

use super::plan::{self, Needs, Plan, StartFacts, Step, Subject, World};
use super::{patch, settings};
use crate::context::Context;
use crate::Error;

/// Held by a pass over a Pending migration from its read of the other migrations to its last
/// write: the limits count the migrations past Pending, so two migrations freed by the same
/// event must not both see the one free place. (One virt-controller leads at a time.)
static STARTING: Mutex<()> = Mutex::const_new(());

/// The access modes of the PVCs `vmi` uses, by claim name; a missing claim is left out (and
/// so counts as not shared).
pub async fn pvc_access_modes(
    client: &kube::Client,
    namespace: &str,
    vmi: &VirtualMachineInstance,
) -> Result<BTreeMap<String, Vec<String>>, kube::Error> {
    let mut modes = BTreeMap::new();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    for volume in &vmi.spec.volumes {
        if let Some(pvc) = &volume.persistent_volume_claim {
            if let Some(claim) = claims.get_opt(&pvc.claim_name).await? {
                let access = claim.spec.and_then(|s| s.access_modes).unwrap_or_default();
                modes.insert(pvc.claim_name.clone(), access);
            }
        }
    }
    Ok(modes)
}

pub async fn reconcile(
    migration: Arc<VirtualMachineInstanceMigration>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let namespace = migration.namespace().ok_or(Error::NotNamespaced)?;
    let migrations: Api<VirtualMachineInstanceMigration> =
        Api::namespaced(ctx.client.clone(), &namespace);
    // A direct read, not the controller's store: a VMI or Pod event can bring this pass before
    // the store holds the status the previous pass wrote.
    let Some(migration) = migrations.get_opt(&migration.name_any()).await? else {
        return Ok(Action::await_change());
    };
    migration.uid().ok_or(Error::NoUid)?;
    let needs = plan::needs(&migration);
    let _starting = if needs.start {
        Some(STARTING.lock().await)
    } else {
        None
    };
    let world = read(&ctx, &namespace, migration, needs).await?;
    let plan = plan::plan(&world).map_err(Error::Render)?;
    let requeue = plan.requeue_after;
    apply(&ctx, &namespace, &world, plan).await?;
    Ok(match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// Reads what the pass needs, directly from the API server (a Pod or status written by the
/// previous pass must be seen).
async fn read(
    ctx: &Context,
    namespace: &str,
    migration: VirtualMachineInstanceMigration,
    needs: Needs,
) -> Result<World, Error> {
    let mut world = World {
        migration,
        vmi: None,
        target_pods: Vec::new(),
        start: None,
        config: ctx.config(),
        now: Timestamp::now(),
    };
    if !needs.vmi {
        return Ok(world);
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let vmi_name = world.migration.spec.vmi_name.clone().unwrap_or_default();
    world.vmi = if vmi_name.is_empty() {
        None
    } else {
        match vmis.get_opt(&vmi_name).await {
            Ok(vmi) => vmi,
            // Also when the VMI CRD is gone: the API server then answers 404 without a Status.
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(e) => return Err(e.into()),
        }
    };
    let Some(vmi) = &world.vmi else {
        return Ok(world);
    };
    let uid = world.migration.uid().unwrap_or_default();
    world.target_pods = pods
        .list(&ListParams::default().labels(&format!("{}={uid}", labels::MIGRATION_JOB)))
        .await?
        .items;
    if needs.start {
        let (policy, settings) = settings::settings_for(ctx, vmi).await?;
        world.start = Some(StartFacts {
            pvc_access_modes: pvc_access_modes(&ctx.client, namespace, vmi).await?,
            migrations: Api::<VirtualMachineInstanceMigration>::all(ctx.client.clone())
                .list(&ListParams::default())
                .await?
                .items,
            launcher_pods: pods
                .list(&ListParams::default().labels(&format!(
                    "{}={}",
                    labels::CREATED_BY,
                    vmi.uid().unwrap_or_default()
                )))
                .await?
                .items,
            policy,
            settings,
        });
    }
    Ok(world)
}

/// Performs the plan's steps in order; the first error ends the pass (and the next one plans
/// again from what was written).
async fn apply(ctx: &Context, namespace: &str, world: &World, plan: Plan) -> Result<(), Error> {
    let migration = &world.migration;
    let name = migration.name_any();
    let migrations: Api<VirtualMachineInstanceMigration> =
        Api::namespaced(ctx.client.clone(), namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let vmi_name = migration.spec.vmi_name.clone().unwrap_or_default();
    let params = PatchParams::default();
    if let Some(note) = &plan.note {
        log::info!("migration {name}: {note}");
    }
    for step in plan.steps {
        match step {
            Step::AddFinalizer(finalizers) | Step::RemoveFinalizer(finalizers) => {
                let body =
                    patch::finalizers(migration.metadata.resource_version.as_deref(), &finalizers);
                migrations
                    .patch(&name, &params, &Patch::Merge(&body))
                    .await?;
            }
            Step::ReplaceVmiStatus(status) => {
                let Some(vmi) = &world.vmi else { continue };
                let mut updated = vmi.clone();
                updated.status = Some(*status);
                vmis.replace_status(&vmi_name, &PostParams::default(), &updated)
                    .await?;
            }
            Step::StartVmiState { state, method } => {
                let body = patch::vmi_start(&state, method);
                vmis.patch_status(&vmi_name, &params, &Patch::Merge(&body))
                    .await?;
            }
            Step::PatchVmiState(state) => {
                let body = patch::vmi_state(&state);
                vmis.patch_status(&vmi_name, &params, &Patch::Merge(&body))
                    .await?;
            }
            Step::PatchVmiLabels(set) => {
                let body = patch::labels(&set);
                vmis.patch(&vmi_name, &params, &Patch::Merge(&body)).await?;
            }
            Step::CreatePod(pod) => {
                pods.create(&PostParams::default(), &pod).await?;
            }
            Step::DeletePod(pod) => match pods.delete(&pod, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            },
            Step::PatchStatus(status) => {
                let old = migration.status.as_ref().and_then(|s| s.phase);
                let body = patch::migration_status(
                    migration.metadata.resource_version.as_deref(),
                    &status,
                );
                migrations
                    .patch_status(&name, &params, &Patch::Merge(&body))
                    .await?;
                if let Some(phase) = status.phase.filter(|p| Some(*p) != old) {
                    log::info!("migration {name}: {phase:?}");
                }
            }
            Step::Event {
                on,
                warning,
                reason,
                note,
            } => match (on, &world.vmi) {
                (Subject::Vmi, Some(vmi)) => ctx.event(vmi, warning, &reason, note).await,
                (Subject::Vmi, None) => {}
                (Subject::Migration, _) => ctx.event(migration, warning, &reason, note).await,
            },
        }
    }
    Ok(())
}
