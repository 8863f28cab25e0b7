//! `instancetype.kubevirt.io/v1beta1`: instance types (the size of a VM: vCPUs and memory, with
//! its scheduling) and preferences (defaults for the rest of its hardware), namespaced and
//! cluster-wide, as KubeVirt has them.
//!
//! A VM names them in `spec.instancetype` and `spec.preference` ([`Matcher`]). virt-controller
//! finds what they name ([`Kind::of`]), stores a copy of the object in a ControllerRevision of
//! the VM's ([`revision_name`], [`revision_labels`], [`revision_data`]) and records it in the
//! VM's `status.instancetypeRef` / `status.preferenceRef` ([`StatusRef`]), so that the VM keeps
//! the size it was created with when the instance type changes; each VMI it starts gets the
//! stored spec applied ([`apply`]). virt-api checks a VM against them when it is admitted
//! (conflicts, the preference's requirements) and expands a VM with them (`expand-spec`).
//!
//! The objects are handled as JSON values: applying one writes KubeVirt's VMI fields, and a field
//! Ferrovirt does not run is then refused by the VMI's own validation at its path, as if the
//! user had written it.
//!
//! The kinds, the matchers and the names are defined in [`crate::instancetype_types`], below
//! the `vm` and `validation` modules that use them, and re-exported here; this module holds
//! what needs a VM, its defaults or its validation.

pub mod apply;
#[cfg(feature = "client")]
pub mod find;
pub mod requirements;
pub mod validation;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::field_error::{FieldError, Path};
use crate::vm::VirtualMachine;
use crate::vmi::VirtualMachineInstanceSpec;

// The types, names and CRDs are below the `vm` and `validation` modules, which use them; this
// module, which uses those, re-exports them at their old paths.
pub use crate::instancetype_types::{
    crds, Kind, Matcher, Reference, RevisionRef, StatusRef, ANNOTATION_CLUSTER_INSTANCETYPE,
    ANNOTATION_CLUSTER_PREFERENCE, ANNOTATION_INSTANCETYPE, ANNOTATION_PREFERENCE, API_VERSION,
    GROUP, LABEL_OBJECT_GENERATION, LABEL_OBJECT_KIND, LABEL_OBJECT_NAME, LABEL_OBJECT_UID,
    LABEL_OBJECT_VERSION, VERSION,
};

/// KubeVirt's name of the ControllerRevision that stores `object` for a VM:
/// `<vm>-<object>-v1beta1-<object uid>-<object generation>`.
pub fn revision_name(vm: &str, object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{vm}-{}-{VERSION}-{}-{}",
        meta["name"].as_str().unwrap_or_default(),
        meta["uid"].as_str().unwrap_or_default(),
        meta["generation"].as_i64().unwrap_or_default()
    )
}

/// The labels of the ControllerRevision that stores `object` of `kind`.
pub fn revision_labels(kind: Kind, object: &Value) -> BTreeMap<String, String> {
    let meta = &object["metadata"];
    let text = |field: &str| meta[field].as_str().unwrap_or_default().to_string();
    BTreeMap::from([
        (
            LABEL_OBJECT_GENERATION.to_string(),
            meta["generation"].as_i64().unwrap_or_default().to_string(),
        ),
        (LABEL_OBJECT_KIND.to_string(), kind.name().to_string()),
        (LABEL_OBJECT_NAME.to_string(), text("name")),
        (LABEL_OBJECT_UID.to_string(), text("uid")),
        (LABEL_OBJECT_VERSION.to_string(), VERSION.to_string()),
    ])
}

/// What a ControllerRevision stores of `object`: the whole object with its apiVersion and kind,
/// its spec as it is, and its metadata without labels, annotations, finalizers, owners and
/// managed fields.
pub fn revision_data(kind: Kind, object: &Value) -> Value {
    let mut data = object.clone();
    data["apiVersion"] = json!(API_VERSION);
    data["kind"] = json!(kind.name());
    if let Some(meta) = data.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
        ] {
            meta.remove(field);
        }
    }
    data
}

/// The spec a ControllerRevision's `data` stores, if it holds an object of `reference`'s kinds.
pub fn spec_of_revision(reference: Reference, data: &Value) -> Result<Value, String> {
    let kind = data["kind"].as_str().unwrap_or_default();
    let api_version = data["apiVersion"].as_str().unwrap_or_default();
    let known = Kind::ALL
        .into_iter()
        .any(|k| k.reference() == reference && k.name() == kind);
    if !known || api_version != API_VERSION {
        return Err(format!(
            "unexpected type in ControllerRevision: {api_version} {kind}"
        ));
    }
    Ok(data.get("spec").cloned().unwrap_or_else(|| json!({})))
}

