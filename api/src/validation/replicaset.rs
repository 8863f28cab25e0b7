//! Validation of `VirtualMachineInstanceReplicaSet`.

use crate::other::reject_other;
use crate::replicaset::VirtualMachineInstanceReplicaSet;

use super::vm::validate_template;
use super::{into_result, FieldError, Path};

/// Validates a replica set: replicas, a selector that matches the template's labels, the template.
pub fn validate_replica_set(rs: &VirtualMachineInstanceReplicaSet) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = Path::root("spec");
    reject_other(
        &rs.spec.other,
        "v1.VirtualMachineInstanceReplicaSetSpec",
        &spec,
        &mut errors,
    );
    if let Some(replicas) = rs.spec.replicas {
        if replicas < 0 {
            errors.push(FieldError::invalid(
                spec.child("replicas"),
                format!("{replicas} must not be negative"),
            ));
        }
    }
    let selector = &rs.spec.selector;
    let labels = rs.spec.template_labels();
    let match_labels = selector.match_labels.clone().unwrap_or_default();
    let expressions = selector.match_expressions.clone().unwrap_or_default();
    if match_labels.is_empty() && expressions.is_empty() {
        errors.push(FieldError::required(
            spec.child("selector"),
            "a selector with matchLabels or matchExpressions is required",
        ));
    }
    for (key, value) in &match_labels {
        if labels.get(key) != Some(value) {
            errors.push(FieldError::invalid(
                spec.child("selector").child("matchLabels"),
                format!("selects {key}={value}, which spec.template.metadata.labels does not have"),
            ));
        }
    }
    for (i, expression) in expressions.iter().enumerate() {
        let at = spec.child("selector").child("matchExpressions").index(i);
        let Some(matches) = crate::selector::requirement_matches(expression, &labels) else {
            errors.push(FieldError::invalid(
                at.child("operator"),
                format!(
                    "{:?} must be In, NotIn, Exists or DoesNotExist",
                    expression.operator
                ),
            ));
            continue;
        };
        if !matches {
            errors.push(FieldError::invalid(
                at,
                "does not match spec.template.metadata.labels",
            ));
        }
    }
    validate_template(&rs.spec.template, &spec.child("template"), &mut errors);
    into_result(errors)
}
