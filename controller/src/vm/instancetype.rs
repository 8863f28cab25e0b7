//! A VM's instance type and preference, KubeVirt's way: found (the ControllerRevision the VM
//! recorded, else the object), stored in a ControllerRevision of the VM the first time, recorded
//! in `status.instancetypeRef` / `status.preferenceRef`, and applied to each VMI it starts.

use std::collections::BTreeMap;

use api::instancetype::find::{find, Found};
use api::instancetype::{
    apply_to_spec, expand_vm, revision_data, revision_labels, revision_name, spec_of_revision,
    Kind, Reference, RevisionRef, StatusRef,
};
use api::{VirtualMachine, VirtualMachineInstance};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

/// Why the VM cannot start now: the reason and message of its `Failure` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

/// What a VM's references resolved to, and its status references.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    pub instancetype: Option<Found>,
    pub preference: Option<Found>,
    pub instancetype_ref: Option<StatusRef>,
    pub preference_ref: Option<StatusRef>,
}

pub use api::instancetype::names_any;

/// Whether the VM is to get its instance type and preference written into its spec, by the
/// reference policy in force: `expandAll` expands every VM, `expand` those that have not stored
/// revisions yet.
pub fn to_expand(vm: &VirtualMachine, policy: &str) -> bool {
    let stored = vm.status.as_ref().is_some_and(|s| {
        [&s.instancetype_ref, &s.preference_ref]
            .iter()
            .any(|r| r.as_ref().is_some_and(|r| r.revision().is_some()))
    });
    names_any(vm) && (policy == "expandAll" || (policy == "expand" && !stored))
}

/// Writes the VM's instance type and preference into its spec and drops the references and
/// the revisions it had stored (KubeVirt's `expand` reference policy).
pub async fn expand(
    client: &Client,
    vm: &VirtualMachine,
    resolved: &Resolved,
) -> Result<(), Problem> {
    let unsupported = |message: String| Problem {
        reason: "UnsupportedSyncError",
        message: format!("unsupported error: {message}"),
    };
    let expanded = expand_vm(
        vm,
        resolved.instancetype.as_ref().map(|f| &f.spec),
        resolved.preference.as_ref().map(|f| &f.spec),
    )
    .map_err(|e| {
        unsupported(format!(
            "error encountered while expanding into VirtualMachine: {e}"
        ))
    })?;
    let namespace = vm.namespace().unwrap_or_default();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace);
    let updated = vms
        .replace(&vm.name_any(), &PostParams::default(), &expanded)
        .await
        .map_err(|e| {
            unsupported(format!(
                "error encountered when trying to update expanded VirtualMachine: {e}"
            ))
        })?;
    let mut with_status = updated.clone();
    with_status.status = expanded.status.clone();
    vms.replace_status(&vm.name_any(), &PostParams::default(), &with_status)
        .await
        .map_err(|e| {
            unsupported(format!(
                "error encountered when trying to update expanded VirtualMachine Status: {e}"
            ))
        })?;
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let old = vm
        .status
        .as_ref()
        .map(|s| [&s.instancetype_ref, &s.preference_ref]);
    for name in old
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(StatusRef::revision)
    {
        match revisions.delete(name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(Problem {
                    reason: "FailedCreate",
                    message: format!(
                        "error encountered cleaning controllerRevision {name} after successfully expanding VirtualMachine {}: {e}",
                        vm.name_any()
                    ),
                })
            }
        }
    }
    Ok(())
}

