//! Any kubevirt.io object, picked by `apiVersion` and `kind`: what the webhooks and tools
//! receive before they know which kind it is.

use serde_json::Value;

use crate::defaults;
use crate::validation::{self, FieldError, Path};
use crate::{
    KubeVirt, MigrationPolicy, VirtualMachine, VirtualMachineInstance,
    VirtualMachineInstanceMigration, VirtualMachineInstanceReplicaSet, VirtualMachinePool,
};

/// The API version Ferrovirt serves.
pub const API_VERSION: &str = "kubevirt.io/v1";
/// The API versions of `VirtualMachinePool` (v1beta1 stored, v1alpha1 the same schema).
pub const POOL_API_VERSIONS: [&str; 2] = ["pool.kubevirt.io/v1beta1", "pool.kubevirt.io/v1alpha1"];
/// The API version of `MigrationPolicy`.
pub const MIGRATION_POLICY_API_VERSION: &str = "migrations.kubevirt.io/v1alpha1";

/// One object of a kind Ferrovirt serves.
#[derive(Clone, Debug, PartialEq)]
pub enum KubeVirtObject {
    VirtualMachine(Box<VirtualMachine>),
    VirtualMachineInstance(Box<VirtualMachineInstance>),
    VirtualMachineInstanceMigration(Box<VirtualMachineInstanceMigration>),
    VirtualMachineInstanceReplicaSet(Box<VirtualMachineInstanceReplicaSet>),
    KubeVirt(Box<KubeVirt>),
    VirtualMachinePool(Box<VirtualMachinePool>),
    MigrationPolicy(Box<MigrationPolicy>),
}

/// Why a JSON value is not an object Ferrovirt serves.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("apiVersion and kind are required")]
    MissingTypeMeta,
    #[error("{api_version} {kind} is not served by ferrovirt (it serves {API_VERSION} VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration, VirtualMachineInstanceReplicaSet and KubeVirt, pool.kubevirt.io/v1beta1 VirtualMachinePool and migrations.kubevirt.io/v1alpha1 MigrationPolicy)")]
    KindNotServed { api_version: String, kind: String },
    #[error("malformed {kind}: {source}")]
    Malformed {
        kind: String,
        #[source]
        source: serde_json::Error,
    },
}

impl KubeVirtObject {
    /// Picks the kind from `apiVersion` and `kind` and deserialises the value as that kind.
    pub fn from_value(value: Value) -> Result<Self, ParseError> {
        let field = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_string);
        let (Some(api_version), Some(kind)) = (field("apiVersion"), field("kind")) else {
            return Err(ParseError::MissingTypeMeta);
        };
        let malformed = |source| ParseError::Malformed {
            kind: kind.clone(),
            source,
        };
        if POOL_API_VERSIONS.contains(&api_version.as_str()) && kind == "VirtualMachinePool" {
            return Ok(Self::VirtualMachinePool(
                serde_json::from_value(value).map_err(malformed)?,
            ));
        }
        if api_version == MIGRATION_POLICY_API_VERSION && kind == "MigrationPolicy" {
            return Ok(Self::MigrationPolicy(
                serde_json::from_value(value).map_err(malformed)?,
            ));
        }
        if api_version != API_VERSION {
            return Err(ParseError::KindNotServed { api_version, kind });
        }
        let object = match kind.as_str() {
            "VirtualMachine" => {
                Self::VirtualMachine(serde_json::from_value(value).map_err(malformed)?)
            }
            "VirtualMachineInstance" => {
                Self::VirtualMachineInstance(serde_json::from_value(value).map_err(malformed)?)
            }
            "VirtualMachineInstanceMigration" => Self::VirtualMachineInstanceMigration(
                serde_json::from_value(value).map_err(malformed)?,
            ),
            "VirtualMachineInstanceReplicaSet" => Self::VirtualMachineInstanceReplicaSet(
                serde_json::from_value(value).map_err(malformed)?,
            ),
            "KubeVirt" => Self::KubeVirt(serde_json::from_value(value).map_err(malformed)?),
            _ => return Err(ParseError::KindNotServed { api_version, kind }),
        };
        Ok(object)
    }

    /// Serialises the object back to JSON.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        match self {
            Self::VirtualMachine(o) => serde_json::to_value(o),
            Self::VirtualMachineInstance(o) => serde_json::to_value(o),
            Self::VirtualMachineInstanceMigration(o) => serde_json::to_value(o),
            Self::VirtualMachineInstanceReplicaSet(o) => serde_json::to_value(o),
            Self::KubeVirt(o) => serde_json::to_value(o),
            Self::VirtualMachinePool(o) => serde_json::to_value(o),
            Self::MigrationPolicy(o) => serde_json::to_value(o),
        }
    }

    /// Applies the defaults of the object's kind.
    pub fn apply_defaults(&mut self) {
        match self {
            Self::VirtualMachine(o) => defaults::default_vm(o),
            Self::VirtualMachineInstance(o) => defaults::default_vmi(o),
            Self::VirtualMachineInstanceMigration(o) => defaults::default_migration(o),
            Self::VirtualMachineInstanceReplicaSet(o) => defaults::default_replica_set(o),
            Self::KubeVirt(o) => defaults::default_kubevirt(o),
            // KubeVirt has no defaults for a pool (its VMs get the VM defaults when created) or a
            // migration policy.
            Self::VirtualMachinePool(_) | Self::MigrationPolicy(_) => {}
        }
    }

    /// Validates the object with the rules of its kind.
    pub fn validate(&self) -> Result<(), Vec<FieldError>> {
        match self {
            Self::VirtualMachine(o) => validation::validate_vm(o),
            Self::VirtualMachineInstance(o) => validation::validate_vmi(o),
            Self::VirtualMachineInstanceMigration(o) => validation::validate_migration(o),
            Self::VirtualMachineInstanceReplicaSet(o) => validation::validate_replica_set(o),
            Self::KubeVirt(o) => validation::validate_kubevirt(o),
            Self::VirtualMachinePool(o) => validation::validate_pool(o),
            Self::MigrationPolicy(o) => validation::validate_migration_policy(o),
        }
    }
}

/// Turns a deserialisation error into a field error at the object's root, for callers that
/// report everything as field errors.
pub fn parse_error_to_field_error(error: &ParseError) -> FieldError {
    FieldError::invalid(Path::root(""), error.to_string())
}
