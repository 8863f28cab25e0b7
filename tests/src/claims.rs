//! PersistentVolumes and claims on the local cluster, which has no provisioner: each volume is
//! a hostPath directory of this host (the netns nodes share its filesystem), so a test
//! prepares and reads a claim's files here.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

/// A hostPath PersistentVolume `name` of 64 MiB on `dir`, of no storage class; bound ahead to
/// claim `claim` (namespace, name) when given, else free for any claim of no class that fits.
/// It is deleted by [`delete_volume`] (it is not namespaced).
pub async fn host_volume(client: &Client, name: &str, dir: &Path, claim: Option<(&str, &str)>) {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let mut spec = serde_json::json!({
        "capacity": {"storage": "64Mi"},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "hostPath": {"path": dir, "type": "Directory"},
    });
    if let Some((namespace, claim)) = claim {
        spec["claimRef"] = serde_json::json!({"namespace": namespace, "name": claim});
    }
    let volume =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec}))
            .expect("a PersistentVolume");
    volumes
        .create(&PostParams::default(), &volume)
        .await
        .unwrap_or_else(|e| panic!("creating PersistentVolume {name}: {e}"));
}

/// A hostPath PersistentVolume `name` on `dir`, bound ahead to claim `name` in `namespace`,
/// and the claim.
pub async fn bound_claim(client: &Client, namespace: &str, name: &str, dir: &Path) {
    host_volume(client, name, dir, Some((namespace, name))).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": "64Mi"}}
        }
    }))
    .expect("a PersistentVolumeClaim");
    claims
        .create(&PostParams::default(), &claim)
        .await
        .unwrap_or_else(|e| panic!("creating PersistentVolumeClaim {name}: {e}"));
}

pub async fn delete_volume(client: &Client, name: &str) {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let _ = volumes.delete(name, &DeleteParams::default()).await;
}

/// A directory of this host, removed with what it holds when dropped.
pub struct HostDir(pub PathBuf);

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
