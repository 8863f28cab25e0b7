//! The Pods that copy volume data for snapshots and restores. Ferrovirt has no CSI
//! `VolumeSnapshot`: a claim's `disk.img` is copied by a Pod of virt-controller's, from the
//! launcher image (its Debian coreutils), that mounts the claims and runs a list of [`Op`]s.
//! It runs as the launcher does (the same user and group, no capability), so it reads and
//! writes what a launcher may. [`pod`] builds it and [`progress`] reads it (both pure);
//! [`step`] creates it, and deletes it once it has ended. Its last lines of output on failure
//! (`cp: error writing ...: No space left on device`) are the error the snapshot or restore
//! shows.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaimVolumeSource, Pod, PodSpec, ResourceRequirements, Toleration,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use crate::config::ClusterConfig;
use crate::pod::{pod_security, restricted_container};

/// The label that marks a copy Pod, with what it is for (`backup`, `remove`, `restore`).
pub const LABEL: &str = "snapshot.ferrovirt.io/volume-copy";

/// Where the Pod mounts claim `NAME`: `CLAIMS_DIR/NAME`.
const CLAIMS_DIR: &str = "/claims";

/// The program: each operation, in order; the first that fails stops it (`set -e`).
/// - `copy FROM TO`: a new file `TO`, written beside it and renamed into place when whole;
/// - `overwrite FROM TO`: `FROM` over the existing `TO`, which keeps its inode, owner and mode
///   (the claim a VM uses);
/// - `remove DIR`: `DIR` and what it holds.
///
/// A source that is a symlink is refused, as virt-handler refuses a `disk.img` that is one. A
/// copy that fails (a full claim) leaves no partial file behind.
const SCRIPT: &str = r#"set -eu
refuse_link() { if [ -L "$1" ]; then echo "$1 is a symlink, not a disk image" >&2; exit 1; fi; }
while [ $# -gt 0 ]; do
  case $1 in
  copy)
    refuse_link "$2"
    mkdir -p "$(dirname "$3")"
    if ! cp --sparse=always "$2" "$3.part" || ! sync "$3.part"; then
      rm -f "$3.part"
      exit 1
    fi
    mv -f "$3.part" "$3"
    sync "$(dirname "$3")"
    echo "copied $2 to $3: $(stat -c %s "$3") bytes"
    shift 3 ;;
  overwrite)
    refuse_link "$2"
    refuse_link "$3"
    cp --sparse=always "$2" "$3"
    sync "$3"
    echo "wrote $2 over $3: $(stat -c %s "$3") bytes"
    shift 3 ;;
  remove)
    rm -rf "$2"
    echo "removed $2"
    shift 2 ;;
  *)
    echo "unknown operation $1" >&2
    exit 2 ;;
  esac
done
"#;

/// A file or directory in a claim: the claim's name and the path under its root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimPath {
    pub claim: String,
    pub path: String,
}

impl ClaimPath {
    pub fn new(claim: &str, path: &str) -> ClaimPath {
        ClaimPath {
            claim: claim.to_string(),
            path: path.to_string(),
        }
    }

    fn in_pod(&self) -> String {
        format!("{CLAIMS_DIR}/{}/{}", self.claim, self.path)
    }
}

/// One thing the Pod does (see [`SCRIPT`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Copy { from: ClaimPath, to: ClaimPath },
    Overwrite { from: ClaimPath, to: ClaimPath },
    Remove(ClaimPath),
}

impl Op {
    fn args(&self) -> Vec<String> {
        match self {
            Op::Copy { from, to } => vec!["copy".into(), from.in_pod(), to.in_pod()],
            Op::Overwrite { from, to } => vec!["overwrite".into(), from.in_pod(), to.in_pod()],
            Op::Remove(dir) => vec!["remove".into(), dir.in_pod()],
        }
    }

    fn claims(&self) -> Vec<&str> {
        match self {
            Op::Copy { from, to } | Op::Overwrite { from, to } => vec![&from.claim, &to.claim],
            Op::Remove(dir) => vec![&dir.claim],
        }
    }
}

/// A copy Pod to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub name: String,
    pub namespace: String,
    /// What it is for: the value of [`LABEL`].
    pub purpose: &'static str,
    /// The node it must run on (the running VM's, whose claims may be node-local); the
    /// scheduler picks one when `None` (it also binds a claim that waits for its first Pod).
    pub node: Option<String>,
    pub ops: Vec<Op>,
    /// The object it works for; the Pod goes with it.
    pub owner: OwnerReference,
}

