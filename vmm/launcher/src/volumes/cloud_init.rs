//! The NoCloud seed disk: an ISO 9660 image labelled `cidata` holding `user-data`,
//! `meta-data` and (when given) `network-config`, with Joliet and Rock Ridge names so that the
//! guest sees the names unchanged. Written by `genisoimage` (Debian package `genisoimage`), or
//! by `xorriso -as mkisofs` (package `xorriso`) when genisoimage is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::plan::CloudInitSeed;

/// The volume label cloud-init's NoCloud datasource looks for.
pub const SEED_LABEL: &str = "cidata";

/// Why the seed disk could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("cannot stage the seed files in {0}")]
    Stage(PathBuf, #[source] std::io::Error),
    #[error(
        "neither genisoimage nor xorriso is installed (Debian packages genisoimage or xorriso)"
    )]
    NoTool,
    #[error("{tool} failed: {stderr}")]
    Tool { tool: String, stderr: String },
}

/// Writes the seed ISO to `target` (replacing it).
pub fn write_seed_iso(seed: &CloudInitSeed, target: &Path) -> Result<(), SeedError> {
    let staging = target.with_extension("seed.d");
    let stage_err = |e| SeedError::Stage(staging.clone(), e);
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(stage_err)?;
    let mut files = vec![
        ("user-data", &seed.user_data),
        ("meta-data", &seed.meta_data),
    ];
    if let Some(network) = &seed.network_config {
        files.push(("network-config", network));
    }
    for (name, data) in &files {
        std::fs::write(staging.join(name), data).map_err(stage_err)?;
    }
    let _ = std::fs::remove_file(target);
    let result = run_tool(
        &staging,
        target,
        &files.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
    );
    let _ = std::fs::remove_dir_all(&staging);
    result
}

fn run_tool(staging: &Path, target: &Path, names: &[&str]) -> Result<(), SeedError> {
    let mkisofs_args = |command: &mut Command| {
        command
            .arg("-output")
            .arg(target)
            .args(["-volid", SEED_LABEL, "-joliet", "-rock", "-quiet"])
            .args(names)
            .current_dir(staging);
    };
    let (tool, mut command) = if crate::util::find_in_path("genisoimage").is_some() {
        ("genisoimage", Command::new("genisoimage"))
    } else if crate::util::find_in_path("xorriso").is_some() {
        let mut command = Command::new("xorriso");
        command.args(["-as", "mkisofs"]);
        ("xorriso", command)
    } else {
        return Err(SeedError::NoTool);
    };
    mkisofs_args(&mut command);
    let output = command.output().map_err(|e| SeedError::Tool {
        tool: tool.to_string(),
        stderr: e.to_string(),
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(SeedError::Tool {
            tool: tool.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_iso_has_the_label_and_the_files() {
        let dir = std::env::temp_dir().join(format!("launcher-seed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let seed = CloudInitSeed {
            user_data: b"#!/bin/sh\necho from-user-data\n".to_vec(),
            meta_data: b"instance-id: abc\nlocal-hostname: vm1\n".to_vec(),
            network_config: Some(b"version: 2\n".to_vec()),
        };
        let target = dir.join("ci.img");
        write_seed_iso(&seed, &target).unwrap();
        let image = std::fs::read(&target).unwrap();
        // Primary volume descriptor at 32 KiB: type 1, "CD001", volume id at offset 40.
        let pvd = &image[32768..32768 + 2048];
        assert_eq!(&pvd[1..6], b"CD001");
        assert!(
            pvd[40..72].starts_with(SEED_LABEL.to_uppercase().as_bytes())
                || pvd[40..72].starts_with(SEED_LABEL.as_bytes())
        );
        let contains = |needle: &[u8]| image.windows(needle.len()).any(|w| w == needle);
        assert!(contains(b"echo from-user-data"));
        assert!(contains(b"local-hostname: vm1"));
        assert!(contains(b"network-config"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
