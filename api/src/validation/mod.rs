//! Validation of every kubevirt.io kind: pure functions from an object to the list of what is
//! wrong with it, each error naming its field path the way KubeVirt does
//! (`spec.domain.devices.disks[1].name`) and saying why.
//!
//! virt-api's validating webhook turns these into an admission denial; the launcher and the
//! controllers call them too, so nothing they receive has to be re-checked.

mod kubevirt;
mod migration;
mod network;
mod pool;
mod replicaset;
mod vm;
mod vmi;

pub use kubevirt::{validate_kubevirt, validate_migration_policy};
pub use migration::validate_migration;
pub use pool::{validate_pool, validate_pool_update, SORT_POLICIES};
pub use replicaset::validate_replica_set;
pub use vm::validate_vm;
pub use vmi::{validate_vmi, validate_vmi_spec, validate_vmi_update};

// The error types live below every kind's module, which report unmodelled fields with them
// (`other::reject_other`); re-exported here, where they have always been.
pub use crate::field_error::{FieldError, FieldErrorKind, FieldErrors, Path};

// The limits (guest memory, vCPUs, virtio devices) are the contract's, derived from the VMM:
// see `contract::limits`.

pub(crate) fn into_result(errors: Vec<FieldError>) -> Result<(), Vec<FieldError>> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Checks a DNS-1123 label (names of disks, volumes, interfaces, networks; hostnames).
pub(crate) fn check_dns_label(value: &str, path: Path, errors: &mut Vec<FieldError>) {
    let valid = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if value.is_empty() {
        errors.push(FieldError::required(path, "must not be empty"));
    } else if !valid {
        errors.push(FieldError::invalid(
            path,
            format!(
                "{value:?} must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', \
                 starting and ending with a letter or digit"
            ),
        ));
    }
}

#[cfg(test)]
mod tests;
