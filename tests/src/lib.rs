//! End-to-end tests of Ferrovirt on the local cluster (`tests/cluster/`).
#![forbid(unsafe_code)]
