//! Validation of the `KubeVirt` CR.

use crate::kubevirt::KubeVirt;
use crate::other::reject_other_settings;

use super::{into_result, FieldError, Path};

/// Feature gates Ferrovirt knows. KubeVirt has many more; those that change nothing here are
/// accepted so that existing CRs apply, the rest are refused.
pub const KNOWN_FEATURE_GATES: &[&str] = &[
    "LiveMigration",
    "ExpandDisks",
    "Snapshot",
    "HotplugVolumes",
    "CPUManager",
    "Sidecar",
    "VMExport",
];

const UNINSTALL_STRATEGIES: [&str; 2] = ["RemoveWorkloads", "BlockUninstallIfWorkloadsExist"];

/// Validates a KubeVirt CR.
pub fn validate_kubevirt(kv: &KubeVirt) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = Path::root("spec");
    reject_other_settings(&kv.spec.other, "v1.KubeVirtSpec", &spec, &mut errors);
    if let Some(strategy) = &kv.spec.uninstall_strategy {
        if !UNINSTALL_STRATEGIES.contains(&strategy.as_str()) {
            errors.push(FieldError::invalid(
                spec.child("uninstallStrategy"),
                format!("{strategy:?} must be one of {UNINSTALL_STRATEGIES:?}"),
            ));
        }
    }
    if let Some(policy) = &kv.spec.image_pull_policy {
        if !["Always", "IfNotPresent", "Never"].contains(&policy.as_str()) {
            errors.push(FieldError::invalid(
                spec.child("imagePullPolicy"),
                format!("{policy:?} must be Always, IfNotPresent or Never"),
            ));
        }
    }
    if let Some(configuration) = &kv.spec.configuration {
        let at = spec.child("configuration");
        reject_other_settings(
            &configuration.other,
            "v1.KubeVirtConfiguration",
            &at,
            &mut errors,
        );
        if let Some(developer) = &configuration.developer_configuration {
            let at = at.child("developerConfiguration");
            reject_other_settings(
                &developer.other,
                "v1.DeveloperConfiguration",
                &at,
                &mut errors,
            );
            for (i, gate) in developer.feature_gates.iter().enumerate() {
                if !KNOWN_FEATURE_GATES.contains(&gate.as_str()) {
                    errors.push(FieldError::value_not_supported(
                        at.child("featureGates").index(i),
                        gate,
                        &format!("known feature gates are {KNOWN_FEATURE_GATES:?}"),
                    ));
                }
            }
        }
    }
    into_result(errors)
}
