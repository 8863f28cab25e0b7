//! Volumes: the pure [`plan`] says which file backs each disk (it is the converter's
//! [`crate::converter::volumes`], re-exported here); [`prepare`] makes those files (I/O),
//! [`container_disk`] finds a containerDisk's image and [`cloud_init`] writes the NoCloud seed
//! disk.

pub mod cloud_init;
pub mod container_disk;
pub mod prepare;

pub use crate::converter::volumes as plan;
