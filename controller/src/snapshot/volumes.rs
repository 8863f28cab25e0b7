//! A snapshot content's volume data: its backups copied from the VM's claims (the VM paused,
//! or its filesystems frozen by the guest agent, while it runs), and removed with the content.
//! The copying is [`copier`]'s; what was done to the VM is kept in the content's
//! [`QUIESCED_ANNOTATION`], so that it is undone once, whatever pass sees the copy end.

use api::snapshot::{backup_dir, backup_path, VirtualMachineSnapshotContent};
use api::VirtualMachineInstance;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::copier::{self, ClaimPath, Job, Op, Progress};
use super::plan::{backup_location, Source};
use crate::context::Context;
use crate::Error;

/// On a content while its copy Pod runs: `pause` or `freeze`, what was done to the running VM
/// (absent when nothing was: the VM was stopped, or paused by its user).
pub const QUIESCED_ANNOTATION: &str = "snapshot.ferrovirt.io/quiesced";

/// How long the guest agent keeps filesystems frozen if virt-controller does not thaw them.
const UNFREEZE_TIMEOUT: &str = "5m0s";

/// Whether the content's VM is paused for the copy of its volumes.
pub fn paused_for_backup(content: &VirtualMachineSnapshotContent) -> bool {
    content
        .annotations()
        .get(QUIESCED_ANNOTATION)
        .is_some_and(|a| a == "pause")
}

pub struct Volumes<'a> {
    pub ctx: &'a Context,
    pub pods: Api<Pod>,
    pub content: &'a VirtualMachineSnapshotContent,
}

