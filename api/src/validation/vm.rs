//! Validation of `VirtualMachine`.

use crate::other::reject_other;
use crate::vm::{RunStrategy, VirtualMachine, VirtualMachineInstanceTemplateSpec};

use super::{into_result, validate_vmi_spec, FieldError, Path};

/// Validates a VM: its run strategy and the VMI template.
pub fn validate_vm(vm: &VirtualMachine) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = Path::root("spec");
    reject_other(&vm.spec.other, "v1.VirtualMachineSpec", &spec, &mut errors);
    if let Some(strategy) = &vm.spec.run_strategy {
        if RunStrategy::parse(strategy).is_none() {
            let allowed: Vec<_> = RunStrategy::ALL.iter().map(|s| s.as_str()).collect();
            errors.push(FieldError::invalid(
                spec.child("runStrategy"),
                format!("{strategy:?} must be one of {allowed:?}"),
            ));
        }
        if vm.spec.running.is_some() {
            errors.push(FieldError::invalid(
                spec.child("running"),
                "running and runStrategy are mutually exclusive; running is deprecated",
            ));
        }
    }
    validate_template(&vm.spec.template, &spec.child("template"), &mut errors);
    into_result(errors)
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
