//! The migration controller: drives a `VirtualMachineInstanceMigration` through KubeVirt's
//! phases, with virt-handler doing the node-side work (see `handler::migration`).
//!
//! 1. Pending: the VMI must be Running and live-migratable ([`plan::check_migratable`]: no
//!    non-ReadWriteMany PVC, no hostDisk, the QEMU TCG backend); when it is not, the VMI's
//!    `LiveMigratable` condition says why and the migration fails with that reason. A
//!    migration waits while the cluster runs [`PARALLEL_MIGRATIONS_PER_CLUSTER`] migrations
//!    or its source node sends [`PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE`] (KubeVirt's defaults).
//!    Then the target launcher Pod is created ([`plan::render_target_pod`]: the VMI's launcher
//!    Pod, marked as a migration target, kept off the source node) and the VMI's
//!    `status.migrationState` started: Scheduling.
//! 2. Scheduling -> Scheduled when the Pod has a node (`targetNode`); -> PreparingTarget when
//!    it runs; -> TargetReady when the target handler has published `targetNodeAddress`;
//!    -> Running when the source handler has started sending (`mode`).
//! 3. The source handler reports `completed` or `failed`. Succeeded: the VMI moves to the
//!    target node (`status.nodeName`, the node label), the source Pod is deleted. Failed (or the
//!    target Pod failed or vanished): the target Pod is deleted; the VM runs on the source.
//! 4. Deleting an unfinished migration cancels it (`abortRequested`); a finalizer keeps the
//!    object until then.

pub mod plan;
pub mod reconcile;

/// KubeVirt's default `parallelMigrationsPerCluster`.
pub const PARALLEL_MIGRATIONS_PER_CLUSTER: usize = 5;
/// KubeVirt's default `parallelOutboundMigrationsPerNode`.
pub const PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE: usize = 2;
/// Label of a target launcher Pod: the UID of its migration (KubeVirt's name).
pub const MIGRATION_JOB_LABEL: &str = "kubevirt.io/migrationJobUID";
/// Label on a VMI while it migrates: the target node (KubeVirt's name).
pub const MIGRATION_TARGET_NODE_LABEL: &str = "kubevirt.io/migrationTargetNodeName";
/// Finalizer that keeps a migration until it is cancelled or finished.
pub const FINALIZER: &str = "kubevirt.io/migrationJobFinalize";

pub use plan::visible_pods;
