//! The compatibility tier (`--features compat`): Ferrovirt's API types against KubeVirt's own
//! OpenAPI document (`kubevirt-openapi/swagger.json` in the directory `FERROVIRT_FIXTURES`
//! names): every typed field exists in
//! KubeVirt with the same name and JSON type, and `src/kubevirt_fields.rs` (the field lists
//! validation uses to tell "not supported" from "unknown") is what the document says.
//!
//! Regenerate the table with `UPDATE_KUBEVIRT_FIELDS=1 FERROVIRT_FIXTURES=DIR cargo test -p api
//! --features compat --test kubevirt_openapi`.

mod common;

use schemars::{schema_for, JsonSchema, Schema};
use serde_json::Value;

use api::domain::*;
use api::kubevirt::*;
use api::migration::*;
use api::pool::{
    self, Empty, NameGeneration, OpportunisticScaleIn, ProactiveScaleIn, ProactiveUpdate,
    ScaleInStrategy, SelectionPolicy, Selectors, UpdateStrategy, VirtualMachinePoolSpec,
    VirtualMachinePoolStatus,
};
use api::replicaset::*;
use api::vm::*;
use api::vmi::*;
use api::volume::*;

/// (KubeVirt definition, the schema of the Rust type that models it).
fn modelled() -> Vec<(&'static str, Schema)> {
    fn s<T: JsonSchema>() -> Schema {
        schema_for!(T)
    }
    vec![
        (
            "v1.VirtualMachineInstanceSpec",
            s::<VirtualMachineInstanceSpec>(),
        ),
        (
            "v1.VirtualMachineInstanceStatus",
            s::<VirtualMachineInstanceStatus>(),
        ),
        (
            "v1.VirtualMachineInstanceNetworkInterface",
            s::<VmiNetworkInterface>(),
        ),
        (
            "v1.VirtualMachineInstanceMigrationState",
            s::<MigrationState>(),
        ),
        ("v1.VirtualMachineInstanceGuestOSInfo", s::<GuestOsInfo>()),
        (
            "v1.VirtualMachineInstancePhaseTransitionTimestamp",
            s::<PhaseTransitionTimestamp>(),
        ),
        ("v1.DomainSpec", s::<DomainSpec>()),
        ("v1.CPU", s::<Cpu>()),
        ("v1.Memory", s::<Memory>()),
        ("v1.ResourceRequirements", s::<ResourceRequirements>()),
        ("v1.Firmware", s::<Firmware>()),
        ("v1.Bootloader", s::<Bootloader>()),
        ("v1.BIOS", s::<Bios>()),
        ("v1.EFI", s::<Efi>()),
        ("v1.KernelBoot", s::<KernelBoot>()),
        ("v1.KernelBootContainer", s::<KernelBootContainer>()),
        ("v1.Devices", s::<Devices>()),
        ("v1.Disk", s::<Disk>()),
        ("v1.DiskTarget", s::<DiskTarget>()),
        ("v1.Interface", s::<Interface>()),
        ("v1.InterfaceMasquerade", s::<InterfaceMasquerade>()),
        ("v1.Port", s::<Port>()),
        ("v1.Rng", s::<Rng>()),
        ("v1.Volume", s::<Volume>()),
        ("v1.ContainerDiskSource", s::<ContainerDiskSource>()),
        ("v1.CloudInitNoCloudSource", s::<CloudInitNoCloudSource>()),
        ("v1.EmptyDiskSource", s::<EmptyDiskSource>()),
        (
            "v1.PersistentVolumeClaimVolumeSource",
            s::<PersistentVolumeClaimVolumeSource>(),
        ),
        ("v1.DataVolumeSource", s::<DataVolumeSource>()),
        ("v1.Network", s::<Network>()),
        ("v1.PodNetwork", s::<PodNetwork>()),
        ("v1.VirtualMachineSpec", s::<VirtualMachineSpec>()),
        ("v1.VirtualMachineStatus", s::<VirtualMachineStatus>()),
        (
            "v1.VirtualMachineStateChangeRequest",
            s::<StateChangeRequest>(),
        ),
        ("v1.VirtualMachineStartFailure", s::<StartFailure>()),
        (
            "v1.VirtualMachineInstanceTemplateSpec",
            s::<VirtualMachineInstanceTemplateSpec>(),
        ),
        (
            "v1.VirtualMachineInstanceMigrationSpec",
            s::<VirtualMachineInstanceMigrationSpec>(),
        ),
        (
            "v1.VirtualMachineInstanceMigrationStatus",
            s::<VirtualMachineInstanceMigrationStatus>(),
        ),
        (
            "v1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp",
            s::<MigrationPhaseTransitionTimestamp>(),
        ),
        (
            "v1.VirtualMachineInstanceReplicaSetSpec",
            s::<VirtualMachineInstanceReplicaSetSpec>(),
        ),
        (
            "v1.VirtualMachineInstanceReplicaSetStatus",
            s::<VirtualMachineInstanceReplicaSetStatus>(),
        ),
        ("v1.KubeVirtSpec", s::<KubeVirtSpec>()),
        (
            "v1beta1.VirtualMachinePoolSpec",
            s::<VirtualMachinePoolSpec>(),
        ),
        (
            "v1beta1.VirtualMachinePoolStatus",
            s::<VirtualMachinePoolStatus>(),
        ),
        (
            "v1beta1.VirtualMachineTemplateSpec",
            s::<pool::VirtualMachineTemplateSpec>(),
        ),
        (
            "v1beta1.VirtualMachinePoolNameGeneration",
            s::<NameGeneration>(),
        ),
        (
            "v1beta1.VirtualMachinePoolScaleInStrategy",
            s::<ScaleInStrategy>(),
        ),
        (
            "v1beta1.VirtualMachinePoolOpportunisticScaleInStrategy",
            s::<OpportunisticScaleIn>(),
        ),
        (
            "v1beta1.VirtualMachinePoolProactiveScaleInStrategy",
            s::<ProactiveScaleIn>(),
        ),
        (
            "v1beta1.VirtualMachinePoolSelectionPolicy",
            s::<SelectionPolicy>(),
        ),
        ("v1beta1.VirtualMachinePoolSelectors", s::<Selectors>()),
        (
            "v1beta1.VirtualMachinePoolUpdateStrategy",
            s::<UpdateStrategy>(),
        ),
        (
            "v1beta1.VirtualMachinePoolProactiveUpdateStrategy",
            s::<ProactiveUpdate>(),
        ),
        ("v1beta1.VirtualMachinePoolUnmanagedStrategy", s::<Empty>()),
        (
            "v1alpha1.MigrationPolicySpec",
            s::<api::migration_policy::MigrationPolicySpec>(),
        ),
        (
            "v1alpha1.Selectors",
            s::<api::migration_policy::Selectors>(),
        ),
        ("v1.KubeVirtConfiguration", s::<KubeVirtConfiguration>()),
        ("v1.DeveloperConfiguration", s::<DeveloperConfiguration>()),
        ("v1.SMBiosConfiguration", s::<SmbiosConfiguration>()),
        ("v1.MigrationConfiguration", s::<MigrationConfiguration>()),
        (
            "v1.KubeVirtCertificateRotateStrategy",
            s::<CertificateRotateStrategy>(),
        ),
        (
            "v1.KubeVirtSelfSignConfiguration",
            s::<SelfSignConfiguration>(),
        ),
        ("v1.CertConfig", s::<CertConfig>()),
        ("v1.KubeVirtStatus", s::<KubeVirtStatus>()),
        ("v1.VirtualMachineInstanceCondition", s::<api::Condition>()),
    ]
}

