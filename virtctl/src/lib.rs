//! virtctl: start, stop, restart, pause, unpause, console, vnc, vnc screenshot, migrate,
//! migrate-cancel, guestosinfo, userlist, fslist, soft-reboot, reset, port-forward, ssh, scp,
//! version, expand, create instancetype, create preference, create vm.
//!
//! Every command except `console`, `vnc`, `migrate-cancel` (it deletes the migration object),
//! `version`, `expand` and `create` is one PUT or GET to a subresource of
//! `subresources.kubevirt.io/v1` through kube-apiserver, which proxies it to virt-api
//! ([`cli::plan`] builds it; [`client`] sends it). `console` opens a WebSocket to the VMI's
//! console subresource and puts the terminal in raw mode ([`console`], [`terminal`]);
//! `vnc` one to its vnc subresource, relayed to one local VNC client, a viewer it starts or
//! (`--proxy-only`) one that connects to the port it prints ([`vnc`]); `vnc screenshot` writes
//! the PNG it GETs to a file; `port-forward` one WebSocket per connection to the `portforward`
//! subresource ([`portforward`]); `ssh` and `scp` run the local OpenSSH client through it
//! ([`ssh`]). The WebSocket client is shared ([`websocket`]).
//! `expand` is a GET of a VM's `expand-spec` or a PUT of a file's VM to `expand-vm-spec`,
//! printed as KubeVirt prints it ([`expand`], [`yaml`]). `create instancetype`,
//! `create preference` and `create vm` only write a manifest, with no cluster ([`create`],
//! [`create_vm`], [`quantity`], [`goflags`]).
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod console;
pub mod create;
pub mod create_vm;
pub mod expand;
pub mod goflags;
pub mod migrate_cancel;
pub mod portforward;
pub mod portforward_udp;
pub mod quantity;
pub mod ssh;
pub mod terminal;
pub mod vnc;
pub mod websocket;
pub mod yaml;
