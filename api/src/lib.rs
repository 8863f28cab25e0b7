//! The `kubevirt.io/v1` API.
#![forbid(unsafe_code)]
