//! The migration controller: drives a `VirtualMachineInstanceMigration` through KubeVirt's
//! phases, with virt-handler doing the node-side work (see `handler::migration`).
//!
//! 1. Pending: the VMI must be Running and live-migratable ([`plan::check_migratable`]: no
//!    non-ReadWriteMany PVC, no hostDisk, the QEMU TCG backend); when it is not, the VMI's
//!    `LiveMigratable` condition says why and the migration fails with that reason. A
//!    migration waits while the cluster runs `parallelMigrationsPerCluster` migrations or its
//!    source node sends `parallelOutboundMigrationsPerNode` (the KubeVirt CR's
//!    `spec.configuration.migrations`, KubeVirt's defaults 5 and 2 when unset).
//!    Then the target launcher Pod is created ([`plan::render_target_pod`]: the VMI's launcher
//!    Pod, marked as a migration target, kept off the source node) and the VMI's
//!    `status.migrationState` started: Scheduling.
//! 2. Scheduling -> Scheduled when the Pod has a node (`targetNode`); -> PreparingTarget when
//!    it runs; -> TargetReady when the target handler has published `targetNodeAddress`;
//!    -> Running when the source handler has started sending (`mode`).
//! 3. The source handler reports `completed` or `failed`. Succeeded: the VMI moves to the
//!    target node (`status.nodeName`, the node label), the source Pod is deleted. Failed (or the
//!    target Pod failed or vanished): the target Pod is deleted; the VM runs on the source.
//! 4. Deleting an unfinished migration cancels it; a finalizer keeps the object until then
//!    ([`plan::cancel_step`]). Before the source sends, it fails at once and the target Pod
//!    goes. While it sends, `abortRequested` asks the source handler to stop, and the target
//!    Pod stays until that handler reports the end: a switch-over that beat the abort
//!    completes as usual (`abortStatus: Failed`), since the VM then runs in the target Pod.
//!
//! The VMI controller keeps the `LiveMigratable` condition on every VMI with a node
//! ([`plan::refresh_live_migratable`]), as KubeVirt does, not only when a migration asks.

pub mod plan;
pub mod reconcile;
pub mod settings;

pub use plan::visible_pods;
