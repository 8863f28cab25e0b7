//! virt-operator: installs, upgrades and removes Ferrovirt from a `KubeVirt` CR.
//!
//! - [`manifests`] renders the components' objects, [`certs`] plans their certificates,
//!   [`install`] puts them together into the desired state of one CR;
//! - [`reconcile`] applies that state with server-side apply, reports status and conditions
//!   ([`status`]), and removes the install when the CR is deleted; [`context`] holds what both
//!   share (the reconcile context and error);
//! - [`release`] renders what a user installs: the operator's own manifest and a KubeVirt CR.
#![forbid(unsafe_code)]

pub mod certs;
pub mod context;
pub mod install;
pub mod manifests;
pub mod reconcile;
pub mod release;
pub mod status;
pub mod user_roles;
