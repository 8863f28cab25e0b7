//! Test helpers: bootdisk's [`bootdisk::testing`] (the committed fixtures, the content pattern
//! their files follow, MBR and GPT builders) and a FAT filesystem builder.
#![allow(dead_code)]

pub mod fat;

pub use bootdisk::testing::*;