/// The simple JSON type of a schema (`string`, `integer`, ...), ignoring `null` in unions.
fn json_type(schema: &Value, root: &Value) -> Option<String> {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next()?;
        let target = root
            .get("$defs")
            .and_then(|d| d.get(name))
            .or_else(|| root.get("definitions").and_then(|d| d.get(name)))?;
        return json_type(target, root);
    }
    match schema.get("type") {
        Some(Value::String(t)) => Some(t.clone()),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .map(str::to_string),
        _ => {
            let variants = schema.get("anyOf").or_else(|| schema.get("oneOf"))?;
            variants
                .as_array()?
                .iter()
                .filter_map(|v| json_type(v, root))
                .find(|t| t != "null")
        }
    }
}

#[test]
fn typed_fields_match_kubevirt_names_and_types() {
    let swagger = common::swagger();
    let definitions = &swagger["definitions"];
    let mut problems = Vec::new();
    for (definition, schema) in modelled() {
        let ours = schema.as_value();
        let theirs = &definitions[definition];
        assert!(
            theirs.is_object(),
            "{definition} is not in KubeVirt's OpenAPI"
        );
        let Some(properties) = ours.get("properties").and_then(Value::as_object) else {
            continue;
        };
        for (field, our_schema) in properties {
            let Some(their_schema) = theirs["properties"].get(field) else {
                problems.push(format!("{definition}.{field}: KubeVirt has no such field"));
                continue;
            };
            let our_type = json_type(our_schema, ours);
            let their_type = json_type(their_schema, &swagger).or_else(|| {
                // Quantities and times are strings on the wire.
                their_schema
                    .get("$ref")
                    .and_then(Value::as_str)
                    .filter(|r| r.ends_with("Quantity") || r.ends_with(".Time"))
                    .map(|_| "string".to_string())
            });
            if let (Some(ours), Some(theirs)) = (&our_type, &their_type) {
                let compatible = ours == theirs
                    || (ours == "integer" && theirs == "number")
                    || (ours == "string" && theirs == "object" && field == "metadata");
                if !compatible {
                    problems.push(format!(
                        "{definition}.{field}: ours is {ours}, KubeVirt's is {theirs}"
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "fields differ from KubeVirt:\n{}",
        problems.join("\n")
    );
}

fn generated_table(swagger: &Value) -> String {
    let mut out = String::from(
        "//! Field names of the KubeVirt API objects that Ferrovirt models, from KubeVirt's OpenAPI\n\
         //! document (`kubevirt-openapi/swagger.json`). Validation uses them to tell a KubeVirt\n\
         //! field Ferrovirt does not support from a field nobody has.\n\
         //!\n\
         //! Generated by `UPDATE_KUBEVIRT_FIELDS=1 FERROVIRT_FIXTURES=DIR cargo test -p api\n\
         //! --features compat --test kubevirt_openapi`; do not edit.\n\n\
         /// (definition, its fields), sorted; the fields packed into lines by the generator.\n\
         #[rustfmt::skip]\n\
         pub const FIELDS: &[(&str, &[&str])] = &[\n",
    );
    let mut definitions: Vec<_> = modelled().into_iter().map(|(d, _)| d).collect();
    definitions.sort();
    definitions.dedup();
    for definition in definitions {
        let mut fields: Vec<_> = swagger["definitions"][definition]["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        fields.sort();
        out.push_str(&format!("    ({definition:?}, &[\n"));
        let mut line = String::new();
        for field in fields {
            let item = format!("{field:?},");
            if !line.is_empty() && 8 + line.len() + 1 + item.len() > 100 {
                out.push_str(&format!("        {line}\n"));
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&item);
        }
        if !line.is_empty() {
            out.push_str(&format!("        {line}\n"));
        }
        out.push_str("    ]),\n");
    }
    out.push_str(
        "];\n\n\
         /// The fields of KubeVirt's `definition` (such as `v1.Devices`); none for one not listed.\n\
         pub fn fields(definition: &str) -> &'static [&'static str] {\n    \
         FIELDS\n        .binary_search_by(|(d, _)| d.cmp(&definition))\n        \
         .map_or(&[], |i| FIELDS[i].1)\n}\n\n\
         /// Whether KubeVirt's `definition` has `field`.\n\
         pub fn has_field(definition: &str, field: &str) -> bool {\n    \
         fields(definition).binary_search(&field).is_ok()\n}\n",
    );
    out
}

#[test]
fn field_table_is_generated_from_kubevirt_openapi() {
    let swagger = common::swagger();
    let want = generated_table(&swagger);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kubevirt_fields.rs");
    let have = std::fs::read_to_string(&path).expect("src/kubevirt_fields.rs is readable");
    if std::env::var_os("UPDATE_KUBEVIRT_FIELDS").is_some() {
        std::fs::write(&path, &want).expect("src/kubevirt_fields.rs is writable");
        return;
    }
    assert!(
        have == want,
        "src/kubevirt_fields.rs is out of date: run UPDATE_KUBEVIRT_FIELDS=1 FERROVIRT_FIXTURES=DIR \
         cargo test -p api --features compat --test kubevirt_openapi"
    );
}

#[test]
fn field_table_answers_lookups() {
    assert!(api::kubevirt_fields::has_field("v1.Devices", "gpus"));
    assert!(api::kubevirt_fields::has_field("v1.Interface", "sriov"));
    assert!(!api::kubevirt_fields::has_field("v1.Devices", "gpu"));
    assert!(!api::kubevirt_fields::has_field("v1.NoSuchThing", "name"));
}
