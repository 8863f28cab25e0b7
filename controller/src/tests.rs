//! Unit tests of the pure planning functions, without a cluster.

mod pod;
mod replicaset_plan;
mod vm_plan;
mod vmi_plan;
