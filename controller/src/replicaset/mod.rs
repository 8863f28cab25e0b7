//! The VirtualMachineInstanceReplicaSet controller: `plan` (pure) and `reconcile` (applies it).

pub mod plan;
pub mod reconcile;