/// How a copy Pod is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    Running,
    Done,
    /// It failed; what it said (or the Pod's reason).
    Failed(String),
}

/// The Pod of a job.
pub fn pod(job: &Job, cfg: &ClusterConfig) -> Pod {
    let mut claims: Vec<&str> = job.ops.iter().flat_map(Op::claims).collect();
    claims.sort_unstable();
    claims.dedup();
    let volume_name = |index: usize| format!("claim{index}");
    let volumes = claims
        .iter()
        .enumerate()
        .map(|(index, claim)| Volume {
            name: volume_name(index),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.to_string(),
                read_only: None,
            }),
            ..Volume::default()
        })
        .collect();
    let mounts = claims
        .iter()
        .enumerate()
        .map(|(index, claim)| VolumeMount {
            name: volume_name(index),
            mount_path: format!("{CLAIMS_DIR}/{claim}"),
            ..VolumeMount::default()
        })
        .collect();
    let mut command = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        SCRIPT.to_string(),
        "volume-copy".to_string(),
    ];
    command.extend(job.ops.iter().flat_map(Op::args));
    let requests = BTreeMap::from([
        ("cpu".to_string(), Quantity("10m".into())),
        ("memory".to_string(), Quantity("16Mi".into())),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some(job.name.clone()),
            namespace: Some(job.namespace.clone()),
            labels: Some(BTreeMap::from([(
                LABEL.to_string(),
                job.purpose.to_string(),
            )])),
            owner_references: Some(vec![job.owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "volume-copy".into(),
                image: Some(cfg.launcher_image.clone()),
                image_pull_policy: Some(cfg.image_pull_policy.clone()),
                command: Some(command),
                volume_mounts: Some(mounts),
                resources: Some(ResourceRequirements {
                    requests: Some(requests),
                    ..ResourceRequirements::default()
                }),
                security_context: (!cfg.root_launcher).then(|| restricted_container(false)),
                termination_message_policy: Some("FallbackToLogsOnError".into()),
                ..Container::default()
            }],
            volumes: Some(volumes),
            restart_policy: Some("Never".into()),
            security_context: pod_security(cfg),
            node_name: job.node.clone(),
            // Placed on the VM's node, it runs there whatever that node's taints.
            tolerations: job.node.as_ref().map(|_| {
                vec![Toleration {
                    operator: Some("Exists".into()),
                    ..Toleration::default()
                }]
            }),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// How a copy Pod is doing, from its phase and its container's end.
pub fn progress(pod: &Pod) -> Progress {
    let Some(status) = &pod.status else {
        return Progress::Running;
    };
    match status.phase.as_deref() {
        Some("Succeeded") => Progress::Done,
        Some("Failed") => {
            let terminated = status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.as_ref()?.terminated.as_ref());
            let said = terminated
                .and_then(|t| t.message.clone().or_else(|| t.reason.clone()))
                .or_else(|| status.message.clone())
                .or_else(|| status.reason.clone())
                .unwrap_or_else(|| "it failed without a message".to_string());
            let code = terminated.map(|t| t.exit_code).unwrap_or_default();
            Progress::Failed(format!(
                "volume copy Pod {} failed (exit code {code}): {}",
                pod.metadata.name.as_deref().unwrap_or_default(),
                said.trim()
            ))
        }
        _ => Progress::Running,
    }
}

/// One look at a job: its Pod is created when missing (`Running`), and deleted once it has
/// ended (`Done` or `Failed`). A job that is looked at again after its Pod was deleted runs
/// again: its operations can be repeated.
pub async fn step(pods: &Api<Pod>, job: &Job, cfg: &ClusterConfig) -> kube::Result<Progress> {
    let Some(found) = pods.get_opt(&job.name).await? else {
        match pods.create(&PostParams::default(), &pod(job, cfg)).await {
            Ok(_) => log::info!("volume copy Pod {}/{} created", job.namespace, job.name),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        return Ok(Progress::Running);
    };
    let progress = progress(&found);
    if progress != Progress::Running {
        log::info!(
            "volume copy Pod {}/{} ended: {progress:?}",
            job.namespace,
            job.name
        );
        match pods.delete(&job.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(progress)
}

#[cfg(test)]
#[path = "copier_tests.rs"]
mod tests;
