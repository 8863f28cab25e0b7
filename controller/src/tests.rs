//! Unit tests of the pure planning functions, without a cluster.

mod pod;
mod pod_security;
mod pool_plan;
mod replicaset_plan;
mod vm_instancetype;
mod vm_plan;
mod vm_revision;
mod vmi_plan;
