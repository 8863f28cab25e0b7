//! virt-handler's part of a live migration: preparing the target launcher, starting the
//! source launcher, and carrying the stream between the two nodes over mutual TLS.
//!
//! virt-controller drives the migration through the VMI's `status.migrationState`; every
//! handler watches the VMIs and acts on those whose migration names its node:
//!
//! 1. Target node (`targetNode` is this node, no `targetNodeAddress` yet): once the target
//!    launcher Pod runs, call its `PrepareMigrationTarget` (it starts QEMU waiting on
//!    `migration-target-sock`), listen on a TCP port of this handler's Pod IP
//!    ([`proxy::listen_target`]) and publish `ip:port` as `targetNodeAddress`.
//! 2. Source node (`sourceNode` is this node and `targetNodeAddress` is set): listen on
//!    `migration-source-sock` in the source launcher's socket directory, relay what arrives
//!    there to the target over TLS ([`proxy::relay_source`]), call the launcher's `Migrate`
//!    with that socket and the `bandwidthPerMigration` and `maxDowntimeMs` of the settings
//!    virt-controller wrote into `migrationState.migrationConfiguration` (the KubeVirt CR's,
//!    with the MigrationPolicy's over them), and set
//!    `mode: PreCopy`. Then follow the launcher's migration status, cancelling it when
//!    [`watchdog`] says it is stuck or too slow, and report the end: `completed` or `failed`
//!    (with `failureReason`) and `endTimestamp`, with an event that gives the total time and
//!    the guest's downtime.
//! 3. `abortRequested` (the migration object was deleted while the source was sending): call
//!    `CancelMigration` and report how the stream ended as in step 2: `failed` when the abort
//!    stopped it (the VM keeps running on the source), `completed` when the switch-over had
//!    already happened (the VM runs on the target, whose Pod virt-controller then keeps).
//! 4. A handler that restarts while its launcher sends finds `mode` set and no task of its own:
//!    it follows the launcher's migration record to the end, as in step 2. One that restarted
//!    after `Migrate` but before `mode` was recorded asks the launcher first ([`sending`]) and
//!    follows the migration it finds instead of starting another. The end is reported until
//!    the API server takes it.
//!
//! After the switch-over the source launcher reports its domain Shutoff ("migrated to the
//! target"); [`migrated_away`] tells the VMI reconciler not to take that for the guest's end.

pub mod proxy;
pub mod reconcile;
pub mod tls;
pub mod watchdog;

use contract::proto::v1::{Domain, MigrationStatus};

/// Whether `domain` is a source whose VM has moved to the target (its state is not the VMI's).
pub fn migrated_away(domain: &Domain) -> bool {
    domain
        .migration
        .as_ref()
        .is_some_and(|m| !m.target && m.status == MigrationStatus::Completed as i32)
}

/// Whether `domain` is a source that is sending its VM, or has sent it: a `Migrate` was taken
/// and a second one must not be made (the launcher refuses it, and the answer is in the record).
/// An outgoing migration that failed or was cancelled is not: the VM is still here, and a new
/// migration may start.
pub fn sending(domain: &Domain) -> bool {
    domain.migration.as_ref().is_some_and(|m| {
        !m.target
            && (m.status == MigrationStatus::Active as i32
                || m.status == MigrationStatus::Completed as i32)
    })
}

#[cfg(test)]
mod tests {
    use contract::proto::v1::MigrationInfo;

    use super::*;

    /// A domain with a migration record.
    fn with(status: MigrationStatus, target: bool) -> Domain {
        Domain {
            migration: Some(MigrationInfo {
                status: status as i32,
                target,
                ..MigrationInfo::default()
            }),
            ..Domain::default()
        }
    }

    #[test]
    fn only_a_completed_outgoing_migration_moves_the_vm_away() {
        assert!(migrated_away(&with(MigrationStatus::Completed, false)));
        assert!(!migrated_away(&with(MigrationStatus::Completed, true)));
        assert!(!migrated_away(&with(MigrationStatus::Failed, false)));
        assert!(!migrated_away(&with(MigrationStatus::Active, false)));
        assert!(!migrated_away(&Domain::default()));
    }

    #[test]
    fn a_source_that_sends_or_has_sent_takes_no_second_migrate() {
        assert!(sending(&with(MigrationStatus::Active, false)));
        assert!(sending(&with(MigrationStatus::Completed, false)));
        // An earlier attempt that ended with the VM still here: a new one may start.
        assert!(!sending(&with(MigrationStatus::Failed, false)));
        assert!(!sending(&with(MigrationStatus::Cancelled, false)));
        // A VM that arrived by migration may leave the same way.
        assert!(!sending(&with(MigrationStatus::Completed, true)));
        assert!(!sending(&with(MigrationStatus::Active, true)));
        assert!(!sending(&Domain::default()));
    }
}