/// A VMI spec (of a VMI at `path` `spec`, or of a VM's template at `spec.template.spec`) with
/// the instance type and the preference applied, KubeVirt's way: the disks of volumes and the
/// default interface first, so that the preference shapes them too. The VMI defaults are not
/// applied. On conflicts, their paths.
pub fn apply_to_spec(
    path: &str,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
    spec: &VirtualMachineInstanceSpec,
    annotations: &mut BTreeMap<String, String>,
) -> Result<VirtualMachineInstanceSpec, Vec<String>> {
    let mut spec = spec.clone();
    crate::defaults::default_devices(&mut spec);
    let mut value = serde_json::to_value(&spec).expect("a VMI spec is JSON");
    apply::apply(path, instancetype, preference, &mut value, annotations)?;
    serde_json::from_value(value).map_err(|e| vec![format!("{path}: {e}")])
}

/// The VM with its instance type and preference written into it, as KubeVirt's `expand-spec`
/// answers it and its `expand` reference policy stores it: the template with both applied and
/// the VMI defaults, and neither the references nor their status. A VM that names neither is
/// returned as it is. On conflicts, KubeVirt's message.
pub fn expand_vm(
    vm: &VirtualMachine,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
) -> Result<VirtualMachine, String> {
    if !names_any(vm) {
        return Ok(vm.clone());
    }
    let mut expanded = vm.clone();
    let template = &mut expanded.spec.template;
    if let Some(spec) = template.spec.as_mut() {
        let meta = template.metadata.get_or_insert_with(Default::default);
        let mut annotations = meta.annotations.clone().unwrap_or_default();
        let mut applied = apply_to_spec(
            "spec.template.spec",
            instancetype,
            preference,
            spec,
            &mut annotations,
        )
        .map_err(|paths| apply::conflict_message(&paths))?;
        crate::defaults::default_vmi_spec(&mut applied);
        *spec = applied;
        meta.annotations = (!annotations.is_empty()).then_some(annotations);
    }
    expanded.spec.instancetype = None;
    expanded.spec.preference = None;
    if let Some(status) = expanded.status.as_mut() {
        status.instancetype_ref = None;
        status.preference_ref = None;
    }
    Ok(expanded)
}

/// Whether a VM names an instance type or a preference.
pub fn names_any(vm: &VirtualMachine) -> bool {
    vm.spec.names_instancetype_or_preference()
}

/// Validates a VM as virt-api admits it, with what its references were found to be (`None` for
/// one that names nothing or was not found): with an instance type or a preference the VM is
/// judged as it will run, with both applied and the VMI defaults, after KubeVirt's conflict and
/// requirements checks. A VM whose template gives no memory is admitted, as in KubeVirt (an
/// instance type not found yet may give it; the VMI is refused when it starts without).
pub fn validate_vm(
    vm: &VirtualMachine,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
) -> Result<(), Vec<FieldError>> {
    let mut expanded = vm.clone();
    let template = &mut expanded.spec.template;
    if let Some(spec) = template.spec.as_mut() {
        if instancetype.is_some() || preference.is_some() {
            let path = "spec.template.spec";
            let mut annotations = template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.clone())
                .unwrap_or_default();
            match apply_to_spec(path, instancetype, preference, spec, &mut annotations) {
                Ok(applied) => *spec = applied,
                Err(paths) => {
                    return Err(paths
                        .iter()
                        .map(|p| {
                            FieldError::invalid(
                                Path::root(p),
                                apply::conflict_message(std::slice::from_ref(p)),
                            )
                        })
                        .collect())
                }
            }
            crate::defaults::default_vmi_spec(spec);
            let value = serde_json::to_value(&*spec).expect("a VMI spec is JSON");
            if let Err(unmet) = requirements::check_requirements(instancetype, preference, &value) {
                return Err(vec![FieldError::invalid(
                    Path::root(&unmet.field),
                    format!(
                        "failure checking preference requirements: {}",
                        unmet.message
                    ),
                )]);
            }
        }
    }
    crate::validation::validate_vm(&expanded)
}

#[cfg(test)]
mod tests;
