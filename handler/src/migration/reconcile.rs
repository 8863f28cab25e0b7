//! The handler's migration controller: one pass over a VMI whose `status.migrationState`
//! names this node (see the module docs of [`super`] for the steps).

use crate::error_chain as chain;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::kubevirt::MigrationConfiguration;
use api::vmi::MigrationState;
use api::{KubeVirt, VirtualMachineInstance};
use contract::client::launcher_client;
use contract::layout::{in_launcher_socket_dir, KUBELET_PODS_DIR};
use contract::proto::v1::launcher_client::LauncherClient;
use contract::proto::v1::{
    GetDomainRequest, MigrateRequest, MigrationStatus, SyncOptions, SyncVmiRequest, VmiRequest,
};
use contract::sockets::{LAUNCHER_SOCKET, MIGRATION_SOURCE_SOCKET, MIGRATION_TARGET_SOCKET};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::proxy;
use super::tls::{cert_dir, MigrationTls};
use super::watchdog::Watchdog;

/// How long one launcher call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the source follows its launcher's migration.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(500);

/// What a migration pass needs.
pub struct MigrationContext {
    pub client: Client,
    pub node: String,
    pub socket_root: PathBuf,
    pub kubevirts: Store<KubeVirt>,
    recorder: Recorder,
    /// Stream tasks by `<role>/<migration UID>`, kept until the migration ends.
    tasks: Mutex<BTreeMap<String, tokio::task::JoinHandle<()>>>,
}

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("kubernetes API")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Failed(String),
}

impl MigrationContext {
    /// The options given to a launcher with a VMI (the KubeVirt CR's settings).
    fn sync_options(&self, notify_socket: String) -> SyncOptions {
        crate::sync_options::sync_options(
            api::kubevirt::in_force(&self.kubevirts.state()),
            notify_socket,
        )
    }

    /// The settings of `vmi`'s migration: those virt-controller wrote into its
    /// `migrationState` when the migration started (the KubeVirt CR's, with the
    /// MigrationPolicy's over them), else the CR's `spec.configuration.migrations` as of now.
    fn migration_config(&self, vmi: &VirtualMachineInstance) -> MigrationConfiguration {
        vmi.status
            .as_ref()
            .and_then(|s| s.migration_state.as_ref())
            .and_then(|m| m.migration_configuration.clone())
            .unwrap_or_else(|| {
                MigrationConfiguration::of(api::kubevirt::in_force(&self.kubevirts.state()))
            })
    }

    /// A watchdog with the configured timeouts for an outgoing migration of `vmi`.
    fn watchdog(&self, vmi: &VirtualMachineInstance) -> Watchdog {
        let memory = crate::metrics::guest_memory_bytes(vmi).unwrap_or(0);
        Watchdog::new(
            &self.migration_config(vmi),
            memory,
            std::time::Instant::now(),
        )
    }

    fn running(&self, key: &str) -> bool {
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.get(key).is_some_and(|t| !t.is_finished())
    }

    /// Whether this process started a task under `key` (finished or not) that [`Self::stop`]
    /// has not cleared yet.
    fn started(&self, key: &str) -> bool {
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.contains_key(key)
    }

    /// Keeps `task` under `key` until [`Self::stop`] sees its migration end.
    fn keep(&self, key: String, task: tokio::task::JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = tasks.insert(key, task) {
            old.abort();
        }
    }

    fn stop(&self, migration: &str) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        for role in ["source", "target"] {
            if let Some(task) = tasks.remove(&format!("{role}/{migration}")) {
                task.abort();
            }
        }
    }

    async fn event(&self, vmi: &VirtualMachineInstance, warning: bool, reason: &str, note: String) {
        crate::events::record(&self.recorder, vmi, warning, reason, "Migrate", note).await;
    }
}

