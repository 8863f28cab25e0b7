//! Wires the controllers: watches, ownership, and the shared context.

use std::sync::Arc;
use std::time::Duration;

use api::{KubeVirt, VirtualMachine, VirtualMachineInstance};
use contract::labels;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};

use crate::config::ClusterConfig;
use crate::context::Context;
use crate::{vm, vmi, Error};

/// Watches the KubeVirt CRs in the background. The store is where the controllers read their
/// configuration from at each use ([`Context::config`]), so it is also what `/healthz` reports
/// the version of; it runs before leader election, so that a standby replica reports too.
pub fn watch_kubevirts(client: Client) -> Store<KubeVirt> {
    let (kubevirts, writer) = reflector::store::<KubeVirt>();
    let kubevirt_watch = watcher(Api::<KubeVirt>::all(client), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .for_each(|_| futures::future::ready(()));
    tokio::spawn(kubevirt_watch);
    kubevirts
}

/// Runs the VM, VMI, migration, replica set, pool, snapshot, restore and clone controllers, and
/// the one that marks the kinds Ferrovirt does not implement, until a shutdown signal. `kubevirts`: from [`watch_kubevirts`].
pub async fn run_controllers(client: Client, base: ClusterConfig, kubevirts: Store<KubeVirt>) {
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
    // A migration moves on when its VMI (the handlers report there), its target Pod or, for
    // one held back by the limits, another migration changes: see `migration::watch`.
    let migrations = Controller::new(
        Api::<api::VirtualMachineInstanceMigration>::all(client.clone()),
        watcher::Config::default(),
    );
    let (of_vmi, of_pod, of_limits) = (migrations.store(), migrations.store(), migrations.store());
    let migration_controller = migrations
        .watches(
            Api::<VirtualMachineInstance>::all(client.clone()),
            watcher::Config::default(),
            move |vmi| crate::migration::watch::migrations_of_vmi(&of_vmi.state(), &vmi),
        )
        .watches(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().labels(labels::MIGRATION_JOB),
            move |pod| crate::migration::watch::migration_of_pod(&of_pod.state(), &pod),
        )
        .watches(
            Api::<api::VirtualMachineInstanceMigration>::all(client.clone()),
            watcher::Config::default(),
            move |migration| {
                crate::migration::watch::waiting_for_limits(&of_limits.state(), &migration)
            },
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
    let snapshot_controller = Controller::new(
        Api::<api::snapshot::VirtualMachineSnapshot>::all(client.clone()),
        watcher::Config::default(),
    )
    .watches(
        Api::<api::snapshot::VirtualMachineSnapshotContent>::all(client.clone()),
        watcher::Config::default(),
        |content| crate::snapshot::take::of_content(&content),
    )
    .shutdown_on_signal()
    .run(crate::snapshot::take::reconcile, error_policy, ctx.clone())
    .for_each(|result| {
        if let Err(e) = result {
            log::debug!("snapshot reconcile: {e}");
        }
        futures::future::ready(())
    });
    let restore_controller = Controller::new(
        Api::<api::snapshot::VirtualMachineRestore>::all(client.clone()),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(
        crate::snapshot::restore::reconcile,
        error_policy,
        ctx.clone(),
    )
    .for_each(|result| {
        if let Err(e) = result {
            log::debug!("restore reconcile: {e}");
        }
        futures::future::ready(())
    });
    let clones = Controller::new(
        Api::<api::clone::VirtualMachineClone>::all(client.clone()),
        watcher::Config::default(),
    );
    let clone_store = clones.store();
    let clone_controller = clones
        .owns(
            Api::<api::snapshot::VirtualMachineSnapshot>::all(client.clone()),
            watcher::Config::default(),
        )
        .owns(
            Api::<api::snapshot::VirtualMachineRestore>::all(client.clone()),
            watcher::Config::default(),
        )
        .watches(
            Api::<VirtualMachine>::all(client.clone()),
            watcher::Config::default(),
            move |vm| crate::clone::clones_of_vm(&clone_store, &vm),
        )
        .shutdown_on_signal()
        .run(crate::clone::reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            if let Err(e) = result {
                log::debug!("clone reconcile: {e}");
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
        snapshot_controller,
        restore_controller,
        clone_controller,
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

#[cfg(test)]
mod tests {
    use api::healthz::ConfigVersion;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    fn kubevirt(resource_version: &str, use_emulation: bool) -> KubeVirt {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt", "uid": "kv",
                         "resourceVersion": resource_version},
            "spec": {"configuration": {"developerConfiguration": {"useEmulation": use_emulation}}},
        }))
        .expect("a KubeVirt")
    }

    /// `/healthz` reports the CR the configuration is read from: once the watch put a new
    /// version into the store, the configuration in force is that version's.
    #[test]
    fn healthz_reports_the_version_whose_configuration_is_in_force() {
        let (store, mut writer) = reflector::store::<KubeVirt>();
        let reader = store.clone();
        let version = ConfigVersion::of_kubevirts(move || reader.state());
        let use_emulation = || {
            let mut cfg = ClusterConfig::default();
            if let Some(kv) = api::kubevirt::in_force(&store.state()) {
                cfg.apply_kubevirt(kv);
            }
            cfg.use_emulation
        };
        assert_eq!(version.get(), "");
        writer.apply_watcher_event(&Event::Apply(kubevirt("10", false)));
        assert_eq!((version.get().as_str(), use_emulation()), ("10", false));
        writer.apply_watcher_event(&Event::Apply(kubevirt("11", true)));
        assert_eq!((version.get().as_str(), use_emulation()), ("11", true));
    }
}
