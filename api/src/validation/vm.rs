//! Validation of `VirtualMachine`.

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
    validate_template(&vm.template, &spec.child("template"), errors);
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
