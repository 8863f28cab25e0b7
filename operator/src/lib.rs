//! virt-operator: installs, upgrades and removes Ferrovirt from a `KubeVirt` CR. For now it
//! holds the install manifests ([`manifests`]), which the operator will apply and keep in shape.
#![forbid(unsafe_code)]

pub mod manifests;
