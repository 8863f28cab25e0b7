//! NoCloud seed disks: `user-data`, `meta-data` and `network-config` on a disk labelled
//! `cidata`, as KubeVirt's `cloudInitNoCloud` volume provides them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file system of the seed disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedFormat {
    /// ISO 9660 with Joliet and Rock Ridge, label `cidata` (what KubeVirt writes), via
    /// `genisoimage`.
    Iso9660,
    /// FAT, label `CIDATA`, via `mkfs.vfat` and `mcopy`.
    Vfat,
}

/// The contents of a NoCloud seed.
#[derive(Debug, Clone, Default)]
pub struct NoCloudSeed {
    pub user_data: String,
    pub meta_data: String,
    pub network_config: Option<String>,
}

/// A step of writing a seed disk that failed.
#[derive(Debug)]
pub enum SeedError {
    WriteFile(PathBuf, std::io::Error),
    /// A host tool could not be run (`genisoimage`, `mkfs.vfat`, `mcopy`).
    RunTool(&'static str, std::io::Error),
    ToolFailed(&'static str, String),
}

impl fmt::Display for SeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeedError::WriteFile(path, e) => write!(f, "writing {}: {e}", path.display()),
            SeedError::RunTool(tool, e) => {
                write!(f, "running {tool}: {e} (guest-images/build.sh installs it)")
            }
            SeedError::ToolFailed(tool, stderr) => write!(f, "{tool} failed: {stderr}"),
        }
    }
}

impl std::error::Error for SeedError {}

impl NoCloudSeed {
    /// Writes the seed disk image into `dir` and returns its path.
    pub fn write(&self, dir: &Path, format: SeedFormat) -> Result<PathBuf, SeedError> {
        let files_dir = dir.join("seed-files");
        std::fs::create_dir_all(&files_dir)
            .map_err(|e| SeedError::WriteFile(files_dir.clone(), e))?;
        let mut names = vec!["user-data", "meta-data"];
        write_file(&files_dir.join("user-data"), &self.user_data)?;
        write_file(&files_dir.join("meta-data"), &self.meta_data)?;
        if let Some(network_config) = &self.network_config {
            write_file(&files_dir.join("network-config"), network_config)?;
            names.push("network-config");
        }
        match format {
            SeedFormat::Iso9660 => {
                let image = dir.join("cidata.iso");
                let mut command = Command::new("genisoimage");
                command
                    .args(["-quiet", "-volid", "cidata", "-joliet", "-rock", "-output"])
                    .arg(&image)
                    .arg(&files_dir);
                run("genisoimage", &mut command)?;
                Ok(image)
            }
            SeedFormat::Vfat => {
                let image = dir.join("cidata.vfat");
                let _ = std::fs::remove_file(&image);
                let mut mkfs = Command::new("mkfs.vfat");
                mkfs.args(["-n", "CIDATA", "-C"]).arg(&image).arg("2048");
                run("mkfs.vfat", &mut mkfs)?;
                let mut mcopy = Command::new("mcopy");
                mcopy.arg("-i").arg(&image);
                for name in names {
                    mcopy.arg(files_dir.join(name));
                }
                mcopy.arg("::/");
                run("mcopy", &mut mcopy)?;
                Ok(image)
            }
        }
    }
}

fn write_file(path: &Path, contents: &str) -> Result<(), SeedError> {
    std::fs::write(path, contents).map_err(|e| SeedError::WriteFile(path.to_path_buf(), e))
}

fn run(tool: &'static str, command: &mut Command) -> Result<(), SeedError> {
    let output = command.output().map_err(|e| SeedError::RunTool(tool, e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(SeedError::ToolFailed(
            tool,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    }
}
