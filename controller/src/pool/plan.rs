//! What a VirtualMachinePool needs, as a pure function of the pool, the VMs and VMIs of its
//! namespace and its ControllerRevisions, the way KubeVirt's pool controller decides it:
//! - the pool and each of its VMs carry the finalizer `pool.kubevirt.io/finalizer`; a VM being
//!   deleted (scaled in, or deleted by someone) loses it, and so does every VM when the pool is
//!   deleted, after which the pool loses its own;
//! - VMs are named `<pool>-<index>`, new ones taking the lowest indexes no VM of the namespace
//!   has; each is written from the template with the revision label naming the
//!   ControllerRevision (`<pool>-<generation>`, the pool's spec) it came from;
//! - fewer VMs than `spec.replicas` (1 when unset): create the difference; more: delete the
//!   excess (proactive scale-in, picked by the selection policy, random by default), unless
//!   the scale-in strategy is unmanaged or opportunistic;
//! - once the count is right, VMs written from an older template are rewritten (unless the
//!   update strategy is unmanaged), and, unless it is opportunistic, their VMIs whose template
//!   differs are restarted (deleted, for the VM to start a new one), at most `maxUnavailable`
//!   not Ready at once; a VMI whose template is the same only gets the new revision label;
//! - revisions no VM or VMI names any more are deleted;
//! - `paused` stops all of that but the finalizers and the status.

use std::collections::{BTreeMap, BTreeSet};

use api::condition::{self, Condition};
use api::pool::{SelectionPolicy, Selectors, VirtualMachinePoolSpec, FINALIZER, REVISION_LABEL};
use api::{
    VirtualMachine, VirtualMachineInstance, VirtualMachinePool, VirtualMachinePoolStatus, VmiPhase,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

/// At most this many creates or deletes in one pass (KubeVirt's burst).
pub const BURST: usize = 250;

/// Why a pool is not acted on (the webhook refuses such pools; this is for ones written
/// around it).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum Invalid {
    #[error("the pool has no UID yet")]
    NoUid,
    #[error("the pool has no virtual machine template")]
    NoTemplate,
    #[error("the selector: {0}")]
    Selector(String),
    #[error("the selector does not match the template's labels")]
    TemplateNotSelected,
}

/// One pass over a pool.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub add_pool_finalizer: bool,
    pub remove_pool_finalizer: bool,
    /// VMs whose finalizer goes: deleted ones, or all of them while the pool is deleted.
    pub release_vms: Vec<String>,
    /// The revision of the pool's current spec, when something is written from it and it does
    /// not exist yet: (name, revision number).
    pub create_revision: Option<(String, i64)>,
    /// New VMs: (name, index).
    pub create: Vec<(String, u32)>,
    /// VMs to delete (scale-in).
    pub delete: Vec<String>,
    /// VMs to rewrite from the current template.
    pub rewrite: Vec<String>,
    /// VMIs to delete, for their VM to start them again from its new template.
    pub restart: Vec<String>,
    /// VMIs whose template did not change: (name, the revision label they get).
    pub relabel: Vec<(String, String)>,
    /// ControllerRevisions nothing names any more.
    pub prune: Vec<String>,
    /// A proactive update is held back by `maxUnavailable`: look again soon.
    pub waiting: bool,
}

/// The inputs of a pass: everything in the pool's namespace, and the pool's revisions by name
/// (their spec parsed).
pub struct World<'a> {
    pub vms: &'a [VirtualMachine],
    pub vmis: &'a [VirtualMachineInstance],
    pub revisions: &'a BTreeMap<String, VirtualMachinePoolSpec>,
}

/// The name of the revision of the pool's spec at its current generation.
pub fn revision_name(pool: &VirtualMachinePool) -> String {
    format!(
        "{}-{}",
        pool.name_any(),
        pool.metadata.generation.unwrap_or_default()
    )
}

