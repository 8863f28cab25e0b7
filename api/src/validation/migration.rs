//! Validation of `VirtualMachineInstanceMigration`.

use crate::migration::VirtualMachineInstanceMigration;
use crate::other::reject_other;

use super::{check_dns_label, into_result, FieldError, Path};

/// Validates a migration request: it must name a VMI.
pub fn validate_migration(
    migration: &VirtualMachineInstanceMigration,
) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = Path::root("spec");
    reject_other(
        &migration.spec.other,
        "v1.VirtualMachineInstanceMigrationSpec",
        &spec,
        &mut errors,
    );
    match &migration.spec.vmi_name {
        Some(name) => check_vmi_name(name, spec.child("vmiName"), &mut errors),
        None => errors.push(FieldError::required(
            spec.child("vmiName"),
            "the VMI to migrate is required",
        )),
    }
    into_result(errors)
}

/// VMI names are DNS-1123 subdomains; the launcher and pod names derived from them are labels,
/// so Ferrovirt keeps them to labels.
fn check_vmi_name(name: &str, path: Path, errors: &mut Vec<FieldError>) {
    check_dns_label(name, path, errors);
}
