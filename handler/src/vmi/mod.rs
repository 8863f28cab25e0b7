//! The VMIs of this node: sync them to their launchers and report their status.

pub mod reconcile;
pub mod status;
