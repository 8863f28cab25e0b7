//! The launcher's record of a migration (what GetDomain reports of it) and the poll that
//! ends it: the target runs the VM or fails, the source stops its copy or runs on.

use std::time::Instant;

use contract::proto::v1;

use super::{Launcher, Vm, CONSOLE_ATTACH_TIMEOUT};
use crate::backend::{MigrationPhase, MigrationProgress};
use crate::domain::DomainState;

/// The launcher's record of the VM's current or last migration.
#[derive(Clone, Debug)]
pub(super) struct MigrationTrack {
    pub(super) target: bool,
    pub(super) block: bool,
    pub(super) started: Instant,
    pub(super) ended: Option<Instant>,
    pub(super) progress: MigrationProgress,
}

impl MigrationTrack {
    pub(super) fn new(target: bool, block: bool) -> Self {
        MigrationTrack {
            target,
            block,
            started: Instant::now(),
            ended: None,
            progress: MigrationProgress::default(),
        }
    }

    pub(super) fn to_proto(&self) -> v1::MigrationInfo {
        let p = &self.progress;
        let status = match p.phase {
            MigrationPhase::Active => v1::MigrationStatus::Active,
            MigrationPhase::Completed => v1::MigrationStatus::Completed,
            MigrationPhase::Failed => v1::MigrationStatus::Failed,
            MigrationPhase::Cancelled => v1::MigrationStatus::Cancelled,
        };
        let elapsed = self.ended.unwrap_or_else(Instant::now) - self.started;
        v1::MigrationInfo {
            status: status.into(),
            target: self.target,
            error: p.error.clone(),
            transferred_bytes: p.transferred_bytes,
            remaining_bytes: p.remaining_bytes,
            total_bytes: p.total_bytes,
            total_ms: p
                .total_ms
                .unwrap_or_else(|| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)),
            downtime_ms: p.downtime_ms.unwrap_or(0),
            block: self.block,
        }
    }
}

impl Launcher {
    /// Follows a migration under way; at its end: the target runs the VM (or fails), the
    /// source stops its copy (or, when it failed, keeps running).
    pub(super) fn poll_migration(&self, vm: &mut Vm) {
        let Some(track) = vm.migration.as_mut() else {
            return;
        };
        if track.progress.phase.is_final() {
            return;
        }
        let Some(progress) = vm.backend.migration() else {
            return;
        };
        track.progress = progress.clone();
        if !progress.phase.is_final() {
            return;
        }
        track.ended = Some(Instant::now());
        let target = track.target;
        log::info!(
            "migration ({}) ended: {:?} {}",
            if target { "incoming" } else { "outgoing" },
            progress.phase,
            progress.error
        );
        match (target, progress.phase) {
            (true, MigrationPhase::Completed) => match vm.backend.resume() {
                Ok(()) => {
                    if let Some(path) = vm.console_after_migration.take() {
                        if let Err(e) = self.relay.attach(&path, CONSOLE_ATTACH_TIMEOUT) {
                            log::warn!("the console of the migrated VM: {e}");
                        }
                    }
                    vm.info.started = Instant::now();
                    self.set_state(vm, DomainState::Running, "migrated in");
                }
                Err(e) => {
                    let reason = format!("cannot run the migrated VM: {e}");
                    let _ = vm.backend.kill(&reason);
                    self.set_state(vm, DomainState::Crashed, &reason);
                }
            },
            (true, _) => {
                let reason = format!("the incoming migration failed: {}", progress.error);
                let _ = vm.backend.kill(&reason);
                self.set_state(vm, DomainState::Crashed, &reason);
            }
            (false, MigrationPhase::Completed) => {
                let reason = "migrated to the target";
                if let Err(e) = vm.backend.kill(reason) {
                    log::warn!("cannot stop the migrated VM: {e}");
                }
                self.set_state(vm, DomainState::Shutoff, reason);
            }
            (false, _) => {
                // Both backends run the VM again by themselves after a failed or cancelled migration.
                let _ = vm.backend.resume();
                let reason = format!("the migration failed, the VM runs here: {}", progress.error);
                self.set_state(vm, DomainState::Running, &reason);
            }
        }
    }
}
