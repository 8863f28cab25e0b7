//! One pass over a VMI of this node: find its launcher, make it run the VMI, report the status.
//!
//! The handler never starts or stops VMs on its own account: it asks the launcher (SyncVMI,
//! Shutdown) and reports what the launcher says (GetDomain). A restarted handler therefore
//! picks up running launchers without touching their VMs: GetDomain answers, SyncVMI is not
//! needed again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use api::{KubeVirt, VirtualMachineInstance, VmiPhase};
use contract::client::launcher_client;
use contract::labels;
use contract::layout::{in_launcher_socket_dir, KUBELET_PODS_DIR};
use contract::proto::v1::{
    GetDomainRequest, InfoRequest, ShutdownRequest, SyncOptions, SyncVmiRequest,
};
use contract::sockets::{LAUNCHER_SOCKET, NOTIFY_SOCKET};
use contract::version::negotiate;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};

use super::status::{status_after_sync_failure, status_from_domain, Observed};
use crate::launcher_socket::{LauncherSockets, Wait};
use crate::notify::NotifyServers;
use crate::ownership::OwnershipError;

/// How long one call to a launcher may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub struct HandlerContext {
    pub client: Client,
    pub node: String,
    /// The host directory that holds one socket directory per VMI UID.
    pub socket_root: PathBuf,
    pub kubevirts: Store<KubeVirt>,
    pub notify: NotifyServers,
    /// Wakes a VMI's pass when its launcher's socket appears.
    pub launcher_sockets: LauncherSockets,
    /// Records KubeVirt's events for the phases this handler sets (Started, Stopped).
    pub recorder: Recorder,
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("kubernetes API")]
    Kube(#[from] kube::Error),
    #[error("the VMI has no UID or namespace")]
    Incomplete,
    #[error("connecting to the launcher")]
    Connect(#[from] tonic::transport::Error),
    #[error("the launcher answered {0}")]
    Launcher(#[from] tonic::Status),
    #[error("the launcher did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the launcher speaks {0:?}, none of which this handler knows")]
    Version(Vec<String>),
    #[error("preparing the pod network")]
    PodNetwork(#[from] crate::podnet::PodNetError),
    #[error("handing the launcher's devices and disks to its user")]
    Ownership(#[from] OwnershipError),
    #[error("serving the notify socket")]
    Notify(#[source] std::io::Error),
}

/// What the launcher cannot do itself before it runs the VMI: its devices and PVC disks handed
/// to its user (when it is not root), then its pod network.
async fn prepare_launcher(vmi: &VirtualMachineInstance, socket: &Path) -> Result<(), SyncError> {
    let (pid, uid) = crate::podnet::launcher_process(socket)?;
    crate::ownership::claim_blocking(vmi, pid, uid).await?;
    crate::podnet::prepare_blocking(vmi, socket).await?;
    Ok(())
}

impl HandlerContext {
    /// The options given to a launcher with a VMI (the KubeVirt CR's settings).
    fn sync_options(&self, notify_socket: String) -> SyncOptions {
        crate::sync_options::sync_options(
            api::kubevirt::in_force(&self.kubevirts.state()),
            notify_socket,
        )
    }
}

async fn call<T>(
    future: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, SyncError> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(result) => Ok(result?.into_inner()),
        Err(_) => Err(SyncError::Timeout(CALL_TIMEOUT)),
    }
}

pub async fn reconcile(
    vmi: Arc<VirtualMachineInstance>,
    ctx: Arc<HandlerContext>,
) -> Result<Action, SyncError> {
    let status = vmi.status.clone().unwrap_or_default();
    if status.node_name.as_deref() != Some(ctx.node.as_str()) {
        return Ok(Action::await_change());
    }
    let (Some(uid), Some(namespace)) = (vmi.uid(), vmi.namespace()) else {
        return Err(SyncError::Incomplete);
    };
    let dir = ctx.socket_root.join(&uid);
    let socket = dir.join(LAUNCHER_SOCKET);
    let phase = status.phase;

    if vmi.metadata.deletion_timestamp.is_some() {
        if socket.exists() {
            if let Ok(mut client) = launcher_client(&socket) {
                let grace = vmi.spec.termination_grace_period_seconds;
                let request = ShutdownRequest {
                    vmi: uid.clone(),
                    grace_period_seconds: grace,
                };
                if let Err(e) = call(client.shutdown(request)).await {
                    log::info!("{}: shutdown: {e}", vmi.name_any());
                }
            }
        }
        ctx.notify.forget(&dir);
        return Ok(Action::await_change());
    }
    if phase.is_some_and(VmiPhase::is_final) {
        ctx.notify.forget(&dir);
        return Ok(Action::await_change());
    }
    let pods: Vec<&str> = (status.active_pods.iter().flatten())
        .filter(|(_, on)| **on == ctx.node)
        .map(|(pod, _)| pod.as_str())
        .collect();
    crate::sockets::link_logged(
        &ctx.socket_root,
        Path::new(KUBELET_PODS_DIR),
        &vmi.name_any(),
        &uid,
        &pods,
    );
    if !socket.exists() {
        // The launcher is still starting (Scheduled), or gone (the controller sees the Pod fail).
        let me = ObjectRef::from_obj(vmi.as_ref());
        match ctx.launcher_sockets.wait_for(&dir, &socket, me) {
            Wait::Appeared => {}
            // A look now and then all the same, should a wake-up be lost.
            Wait::Watching => return Ok(Action::requeue(Duration::from_secs(30))),
            Wait::Unwatchable => return Ok(Action::requeue(Duration::from_secs(1))),
        }
    }

    let mut client = launcher_client(&socket)?;
    let info = call(client.info(InfoRequest {})).await?;
    // Every call below is launcher.v1's; a launcher that no longer speaks it is left alone.
    negotiate(&info.supported_versions).map_err(|e| SyncError::Version(e.offered))?;
    ctx.notify
        .ensure(&dir, ObjectRef::from_obj(vmi.as_ref()))
        .map_err(SyncError::Notify)?;

    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut domain = call(client.get_domain(GetDomainRequest {})).await?.domain;
    if domain.is_none() {
        let request = SyncVmiRequest {
            vmi_json: serde_json::to_vec(vmi.as_ref())
                .map_err(|e| tonic::Status::internal(e.to_string()))?,
            options: Some(ctx.sync_options(in_launcher_socket_dir(NOTIFY_SOCKET))),
        };
        let synced = match prepare_launcher(&vmi, &socket).await {
            Ok(()) => call(client.sync_vmi(request)).await,
            Err(e) => Err(e),
        };
        match synced {
            Ok(response) => domain = response.domain,
            Err(e) => {
                // Say why on the VMI. A VMI the launcher can never run fails with the reason;
                // otherwise the next pass tries again.
                let (can_never_run, message) = match &e {
                    SyncError::Launcher(status) => (
                        status.code() == tonic::Code::InvalidArgument,
                        status.message().to_string(),
                    ),
                    // A PVC's disk.img that is a symlink, a /dev/kvm that is no device: what
                    // the volume or the image holds does not change by trying again.
                    SyncError::Ownership(OwnershipError::Kind { .. }) => {
                        (true, crate::error_chain(&e))
                    }
                    other => (false, crate::error_chain(other)),
                };
                let mut failed = (*vmi).clone();
                failed.status = Some(status_after_sync_failure(
                    &vmi,
                    can_never_run,
                    &message,
                    Timestamp::now(),
                ));
                vmis.replace_status(&vmi.name_any(), &PostParams::default(), &failed)
                    .await?;
                if can_never_run {
                    log::warn!("{}: failed: {message}", vmi.name_any());
                    ctx.notify.forget(&dir);
                    return Ok(Action::await_change());
                }
                return Err(e);
            }
        }
    }
    let Some(domain) = domain else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    if crate::migration::migrated_away(&domain) {
        // The VM runs on the migration target now; virt-controller moves the VMI there.
        return Ok(Action::await_change());
    }

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let pod_ip = pods
        .list(&ListParams::default().labels(&format!("{}={uid}", labels::CREATED_BY)))
        .await?
        .items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        // After a migration the source Pod may still be running elsewhere: this node's Pod.
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(ctx.node.as_str()))
        .find_map(|p| p.status.and_then(|s| s.pod_ip));
    let observed = Observed {
        node: ctx.node.clone(),
        pod_ip,
        launcher_version: Some(info.launcher_version),
    };
    let mut new_status = status_from_domain(&vmi, &domain, &observed, Timestamp::now());
    new_status
        .conditions
        .retain(|c| !(c.type_ == "Synchronized" && c.reason.as_deref() == Some("SyncFailed")));
    if Some(&new_status) != vmi.status.as_ref() {
        let entered = new_status.phase.filter(|p| Some(*p) != phase);
        let mut updated = (*vmi).clone();
        updated.status = Some(new_status);
        vmis.replace_status(&vmi.name_any(), &PostParams::default(), &updated)
            .await?;
        if let Some((warning, reason, note)) = entered.and_then(VmiPhase::entered_event) {
            crate::events::record(&ctx.recorder, &vmi, warning, reason, reason, note.into()).await;
        }
    }
    Ok(Action::requeue(Duration::from_secs(30)))
}
