//! Validation of `VirtualMachinePool`, with KubeVirt's rules (`vmpool-admitter.go`) and the
//! settings Ferrovirt cannot honour refused by path.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::other::reject_other;
use crate::pool::{SelectionPolicy, VirtualMachinePool};

use super::vm::validate_vm_spec;
use super::{into_result, FieldError, Path};

/// The sort policies of a selection policy.
pub const SORT_POLICIES: [&str; 5] = [
    "AscendingOrder",
    "DescendingOrder",
    "Newest",
    "Oldest",
    "Random",
];

/// Validates a pool: replicas, the template (a valid VM spec whose labels the selector
/// matches), maxUnavailable, one strategy at most of each kind, and no state preservation.
pub fn validate_pool(pool: &VirtualMachinePool) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = Path::root("spec");
    let s = &pool.spec;
    reject_other(
        &s.other,
        "v1beta1.VirtualMachinePoolSpec",
        &spec,
        &mut errors,
    );
    if let Some(replicas) = s.replicas.filter(|r| *r < 0) {
        errors.push(FieldError::invalid(
            spec.child("replicas"),
            format!("{replicas} must not be negative"),
        ));
    }
    let template_path = spec.child("virtualMachineTemplate");
    match s
        .virtual_machine_template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
    {
        Some(vm) => validate_vm_spec(vm, &template_path.child("spec"), &mut errors),
        None => errors.push(FieldError::required(
            template_path.child("spec"),
            "missing virtual machine template.",
        )),
    }
    match crate::selector::matches(&s.selector, &s.template_labels()) {
        Err(e) => errors.push(FieldError::invalid(spec.child("selector"), e)),
        Ok(false) => errors.push(FieldError::invalid(
            spec.child("selector"),
            "selector does not match labels.",
        )),
        Ok(true) => {}
    }
    if let Some(max) = &s.max_unavailable {
        let path = spec.child("maxUnavailable");
        match max {
            IntOrString::Int(n) if *n <= 0 => errors.push(FieldError::invalid(
                path,
                "maxUnavailable must be greater than 0",
            )),
            IntOrString::Int(_) => {}
            IntOrString::String(text) => match text.strip_suffix('%') {
                None => errors.push(FieldError::invalid(
                    path,
                    "maxUnavailable percentage must end with %",
                )),
                Some(number) => match number.parse::<i64>() {
                    Err(e) => errors.push(FieldError::invalid(
                        path,
                        format!("maxUnavailable percentage value {number:?} is invalid: {e}"),
                    )),
                    Ok(v) if !(1..=100).contains(&v) => errors.push(FieldError::invalid(
                        path,
                        format!("maxUnavailable percentage value {v} must be between 1 and 100"),
                    )),
                    Ok(_) => {}
                },
            },
        }
    }
    if let Some(generation) = &s.name_generation {
        reject_other(
            &generation.other,
            "v1beta1.VirtualMachinePoolNameGeneration",
            &spec.child("nameGeneration"),
            &mut errors,
        );
    }
    if let Some(scale_in) = &s.scale_in_strategy {
        let path = spec.child("scaleInStrategy");
        reject_other(
            &scale_in.other,
            "v1beta1.VirtualMachinePoolScaleInStrategy",
            &path,
            &mut errors,
        );
        let set = [
            scale_in.unmanaged.is_some(),
            scale_in.opportunistic.is_some(),
            scale_in.proactive.is_some(),
        ];
        exclusive(&set, &path, &mut errors);
        if let Some(empty) = &scale_in.unmanaged {
            reject_other(
                &empty.other,
                "v1beta1.VirtualMachinePoolUnmanagedStrategy",
                &path.child("unmanaged"),
                &mut errors,
            );
        }
        if let Some(o) = &scale_in.opportunistic {
            let at = path.child("opportunistic");
            reject_other(
                &o.other,
                "v1beta1.VirtualMachinePoolOpportunisticScaleInStrategy",
                &at,
                &mut errors,
            );
            state_preservation(o.state_preservation.as_deref(), &at, &mut errors);
        }
        if let Some(p) = &scale_in.proactive {
            let at = path.child("proactive");
            reject_other(
                &p.other,
                "v1beta1.VirtualMachinePoolProactiveScaleInStrategy",
                &at,
                &mut errors,
            );
            state_preservation(p.state_preservation.as_deref(), &at, &mut errors);
            if let Some(policy) = &p.selection_policy {
                selection_policy(policy, &at.child("selectionPolicy"), &mut errors);
            }
        }
    }
    if let Some(update) = &s.update_strategy {
        let path = spec.child("updateStrategy");
        reject_other(
            &update.other,
            "v1beta1.VirtualMachinePoolUpdateStrategy",
            &path,
            &mut errors,
        );
        let set = [
            update.unmanaged.is_some(),
            update.opportunistic.is_some(),
            update.proactive.is_some(),
        ];
        exclusive(&set, &path, &mut errors);
        for (name, empty) in [
            ("unmanaged", &update.unmanaged),
            ("opportunistic", &update.opportunistic),
        ] {
            if let Some(empty) = empty {
                reject_other(
                    &empty.other,
                    "v1beta1.VirtualMachinePoolUnmanagedStrategy",
                    &path.child(name),
                    &mut errors,
                );
            }
        }
        if let Some(p) = &update.proactive {
            let at = path.child("proactive");
            reject_other(
                &p.other,
                "v1beta1.VirtualMachinePoolProactiveUpdateStrategy",
                &at,
                &mut errors,
            );
            if let Some(policy) = &p.selection_policy {
                selection_policy(policy, &at.child("selectionPolicy"), &mut errors);
            }
        }
    }
    into_result(errors)
}

