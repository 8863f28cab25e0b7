//! Applies the VM plan: the VMI action, then the status with optimistic concurrency.

use std::sync::Arc;
use std::time::Duration;

use api::condition::Condition;
use api::{VirtualMachine, VirtualMachineInstance};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::instancetype::{apply_to_vmi, expand, names_any, resolve, to_expand, Problem, Resolved};
use super::plan::{plan, vmi_for, VmiAction};
use super::revision;
use crate::context::Context;
use crate::Error;

/// One pass over a VM: read its VMI, plan, apply.
pub async fn reconcile(vm: Arc<VirtualMachine>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = vm.namespace().ok_or(Error::NotNamespaced)?;
    let vms: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = vm.name_any();
    let vmi = vmis.get_opt(&name).await?;
    // A VMI of the same name that this VM does not own is left alone.
    let vmi = vmi.filter(|v| {
        v.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == vm.uid().as_ref())
    });
    let mut plan = plan(&vm, vmi.as_ref(), Timestamp::now());

    // The instance type and preference: found and stored before a VMI starts; while they
    // cannot be, the VM does not start and says why.
    let mut problem = None;
    let mut resolved = Resolved::default();
    if names_any(&vm) {
        let expanding = to_expand(&vm, &ctx.config().instancetype_reference_policy);
        let found = resolve(&ctx.client, &vm, !expanding).await;
        if let (true, Ok(found)) = (expanding, &found) {
            // The VM is rewritten; the next pass runs it as a VM that names nothing.
            match expand(&ctx.client, &vm, found).await {
                Ok(()) => return Ok(Action::requeue(Duration::from_secs(1))),
                Err(p) => problem = Some(p),
            }
        }
        match found {
            Ok(_) if expanding => {}
            Ok(found) => {
                for (status_ref, found_ref) in [
                    (&mut plan.status.instancetype_ref, &found.instancetype_ref),
                    (&mut plan.status.preference_ref, &found.preference_ref),
                ] {
                    if found_ref.is_some() {
                        status_ref.clone_from(found_ref);
                    }
                }
                resolved = found;
            }
            Err(p) => problem = Some(p),
        }
    }
    let mut new_vmi = None;
    if plan.action == VmiAction::Create && problem.is_none() {
        new_vmi = vmi_for(&vm).map(|mut new| {
            if plan.start_paused {
                new.spec.start_strategy = Some("Paused".into());
            }
            new
        });
        if let Some(new) = &mut new_vmi {
            if let Err(message) = apply_to_vmi(new, &resolved) {
                problem = Some(Problem {
                    reason: "FailedCreate",
                    message,
                });
            }
        }
    }
    if let Some(problem) = &problem {
        if plan.action == VmiAction::Create {
            // Not started: a Start request it would have served stays.
            plan.action = VmiAction::Nothing;
            plan.status.state_change_requests = vm
                .status
                .as_ref()
                .map(|s| s.state_change_requests.clone())
                .unwrap_or_default();
            if vmi.is_none() {
                plan.status.printable_status = Some("Stopped".into());
            }
        }
        plan.status.conditions.push(Condition::new(
            "Failure",
            true,
            problem.reason,
            &problem.message,
        ));
        if vm.status.as_ref() != Some(&plan.status) {
            ctx.event(vm.as_ref(), true, problem.reason, problem.message.clone())
                .await;
        }
    }

    let mut requeue = if problem.is_some() {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(300)
    };
    match &plan.action {
        VmiAction::Nothing => {}
        VmiAction::Create => match new_vmi {
            Some(new) => match revision::record(&ctx.client, &vm).await {
                Err(message) => {
                    ctx.event(vm.as_ref(), true, "FailedCreate", message).await;
                    requeue = Duration::from_secs(5);
                }
                Ok(revision) => match vmis.create(&PostParams::default(), &new).await {
                    Ok(_) => {
                        ctx.event(
                            vm.as_ref(),
                            false,
                            "SuccessfulCreate",
                            format!("created VMI {name}"),
                        )
                        .await;
                        // The status subresource drops what a create carries in status.
                        let body = serde_json::json!({
                            "status": {"virtualMachineRevisionName": revision}
                        });
                        let patch = Patch::Merge(&body);
                        if let Err(e) = vmis
                            .patch_status(&name, &PatchParams::default(), &patch)
                            .await
                        {
                            log::warn!("VMI {namespace}/{name}: recording {revision}: {e}");
                        }
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => requeue = Duration::from_secs(1),
                    Err(e) => {
                        ctx.event(vm.as_ref(), true, "FailedCreate", e.to_string())
                            .await;
                        return Err(e.into());
                    }
                },
            },
            None => {
                ctx.event(
                    vm.as_ref(),
                    true,
                    "FailedCreate",
                    "the template has no spec".into(),
                )
                .await;
            }
        },
        VmiAction::Delete { uid } => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match vmis.delete(&name, &params).await {
                Ok(_) => {
                    ctx.event(
                        vm.as_ref(),
                        false,
                        "SuccessfulDelete",
                        format!("deleted VMI {name}"),
                    )
                    .await
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Come back when a crash-loop back-off ends.
    if let Some(retry) = plan
        .status
        .start_failure
        .as_ref()
        .and_then(|f| f.retry_after_timestamp.as_ref())
    {
        let wait = retry.0.duration_since(Timestamp::now());
        if wait.is_positive() {
            requeue = requeue.min(Duration::from_secs(wait.as_secs() as u64 + 1));
        }
    }

    if vm.status.as_ref() != Some(&plan.status) {
        // A full replace guarded by the resourceVersion we read: fields that went away are
        // removed, and a concurrent writer makes this pass fail and retry.
        let mut updated = (*vm).clone();
        updated.status = Some(plan.status);
        vms.replace_status(&name, &PostParams::default(), &updated)
            .await?;
    }
    Ok(Action::requeue(requeue))
}
