//! Where `guest-images/build.sh` puts its outputs, and checks that they are there.

use std::fmt;
use std::path::{Path, PathBuf};

/// The line the tiny guest prints on its console (and in the kernel log) when it has applied
/// its cloud-init data and is about to offer a login prompt.
pub const READY_MARKER: &str = "FERROVIRT-GUEST-READY";

/// The cache `build.sh` writes to, unless `FERROVIRT_GUEST_IMAGES_CACHE` says otherwise.
pub const DEFAULT_CACHE_DIR: &str = "/var/cache/ferrovirt/guest-images";

/// The command that builds what is missing.
pub const BUILD_COMMAND: &str = "guest-images/build.sh";

/// An artifact that should have been built and is not there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingArtifact {
    pub path: PathBuf,
}

impl fmt::Display for MissingArtifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "guest image artifact {} is missing: build the guest images with `{}` (as root)",
            self.path.display(),
            BUILD_COMMAND
        )
    }
}

impl std::error::Error for MissingArtifact {}

/// One complete set of built artifacts (the `current` directory of the cache).
#[derive(Debug, Clone)]
pub struct Artifacts {
    dir: PathBuf,
}

impl Artifacts {
    /// The files every set has, relative to the set directory.
    pub const REQUIRED: [&'static str; 9] = [
        "vmlinux",
        "bzImage",
        "initramfs.cpio.gz",
        "rootdisk.img",
        "stock/vmlinuz",
        "stock/initramfs.cpio.gz",
        "oci/containerdisk/index.json",
        "oci/kernel-boot/index.json",
        "inputs.txt",
    ];

    /// The current set of the cache named by `FERROVIRT_GUEST_IMAGES_CACHE`, or of
    /// [`DEFAULT_CACHE_DIR`], after checking that every [`Self::REQUIRED`] file exists.
    pub fn locate() -> Result<Self, MissingArtifact> {
        let cache = std::env::var_os("FERROVIRT_GUEST_IMAGES_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE_DIR));
        Self::at(cache.join("current"))
    }

    /// The set in `dir`, after checking that every [`Self::REQUIRED`] file exists.
    pub fn at(dir: impl Into<PathBuf>) -> Result<Self, MissingArtifact> {
        let artifacts = Self { dir: dir.into() };
        for name in Self::REQUIRED {
            artifacts.require(name)?;
        }
        Ok(artifacts)
    }

    /// `name` inside the set, or the error naming it and the build command.
    pub fn require(&self, name: &str) -> Result<PathBuf, MissingArtifact> {
        let path = self.dir.join(name);
        if path.exists() {
            Ok(path)
        } else {
            Err(MissingArtifact { path })
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Our kernel as a PVH ELF (what `-M microvm` and linux-loader boot fastest).
    pub fn vmlinux(&self) -> PathBuf {
        self.dir.join("vmlinux")
    }

    /// Our kernel as a bzImage.
    pub fn bzimage(&self) -> PathBuf {
        self.dir.join("bzImage")
    }

    /// The tiny guest as an initramfs for our kernel.
    pub fn initramfs(&self) -> PathBuf {
        self.dir.join("initramfs.cpio.gz")
    }

    /// The tiny guest on an ext4 raw disk labelled `ferrovirt-root`.
    pub fn rootdisk(&self) -> PathBuf {
        self.dir.join("rootdisk.img")
    }

    /// Debian's stock cloud kernel.
    pub fn stock_kernel(&self) -> PathBuf {
        self.dir.join("stock/vmlinuz")
    }

    /// The tiny initramfs plus the stock kernel's virtio, vsock and file system modules.
    pub fn stock_initramfs(&self) -> PathBuf {
        self.dir.join("stock/initramfs.cpio.gz")
    }

    /// OCI image layout of the containerDisk (`/disk/disk.img`).
    pub fn containerdisk_layout(&self) -> PathBuf {
        self.dir.join("oci/containerdisk")
    }

    /// OCI image layout of the kernelBoot image (`/boot/vmlinuz`, `/boot/initramfs`).
    pub fn kernel_boot_layout(&self) -> PathBuf {
        self.dir.join("oci/kernel-boot")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_set_names_the_file_and_the_build_command() {
        let err = Artifacts::at("/nonexistent/ferrovirt/current").unwrap_err();
        assert_eq!(
            err.path,
            PathBuf::from("/nonexistent/ferrovirt/current/vmlinux")
        );
        let message = err.to_string();
        assert!(
            message.contains("/nonexistent/ferrovirt/current/vmlinux"),
            "{message}"
        );
        assert!(message.contains("guest-images/build.sh"), "{message}");
    }
}
