//! When to give up on an outgoing migration, as KubeVirt's migration monitor does: no byte sent
//! for `progressTimeout` seconds, or more than `completionTimeoutPerGiB` seconds for each GiB to
//! migrate (guest memory, and the disks of a block migration). The source handler then cancels
//! it and the VM keeps running on the source.

use std::time::{Duration, Instant};

use api::kubevirt::MigrationConfiguration;

const GIB: f64 = (1u64 << 30) as f64;

/// Follows one migration's progress reports.
#[derive(Debug)]
pub struct Watchdog {
    progress_timeout: Duration,
    completion_timeout_per_gib: u64,
    /// Bytes to migrate at least (the guest's memory), before the launcher reports a total.
    floor_bytes: u64,
    started: Instant,
    last_progress: Instant,
    transferred: u64,
}

impl Watchdog {
    pub fn new(config: &MigrationConfiguration, guest_memory: u64, now: Instant) -> Self {
        Watchdog {
            progress_timeout: Duration::from_secs(config.progress_timeout()),
            completion_timeout_per_gib: config.completion_timeout_per_gib(),
            floor_bytes: guest_memory,
            started: now,
            last_progress: now,
            transferred: 0,
        }
    }

    /// Takes one report (`transferred` of `total` bytes at `now`); returns why the migration
    /// must be cancelled once one of the limits is passed.
    pub fn check(&mut self, transferred: u64, total: u64, now: Instant) -> Option<String> {
        if transferred > self.transferred {
            self.transferred = transferred;
            self.last_progress = now;
        }
        let stalled = now.saturating_duration_since(self.last_progress);
        if stalled >= self.progress_timeout {
            return Some(format!(
                "live migration stuck for {} s and has been aborted (progressTimeout {} s)",
                stalled.as_secs(),
                self.progress_timeout.as_secs()
            ));
        }
        let gib = total.max(self.floor_bytes) as f64 / GIB;
        let allowed = Duration::from_secs_f64(self.completion_timeout_per_gib as f64 * gib);
        let elapsed = now.saturating_duration_since(self.started);
        (elapsed > allowed).then(|| {
            format!(
                "live migration is not completed after {} s and has been aborted \
                 (completionTimeoutPerGiB {} s for {gib:.2} GiB: {} of {total} bytes migrated)",
                elapsed.as_secs(),
                self.completion_timeout_per_gib,
                self.transferred
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn config(progress: i64, per_gib: i64) -> MigrationConfiguration {
        MigrationConfiguration {
            progress_timeout: Some(progress),
            completion_timeout_per_gib: Some(per_gib),
            ..MigrationConfiguration::default()
        }
    }

    #[test]
    fn a_migration_that_keeps_sending_within_its_time_goes_on() {
        let t0 = Instant::now();
        let mut dog = Watchdog::new(&MigrationConfiguration::default(), 128 * MIB, t0);
        for s in 1..=18 {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(dog.check(s * MIB, 128 * MIB, at), None, "at {s} s");
        }
    }

    #[test]
    fn no_byte_sent_for_progress_timeout_cancels() {
        let t0 = Instant::now();
        let mut dog = Watchdog::new(&config(10, 1000), 128 * MIB, t0);
        assert_eq!(dog.check(MIB, 128 * MIB, t0 + Duration::from_secs(5)), None);
        // The same count for 9 s: still within the limit.
        assert_eq!(
            dog.check(MIB, 128 * MIB, t0 + Duration::from_secs(14)),
            None
        );
        let why = dog
            .check(MIB, 128 * MIB, t0 + Duration::from_secs(15))
            .expect("stuck for 10 s");
        assert!(why.contains("stuck for 10 s"), "{why}");
        assert!(why.contains("progressTimeout 10 s"), "{why}");
    }

    #[test]
    fn the_completion_limit_grows_with_what_there_is_to_migrate() {
        let t0 = Instant::now();
        // 4 s per GiB; 512 MiB of memory: 2 s before the launcher says more.
        let mut dog = Watchdog::new(&config(1000, 4), 512 * MIB, t0);
        assert_eq!(dog.check(MIB, 0, t0 + Duration::from_secs(2)), None);
        // The launcher reports 2 GiB with the disks: 8 s in all.
        assert_eq!(
            dog.check(2 * MIB, 2048 * MIB, t0 + Duration::from_secs(8)),
            None
        );
        let why = dog
            .check(3 * MIB, 2048 * MIB, t0 + Duration::from_millis(8001))
            .expect("past 8 s");
        assert!(why.contains("not completed after 8 s"), "{why}");
        assert!(
            why.contains("completionTimeoutPerGiB 4 s for 2.00 GiB"),
            "{why}"
        );
        assert!(why.contains(&format!("{} of", 3 * MIB)), "{why}");
    }
}
