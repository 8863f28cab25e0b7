//! The contract between virt-controller, virt-handler and virt-launcher (KubeVirt's
//! `pkg/handler-launcher-com/cmd/v1` and the constants around it): what each side must agree on
//! with the others, in one place that all of them import and that links no hypervisor.
//!
//! - [`proto`] and [`client`] (feature `grpc`, on by default): the `launcher.v1` gRPC API the
//!   launcher serves on [`sockets::LAUNCHER_SOCKET`] and the handler calls, and the connection
//!   over a unix socket both sides use.
//! - [`version`]: the API versions and the rule that lets a newer handler drive an older
//!   launcher (the handler asks `Info` and uses the highest version both know).
//! - [`sockets`] and [`layout`]: the socket names in a VMI's socket directory and the
//!   directories of the node (hostPath) and of the launcher Pod.
//! - [`labels`], [`annotations`], [`finalizers`], [`resources`]: the metadata keys the
//!   components read from each other's objects.
//! - [`limits`]: what a VMI may ask for, derived from what the VMM can attach.
//! - [`base64`]: the one decoder of `userDataBase64`/`networkDataBase64`, used by virt-api's
//!   validation and by the launcher alike.
//! - [`podnet`]: the masquerade binding's pod network and its split: what virt-handler sets up
//!   in the launcher Pod's network namespace, what the launcher does there without privileges.
//! - [`smbios`]: what the guest's SMBIOS System Information may hold (`firmware.uuid` and
//!   `firmware.serial`), as virt-api admits it and the VMM writes it.
//! - [`capability`]: the node's KVM capability probe (the handler labels the node with it, the
//!   launcher chooses its backend by it).
//!
//! Without the `grpc` feature the crate has no dependency beyond `base64` and `thiserror`, so
//! the API types and the controller take the constants without tonic.
#![forbid(unsafe_code)]

pub mod annotations;
pub mod base64;
pub mod capability;
#[cfg(feature = "grpc")]
pub mod client;
pub mod finalizers;
pub mod labels;
pub mod layout;
pub mod limits;
pub mod podnet;
#[cfg(feature = "grpc")]
pub mod proto;
pub mod resources;
pub mod smbios;
pub mod sockets;
pub mod version;