/// The index at the end of a VM's name (`<pool>-<index>`).
pub fn index_of(name: &str) -> Option<u32> {
    name.rsplit('-').next()?.parse().ok()
}

/// The VMs the pool controls (its UID in a controller owner reference).
pub fn controlled<'a>(
    pool: &VirtualMachinePool,
    vms: &'a [VirtualMachine],
) -> Vec<&'a VirtualMachine> {
    let uid = pool.metadata.uid.as_deref();
    vms.iter()
        .filter(|v| {
            v.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
        })
        .collect()
}

fn has_finalizer<K: Resource>(object: &K) -> bool {
    object
        .meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

fn vm_ready(vm: &VirtualMachine) -> bool {
    vm.status
        .as_ref()
        .and_then(|s| condition::find(&s.conditions, "Ready"))
        .is_some_and(Condition::is_true)
}

fn vmi_ready(vmi: &VirtualMachineInstance) -> bool {
    vmi.metadata.deletion_timestamp.is_none()
        && vmi.status.as_ref().and_then(|s| s.phase) == Some(VmiPhase::Running)
        && vmi
            .status
            .as_ref()
            .and_then(|s| condition::find(&s.conditions, "Ready"))
            .is_some_and(Condition::is_true)
}

fn revision_of<K: Resource>(object: &K) -> Option<&str> {
    object
        .meta()
        .labels
        .as_ref()?
        .get(REVISION_LABEL)
        .map(String::as_str)
}

/// A small deterministic shuffle (xorshift), seeded per pass, for the `Random` policy.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    seed |= 1;
    for i in (1..items.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        items.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// Orders `vms` by a selection policy's `sortPolicy` (random when unset or unknown).
fn order<'a>(
    mut vms: Vec<&'a VirtualMachine>,
    sort: Option<&str>,
    seed: u64,
) -> Vec<&'a VirtualMachine> {
    match sort {
        Some("AscendingOrder") => vms.sort_by_key(|v| index_of(&v.name_any()).unwrap_or(0)),
        Some("DescendingOrder") => {
            vms.sort_by_key(|v| std::cmp::Reverse(index_of(&v.name_any()).unwrap_or(0)))
        }
        Some("Newest") => vms.sort_by_key(|v| {
            std::cmp::Reverse(v.metadata.creation_timestamp.as_ref().map(|t| t.0))
        }),
        Some("Oldest") => vms.sort_by_key(|v| v.metadata.creation_timestamp.as_ref().map(|t| t.0)),
        _ => {
            vms.sort_by_key(|v| v.name_any());
            shuffle(&mut vms, seed);
        }
    }
    vms
}

/// The VMs whose VMI template a selection policy's `selectors` match (all when unset).
fn matching<'a>(
    vms: Vec<&'a VirtualMachine>,
    selectors: Option<&Selectors>,
) -> Vec<&'a VirtualMachine> {
    let Some(selectors) = selectors else {
        return vms;
    };
    vms.into_iter()
        .filter(|vm| {
            let meta = vm.spec.template.metadata.as_ref();
            let labels = meta.and_then(|m| m.labels.clone()).unwrap_or_default();
            let node_selector: BTreeMap<String, String> = vm
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default();
            let by_label = selectors
                .label_selector
                .as_ref()
                .is_none_or(|s| api::selector::matches(s, &labels).unwrap_or(false));
            let by_node = selectors
                .node_selector_requirement_matcher
                .iter()
                .flatten()
                .all(|r| {
                    api::selector::node_requirement_matches(r, &node_selector).unwrap_or(false)
                });
            by_label && by_node
        })
        .collect()
}

/// How many VMs a proactive update may have not Ready at once: `maxUnavailable` (a count or a
/// percentage of the replicas, 100% when unset), at least 1.
pub fn max_unavailable(spec: &VirtualMachinePoolSpec) -> usize {
    let replicas = spec.replicas.unwrap_or(1).max(0) as i64;
    let n = match &spec.max_unavailable {
        None => replicas,
        Some(IntOrString::Int(n)) => i64::from(*n),
        Some(IntOrString::String(s)) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map(|p| replicas * p / 100)
            .unwrap_or(1),
    };
    n.max(1) as usize
}

