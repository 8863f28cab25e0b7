//! PersistentVolumes and claims on the local cluster, which has no provisioner: each volume is
//! a hostPath directory of this host (the netns nodes share its filesystem), so a test
//! prepares and reads a claim's files here.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

/// A test's hostPath volumes: their directories under one of this host's, and the
/// PersistentVolumes made on them. Dropped, whatever the test's outcome, it deletes the volumes
/// (one left `Available` would be bound by a later test's claim) and the directory.
pub struct HostVolumes {
    pub dir: PathBuf,
    volumes: Vec<String>,
}

impl HostVolumes {
    /// The volumes of the test in `namespace`: `/var/tmp/ferrovirt-e2e-<namespace>`.
    pub fn new(namespace: &str) -> HostVolumes {
        HostVolumes {
            dir: PathBuf::from(format!("/var/tmp/ferrovirt-e2e-{namespace}")),
            volumes: Vec::new(),
        }
    }

    /// A hostPath PersistentVolume `name` of 64 MiB on `dir`, of no storage class; bound
    /// ahead to claim `claim` (namespace, name) when given, else free for any claim of no class
    /// that fits.
    pub async fn volume(
        &mut self,
        client: &Client,
        name: &str,
        dir: &Path,
        claim: Option<(&str, &str)>,
    ) {
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
        self.volumes.push(name.to_string());
    }

    /// A hostPath PersistentVolume `name` on `dir`, bound ahead to claim `name` in
    /// `namespace`, and the claim.
    pub async fn bound_claim(&mut self, client: &Client, namespace: &str, name: &str, dir: &Path) {
        self.volume(client, name, dir, Some((namespace, name)))
            .await;
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
}

impl Drop for HostVolumes {
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.volumes);
        crate::clean_up(move |client| async move {
            let volumes: Api<PersistentVolume> = Api::all(client);
            for name in names {
                let _ = volumes.delete(&name, &DeleteParams::default()).await;
            }
        });
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
