//! VM subresources: `start`, `stop`, `restart`, `migrate`, with KubeVirt's semantics.
//!
//! virt-api does not start or stop anything itself. It changes the VM the way KubeVirt's
//! virt-api does, and the VM controller acts on the change:
//!
//! | runStrategy | start | stop | restart |
//! |---|---|---|---|
//! | Halted | set `Always` | 409 "VM is not running" (unless forcing a stopping VMI) | 409 |
//! | Always, Once | 409 "does not support manual start requests" | set `Halted` | Stop(uid)+Start requests |
//! | RerunOnFailure | `Start` request (after Succeeded: Stop(uid)+Start; after Failed: 409) | `Stop(uid)` request | Stop(uid)+Start requests |
//! | Manual | `Start` request | `Stop(uid)` request | Stop(uid)+Start requests |
//!
//! Requests go to `status.stateChangeRequests` (a merge patch carrying the resourceVersion,
//! so a concurrent change is a conflict, not a lost update). A grace period override
//! (`stop --grace-period`, `restart --grace-period`) is written to the VMI's
//! `spec.terminationGracePeriodSeconds`, the one VMI spec change the validating webhook allows
//! virt-api. `migrate` creates a `VirtualMachineInstanceMigration`.

use api::vm::{RunStrategy, StateChangeRequest, VirtualMachine};
use api::{VirtualMachineInstance, VirtualMachineInstanceMigration, VmiPhase};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::options::{is_dry_run, MigrateOptions, RestartOptions, StartOptions, StopOptions};
use crate::status::ApiError;

/// A change to make to the VM (and its VMI) for one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmChange {
    /// New `spec.runStrategy`.
    pub run_strategy: Option<RunStrategy>,
    /// Requests to append to `status.stateChangeRequests`.
    pub requests: Vec<StateChangeRequest>,
    /// New `spec.terminationGracePeriodSeconds` of the running VMI.
    pub vmi_grace_period: Option<i64>,
}

fn strategy(vm: &VirtualMachine) -> Result<RunStrategy, ApiError> {
    vm.spec.effective_run_strategy().ok_or_else(|| {
        ApiError::bad_request(format!(
            "VM {} has an invalid runStrategy {:?}",
            name_of(vm),
            vm.spec.run_strategy
        ))
    })
}

fn name_of(vm: &VirtualMachine) -> &str {
    vm.metadata.name.as_deref().unwrap_or_default()
}

fn phase(vmi: Option<&VirtualMachineInstance>) -> Option<VmiPhase> {
    vmi.and_then(|v| v.status.as_ref()).and_then(|s| s.phase)
}

/// A VMI that exists and has not ended.
fn is_running(vmi: Option<&VirtualMachineInstance>) -> bool {
    vmi.is_some() && !phase(vmi).is_some_and(|p| p.is_final() || p == VmiPhase::Unknown)
}

fn start_request(paused: bool) -> StateChangeRequest {
    StateChangeRequest {
        action: "Start".into(),
        data: paused.then(|| [("startPaused".to_string(), "true".to_string())].into()),
        uid: None,
    }
}

fn stop_request(vmi: &VirtualMachineInstance) -> StateChangeRequest {
    StateChangeRequest {
        action: "Stop".into(),
        data: None,
        uid: vmi.metadata.uid.clone(),
    }
}

fn no_pending_requests(vm: &VirtualMachine) -> Result<(), ApiError> {
    let pending = vm
        .status
        .as_ref()
        .is_some_and(|s| !s.state_change_requests.is_empty());
    if pending {
        return Err(ApiError::conflict(format!(
            "VM {} has a pending state change request",
            name_of(vm)
        )));
    }
    Ok(())
}

/// Plans `start`.
pub fn plan_start(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    options: &StartOptions,
) -> Result<VmChange, ApiError> {
    let strategy = strategy(vm)?;
    if is_running(vmi) {
        return Err(ApiError::conflict("VM is already running"));
    }
    match strategy {
        RunStrategy::Halted => Ok(VmChange {
            run_strategy: Some(RunStrategy::Always),
            requests: if options.paused {
                vec![start_request(true)]
            } else {
                vec![]
            },
            ..Default::default()
        }),
        RunStrategy::Manual | RunStrategy::RerunOnFailure => {
            if strategy == RunStrategy::RerunOnFailure && phase(vmi) == Some(VmiPhase::Failed) {
                return Err(ApiError::conflict(
                    "RerunOnFailure does not support starting VM from failed state",
                ));
            }
            no_pending_requests(vm)?;
            let mut requests = Vec::new();
            if let Some(vmi) = vmi.filter(|_| phase(vmi).is_some_and(VmiPhase::is_final)) {
                requests.push(stop_request(vmi));
            }
            requests.push(start_request(options.paused));
            Ok(VmChange {
                requests,
                ..Default::default()
            })
        }
        RunStrategy::Always | RunStrategy::Once => Err(ApiError::conflict(format!(
            "{} does not support manual start requests",
            strategy.as_str()
        ))),
    }
}