/// Plans one pass. `seed` drives the random selection policy.
pub fn plan(pool: &VirtualMachinePool, world: &World, seed: u64) -> Result<Plan, Invalid> {
    if pool.metadata.uid.is_none() {
        return Err(Invalid::NoUid);
    }
    let spec = &pool.spec;
    let mut plan = Plan::default();
    let vms = controlled(pool, world.vms);
    if pool.metadata.deletion_timestamp.is_some() {
        // By the selector, not the owner: a deletion with `propagationPolicy: Orphan` has the
        // garbage collector take the owner references off at the same time.
        plan.release_vms = world
            .vms
            .iter()
            .filter(|v| has_finalizer(*v))
            .filter(|v| {
                let labels = v.metadata.labels.clone().unwrap_or_default();
                api::selector::matches(&spec.selector, &labels).unwrap_or(false)
            })
            .map(|v| v.name_any())
            .collect();
        plan.remove_pool_finalizer = has_finalizer(pool);
        plan.prune = world.revisions.keys().cloned().collect();
        return Ok(plan);
    }
    if spec.virtual_machine_template.is_none() {
        return Err(Invalid::NoTemplate);
    }
    if !api::selector::matches(&spec.selector, &spec.template_labels())
        .map_err(Invalid::Selector)?
    {
        return Err(Invalid::TemplateNotSelected);
    }
    plan.add_pool_finalizer = !has_finalizer(pool);
    // A VM on its way out leaves the pool: nothing is preserved (statePreservation is
    // Disabled), so its finalizer goes.
    plan.release_vms = vms
        .iter()
        .filter(|v| v.metadata.deletion_timestamp.is_some() && has_finalizer(**v))
        .map(|v| v.name_any())
        .collect();
    if spec.paused == Some(true) {
        return Ok(plan);
    }
    let current = revision_name(pool);
    let revision_missing = !world.revisions.contains_key(&current);
    let wanted = spec.replicas.unwrap_or(1).max(0) as usize;
    let scale_in = spec.scale_in_strategy.as_ref();
    if vms.len() < wanted {
        let taken: BTreeSet<String> = world.vms.iter().map(|v| v.name_any()).collect();
        let mut index = 0u32;
        while plan.create.len() < (wanted - vms.len()).min(BURST) {
            let name = format!("{}-{index}", pool.name_any());
            if !taken.contains(&name) {
                plan.create.push((name, index));
            }
            index += 1;
        }
    } else if vms.len() > wanted {
        let proactive = scale_in.is_none_or(|s| s.unmanaged.is_none() && s.opportunistic.is_none());
        let leaving = vms
            .iter()
            .filter(|v| v.metadata.deletion_timestamp.is_some())
            .count();
        let excess = (vms.len() - wanted).saturating_sub(leaving).min(BURST);
        if proactive && excess > 0 {
            let staying: Vec<&VirtualMachine> = vms
                .iter()
                .copied()
                .filter(|v| v.metadata.deletion_timestamp.is_none())
                .collect();
            let policy = scale_in
                .and_then(|s| s.proactive.as_ref())
                .and_then(|p| p.selection_policy.as_ref());
            let ordered = order(staying, policy.and_then(|p| p.sort_policy.as_deref()), seed);
            plan.delete = matching(ordered, policy.and_then(|p| p.selectors.as_ref()))
                .into_iter()
                .take(excess)
                .map(|v| v.name_any())
                .collect();
        }
    } else {
        update(pool, world, &vms, &current, seed, &mut plan);
    }
    if (!plan.create.is_empty() || !plan.rewrite.is_empty()) && revision_missing {
        plan.create_revision = Some((current, pool.metadata.generation.unwrap_or_default()));
    }
    Ok(plan)
}

