//! The VirtualMachinePool controller (`pool.kubevirt.io`).
pub mod plan;
pub mod reconcile;
