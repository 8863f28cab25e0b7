//! Wires the controllers: watches, ownership, and the shared context.

use std::sync::Arc;
use std::time::Duration;

use api::{KubeVirt, VirtualMachine, VirtualMachineInstance};
use contract::labels;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};

use crate::config::ClusterConfig;
use crate::context::Context;
use crate::{vm, vmi, Error};

/// Runs the VM, VMI, migration, replica set and pool controllers, and the one that marks the kinds Ferrovirt does
/// not implement, until a shutdown signal.
pub async fn run_controllers(client: Client, base: ClusterConfig) {
    let (kubevirts, writer) = reflector::store::<KubeVirt>();
    let kubevirt_watch = watcher(
        Api::<KubeVirt>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects()
    .for_each(|_| futures::future::ready(()));
    tokio::spawn(kubevirt_watch);
    kubevirts.wait_until_ready().await.ok();

    let ctx = Context::new(client.clone(), kubevirts, base);
    let launcher_pods =
        watcher::Config::default().labels(&format!("{}={}", labels::APP, labels::LAUNCHER_APP));

    let vmi_controller = Controller::new(
        Api::<VirtualMachineInstance>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<Pod>::all(client.clone()), launcher_pods)
    .shutdown_on_signal()
    .run(vmi::reconcile::reconcile, error_policy, ctx.clone())
    .for_each(|result| {
        if let Err(e) = result {
            log::debug!("vmi reconcile: {e}");
        }
        futures::future::ready(())
    });
    let vm_controller = Controller::new(
        Api::<VirtualMachine>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<VirtualMachineInstance>::all(client.clone()),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(vm::reconcile::reconcile, error_policy, ctx.clone())
    .for_each(|result| {
        if let Err(e) = result {
            log::debug!("vm reconcile: {e}");
        }
        futures::future::ready(())
    });
    let migration_controller = Controller::new(
        Api::<api::VirtualMachineInstanceMigration>::all(client.clone()),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(
        crate::migration::reconcile::reconcile,
        error_policy,
        ctx.clone(),
    )
    .for_each(|result| {
        if let Err(e) = result {
            log::debug!("migration reconcile: {e}");
        }
        futures::future::ready(())
    });
    let replica_set_controller = Controller::new(
        Api::<api::VirtualMachineInstanceReplicaSet>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<VirtualMachineInstance>::all(client.clone()),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(
        crate::replicaset::reconcile::reconcile,
        error_policy,
        ctx.clone(),
    )
    .for_each(|result| {
        if let Err(e) = result {
            log::debug!("replica set reconcile: {e}");
        }
        futures::future::ready(())
    });
    let pool_controller = Controller::new(
        Api::<api::VirtualMachinePool>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<VirtualMachine>::all(client.clone()),
        watcher::Config::default(),
    )
    .watches(
        Api::<VirtualMachineInstance>::all(client.clone()),
        watcher::Config::default().labels(api::pool::REVISION_LABEL),
        |vmi| crate::pool::reconcile::pool_of_vmi(&vmi),
    )
    .shutdown_on_signal()
    .run(crate::pool::reconcile::reconcile, error_policy, ctx.clone())
    .for_each(|result| {
        if let Err(e) = result {
            log::debug!("pool reconcile: {e}");
        }
        futures::future::ready(())
    });
    let unsupported = crate::unsupported::run(ctx.clone());
    futures::join!(
        vmi_controller,
        vm_controller,
        migration_controller,
        replica_set_controller,
        pool_controller,
        unsupported
    );
}

/// Retries soon on conflicts (another writer won the race), later on other errors.
fn error_policy<K: ResourceExt>(object: Arc<K>, error: &Error, _: Arc<Context>) -> Action {
    let conflict = matches!(error, Error::Kube(kube::Error::Api(e)) if e.code == 409);
    if conflict {
        return Action::requeue(Duration::from_millis(200));
    }
    log::warn!("{}: {error}: {}", object.name_any(), source_chain(error));
    Action::requeue(Duration::from_secs(5))
}

fn source_chain(error: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut source = error.source();
    while let Some(e) = source {
        parts.push(e.to_string());
        source = e.source();
    }
    parts.join(": ")
}
