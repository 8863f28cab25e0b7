//! virt-controller: reconciles `VirtualMachine` -> `VirtualMachineInstance` and VMI -> launcher
//! Pod. Planning is pure (`pod::render_launcher_pod`, `vm::plan`, `vmi::plan`) and unit-tested;
//! the reconcilers only read, plan and apply. The kinds of KubeVirt's other API groups, which
//! Ferrovirt serves without implementing them, are marked not supported ([`unsupported`]).
#![forbid(unsafe_code)]

pub mod clone;
pub mod config;
pub mod context;
mod error;
pub mod lease;
pub mod metrics;
pub mod migration;
pub mod node;
pub mod pod;
pub mod pool;
pub mod replicaset;
pub mod run;
pub mod snapshot;
pub mod unsupported;
pub mod vm;
pub mod vmi;

pub use error::Error;

#[cfg(test)]
mod tests;
