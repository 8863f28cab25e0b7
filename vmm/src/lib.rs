//! The Ferrovirt VMM: a microVM on KVM built from rust-vmm crates, and virt-launcher.
//!
//! One library, thin binaries on top. [`builder::build_and_boot`] turns a [`config::VmConfig`]
//! into a running VM in one documented order; the returned [`vmm::Vmm`] pauses, resumes, resets
//! in place ([`reset`]), shuts down and stops it and tells why it stopped ([`lifecycle::VmExit`]). [`capability::probe`] says
//! whether this host's `/dev/kvm` can run a standard guest at all.
//!
//! Layout (Firecracker's): `arch/` (x86_64 boot state: page tables, GDT, CPUID, MSRs, zero
//! page), `vstate/` (KVM VM, vCPUs, guest memory, the KVM side of PCI), `devices/legacy` (16550
//! serial, i8042, power-off port, ACPI PM registers), `devices/pci` (root bus, configuration
//! space, BARs, MSI-X), `devices/virtio` (mmio and pci transports, block, net, rng, vsock),
//! `acpi/` (the ACPI tables of the PCI machine).
//!
//! The modules are layered; each uses only those below it:
//! 1. [`poison`], [`error`], [`guest_memory`], [`wire`], [`lifecycle`] (the run state and exit
//!    reasons the devices and vCPUs share), [`capabilities`] and [`seccomp`]; [`agent`] (the
//!    QEMU guest agent protocol, which virt-launcher speaks over the guest agent port: QEMU's
//!    virtio-serial one, or this VMM's virtio-console) uses none of the others;
//! 2. [`arch`]; [`devices`]; then [`vstate`] (KVM state, with the KVM side of the devices'
//!    buses and interrupts);
//! 3. [`loader`], [`acpi`], [`config`], [`console`], [`payload`] (step 5 of a boot);
//! 4. [`vmm`] (the handle of a running VM), then [`reset`], [`builder`] and [`migration`].

pub mod acpi;
pub mod agent;
pub mod arch;
pub mod builder;
pub mod capabilities;
/// The host capability probe; it lives in the handler <-> launcher contract, so that
/// virt-handler probes its node without linking the VMM.
pub use contract::capability;
pub mod config;
pub mod console;
pub mod devices;
pub mod error;
pub mod guest_memory;
pub mod lifecycle;
pub mod loader;
pub mod migration;
pub mod payload;
pub mod poison;
pub mod reset;
pub mod seccomp;
pub mod smbios;
pub mod vmm;
pub mod vstate;
pub mod wire;

pub use arch::MAX_VIRTIO_DEVICES;