/// The update part of a pass, once the count is right.
fn update(
    pool: &VirtualMachinePool,
    world: &World,
    vms: &[&VirtualMachine],
    current: &str,
    seed: u64,
    plan: &mut Plan,
) {
    let spec = &pool.spec;
    let strategy = spec.update_strategy.as_ref();
    if strategy.is_some_and(|s| s.unmanaged.is_some()) {
        return;
    }
    let proactive_policy = strategy
        .and_then(|s| s.proactive.as_ref())
        .and_then(|p| p.selection_policy.as_ref());
    let candidates: Vec<&VirtualMachine> = vms
        .iter()
        .copied()
        .filter(|v| v.metadata.deletion_timestamp.is_none())
        .collect();
    // Selectors of a proactive policy limit which VMs are updated at all; its sort order only
    // matters for VMI restarts.
    let candidates = matching(
        candidates,
        proactive_policy.and_then(|p| p.selectors.as_ref()),
    );
    let template = spec.virtual_machine_template.as_ref();
    let mut up_to_date = Vec::new();
    for vm in candidates {
        let outdated = match revision_of(vm).and_then(|r| world.revisions.get(r)) {
            None => true,
            Some(old) => old.virtual_machine_template.as_ref() != template,
        };
        if outdated {
            plan.rewrite.push(vm.name_any());
        } else {
            up_to_date.push(vm);
        }
    }
    // Opportunistic: the VMs are rewritten, their VMIs left as they are (the revisions those
    // name are kept while they run).
    if strategy.is_none_or(|s| s.opportunistic.is_none()) {
        proactive(spec, world, up_to_date, proactive_policy, seed, plan);
    }
    if plan.rewrite.is_empty() && plan.restart.is_empty() && !plan.waiting {
        let mut named: BTreeSet<&str> = BTreeSet::from([current]);
        for vm in vms {
            named.extend(revision_of(*vm));
            if let Some(vmi) = vmi_of(world, vm) {
                named.extend(revision_of(vmi));
            }
        }
        plan.prune = world
            .revisions
            .keys()
            .filter(|r| !named.contains(r.as_str()))
            .cloned()
            .collect();
    }
}

fn vmi_of<'a>(world: &'a World, vm: &VirtualMachine) -> Option<&'a VirtualMachineInstance> {
    world
        .vmis
        .iter()
        .find(|i| i.name_any() == vm.name_any() && i.namespace() == vm.namespace())
}

/// Restarts the VMIs of up-to-date VMs whose VMI came from a different VMI template, within
/// `maxUnavailable`; relabels those whose template is the same.
fn proactive(
    spec: &VirtualMachinePoolSpec,
    world: &World,
    up_to_date: Vec<&VirtualMachine>,
    policy: Option<&SelectionPolicy>,
    seed: u64,
    plan: &mut Plan,
) {
    let ordered = match policy.and_then(|p| p.sort_policy.as_deref()) {
        Some(sort) => order(up_to_date.clone(), Some(sort), seed),
        None => up_to_date.clone(),
    };
    let unavailable = up_to_date
        .iter()
        .filter(|vm| !vmi_of(world, vm).is_some_and(vmi_ready))
        .count();
    let mut budget = max_unavailable(spec).saturating_sub(unavailable);
    // Not Ready VMIs first: restarting them costs no availability.
    let (not_ready, ready): (Vec<_>, Vec<_>) = ordered
        .into_iter()
        .partition(|vm| !vmi_of(world, vm).is_some_and(vmi_ready));
    for (vm, free) in not_ready
        .into_iter()
        .map(|v| (v, true))
        .chain(ready.into_iter().map(|v| (v, false)))
    {
        let Some(vmi) = vmi_of(world, vm) else {
            continue;
        };
        if vmi.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(vm_revision) = revision_of(vm) else {
            continue;
        };
        let restart = match revision_of(vmi) {
            None => true,
            Some(r) if r == vm_revision => continue,
            Some(r) => match (world.revisions.get(r), world.revisions.get(vm_revision)) {
                (_, None) => continue,
                (None, Some(_)) => true,
                (Some(old), Some(new)) => vmi_template(old) != vmi_template(new),
            },
        };
        if !restart {
            plan.relabel.push((vmi.name_any(), vm_revision.to_string()));
        } else if free {
            plan.restart.push(vmi.name_any());
        } else if budget > 0 {
            budget -= 1;
            plan.restart.push(vmi.name_any());
        } else {
            plan.waiting = true;
        }
    }
}

