//! What a replica set needs, as a pure function of the replica set and the VMIs of its
//! namespace, the way KubeVirt's replica set controller decides it:
//! - it claims the VMIs its selector matches that have no controller (adoption), and counts
//!   those it controls that are neither final nor being deleted (the active ones);
//! - fewer active VMIs than `spec.replicas` (1 when unset): create the difference from the
//!   template; more: delete the excess, those not yet Running first, the newest first among
//!   equals; a finished (Succeeded or Failed) VMI is deleted, so that a new one replaces it;
//! - `paused` stops every create and delete;
//! - the status: `replicas` (active), `readyReplicas` (active and Ready), `labelSelector` (the
//!   selector's string form, for the scale subresource), the `ReplicaPaused` condition while
//!   paused and `ReplicaFailure` after a create or delete failed.

use std::collections::BTreeMap;

use api::condition::{self, Condition};
use api::{
    VirtualMachineInstance, VirtualMachineInstanceReplicaSet,
    VirtualMachineInstanceReplicaSetStatus, VmiPhase,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

/// At most this many creates or deletes in one pass (KubeVirt's burst).
pub const BURST: usize = 250;

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// VMIs to create from the template.
    pub create: usize,
    /// Active VMIs to delete (the excess), by name.
    pub delete: Vec<String>,
    /// Finished VMIs to delete, by name.
    pub delete_finished: Vec<String>,
    /// VMIs without a controller that the selector matches: to adopt, by name.
    pub adopt: Vec<String>,
}

/// Why a replica set is not acted on (KubeVirt logs it and leaves the object alone; the
/// admission webhook refuses such objects, so this is for ones written around it).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum Invalid {
    #[error("the replica set has no UID yet")]
    NoUid,
    #[error("the selector: {0}")]
    Selector(String),
    #[error("the selector does not match the template's labels")]
    TemplateNotSelected,
}

fn labels_of(vmi: &VirtualMachineInstance) -> BTreeMap<String, String> {
    vmi.metadata.labels.clone().unwrap_or_default()
}

fn is_active(vmi: &VirtualMachineInstance) -> bool {
    let phase = vmi.status.as_ref().and_then(|s| s.phase);
    vmi.metadata.deletion_timestamp.is_none() && !phase.is_some_and(VmiPhase::is_final)
}

fn is_ready(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| condition::find(&s.conditions, "Ready"))
        .is_some_and(Condition::is_true)
}

/// The VMIs this replica set controls (its UID in a controller owner reference).
fn controlled_by<'a>(
    rs: &VirtualMachineInstanceReplicaSet,
    vmis: &'a [VirtualMachineInstance],
) -> Vec<&'a VirtualMachineInstance> {
    let uid = rs.metadata.uid.as_deref();
    vmis.iter()
        .filter(|v| {
            v.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
        })
        .collect()
}

/// Plans one pass; `vmis` are all the VMIs of the replica set's namespace.
pub fn plan(
    rs: &VirtualMachineInstanceReplicaSet,
    vmis: &[VirtualMachineInstance],
) -> Result<Plan, Invalid> {
    if rs.metadata.uid.is_none() {
        return Err(Invalid::NoUid);
    }
    let selector = &rs.spec.selector;
    let template_labels = rs.spec.template_labels();
    if template_labels.is_empty()
        || !api::selector::matches(selector, &template_labels).map_err(Invalid::Selector)?
    {
        return Err(Invalid::TemplateNotSelected);
    }
    let mut plan = Plan::default();
    let deleting = rs.metadata.deletion_timestamp.is_some();
    if !deleting {
        for vmi in vmis {
            let orphan = !vmi
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true));
            if orphan
                && vmi.metadata.deletion_timestamp.is_none()
                && api::selector::matches(selector, &labels_of(vmi)).unwrap_or(false)
            {
                plan.adopt.push(vmi.name_any());
            }
        }
    }
    if deleting || rs.spec.paused == Some(true) {
        return Ok(plan);
    }
    let controlled = controlled_by(rs, vmis);
    let adopted = vmis.iter().filter(|v| plan.adopt.contains(&v.name_any()));
    let mut active: Vec<&VirtualMachineInstance> = controlled
        .iter()
        .copied()
        .chain(adopted)
        .filter(|v| is_active(v))
        .collect();
    let wanted = rs.spec.replicas.unwrap_or(1).max(0) as usize;
    if active.len() < wanted {
        plan.create = (wanted - active.len()).min(BURST);
    } else if active.len() > wanted {
        // Not yet Running first, then the newest.
        active.sort_by_key(|v| {
            let running = v.status.as_ref().and_then(|s| s.phase) == Some(VmiPhase::Running);
            let created = v.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (running, std::cmp::Reverse(created))
        });
        plan.delete = active
            .iter()
            .take((active.len() - wanted).min(BURST))
            .map(|v| v.name_any())
            .collect();
    }
    plan.delete_finished = controlled
        .iter()
        .filter(|v| v.metadata.deletion_timestamp.is_none() && !is_active(v))
        .map(|v| v.name_any())
        .take(BURST)
        .collect();
    Ok(plan)
}

