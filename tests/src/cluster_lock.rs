//! One lock for every test that changes what the whole local cluster shares: the KubeVirt CR,
//! the operator's Deployment, the kubevirt.io CRDs, node labels, the components' workloads.
//!
//! 1. A test that changes such an object takes the lock exclusively for its whole
//!    change-and-check ([`ClusterChange::begin`], or [`ClusterLock::exclusive`]); a test that
//!    only needs them to stay as they are while it runs takes it shared
//!    ([`ClusterLock::shared`]).
//! 2. The lock is an flock(2) on [`LOCK_FILE`], so it holds across the threads of one test
//!    binary, across binaries and across crates (the operator's tests, the end-to-end tests,
//!    virt-api's cluster test), and against scripts: `flock LOCK_FILE CMD` takes it too
//!    (tests/kubevirt-suite/run.sh does). The kernel lets it go when its holder exits, however.
//! 3. [`ClusterChange`] also keeps the KubeVirt CR's spec as it found it and puts it back when
//!    dropped, before it lets the lock go: whatever the test's assertions did, the next holder
//!    finds the CR as it was.

use std::fs::{File, OpenOptions};
use std::io;

use rustix::fs::FlockOperation;

/// The lock's file. In /run/lock: it outlives `cluster.sh down` (which removes the cluster's
/// state directory) and goes at reboot, with every holder.
pub const LOCK_FILE: &str = "/run/lock/ferrovirt-cluster-tests.lock";

/// A held flock(2) on [`LOCK_FILE`]; dropping it lets the lock go.
#[derive(Debug)]
pub struct ClusterLock {
    _file: File,
}

impl ClusterLock {
    /// Waits until no other test holds the lock, and holds it alone.
    pub async fn exclusive() -> ClusterLock {
        Self::take_async(true).await
    }

    /// Waits until no test holds the lock exclusively, and holds it beside other readers.
    pub async fn shared() -> ClusterLock {
        Self::take_async(false).await
    }

    /// [`ClusterLock::exclusive`] for a caller outside an async runtime: blocks the thread.
    pub fn exclusive_blocking() -> ClusterLock {
        Self::take(true).unwrap_or_else(|e| panic!("locking {LOCK_FILE}: {e}"))
    }

    async fn take_async(exclusive: bool) -> ClusterLock {
        tokio::task::spawn_blocking(move || Self::take(exclusive))
            .await
            .expect("the thread taking the cluster lock")
            .unwrap_or_else(|e| panic!("locking {LOCK_FILE}: {e}"))
    }

    fn take(exclusive: bool) -> io::Result<ClusterLock> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(LOCK_FILE)?;
        let (now, wait) = if exclusive {
            (
                FlockOperation::NonBlockingLockExclusive,
                FlockOperation::LockExclusive,
            )
        } else {
            (
                FlockOperation::NonBlockingLockShared,
                FlockOperation::LockShared,
            )
        };
        if rustix::fs::flock(&file, now).is_err() {
            eprintln!("waiting for {LOCK_FILE}: another test is changing the cluster");
            rustix::fs::flock(&file, wait)?;
        }
        Ok(ClusterLock { _file: file })
    }
}

/// The exclusive [`ClusterLock`] and the KubeVirt CR's spec as it was when taken; dropping it
/// puts the spec back (when the CR exists and differs), then lets the lock go.
#[derive(Debug)]
pub struct ClusterChange {
    saved_spec: Option<serde_json::Value>,
    _lock: ClusterLock,
}

impl ClusterChange {
    /// Takes the lock exclusively, then reads the KubeVirt CR's spec to put back.
    pub async fn begin() -> ClusterChange {
        let lock = ClusterLock::exclusive().await;
        ClusterChange {
            saved_spec: kubevirt_spec(),
            _lock: lock,
        }
    }

    /// Puts the KubeVirt CR's spec back as it was now, as dropping does; the lock stays.
    pub fn restore_kubevirt_spec(&self) {
        let Some(saved) = &self.saved_spec else {
            return;
        };
        let current = kubevirt_spec();
        if current.is_none() || current.as_ref() == Some(saved) {
            return;
        }
        let out = set_kubevirt_spec(saved);
        if out.code != Some(0) {
            eprintln!("could not put the KubeVirt CR's spec back to {saved}: {out:?}");
        }
    }
}

impl Drop for ClusterChange {
    fn drop(&mut self) {
        self.restore_kubevirt_spec();
    }
}

/// Sets the KubeVirt CR's whole spec to `spec`, with kubectl (so that it works in `Drop`).
pub fn set_kubevirt_spec(spec: &serde_json::Value) -> crate::CommandOutput {
    let patch = serde_json::json!([{"op": "add", "path": "/spec", "value": spec}]);
    crate::kubectl(
        "kubevirt",
        &[
            "patch",
            "kv",
            "kubevirt",
            "--type",
            "json",
            "-p",
            &patch.to_string(),
        ],
    )
}

/// The KubeVirt CR's spec, read with kubectl (so that it works in `Drop`, outside a runtime);
/// `None` when there is no CR or it is being deleted.
pub fn kubevirt_spec() -> Option<serde_json::Value> {
    let out = crate::kubectl("kubevirt", &["get", "kv", "kubevirt", "-o", "json"]);
    if out.code != Some(0) {
        return None;
    }
    let mut kv: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
    if !kv["metadata"]["deletionTimestamp"].is_null() {
        return None;
    }
    Some(kv["spec"].take())
}
