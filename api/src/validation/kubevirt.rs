//! Validation of the `KubeVirt` CR.

use crate::kubevirt::{CertConfig, CertificateRotateStrategy, KubeVirt, MigrationConfiguration};
use crate::migration_policy::MigrationPolicy;
use crate::other::{reject_other, reject_other_settings};

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
    // The launcher runs as root instead of KubeVirt's non-root user 107.
    "Root",
];

/// KubeVirt's feature gates for what Ferrovirt does not have, which a CR may therefore list as
/// disabled (what it asks is what runs), with why enabling them is refused.
pub const ABSENT_FEATURE_GATES: &[(&str, &str)] = &[(
    "ImageVolume",
    "Ferrovirt runs each containerDisk as a container of the launcher Pod and reads the image \
     there; it does not mount Kubernetes image volumes",
)];

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
    if let Some(strategy) = &kv.spec.certificate_rotate_strategy {
        validate_rotation(
            strategy,
            &spec.child("certificateRotateStrategy"),
            &mut errors,
        );
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
        if let Some(instancetype) = &configuration.instancetype {
            let at = at.child("instancetype");
            reject_other_settings(
                &instancetype.other,
                "v1.InstancetypeConfiguration",
                &at,
                &mut errors,
            );
            if let Some(policy) = &instancetype.reference_policy {
                let policies = crate::kubevirt::REFERENCE_POLICIES;
                if !policies.contains(&policy.as_str()) {
                    errors.push(FieldError::value_not_supported(
                        at.child("referencePolicy"),
                        policy,
                        &format!("one of {policies:?}"),
                    ));
                }
            }
        }
        if let Some(developer) = &configuration.developer_configuration {
            let at = at.child("developerConfiguration");
            reject_other_settings(
                &developer.other,
                "v1.DeveloperConfiguration",
                &at,
                &mut errors,
            );
            if let Some(percent) = developer.memory_overcommit {
                if !(1..=i64::from(u32::MAX)).contains(&percent) {
                    errors.push(FieldError::invalid(
                        at.child("memoryOvercommit"),
                        format!(
                            "{percent} is not a percentage above 0: a VMI's Pod requests \
                             memory.guest x 100 / memoryOvercommit"
                        ),
                    ));
                }
            }
            let gates = [
                ("featureGates", &developer.feature_gates),
                ("disabledFeatureGates", &developer.disabled_feature_gates),
            ];
            for (field, gate, i) in gates
                .iter()
                .flat_map(|(f, list)| list.iter().enumerate().map(move |(i, g)| (*f, g, i)))
            {
                if KNOWN_FEATURE_GATES.contains(&gate.as_str()) {
                    continue;
                }
                let absent = ABSENT_FEATURE_GATES.iter().find(|(g, _)| g == gate);
                match absent {
                    Some(_) if field == "disabledFeatureGates" => {}
                    Some((_, why)) => errors.push(FieldError::value_not_supported(
                        at.child(field).index(i),
                        gate,
                        why,
                    )),
                    None => errors.push(FieldError::value_not_supported(
                        at.child(field).index(i),
                        gate,
                        &format!("known feature gates are {KNOWN_FEATURE_GATES:?}"),
                    )),
                }
            }
        }
        if let Some(migrations) = &configuration.migrations {
            validate_migrations(migrations, &at.child("migrations"), &mut errors);
        }
        if let Some(smbios) = &configuration.smbios {
            let at = at.child("smbios");
            reject_other_settings(&smbios.other, "v1.SMBiosConfiguration", &at, &mut errors);
            for (field, value) in smbios.fields() {
                if let Some(problem) = value.and_then(contract::smbios::string_problem) {
                    errors.push(FieldError::invalid(
                        at.child(field),
                        format!("the SMBIOS {field} {problem}"),
                    ));
                }
            }
        }
    }
    into_result(errors)
}