/// An update of a pool: the new pool is valid and its selector is the old one's.
pub fn validate_pool_update(
    old: &VirtualMachinePool,
    new: &VirtualMachinePool,
) -> Result<(), Vec<FieldError>> {
    let mut errors = validate_pool(new).err().unwrap_or_default();
    if old.spec.selector != new.spec.selector {
        errors.push(FieldError::invalid(
            Path::root("spec").child("selector"),
            "selector is immutable after creation.",
        ));
    }
    into_result(errors)
}

fn exclusive(set: &[bool; 3], path: &Path, errors: &mut Vec<FieldError>) {
    if set.iter().filter(|s| **s).count() > 1 {
        errors.push(FieldError::invalid(
            path.clone(),
            "only one of unmanaged, opportunistic or proactive can be set",
        ));
    }
}

/// `Disabled` is what Ferrovirt does; `Offline` and `Online` keep a scaled-in VM's volumes (and
/// memory) for the next scale-out, which needs the persistent DataVolumes Ferrovirt lacks.
fn state_preservation(value: Option<&str>, path: &Path, errors: &mut Vec<FieldError>) {
    match value {
        None | Some("Disabled") => {}
        Some(v @ ("Offline" | "Online")) => errors.push(FieldError::value_not_supported(
            path.child("statePreservation"),
            v,
            "Disabled: Ferrovirt keeps no state of a scaled-in VM (it has no DataVolumes to preserve)",
        )),
        Some(v) => errors.push(FieldError::value_not_supported(
            path.child("statePreservation"),
            v,
            "Disabled, Offline or Online",
        )),
    }
}

fn selection_policy(policy: &SelectionPolicy, path: &Path, errors: &mut Vec<FieldError>) {
    reject_other(
        &policy.other,
        "v1beta1.VirtualMachinePoolSelectionPolicy",
        path,
        errors,
    );
    if let Some(sort) = &policy.sort_policy {
        if !SORT_POLICIES.contains(&sort.as_str()) {
            errors.push(FieldError::value_not_supported(
                path.child("sortPolicy"),
                sort,
                &SORT_POLICIES.join(", "),
            ));
        }
    }
    if let Some(selectors) = &policy.selectors {
        let at = path.child("selectors");
        reject_other(
            &selectors.other,
            "v1beta1.VirtualMachinePoolSelectors",
            &at,
            errors,
        );
        if let Some(selector) = &selectors.label_selector {
            if let Err(e) = crate::selector::matches(selector, &Default::default()) {
                errors.push(FieldError::invalid(at.child("labelSelector"), e));
            }
        }
        for (i, r) in selectors
            .node_selector_requirement_matcher
            .iter()
            .flatten()
            .enumerate()
        {
            if crate::selector::node_requirement_matches(r, &Default::default()).is_none() {
                errors.push(FieldError::value_not_supported(
                    at.child("nodeSelectorRequirementMatcher")
                        .index(i)
                        .child("operator"),
                    &r.operator,
                    "In, NotIn, Exists, DoesNotExist, Gt or Lt",
                ));
            }
        }
    }
}
