//! Small helpers with no launcher state, at the bottom of the launcher so that every layer can
//! use them: the one-line error chain of logs and gRPC statuses, and the `PATH` lookup of the
//! host tools the launcher runs (QEMU, `qemu-img`, the ISO writers of cloud-init seeds), and
//! for tests a fresh scratch directory.

use std::path::PathBuf;

/// `error: cause: cause`, the whole chain on one line (the VMM's own formatter).
pub use vmm::error::error_chain as chain;

/// Looks `program` up in `PATH`.
pub fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// An empty directory `launcher-<name>-<pid>` under the temporary directory (a test's scratch
/// space; what a run before left there is removed).
#[cfg(test)]
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("launcher-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
