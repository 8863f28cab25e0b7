//! The VM controller: VirtualMachine -> VirtualMachineInstance by run strategy.

pub mod instancetype;
pub mod plan;
pub mod reconcile;
pub mod revision;
