//! The `kubevirt.io/v1` API as Ferrovirt serves it: the Rust types of `VirtualMachine`,
//! `VirtualMachineInstance`, `VirtualMachineInstanceMigration`,
//! `VirtualMachineInstanceReplicaSet`, `KubeVirt`, `pool.kubevirt.io`'s `VirtualMachinePool` and
//! `migrations.kubevirt.io`'s `MigrationPolicy`, their CRDs, and the pure defaulting and
//! validation functions that virt-api's webhooks, the controllers and the launcher share; and
//! the CRDs of KubeVirt's other kinds, served but not implemented ([`siblings`]).
//!
//! Field names and JSON shapes are KubeVirt's (from its OpenAPI document), so KubeVirt
//! manifests and clients work unchanged. What Ferrovirt does not model is kept, not dropped
//! (see [`other`]), and validation refuses it by field path.
#![forbid(unsafe_code)]
// kube's `printcolumn(...)` attributes repeat `type_ = "string"`, which this lint mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod clone;
pub mod condition;
pub mod crd;
pub mod defaults;
pub mod domain;
pub mod duration;
pub mod healthz;
pub mod instancetype;
pub mod kubevirt;
#[rustfmt::skip]
pub mod kubevirt_fields;
pub mod migration;
pub mod migration_policy;
pub mod object;
pub mod other;
pub mod pool;
pub mod quantity;
pub mod replicaset;
mod schema;
pub mod selector;
pub mod siblings;
pub mod snapshot;
pub mod validation;
pub mod vm;
pub mod vmi;
pub mod volume;

pub use condition::Condition;
pub use kubevirt::{KubeVirt, KubeVirtSpec, KubeVirtStatus};
pub use migration::{
    VirtualMachineInstanceMigration, VirtualMachineInstanceMigrationSpec,
    VirtualMachineInstanceMigrationStatus,
};
pub use migration_policy::{MigrationPolicy, MigrationPolicySpec};
pub use pool::{VirtualMachinePool, VirtualMachinePoolSpec, VirtualMachinePoolStatus};
pub use replicaset::{
    VirtualMachineInstanceReplicaSet, VirtualMachineInstanceReplicaSetSpec,
    VirtualMachineInstanceReplicaSetStatus,
};
pub use validation::{FieldError, FieldErrorKind, FieldErrors};
pub use vm::{RunStrategy, VirtualMachine, VirtualMachineSpec, VirtualMachineStatus};
pub use vmi::{
    VirtualMachineInstance, VirtualMachineInstanceSpec, VirtualMachineInstanceStatus, VmiPhase,
};
