//! Finalizers virt-controller puts on the objects it must clean up after (KubeVirt's names).

/// On a VMI: kept until its launcher Pods are gone.
pub const VMI: &str = "kubevirt.io/virtualMachineControllerFinalize";
/// On a VirtualMachineInstanceMigration: kept until it is cancelled or finished.
pub const MIGRATION: &str = "kubevirt.io/migrationJobFinalize";
