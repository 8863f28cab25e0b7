//! Ferrovirt guest artifacts and the harness that boots them.
//!
//! `guest-images/build.sh` builds the artifacts (our microVM kernel, Debian's stock cloud kernel
//! with a virtio initramfs, the tiny busybox guest as initramfs and as ext4 root disk, and the
//! containerDisk OCI layouts) into `/var/cache/ferrovirt/guest-images/current`. This crate
//! finds them ([`artifacts`]), makes NoCloud seed disks ([`seed`]) and boots guests under
//! `qemu-system-x86_64 -M microvm -accel tcg` with a deadline on every wait ([`qemu`]). The
//! integration tests and the `bench-boot` binary are built on it.

#![forbid(unsafe_code)]

pub mod artifacts;
pub mod host;
pub mod l1;
pub mod qemu;
pub mod scratch;
pub mod seed;

pub use artifacts::{Artifacts, MissingArtifact, READY_MARKER};

/// The median of `values` (the mean of the two middle ones for an even count); `None` when
/// empty. The benchmarks' figure of a run set.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[middle]),
        _ => Some((sorted[middle - 1] + sorted[middle]) / 2.0),
    }
}

pub use qemu::{GuestError, GuestSpec, RunningGuest};
pub use seed::{NoCloudSeed, SeedFormat};

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(super::median(&[]), None);
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
