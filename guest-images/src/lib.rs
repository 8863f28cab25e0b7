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
pub use qemu::{GuestError, GuestSpec, RunningGuest};
pub use seed::{NoCloudSeed, SeedFormat};