/// Runs the migration controller of this node until the process ends.
pub async fn run(client: Client, node: String, socket_root: PathBuf, kubevirts: Store<KubeVirt>) {
    let reporter = Reporter {
        controller: "virt-handler".into(),
        instance: Some(node.clone()),
    };
    let ctx = Arc::new(MigrationContext {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        node,
        socket_root,
        kubevirts,
        tasks: Mutex::new(BTreeMap::new()),
    });
    Controller::new(
        Api::<VirtualMachineInstance>::all(client),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(reconcile, error_policy, ctx)
    .for_each(|_| futures::future::ready(()))
    .await;
}

fn error_policy(
    vmi: Arc<VirtualMachineInstance>,
    error: &MigrationError,
    _: Arc<MigrationContext>,
) -> Action {
    log::warn!("migration of {}: {error}", vmi.name_any());
    Action::requeue(Duration::from_secs(2))
}

/// Merges `fields` into the VMI's `status.migrationState`.
async fn patch_state(
    client: &Client,
    vmi: &VirtualMachineInstance,
    fields: MigrationState,
) -> Result<(), kube::Error> {
    let namespace = vmi.namespace().unwrap_or_default();
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace);
    // A merge patch of the fields set: the unset ones serialize to nothing.
    let patch = json!({"status": {"migrationState": fields}});
    vmis.patch_status(
        &vmi.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// Marks the migration failed with `reason`.
async fn report_failure(
    ctx: &MigrationContext,
    vmi: &VirtualMachineInstance,
    reason: &str,
) -> Result<(), kube::Error> {
    log::warn!("migration of {} failed: {reason}", vmi.name_any());
    patch_state(&ctx.client, vmi, failed_state(reason.into())).await?;
    ctx.event(vmi, true, "MigrationFailed", reason.to_string())
        .await;
    Ok(())
}

/// The fields that end a migration as failed, for `reason`.
fn failed_state(reason: String) -> MigrationState {
    MigrationState {
        failed: Some(true),
        failure_reason: Some(reason),
        end_timestamp: Some(now()),
        ..MigrationState::default()
    }
}

async fn call<T>(
    future: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(status.message().to_string()),
        Err(_) => Err(format!(
            "the launcher did not answer within {CALL_TIMEOUT:?}"
        )),
    }
}

pub async fn reconcile(
    vmi: Arc<VirtualMachineInstance>,
    ctx: Arc<MigrationContext>,
) -> Result<Action, MigrationError> {
    let Some(state) = vmi.status.as_ref().and_then(|s| s.migration_state.clone()) else {
        return Ok(Action::await_change());
    };
    let Some(migration) = state.migration_uid.clone() else {
        return Ok(Action::await_change());
    };
    let me = Some(ctx.node.as_str());
    if state.completed == Some(true) || state.failed == Some(true) {
        let sending = ctx.running(&format!("source/{migration}"));
        ctx.stop(&migration);
        if sending && state.failed == Some(true) {
            // Failed elsewhere (target Pod gone, migration deleted): the VM stays here.
            cancel(&ctx, &vmi).await;
        }
        return Ok(Action::await_change());
    }
    if state.target_node.as_deref() == me && state.target_node_address.is_none() {
        let key = format!("target/{migration}");
        if !ctx.running(&key) {
            if let Err(reason) = prepare_target(&ctx, &vmi, &state, key).await {
                if let Some(reason) = reason {
                    report_failure(&ctx, &vmi, &reason).await?;
                }
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
        }
    }
    if state.source_node.as_deref() == me {
        let key = format!("source/{migration}");
        let following = ctx.running(&key);
        if state.abort_requested == Some(true) {
            cancel(&ctx, &vmi).await;
            if !following && state.mode.is_none() {
                // An earlier run of this handler may have told the launcher to send, and the
                // switch-over may have happened: the launcher's record says how it ended.
                let socket = ctx.socket_root.join(vmi.uid().unwrap_or_default());
                let sending = match launcher_client(&socket.join(LAUNCHER_SOCKET)) {
                    Ok(mut client) => launcher_sending(&mut client).await.unwrap_or(false),
                    Err(_) => false,
                };
                if sending {
                    adopt_source(&ctx, &vmi, key.clone()).await;
                } else {
                    report_failure(&ctx, &vmi, "cancelled before the source started sending")
                        .await?;
                }
            }
        } else if let (Some(address), None) = (&state.target_node_address, &state.mode) {
            if !following {
                if let Err(reason) = start_source(&ctx, &vmi, address, key.clone()).await {
                    report_failure(&ctx, &vmi, &reason).await?;
                }
            }
        }
        if state.mode.is_some() && !ctx.started(&key) {
            // The launcher was told to send, but no task of this process follows it: this
            // handler restarted. The launcher's own record says how the stream ends.
            adopt_source(&ctx, &vmi, key).await;
        }
    }
    Ok(Action::requeue(Duration::from_secs(2)))
}

/// Target side. `Err(None)`: not ready yet, try again; `Err(Some(reason))`: failed.
async fn prepare_target(
    ctx: &Arc<MigrationContext>,
    vmi: &Arc<VirtualMachineInstance>,
    state: &api::vmi::MigrationState,
    key: String,
) -> Result<(), Option<String>> {
    let (Some(uid), Some(namespace), Some(pod_name)) =
        (vmi.uid(), vmi.namespace(), state.target_pod.clone())
    else {
        return Err(None);
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let pod = pods.get_opt(&pod_name).await.map_err(|e| {
        log::info!("target Pod {pod_name}: {e}");
        None
    })?;
    let Some(pod) = pod else {
        return Err(Some(format!("the target Pod {pod_name} is gone")));
    };
    match api::launcher_pod::phase(&pod) {
        "Running" => {}
        "Failed" | "Succeeded" => return Err(Some(format!("the target Pod {pod_name} has ended"))),
        _ => return Err(None),
    }
    if let Some(pod_uid) = pod.metadata.uid.as_deref() {
        crate::sockets::link_logged(
            &ctx.socket_root,
            Path::new(KUBELET_PODS_DIR),
            &vmi.name_any(),
            &uid,
            &[pod_uid],
        );
    }
    let dir = ctx.socket_root.join(&uid);
    let socket = dir.join(LAUNCHER_SOCKET);
    if !socket.exists() {
        return Err(None);
    }
    let tls = MigrationTls::load(&cert_dir())
        .map_err(|e| Some(format!("migration TLS: {}", chain(&e))))?;
    let mut client = launcher_client(&socket).map_err(|e| Some(e.to_string()))?;
    let existing = call(client.get_domain(GetDomainRequest {}))
        .await
        .map_err(Some)?;
    if existing.domain.is_none() {
        let (pid, uid) = crate::podnet::launcher_process(&socket)
            .map_err(|e| Some(format!("the target's launcher: {}", chain(&e))))?;
        crate::ownership::claim_blocking(vmi, pid, uid)
            .await
            .map_err(|e| Some(format!("the target's launcher: {}", chain(&e))))?;
        crate::podnet::prepare_blocking(vmi, &socket)
            .await
            .map_err(|e| Some(format!("the target's pod network: {}", chain(&e))))?;
        let request = SyncVmiRequest {
            vmi_json: serde_json::to_vec(vmi.as_ref()).map_err(|e| Some(e.to_string()))?,
            options: Some(ctx.sync_options(String::new())),
        };
        call(client.prepare_migration_target(request))
            .await
            .map_err(|e| Some(format!("preparing the target launcher: {e}")))?;
    }
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", 0))
        .await
        .map_err(|e| Some(format!("cannot listen for the migration stream: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| Some(e.to_string()))?
        .port();
    let ip = own_pod_ip(&ctx.client)
        .await
        .ok_or_else(|| Some("this handler does not know its Pod IP".to_string()))?;
    let target_socket = dir.join(MIGRATION_TARGET_SOCKET);
    let name = vmi.name_any();
    let task = tokio::spawn(async move {
        match proxy::listen_target(listener, Arc::new(tls), target_socket).await {
            Ok((received, _)) => log::info!("{name}: migration stream ended, {received} bytes in"),
            Err(e) => log::warn!("{name}: incoming migration stream: {}", chain(&e)),
        }
    });
    ctx.keep(key, task);
    let address = SocketAddr::new(ip, port).to_string();
    log::info!(
        "{}: target ready, migration stream on {address}",
        vmi.name_any()
    );
    patch_state(
        &ctx.client,
        vmi,
        MigrationState {
            target_node_address: Some(address),
            ..MigrationState::default()
        },
    )
    .await
    .map_err(|e| Some(format!("publishing the target address: {e}")))?;
    Ok(())
}

/// This handler's Pod IP (from `POD_IP`, or its Pod named by `POD_NAME`/`POD_NAMESPACE`).
async fn own_pod_ip(client: &Client) -> Option<std::net::IpAddr> {
    if let Some(ip) = std::env::var("POD_IP").ok().and_then(|ip| ip.parse().ok()) {
        return Some(ip);
    }
    let name = std::env::var("POD_NAME").ok()?;
    let namespace = std::env::var("POD_NAMESPACE").ok()?;
    let pod = Api::<Pod>::namespaced(client.clone(), &namespace)
        .get(&name)
        .await
        .ok()?;
    pod.status?.pod_ip?.parse().ok()
}

/// Source side: relay, `Migrate`, then follow the launcher until the end.
async fn start_source(
    ctx: &Arc<MigrationContext>,
    vmi: &Arc<VirtualMachineInstance>,
    address: &str,
    key: String,
) -> Result<(), String> {
    let uid = vmi.uid().ok_or("the VMI has no UID")?;
    let target: SocketAddr = address
        .parse()
        .map_err(|e| format!("bad targetNodeAddress {address:?}: {e}"))?;
    let dir = ctx.socket_root.join(&uid);
    let mut client = launcher_client(&dir.join(LAUNCHER_SOCKET)).map_err(|e| e.to_string())?;
    // A handler killed between `Migrate` and recording `mode` left the launcher sending: follow
    // that migration rather than ask for a second one, which the launcher would refuse.
    if launcher_sending(&mut client).await? {
        log::info!(
            "{}: the source launcher is already sending (this handler restarted before it recorded the mode)",
            vmi.name_any()
        );
        record_mode(ctx, vmi).await;
        follow(ctx, vmi, client, None, key);
        return Ok(());
    }
    let tls =
        MigrationTls::load(&cert_dir()).map_err(|e| format!("migration TLS: {}", chain(&e)))?;
    let relay_path = dir.join(MIGRATION_SOURCE_SOCKET);
    let _ = std::fs::remove_file(&relay_path);
    let listener = tokio::net::UnixListener::bind(&relay_path)
        .map_err(|e| format!("cannot listen on {}: {e}", relay_path.display()))?;
    crate::sockets::hand_to_launcher(&relay_path).map_err(|e| {
        format!(
            "cannot give {} to the launcher's user: {e}",
            relay_path.display()
        )
    })?;
    let relay = tokio::spawn(proxy::relay_source(listener, Arc::new(tls), target));
    let config = ctx.migration_config(vmi);
    let request = MigrateRequest {
        vmi: uid.clone(),
        socket: in_launcher_socket_dir(MIGRATION_SOURCE_SOCKET),
        bandwidth_bytes_per_second: config.bandwidth_bytes_per_second(),
        max_downtime_ms: config.max_downtime_ms(),
    };
    let request_bandwidth = request.bandwidth_bytes_per_second;
    if let Err(e) = call(client.migrate(request)).await {
        relay.abort();
        return Err(format!("the source launcher refused to migrate: {e}"));
    }
    log::info!(
        "{}: migrating to {address} (bandwidth {} bytes/s, 0: unlimited)",
        vmi.name_any(),
        request_bandwidth
    );
    record_mode(ctx, vmi).await;
    follow(ctx, vmi, client, Some(relay), key);
    Ok(())
}

/// Sets `mode: PreCopy`: the launcher was told to send. Not fatal when lost: a handler that
/// restarts without it asks the launcher before it starts a migration.
async fn record_mode(ctx: &MigrationContext, vmi: &VirtualMachineInstance) {
    let mode = MigrationState {
        mode: Some("PreCopy".into()),
        ..MigrationState::default()
    };
    if let Err(e) = patch_state(&ctx.client, vmi, mode).await {
        log::warn!("{}: cannot record the migration mode: {e}", vmi.name_any());
    }
}

/// Follows the source launcher's migration in a task kept under `key`.
fn follow(
    ctx: &Arc<MigrationContext>,
    vmi: &Arc<VirtualMachineInstance>,
    client: LauncherClient<tonic::transport::Channel>,
    relay: Option<tokio::task::JoinHandle<Result<proxy::Copied, proxy::ProxyError>>>,
    key: String,
) {
    let (ctx2, vmi2) = (Arc::clone(ctx), Arc::clone(vmi));
    let watchdog = ctx.watchdog(vmi);
    let task = tokio::spawn(async move {
        follow_source(&ctx2, &vmi2, client, relay, watchdog).await;
    });
    ctx.keep(key, task);
}

/// Whether the source launcher behind `client` is sending its VM or has sent it
/// ([`super::sending`]).
async fn launcher_sending(
    client: &mut LauncherClient<tonic::transport::Channel>,
) -> Result<bool, String> {
    let domain = call(client.get_domain(GetDomainRequest {})).await?.domain;
    Ok(domain.as_ref().is_some_and(super::sending))
}

/// Follows a migration that an earlier run of this handler started.
async fn adopt_source(ctx: &Arc<MigrationContext>, vmi: &Arc<VirtualMachineInstance>, key: String) {
    let Some(uid) = vmi.uid() else { return };
    let socket = ctx.socket_root.join(&uid).join(LAUNCHER_SOCKET);
    let client = match launcher_client(&socket) {
        Ok(client) => client,
        Err(e) => {
            log::warn!("{}: cannot reach the source launcher: {e}", vmi.name_any());
            return;
        }
    };
    log::info!("{}: following the migration under way", vmi.name_any());
    follow(ctx, vmi, client, None, key);
}

async fn follow_source(
    ctx: &MigrationContext,
    vmi: &VirtualMachineInstance,
    mut client: LauncherClient<tonic::transport::Channel>,
    relay: Option<tokio::task::JoinHandle<Result<proxy::Copied, proxy::ProxyError>>>,
    mut watchdog: Watchdog,
) {
    let name = vmi.name_any();
    // The relay ends with this task, also when it is aborted.
    let mut relay = AbortOnDrop(relay);
    let mut timed_out = None;
    let info = loop {
        tokio::time::sleep(PROGRESS_INTERVAL).await;
        match call(client.get_domain(GetDomainRequest {})).await {
            Ok(response) => {
                let migration = response.domain.and_then(|d| d.migration);
                match migration.filter(|m| !m.target) {
                    Some(m) if m.status == MigrationStatus::Active as i32 => {
                        if timed_out.is_some() {
                            continue;
                        }
                        let now = std::time::Instant::now();
                        if let Some(why) = watchdog.check(m.transferred_bytes, m.total_bytes, now) {
                            log::warn!("{name}: {why}");
                            let request = VmiRequest {
                                vmi: vmi.uid().unwrap_or_default(),
                            };
                            if let Err(e) = call(client.cancel_migration(request)).await {
                                log::warn!("{name}: cannot cancel the migration: {e}");
                            }
                            timed_out = Some(why);
                        }
                    }
                    Some(m) => break m,
                    None => {
                        let why = "the source launcher has no record of an outgoing migration";
                        report_end(ctx, vmi, Err(why.to_string())).await;
                        return;
                    }
                }
            }
            Err(e) => log::warn!("{name}: following the migration: {e}"),
        }
    };
    let relayed = match relay.0.take() {
        Some(relay) if relay.is_finished() => match relay.await {
            Ok(Ok((sent, _))) => format!(", {sent} bytes over the network"),
            Ok(Err(e)) => format!(" (stream: {})", chain(&e)),
            Err(_) => String::new(),
        },
        Some(relay) => {
            relay.abort();
            String::new()
        }
        None => String::new(),
    };
    let end = if info.status == MigrationStatus::Completed as i32 {
        Ok(format!(
            "migration completed in {} ms, guest downtime {} ms, {} bytes sent (block migration: {}){relayed}",
            info.total_ms, info.downtime_ms, info.transferred_bytes, info.block
        ))
    } else if info.status == MigrationStatus::Cancelled as i32 {
        Err(timed_out.unwrap_or_else(|| "the migration was cancelled".to_string()))
    } else {
        Err(format!(
            "the migration stream failed: {}{relayed}",
            info.error
        ))
    };
    report_end(ctx, vmi, end).await;
}

/// How long [`report_end`] waits after each refused patch before it tries again.
const REPORT_RETRIES: [Duration; 6] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(15),
    Duration::from_secs(30),
];

/// Reports how the outgoing migration ended (`Ok(note)`: completed, `Err(reason)`: failed): an
/// event, then `migrationState`. The event goes first: the state patch ends this task (the next
/// pass sees the migration over and stops it). Only this task knows the end, and no later pass
/// asks again, so a patch the API server refuses is tried again; the VMI gone ends it.
async fn report_end(
    ctx: &MigrationContext,
    vmi: &VirtualMachineInstance,
    end: Result<String, String>,
) {
    let name = vmi.name_any();
    let fields = match end {
        Ok(note) => {
            log::info!("{name}: {note}");
            ctx.event(vmi, false, "Migrated", note).await;
            MigrationState {
                completed: Some(true),
                end_timestamp: Some(now()),
                ..MigrationState::default()
            }
        }
        Err(reason) => {
            log::warn!("migration of {name} failed: {reason}");
            ctx.event(vmi, true, "MigrationFailed", reason.clone())
                .await;
            failed_state(reason)
        }
    };
    let mut waits = REPORT_RETRIES.iter();
    loop {
        match patch_state(&ctx.client, vmi, fields.clone()).await {
            Ok(()) => return,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                log::info!("{name}: the VMI is gone; the end of its migration is not reported");
                return;
            }
            Err(e) => match waits.next() {
                Some(wait) => {
                    log::warn!(
                        "{name}: cannot report the end of the migration (again in {wait:?}): {e}"
                    );
                    tokio::time::sleep(*wait).await;
                }
                None => {
                    log::error!("{name}: gave up reporting the end of the migration: {e}");
                    return;
                }
            },
        }
    }
}

async fn cancel(ctx: &MigrationContext, vmi: &VirtualMachineInstance) {
    let Some(uid) = vmi.uid() else { return };
    let socket = ctx.socket_root.join(&uid).join(LAUNCHER_SOCKET);
    if let Ok(mut client) = launcher_client(&socket) {
        match call(client.cancel_migration(VmiRequest { vmi: uid })).await {
            Ok(_) => log::info!("{}: migration cancelled", vmi.name_any()),
            Err(e) => log::debug!("{}: cancel: {e}", vmi.name_any()),
        }
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop<T>(Option<tokio::task::JoinHandle<T>>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}
