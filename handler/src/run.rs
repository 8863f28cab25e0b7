//! Starts everything virt-handler does on its node.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use api::healthz::ConfigVersion;
use api::{KubeVirt, VirtualMachineInstance};
use contract::labels;
use contract::layout::{DEVICE_PLUGIN_DIR, HOST_SOCKET_ROOT};
use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};

use crate::device_plugin::{run_device_plugin, KVM, TUN};
use crate::launcher_socket::LauncherSockets;
use crate::node;
use crate::notify::NotifyServers;
use crate::vmi::reconcile::{reconcile, HandlerContext, SyncError};

pub async fn run_handler(client: Client, node_name: String) {
    let capability = contract::capability::probe();
    log::info!("node {node_name}: KVM {:?}", capability);
    if let Err(e) = node::mark_node(&client, &node_name, &capability).await {
        log::warn!("labelling node {node_name}: {e}");
    }
    tokio::spawn(node::heartbeat(
        client.clone(),
        node_name.clone(),
        capability,
    ));
    for device in [KVM, TUN] {
        tokio::spawn(run_device_plugin(device, PathBuf::from(DEVICE_PLUGIN_DIR)));
    }

    let (kubevirts, writer) = reflector::store::<KubeVirt>();
    tokio::spawn(
        watcher(
            Api::<KubeVirt>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .for_each(|_| futures::future::ready(())),
    );
    // The handler reads its configuration from this store at each use, so the store's CR is
    // the one in force.
    let store = kubevirts.clone();
    api::healthz::server::spawn(
        "virt-handler",
        client.clone(),
        ConfigVersion::of_kubevirts(move || store.state()),
    );
    let _ = std::fs::create_dir_all(HOST_SOCKET_ROOT);
    tokio::spawn(crate::migration::reconcile::run(
        client.clone(),
        node_name.clone(),
        PathBuf::from(HOST_SOCKET_ROOT),
        kubevirts.clone(),
    ));
    tokio::spawn(crate::server::run_from_env(PathBuf::from(HOST_SOCKET_ROOT)));
    tokio::spawn(crate::sockets::sweep_forever(PathBuf::from(
        HOST_SOCKET_ROOT,
    )));
    tokio::spawn(crate::metrics::serve(client.clone(), node_name.clone()));
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = Arc::new(HandlerContext {
        client: client.clone(),
        node: node_name.clone(),
        socket_root: PathBuf::from(HOST_SOCKET_ROOT),
        kubevirts,
        notify: NotifyServers::new(events_tx.clone()),
        launcher_sockets: LauncherSockets::start(events_tx).unwrap_or_else(|e| {
            log::error!("cannot watch for launcher sockets (inotify): {e}");
            std::process::exit(1)
        }),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "virt-handler".into(),
                instance: Some(node_name.clone()),
            },
        ),
    });
    let mine = watcher::Config::default().labels(&format!("{}={node_name}", labels::NODE_NAME));
    Controller::new(Api::<VirtualMachineInstance>::all(client), mine)
        .reconcile_on(tokio_stream::wrappers::UnboundedReceiverStream::new(
            events_rx,
        ))
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn error_policy(
    vmi: Arc<VirtualMachineInstance>,
    error: &SyncError,
    _: Arc<HandlerContext>,
) -> Action {
    if matches!(error, SyncError::Kube(kube::Error::Api(e)) if e.code == 409) {
        return Action::requeue(Duration::from_millis(200));
    }
    log::warn!(
        "{}/{}: {}",
        vmi.namespace().unwrap_or_default(),
        vmi.name_any(),
        crate::error_chain(error)
    );
    Action::requeue(Duration::from_secs(3))
}
