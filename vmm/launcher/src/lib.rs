//! virt-launcher: one per VMI, inside the launcher Pod. It turns the VMI into a running VM and
//! answers virt-handler.
//!
//! Flow of a `SyncVMI` call ([`server`]):
//! 1. parse, default and validate the VMI JSON ([`converter::admit_vmi`]);
//! 2. choose the backend, in-process KVM or QEMU TCG ([`backend::choose`]);
//! 3. read the boot disk for the user's own kernel, initrd and command line ([`discovery`]);
//! 4. convert the VMI with the host facts (the boot discovery among them) into a
//!    `vmm::config::VmConfig` and the boot choice ([`converter::convert`], pure);
//! 5. prepare its volumes: containerDisk copies, emptyDisks, the cloud-init seed ([`volumes`]);
//! 6. set up the pod network when the VM has an interface ([`network`]), and boot;
//! 7. relay the serial console to `console-sock` ([`console`]) and push every domain state
//!    change to the handler's notify socket ([`server::notify`]);
//! 8. poll the guest agent, when the backend has its channel ([`agent`]), for the domain's
//!    `guest_agent` report; its changes are domain events too.
//!
//! The modules are layered, each using only those before it: [`util`] (error chains, `PATH`
//! lookups) at the bottom, then the pure [`converter`] (the volume plan among its pieces), then
//! the I/O of one concern each ([`volumes`], then [`discovery`]; [`network`]; [`backend`], then
//! [`domain`], the launcher's record of its VM; [`console`]; [`agent`]), and [`server`] on top.
//!
//! What it shares with virt-handler and virt-controller (the `launcher.v1` API, the socket
//! names, the directories, the limits) is the `contract` crate.
#![forbid(unsafe_code)]

pub mod agent;
pub mod backend;
pub mod console;
#[cfg(test)]
mod contract_tests;
pub mod converter;
pub mod discovery;
pub mod domain;
pub mod network;
pub mod server;
pub mod util;
pub mod volumes;