/// `spec.configuration.migrations`: numbers in range, and what Ferrovirt cannot do refused.
fn validate_migrations(m: &MigrationConfiguration, at: &Path, errors: &mut Vec<FieldError>) {
    reject_other_settings(&m.other, "v1.MigrationConfiguration", at, errors);
    let counts = [
        (
            "parallelMigrationsPerCluster",
            m.parallel_migrations_per_cluster,
        ),
        (
            "parallelOutboundMigrationsPerNode",
            m.parallel_outbound_migrations_per_node,
        ),
    ];
    for (field, value) in counts {
        if value == Some(0) {
            errors.push(FieldError::invalid(
                at.child(field),
                "must be at least 1 (0 would stop every migration)",
            ));
        }
    }
    let positive = [
        ("completionTimeoutPerGiB", m.completion_timeout_per_gib),
        ("progressTimeout", m.progress_timeout),
        ("maxDowntimeMs", m.max_downtime_ms),
    ];
    for (field, value) in positive {
        if value.is_some_and(|v| v <= 0) {
            errors.push(FieldError::invalid(at.child(field), "must be positive"));
        }
    }
    if let Some(bandwidth) = &m.bandwidth_per_migration {
        if let Err(e) = crate::quantity::to_u64(bandwidth) {
            errors.push(FieldError::invalid(
                at.child("bandwidthPerMigration"),
                e.to_string(),
            ));
        }
    }
    let refused = [
        (
            "allowPostCopy",
            m.allow_post_copy,
            "post-copy migration is not supported: Ferrovirt migrates by pre-copy",
        ),
        (
            "allowAutoConverge",
            m.allow_auto_converge,
            "auto-converge is not supported: Ferrovirt does not throttle a migrating guest",
        ),
        (
            "allowWorkloadDisruption",
            m.allow_workload_disruption,
            "not supported: a migration past its completion timeout is cancelled",
        ),
        (
            "disableTLS",
            m.disable_tls,
            "not supported: Ferrovirt always carries migrations over mutual TLS",
        ),
    ];
    for (field, value, why) in refused {
        if value == Some(true) {
            errors.push(FieldError::forbidden(at.child(field), why));
        }
    }
}

/// Validates a MigrationPolicy: the settings it overrides follow the rules of the same
/// fields of the KubeVirt CR's `spec.configuration.migrations`, at `spec.<field>`.
pub fn validate_migration_policy(policy: &MigrationPolicy) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = Path::root("spec");
    let p = &policy.spec;
    reject_other(&p.other, "v1alpha1.MigrationPolicySpec", &spec, &mut errors);
    if let Some(selectors) = &p.selectors {
        reject_other(
            &selectors.other,
            "v1alpha1.Selectors",
            &spec.child("selectors"),
            &mut errors,
        );
    }
    // Only what the policy itself says (not what `apply` derives from it), so that each error
    // is at a field the user wrote.
    let as_settings = MigrationConfiguration {
        bandwidth_per_migration: p.bandwidth_per_migration.clone(),
        completion_timeout_per_gib: p.completion_timeout_per_gib,
        max_downtime_ms: p.max_downtime_ms,
        allow_post_copy: p.allow_post_copy,
        allow_auto_converge: p.allow_auto_converge,
        allow_workload_disruption: p.allow_workload_disruption,
        ..MigrationConfiguration::default()
    };
    validate_migrations(&as_settings, &spec, &mut errors);
    into_result(errors)
}

/// `spec.certificateRotateStrategy`: durations that parse, a renewal inside the lifetime.
fn validate_rotation(
    strategy: &CertificateRotateStrategy,
    at: &Path,
    errors: &mut Vec<FieldError>,
) {
    reject_other_settings(
        &strategy.other,
        "v1.KubeVirtCertificateRotateStrategy",
        at,
        errors,
    );
    let Some(signed) = &strategy.self_signed else {
        return;
    };
    let at = at.child("selfSigned");
    reject_other_settings(
        &signed.other,
        "v1.KubeVirtSelfSignConfiguration",
        &at,
        errors,
    );
    for (field, config) in [("ca", &signed.ca), ("server", &signed.server)] {
        let Some(config) = config else { continue };
        let at = at.child(field);
        reject_other_settings(&config.other, "v1.CertConfig", &at, errors);
        let mut parse = |name: &str, text: &Option<String>| {
            let text = text.as_deref()?;
            match crate::duration::parse(text) {
                Ok(d) => Some(d),
                Err(e) => {
                    errors.push(FieldError::invalid(at.child(name), e));
                    None
                }
            }
        };
        let duration = parse("duration", &config.duration);
        let renew_before = parse("renewBefore", &config.renew_before);
        if duration.is_some_and(|d| d < CertConfig::MIN_DURATION) {
            errors.push(FieldError::invalid(
                at.child("duration"),
                format!("must be at least {}s", CertConfig::MIN_DURATION.as_secs()),
            ));
        }
        if let (Some(d), Some(r)) = (duration, renew_before) {
            if r >= d {
                errors.push(FieldError::invalid(
                    at.child("renewBefore"),
                    "must be shorter than duration",
                ));
            }
        }
    }
}
