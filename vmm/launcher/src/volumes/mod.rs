//! Volumes: the pure [`plan`] says which file backs each disk; [`prepare`] makes those files
//! (I/O), and [`cloud_init`] writes the NoCloud seed disk.

pub mod cloud_init;
pub mod plan;
pub mod prepare;
