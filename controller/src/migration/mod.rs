//! The migration controller: drives a `VirtualMachineInstanceMigration` through KubeVirt's
//! phases, with virt-handler doing the node-side work (see `handler::migration`).
//!
//! 1. Pending: the VMI must be Running and live-migratable ([`checks::check_migratable`]: no
//!    non-ReadWriteMany PVC, no hostDisk, the QEMU TCG backend); when it is not, the VMI's
//!    `LiveMigratable` condition says why and the migration fails with that reason. A
//!    migration waits while its VMI runs another migration, while the cluster runs
//!    `parallelMigrationsPerCluster` migrations, or while its source node sends
//!    `parallelOutboundMigrationsPerNode` (the KubeVirt CR's `spec.configuration.migrations`,
//!    KubeVirt's defaults 5 and 2 when unset). Then the VMI's `status.migrationState` is
//!    started, naming the target launcher Pod, and the Pod created
//!    ([`target::render_target_pod`]: the VMI's launcher Pod, marked as a migration target,
//!    kept off the source node, named from the migration's UID): Scheduling.
//! 2. Scheduling -> Scheduled when the Pod has a node (`targetNode`); -> PreparingTarget when
//!    it runs; -> TargetReady when the target handler has published `targetNodeAddress`;
//!    -> Running when the source handler has started sending (`mode`). A target Pod without a
//!    node after 300 s (KubeVirt's `unschedulablePendingTimeoutSeconds`) fails the migration.
//! 3. The source handler reports `completed` or `failed`. Succeeded: the VMI moves to the
//!    target node (`status.nodeName`, the node label), the source Pod is deleted. Failed (or the
//!    target Pod failed or vanished): the target Pod is deleted; the VM runs on the source.
//! 4. Deleting an unfinished migration cancels it; a finalizer keeps the object until then
//!    ([`checks::cancel_step`]). Before the source sends, it fails at once and the target Pod
//!    goes. While it sends, `abortRequested` asks the source handler to stop, and the target
//!    Pod stays until that handler reports the end: a switch-over that beat the abort
//!    completes as usual (`abortStatus: Failed`), since the VM then runs in the target Pod.
//!
//! Each pass reads the migration, its VMI and its Pods, decides with the pure [`plan::plan`]
//! what to write, and [`reconcile`] writes it. Passes come from watches ([`watch`]): of the
//! migrations, of the VMIs (the handlers report in `migrationState`), of the target Pods, and
//! of migrations that end (for those waiting on the limits). Two waits are timed because no
//! watch ends them: the unschedulable timeout, and a slow re-check of the limits.
//!
//! The migration policy in force ([`settings`]) is recorded in `migrationState` at the start.
//! The VMI controller keeps the `LiveMigratable` condition on every VMI with a node
//! ([`checks::refresh_live_migratable`]), as KubeVirt does, not only when a migration asks.

pub mod checks;
#[cfg(test)]
mod fixtures;
pub mod patch;
pub mod plan;
pub mod reconcile;
pub mod settings;
pub mod target;
pub mod watch;

pub use target::visible_pods;