/// Plans `stop`. A grace period on a VM that is already stopping only shortens its grace
/// period (`virtctl stop --force --grace-period 0`).
pub fn plan_stop(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    options: &StopOptions,
) -> Result<VmChange, ApiError> {
    let strategy = strategy(vm)?;
    let running = is_running(vmi);
    let vmi_grace_period = options.grace_period.filter(|_| running);
    match (strategy, vmi) {
        (RunStrategy::Halted, _) if vmi_grace_period.is_some() => Ok(VmChange {
            vmi_grace_period,
            ..Default::default()
        }),
        (RunStrategy::Halted, _) => Err(ApiError::conflict("VM is not running")),
        // The VM keeps its strategy; the controller stops the VMI the request names.
        (RunStrategy::Manual | RunStrategy::RerunOnFailure, Some(vmi)) if running => {
            no_pending_requests(vm)?;
            Ok(VmChange {
                requests: vec![stop_request(vmi)],
                vmi_grace_period,
                ..Default::default()
            })
        }
        (RunStrategy::Manual | RunStrategy::RerunOnFailure, _) => {
            Err(ApiError::conflict("VM is not running"))
        }
        (RunStrategy::Always | RunStrategy::Once, _) => Ok(VmChange {
            run_strategy: Some(RunStrategy::Halted),
            vmi_grace_period,
            ..Default::default()
        }),
    }
}

/// Plans `restart`: the VM controller deletes the VMI named by the Stop request, then the
/// Start request creates a new one.
pub fn plan_restart(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    options: &RestartOptions,
) -> Result<VmChange, ApiError> {
    let strategy = strategy(vm)?;
    if strategy == RunStrategy::Halted {
        return Err(ApiError::conflict(
            "Halted does not support manual restart requests",
        ));
    }
    let Some(vmi) = vmi.filter(|_| is_running(vmi)) else {
        return Err(ApiError::conflict("VM is not running"));
    };
    no_pending_requests(vm)?;
    Ok(VmChange {
        run_strategy: None,
        requests: vec![stop_request(vmi), start_request(false)],
        vmi_grace_period: options.grace_period_seconds,
    })
}

/// The migration `migrate` creates.
pub fn plan_migration(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    options: &MigrateOptions,
) -> Result<VirtualMachineInstanceMigration, ApiError> {
    if phase(vmi) != Some(VmiPhase::Running) {
        return Err(ApiError::conflict("VM is not running"));
    }
    let mut migration = VirtualMachineInstanceMigration::new("", Default::default());
    migration.metadata.name = None;
    migration.metadata.generate_name = Some("kubevirt-migrate-vm-".to_string());
    migration.metadata.namespace = vm.metadata.namespace.clone();
    migration.spec.vmi_name = vm.metadata.name.clone();
    if let Some(selector) = &options.added_node_selector {
        migration
            .spec
            .other
            .insert("addedNodeSelector".into(), json!(selector));
    }
    Ok(migration)
}

/// Reads the VM and its VMI (same name), as every VM action needs.
pub async fn load(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(VirtualMachine, Option<VirtualMachineInstance>), ApiError> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vm = vms
        .get_opt(name)
        .await
        .map_err(|e| ApiError::from_kube("reading the VM", e))?
        .ok_or_else(|| {
            ApiError::not_found(format!("virtualmachines.kubevirt.io \"{name}\" not found"))
        })?;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    let vmi = vmis
        .get_opt(name)
        .await
        .map_err(|e| ApiError::from_kube("reading the VMI", e))?;
    Ok((vm, vmi))
}

/// Writes a planned change: VMI grace period first (so the stop it precedes uses it), then
/// the run strategy, then the requests.
pub async fn apply(
    client: &Client,
    vm: &VirtualMachine,
    change: &VmChange,
    dry_run: &[String],
) -> Result<(), ApiError> {
    let namespace = vm.metadata.namespace.as_deref().unwrap_or_default();
    let name = name_of(vm);
    let params = PatchParams {
        dry_run: is_dry_run(dry_run),
        ..Default::default()
    };
    if let Some(seconds) = change.vmi_grace_period {
        let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
        let patch = json!({"spec": {"terminationGracePeriodSeconds": seconds}});
        vmis.patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|e| ApiError::from_kube("setting the VMI's grace period", e))?;
    }
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    if let Some(strategy) = change.run_strategy {
        let patch = json!({"spec": {"runStrategy": strategy.as_str(), "running": null}});
        vms.patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|e| ApiError::from_kube("setting the run strategy", e))?;
    }
    if !change.requests.is_empty() {
        let mut requests = vm
            .status
            .as_ref()
            .map(|s| s.state_change_requests.clone())
            .unwrap_or_default();
        requests.extend(change.requests.iter().cloned());
        // The resourceVersion makes a concurrent change a conflict instead of a lost request
        // (only when the run strategy patch above has not moved it on).
        let mut patch = json!({"status": {"stateChangeRequests": requests}});
        if change.run_strategy.is_none() {
            patch["metadata"] = json!({"resourceVersion": vm.metadata.resource_version});
        }
        vms.patch_status(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|e| ApiError::from_kube("adding state change requests", e))?;
    }
    Ok(())
}

/// Creates the migration.
pub async fn create_migration(
    client: &Client,
    migration: &VirtualMachineInstanceMigration,
    dry_run: &[String],
) -> Result<(), ApiError> {
    let namespace = migration.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), namespace);
    let params = PostParams {
        dry_run: is_dry_run(dry_run),
        ..Default::default()
    };
    api.create(&params, migration)
        .await
        .map_err(|e| ApiError::from_kube("creating the migration", e))?;
    Ok(())
}

#[cfg(test)]
#[path = "vm_actions_tests.rs"]
mod tests;
