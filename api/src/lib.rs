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
//!
//! The modules are layered, and none depends on a module above it:
//! - at the bottom, the vocabulary: [`field_error`] (field paths and errors),
//!   [`kubevirt_fields`], [`other`], [`condition`], [`quantity`], [`duration`], [`selector`],
//!   [`siblings`];
//! - the kinds' types: [`domain`], [`volume`], [`kubevirt`], [`vmi`], [`instancetype_types`]
//!   (what a VM names of `instancetype.kubevirt.io`), [`vm`], [`migration`],
//!   [`migration_policy`], [`replicaset`], [`pool`];
//! - [`defaults`], then [`validation`] (which re-exports [`field_error`]'s types);
//! - the behaviour on top of them: [`instancetype`] (applying, expanding and admitting; it
//!   re-exports [`instancetype_types`]), [`snapshot`], [`clone`], [`object`], [`healthz`] and
//!   [`crd`];
//! - beside them: [`prometheus_text`] (the metrics' text format), and with the feature `client`,
//!   `client_metrics`, the components' kube client with its requests counted for Prometheus.
#![forbid(unsafe_code)]
// kube's `printcolumn(...)` attributes repeat `type_ = "string"`, which this lint mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

#[cfg(feature = "client")]
pub mod client_metrics;
pub mod clone;
pub mod condition;
pub mod crd;
pub mod defaults;
pub mod domain;
pub mod duration;
pub mod field_error;
pub mod healthz;
pub mod instancetype;
pub mod instancetype_types;
pub mod kubevirt;
#[rustfmt::skip]
pub mod kubevirt_fields;
pub mod launcher_pod;
pub mod masquerade;
pub mod migration;
pub mod migration_policy;
pub mod object;
pub mod other;
pub mod pool;
pub mod prometheus_text;
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
pub use field_error::{FieldError, FieldErrorKind, FieldErrors};
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
pub use vm::{RunStrategy, VirtualMachine, VirtualMachineSpec, VirtualMachineStatus};
pub use vmi::{
    VirtualMachineInstance, VirtualMachineInstanceSpec, VirtualMachineInstanceStatus, VmiPhase,
};
