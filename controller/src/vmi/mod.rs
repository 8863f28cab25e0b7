//! The VMI controller: VirtualMachineInstance -> launcher Pod and the phases up to Scheduled.

pub mod plan;
pub mod reconcile;