fn vmi_template(
    spec: &VirtualMachinePoolSpec,
) -> Option<&api::vm::VirtualMachineInstanceTemplateSpec> {
    spec.virtual_machine_template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .map(|s| &s.template)
}

/// The pool as its VMs' controller.
pub fn owner_reference(pool: &VirtualMachinePool) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: VirtualMachinePool::api_version(&()).into_owned(),
        kind: VirtualMachinePool::kind(&()).into_owned(),
        name: pool.metadata.name.clone()?,
        uid: pool.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The VM at `index` as the template writes it: the template's labels and annotations, its
/// spec, the revision label on the VM and on its VMI template; `base` is the VM being
/// rewritten (its name, finalizers and owner are kept) or a new one. KubeVirt also keeps a
/// rewritten VM's firmware UUID and serial; Ferrovirt refuses both fields, so there are none.
pub fn vm_from_template(
    pool: &VirtualMachinePool,
    name: &str,
    revision: &str,
    base: Option<&VirtualMachine>,
) -> Option<VirtualMachine> {
    let template = pool.spec.virtual_machine_template.as_ref()?;
    let mut spec = template.spec.clone()?;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut vm = match base {
        Some(base) => base.clone(),
        None => {
            let mut vm = VirtualMachine::new(name, spec.clone());
            vm.metadata.namespace = pool.metadata.namespace.clone();
            vm.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
            vm.metadata.owner_references = Some(vec![owner_reference(pool)?]);
            vm
        }
    };
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(REVISION_LABEL.to_string(), revision.to_string());
    vm.metadata.labels = Some(labels);
    vm.metadata.annotations = meta.annotations;
    let template_meta = spec.template.metadata.get_or_insert_with(Default::default);
    template_meta
        .labels
        .get_or_insert_with(Default::default)
        .insert(REVISION_LABEL.to_string(), revision.to_string());
    vm.spec = spec;
    Some(vm)
}

/// The status after a pass: counts over the pool's VMs (before this pass's writes land),
/// the selector string, and the conditions. `failure` is (reason, message) of the pass's
/// first failed write.
pub fn status(
    pool: &VirtualMachinePool,
    vms: &[VirtualMachine],
    failure: Option<(&str, &str)>,
    now: Timestamp,
) -> VirtualMachinePoolStatus {
    let vms = controlled(pool, vms);
    let old = pool.status.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> = Vec::new();
    let mut keep_or_new = |type_: &str, reason: &str, message: &str| {
        let existing = condition::find(&old.conditions, type_).filter(|c| {
            c.is_true()
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref().unwrap_or_default() == message
        });
        conditions.push(existing.cloned().unwrap_or_else(|| Condition {
            last_transition_time: Some(Time(now)),
            ..Condition::new(type_, true, reason, message)
        }));
    };
    if let Some((reason, message)) = failure {
        keep_or_new("ReplicaFailure", reason, message);
    }
    if pool.spec.paused == Some(true) {
        keep_or_new(
            "ReplicaPaused",
            "SuccessfulPaused",
            "Pool controller is paused",
        );
    }
    VirtualMachinePoolStatus {
        replicas: Some(vms.len() as i32),
        ready_replicas: Some(vms.iter().filter(|v| vm_ready(v)).count() as i32),
        label_selector: Some(api::selector::to_string(&pool.spec.selector)),
        conditions,
    }
}
