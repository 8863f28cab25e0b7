//! Validation of `VirtualMachine`.

use crate::instancetype_types::{Kind, Matcher, Reference};
use crate::other::reject_other;
use crate::vm::{
    RunStrategy, VirtualMachine, VirtualMachineInstanceTemplateSpec, VirtualMachineSpec,
};

use super::{into_result, validate_vmi_spec, FieldError, Path};

/// Validates a VM: its run strategy and the VMI template.
pub fn validate_vm(vm: &VirtualMachine) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    validate_vm_spec(&vm.spec, &Path::root("spec"), &mut errors);
    into_result(errors)
}

/// Validates a VM spec found at `spec` (a VM's, or a pool's VM template).
pub(crate) fn validate_vm_spec(vm: &VirtualMachineSpec, spec: &Path, errors: &mut Vec<FieldError>) {
    reject_other(&vm.other, "v1.VirtualMachineSpec", spec, errors);
    if let Some(strategy) = &vm.run_strategy {
        if RunStrategy::parse(strategy).is_none() {
            let allowed: Vec<_> = RunStrategy::ALL.iter().map(|s| s.as_str()).collect();
            errors.push(FieldError::invalid(
                spec.child("runStrategy"),
                format!("{strategy:?} must be one of {allowed:?}"),
            ));
        }
        if vm.running.is_some() {
            errors.push(FieldError::invalid(
                spec.child("running"),
                "running and runStrategy are mutually exclusive; running is deprecated",
            ));
        }
    }
    for (matcher, field, kind) in [
        (&vm.instancetype, "instancetype", "InstancetypeMatcher"),
        (&vm.preference, "preference", "PreferenceMatcher"),
    ] {
        if let Some(matcher) = matcher {
            validate_matcher(matcher, &spec.child(field), kind, errors);
        }
    }
    validate_template(&vm.template, &spec.child("template"), errors);
}

/// A VM's `spec.instancetype` or `spec.preference`: KubeVirt's rules; inferring the name from a
/// volume is refused.
fn validate_matcher(matcher: &Matcher, path: &Path, kind: &str, errors: &mut Vec<FieldError>) {
    reject_other(&matcher.other, &format!("v1.{kind}"), path, errors);
    if matcher
        .infer_from_volume
        .as_deref()
        .is_some_and(|v| !v.is_empty())
    {
        errors.push(FieldError::new(
            path.child("inferFromVolume"),
            crate::FieldErrorKind::NotSupported,
            "not supported by ferrovirt: name the instance type or preference",
        ));
    } else if matcher.name().is_none() && matcher.revision_name().is_none() {
        errors.push(FieldError::new(
            path.clone(),
            crate::FieldErrorKind::Required,
            format!("Either Name or InferFromVolume should be provided within the {kind}"),
        ));
    }
    if matcher.infer_from_volume_failure_policy.is_some() {
        errors.push(FieldError::new(
            path.child("inferFromVolumeFailurePolicy"),
            crate::FieldErrorKind::NotSupported,
            "not supported by ferrovirt: inferFromVolume is not",
        ));
    }
    if let Err(message) = Kind::of(
        if kind == "InstancetypeMatcher" {
            Reference::Instancetype
        } else {
            Reference::Preference
        },
        matcher.kind.as_deref(),
    ) {
        errors.push(FieldError::invalid(path.child("kind"), message));
    }
}

/// Validates a VMI template (of a VM or a replica set) found at `path`.
pub(crate) fn validate_template(
    template: &VirtualMachineInstanceTemplateSpec,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    match &template.spec {
        Some(spec) => validate_vmi_spec(spec, &path.child("spec"), errors),
        None => errors.push(FieldError::required(
            path.child("spec"),
            "the template needs a VMI spec",
        )),
    }
}
