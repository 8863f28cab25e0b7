//! virtctl: start, stop, restart, pause, unpause, console, migrate, migrate-cancel, guestosinfo,
//! version.
//!
//! Every command except `console`, `migrate-cancel` (it deletes the migration object) and
//! `version` is one PUT or GET to a subresource of
//! `subresources.kubevirt.io/v1` through kube-apiserver, which proxies it to virt-api
//! ([`cli::plan`] builds it; [`client`] sends it). `console` opens a WebSocket to the VMI's
//! console subresource and puts the terminal in raw mode ([`console`], [`terminal`]).
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod console;
pub mod migrate_cancel;
pub mod terminal;