/// The VMI to create: the template's metadata and spec, `generateName` from the template's name
/// or generateName or else the replica set's name, the template's labels, and the replica set
/// as controller.
pub fn vmi_from_template(rs: &VirtualMachineInstanceReplicaSet) -> Option<VirtualMachineInstance> {
    let spec = rs.spec.template.spec.clone()?;
    let meta = rs.spec.template.metadata.clone().unwrap_or_default();
    let base = meta
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| meta.generate_name.clone().filter(|n| !n.is_empty()))
        .or_else(|| rs.metadata.name.clone())?;
    let mut vmi = VirtualMachineInstance::new("", spec);
    vmi.metadata.name = None;
    vmi.metadata.generate_name = Some(base);
    vmi.metadata.namespace = rs.metadata.namespace.clone();
    vmi.metadata.labels = meta.labels;
    vmi.metadata.annotations = meta.annotations;
    vmi.metadata.owner_references = Some(vec![owner_reference(rs)?]);
    Some(vmi)
}

/// The replica set as a VMI's controller.
pub fn owner_reference(rs: &VirtualMachineInstanceReplicaSet) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: VirtualMachineInstanceReplicaSet::api_version(&()).into_owned(),
        kind: VirtualMachineInstanceReplicaSet::kind(&()).into_owned(),
        name: rs.metadata.name.clone()?,
        uid: rs.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The status after a pass: counts over the VMIs the replica set controls (before this pass's
/// creates and deletes land, as KubeVirt counts), the selector string, and the conditions.
/// `scale_error` is the first create or delete failure of the pass, as (reason, message):
/// `FailedCreate` or `FailedDelete`.
pub fn status(
    rs: &VirtualMachineInstanceReplicaSet,
    vmis: &[VirtualMachineInstance],
    scale_error: Option<(&str, &str)>,
    now: Timestamp,
) -> VirtualMachineInstanceReplicaSetStatus {
    let active: Vec<&VirtualMachineInstance> = controlled_by(rs, vmis)
        .into_iter()
        .filter(|v| is_active(v))
        .collect();
    let old = rs.status.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> = Vec::new();
    let mut keep_or_new = |type_: &str, reason: &str, message: &str| {
        let existing = condition::find(&old.conditions, type_)
            .filter(|c| c.is_true() && c.reason.as_deref() == Some(reason));
        conditions.push(existing.cloned().unwrap_or_else(|| Condition {
            last_transition_time: Some(Time(now)),
            ..Condition::new(type_, true, reason, message)
        }));
    };
    if rs.spec.paused == Some(true) {
        keep_or_new("ReplicaPaused", "Paused", "");
    }
    if let Some((reason, message)) = scale_error {
        keep_or_new("ReplicaFailure", reason, message);
        if let Some(c) = conditions.last_mut() {
            c.message = Some(message.to_string());
        }
    }
    VirtualMachineInstanceReplicaSetStatus {
        replicas: Some(active.len() as i32),
        ready_replicas: Some(active.iter().filter(|v| is_ready(v)).count() as i32),
        label_selector: Some(api::selector::to_string(&rs.spec.selector)),
        conditions,
    }
}
