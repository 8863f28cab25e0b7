//! VM snapshots and restores (`snapshot.kubevirt.io`), as KubeVirt's snapshot and restore
//! controllers run them: [`take`] locks the VM, stores it in a content with a copy of its
//! claims' data and unlocks it; [`restore`] writes a stored VM, and its claims' data, into its
//! target once the target runs nothing. What each writes is decided by the pure functions of
//! [`plan`]; these modules read and apply. The data is copied by the Pods of [`copier`]
//! (`volumes` runs them for a snapshot's content, pausing or freezing a running VM meanwhile).

pub mod copier;
pub mod plan;
pub mod restore;
pub mod take;
mod volumes;

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Adds or removes one finalizer of an object, guarded by its resourceVersion.
async fn set_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
    present: bool,
) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let has = object.finalizers().iter().any(|f| f == finalizer);
    if has == present {
        return Ok(());
    }
    let mut finalizers: Vec<String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if present {
        finalizers.push(finalizer.to_string());
    }
    let patch = json!({"metadata": {"finalizers": finalizers,
                                    "resourceVersion": object.resource_version()}});
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// The text of an API error as the API server wrote it (a webhook's denial included).
fn error_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(e) => e.message.clone(),
        other => other.to_string(),
    }
}