/// Finds what the VM names and, when `store`, stores what was read from the objects themselves.
pub async fn resolve(
    client: &Client,
    vm: &VirtualMachine,
    store_revisions: bool,
) -> Result<Resolved, Problem> {
    let mut resolved = Resolved::default();
    for reference in [Reference::Instancetype, Reference::Preference] {
        let reason = match reference {
            Reference::Instancetype => "FailedFindInstancetype",
            Reference::Preference => "FailedFindPreference",
        };
        let found = find(client, vm, reference)
            .await
            .map_err(|message| Problem { reason, message })?;
        let Some(mut found) = found else { continue };
        if let (true, Some(object)) = (store_revisions, &found.object) {
            let name = store(client, vm, found.kind, object)
                .await
                .map_err(|e| Problem {
                    reason: "FailedCreate",
                    message: format!(
                        "error encountered while storing instancetype.kubevirt.io controllerRevisions: {e}"
                    ),
                })?;
            found.revision = Some(name);
        }
        let matcher = api::instancetype::find::matcher(vm, reference)
            .cloned()
            .unwrap_or_default();
        let status_ref = StatusRef {
            name: matcher.name.clone(),
            kind: matcher.kind.clone().filter(|k| !k.is_empty()),
            controller_revision_ref: found.revision.clone().map(|name| RevisionRef { name }),
            ..StatusRef::default()
        };
        match reference {
            Reference::Instancetype => {
                resolved.instancetype = Some(found);
                resolved.instancetype_ref = Some(status_ref);
            }
            Reference::Preference => {
                resolved.preference = Some(found);
                resolved.preference_ref = Some(status_ref);
            }
        }
    }
    Ok(resolved)
}

/// Stores `object` in the VM's ControllerRevision for it; an existing one of the same name is
/// used when it stores the same spec.
async fn store(
    client: &Client,
    vm: &VirtualMachine,
    kind: Kind,
    object: &serde_json::Value,
) -> Result<String, String> {
    let namespace = vm.namespace().unwrap_or_default();
    let name = revision_name(&vm.name_any(), object);
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let revision = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace),
            labels: Some(revision_labels(kind, object)),
            owner_references: Some(vec![super::controller_ref(vm)]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(revision_data(kind, object))),
        revision: 0,
    };
    match revisions.create(&PostParams::default(), &revision).await {
        Ok(_) => Ok(name),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = revisions
                .get(&name)
                .await
                .map_err(|e| format!("failed to get ControllerRevision: {e}"))?;
            let data = existing.data.map(|d| d.0).unwrap_or_default();
            let stored = spec_of_revision(kind.reference(), &data)
                .map_err(|e| format!("failed to decode object in ControllerRevision: {e}"))?;
            if Some(&stored) == object.get("spec") {
                Ok(name)
            } else {
                Err(format!(
                    "found existing ControllerRevision with unexpected data: {name}"
                ))
            }
        }
        Err(e) => Err(format!("failed to create ControllerRevision: {e}")),
    }
}

/// Applies what the VM's references resolved to to the VMI it starts: the annotations that name
/// them, the instance type and the preference. On conflicts, KubeVirt's message.
pub fn apply_to_vmi(vmi: &mut VirtualMachineInstance, resolved: &Resolved) -> Result<(), String> {
    let mut annotations: BTreeMap<String, String> =
        vmi.metadata.annotations.clone().unwrap_or_default();
    for found in [&resolved.instancetype, &resolved.preference]
        .into_iter()
        .flatten()
    {
        let name = match found.kind.reference() {
            Reference::Instancetype => &resolved.instancetype_ref,
            Reference::Preference => &resolved.preference_ref,
        }
        .as_ref()
        .and_then(|r| r.name.clone())
        .unwrap_or_default();
        annotations.insert(found.kind.annotation().to_string(), name);
    }
    let spec = apply_to_spec(
        "spec",
        resolved.instancetype.as_ref().map(|f| &f.spec),
        resolved.preference.as_ref().map(|f| &f.spec),
        &vmi.spec,
        &mut annotations,
    )
    .map_err(|paths| {
        format!(
            "Failure while starting VMI: VMI conflicts with instancetype spec in fields: [{}]",
            paths.join(", ")
        )
    })?;
    vmi.spec = spec;
    vmi.metadata.annotations = Some(annotations);
    Ok(())
}
