//! The Ferrovirt VMM: a microVM on KVM built from rust-vmm crates, and virt-launcher.

pub mod config;
