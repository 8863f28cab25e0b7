//! virt-operator: installs, upgrades and removes Ferrovirt from a `KubeVirt` CR.
//! Not written yet (issue "virt-operator").
#![forbid(unsafe_code)]