impl Volumes<'_> {
    fn namespace(&self) -> String {
        self.content.namespace().unwrap_or_default()
    }

    /// The copy Pod of this content for `purpose`.
    fn pod_name(&self, purpose: &str) -> String {
        format!("{}-{purpose}", self.content.name_any())
    }

    fn job(&self, purpose: &'static str, node: Option<String>, ops: Vec<Op>) -> Job {
        Job {
            name: self.pod_name(purpose),
            namespace: self.namespace(),
            purpose,
            node,
            ops,
            owner: self
                .content
                .controller_owner_ref(&())
                .expect("a content read from the API server has a name and uid"),
        }
    }

    fn contents(&self) -> Api<VirtualMachineSnapshotContent> {
        Api::namespaced(self.ctx.client.clone(), &self.namespace())
    }

    fn quiesced(&self) -> Option<String> {
        self.content.annotations().get(QUIESCED_ANNOTATION).cloned()
    }

    /// One step of copying the claims' data into their backups (`Done` at once when there is
    /// none). A running VM (`vmi`) is quiesced before its copy Pod starts, on its node.
    pub async fn back_up(
        &self,
        vmi: Option<&VirtualMachineInstance>,
        source: Option<&Source>,
    ) -> Result<Progress, Error> {
        let backups = &self.content.spec.volume_backups;
        if backups.is_empty() {
            return Ok(Progress::Done);
        }
        let ops = backups
            .iter()
            .map(|backup| {
                let (name, claim) = backup_location(backup);
                Op::Copy {
                    from: ClaimPath::new(&claim, "disk.img"),
                    to: ClaimPath::new(&claim, &backup_path(&name)),
                }
            })
            .collect();
        let node = vmi
            .and_then(|v| v.status.as_ref())
            .and_then(|s| s.node_name.clone());
        let job = self.job("backup", node, ops);
        if let Some(vmi) = vmi {
            if self.pods.get_opt(&job.name).await?.is_none() {
                self.quiesce(vmi, source).await?;
            }
        }
        Ok(copier::step(&self.pods, &job, &self.ctx.config()).await?)
    }

    /// Pauses the running VM, or freezes its filesystems when its guest agent is connected,
    /// unless its user paused it; noted in the content first, so that [`Volumes::release`]
    /// undoes it even if this pass goes no further.
    async fn quiesce(
        &self,
        vmi: &VirtualMachineInstance,
        source: Option<&Source>,
    ) -> Result<(), Error> {
        let action = match (self.quiesced(), source) {
            (Some(noted), _) => noted,
            (None, Some(s)) if s.paused => return Ok(()),
            (None, Some(s)) if s.guest_agent => "freeze".to_string(),
            (None, _) => "pause".to_string(),
        };
        if self.quiesced().is_none() {
            let patch = json!({"metadata": {"annotations": {QUIESCED_ANNOTATION: action}}});
            self.contents()
                .patch(
                    &self.content.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
        }
        let body = match action.as_str() {
            "freeze" => json!({"unfreezeTimeout": UNFREEZE_TIMEOUT}),
            _ => json!({}),
        };
        self.vmi_action(&vmi.name_any(), &action, body).await?;
        self.ctx
            .event(
                self.content,
                false,
                "VolumeBackupQuiesced",
                format!(
                    "VMI {}: {action} while its volumes are copied",
                    vmi.name_any()
                ),
            )
            .await;
        Ok(())
    }

    /// Undoes what [`Volumes::quiesce`] did, if anything: the VM resumes, or its filesystems
    /// thaw. A VM that has stopped since, or was resumed by its user, needs nothing; any other
    /// failure is an event (the guest agent thaws by itself at [`UNFREEZE_TIMEOUT`]).
    pub async fn release(&self, source: Option<&Source>) {
        let Some(action) = self.quiesced() else {
            return;
        };
        let undo = if action == "freeze" {
            "unfreeze"
        } else {
            "unpause"
        };
        let vm = self
            .content
            .spec
            .source
            .virtual_machine
            .as_ref()
            .and_then(|vm| vm.metadata.name.clone())
            .unwrap_or_default();
        let undone = match source {
            Some(s) if s.online => self.vmi_action(&vm, undo, json!({})).await,
            _ => Ok(()),
        };
        let patch = json!({"metadata": {"annotations": {QUIESCED_ANNOTATION: null}}});
        let cleared = match undone {
            Ok(()) => self
                .contents()
                .patch(
                    &self.content.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map(|_| ())
                .map_err(Error::from),
            Err(e) => Err(e),
        };
        let (warning, reason, message) = match cleared {
            Ok(()) => (
                false,
                "VolumeBackupReleased",
                format!("VM {vm}: {undo} after its volumes were copied"),
            ),
            Err(e) => (
                true,
                "VolumeBackupReleaseFailed",
                format!("could not {undo} VM {vm} after its volume backup: {e}"),
            ),
        };
        self.ctx.event(self.content, warning, reason, message).await;
    }

    /// One step of removing the backups from the claims that still exist; `true` once they are
    /// gone (or a copy Pod failed to remove them: an event says so, and the content goes).
    pub async fn remove_backups(&self) -> Result<bool, Error> {
        let backups = &self.content.spec.volume_backups;
        if backups.is_empty() {
            return Ok(true);
        }
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.ctx.client.clone(), &self.namespace());
        let mut ops = Vec::new();
        for backup in backups {
            let (name, claim) = backup_location(backup);
            let present = claims
                .get_opt(&claim)
                .await?
                .is_some_and(|c| c.metadata.deletion_timestamp.is_none());
            if present {
                ops.push(Op::Remove(ClaimPath::new(&claim, &backup_dir(&name))));
            }
        }
        if ops.is_empty() {
            return Ok(true);
        }
        // A backup still being copied stops first: it would write after the removal.
        match self
            .pods
            .delete(&self.pod_name("backup"), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        match copier::step(
            &self.pods,
            &self.job("remove", None, ops),
            &self.ctx.config(),
        )
        .await?
        {
            Progress::Running => Ok(false),
            Progress::Done => Ok(true),
            Progress::Failed(message) => {
                self.ctx
                    .event(self.content, true, "VolumeBackupRemoveFailed", message)
                    .await;
                Ok(true)
            }
        }
    }

    /// `PUT` of a VMI subresource of virt-api (`pause`, `unpause`, `freeze`, `unfreeze`).
    /// A VMI that is gone (404) or already as asked (409) is not an error.
    async fn vmi_action(
        &self,
        vmi: &str,
        action: &str,
        body: serde_json::Value,
    ) -> Result<(), Error> {
        let path = format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/{}/virtualmachineinstances/{vmi}/{action}",
            self.namespace()
        );
        let request = http::Request::put(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|e| Error::Kube(kube::Error::HttpError(e)))?;
        match self.ctx.client.request_text(request).await {
            Ok(_) => {
                log::info!(
                    "VMI {}/{vmi}: {action} for a volume backup",
                    self.namespace()
                );
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
