//! Live migration on the two-node local cluster (QEMU TCG).
//!
//! - A VM whose guest prints `fv-count N UPTIME TOKEN` (a counter, its uptime, and a token it
//!   keeps in RAM) and writes to its emptyDisk is migrated with `virtctl migrate`: the
//!   migration goes through its phases to Succeeded, the VMI moves to the other node, the source
//!   Pod goes, and the console on the new node shows the counter going on with the same token
//!   and a growing uptime (no reboot). The total time and the guest's downtime are printed.
//! - The target Pod is killed, or the source node's virt-handler restarted, while the stream
//!   runs; or `virtctl migrate-cancel` deletes the migration object: the migration fails and the
//!   VM keeps running on the source.
//! - A VMI with a ReadWriteOnce PVC is refused: the migration fails with the reason, and the
//!   VMI's LiveMigratable condition says it.
//! - The limits of the KubeVirt CR and of a MigrationPolicy: tests/migration_limits.rs.
//!
//! Tests that disturb the whole cluster or a node (a restarted virt-handler, whose device plugins then refuse Pods for a moment) hold the cluster
//! lock alone (`ClusterChange`, which also puts the CR's spec back); the other migration tests
//! hold it shared, beside each other but never beside a change, from any test binary.

use std::io::Read;
use std::time::{Duration, Instant};

use api::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use api::{VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::counter::console_counts;
use ferrovirt_tests::migration::{
    failed_and_still_counting_on_the_source, running_vm, UnderWay, DISK_MARKER,
};
use ferrovirt_tests::{
    client, launcher_pids, migration_of, migration_phase as phase, restart_handler,
    two_schedulable_nodes, virtctl, wait_for, ClusterChange, ClusterLock, TestNamespace,
};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtctl_migrate_moves_a_running_vm_to_the_other_node() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    two_schedulable_nodes(&client).await;
    let namespace = TestNamespace::create(&client, "e2e-migrate").await;
    let ns = namespace.name.as_str();
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (vmi, source_node, before) = running_vm(&client, ns, "vm-counter", "1Gi").await;
    let uid = vmi.uid().expect("uid");
    let last_before = before.last().cloned().expect("counts");

    let started = Instant::now();
    let out = virtctl(ns, &["migrate", "vm-counter"]);
    assert_eq!(out.code, Some(0), "virtctl migrate: {out:?}");
    assert!(out.stdout.contains("was scheduled to migrate"), "{out:?}");
    let migration = migration_of(&client, ns, "vm-counter").await;
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    let done = wait_for("the migration to end", Duration::from_secs(300), || async {
        let m = migrations.get(&migration.name_any()).await.ok()?;
        phase(&m).is_some_and(MigrationPhase::is_final).then_some(m)
    })
    .await;
    let total = started.elapsed();
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(MigrationPhase::Succeeded),
        "migration: {status:?}"
    );
    let phases: Vec<MigrationPhase> = status
        .phase_transition_timestamps
        .iter()
        .map(|t| t.phase)
        .collect();
    for want in [
        MigrationPhase::Scheduling,
        MigrationPhase::Scheduled,
        MigrationPhase::PreparingTarget,
        MigrationPhase::TargetReady,
        MigrationPhase::Running,
        MigrationPhase::Succeeded,
    ] {
        assert!(
            phases.contains(&want),
            "phase {want:?} missing from {phases:?}"
        );
    }

    // The VMI is on the other node, with the migration recorded.
    let moved = wait_for(
        "the VMI on the target node",
        Duration::from_secs(60),
        || async {
            let v = vmis.get("vm-counter").await.ok()?;
            let s = v.status.as_ref()?;
            (s.node_name.as_deref() != Some(source_node.as_str())
                && s.phase == Some(VmiPhase::Running))
            .then_some(v)
        },
    )
    .await;
    let s = moved.status.clone().unwrap_or_default();
    let target_node = s.node_name.clone().expect("nodeName");
    let state = s.migration_state.clone().expect("migrationState");
    assert_eq!(state.source_node.as_deref(), Some(source_node.as_str()));
    assert_eq!(state.target_node.as_deref(), Some(target_node.as_str()));
    assert_eq!(state.completed, Some(true));
    assert_ne!(state.failed, Some(true));
    assert_eq!(state.mode.as_deref(), Some("PreCopy"));
    let (Some(start), Some(end)) = (&state.start_timestamp, &state.end_timestamp) else {
        panic!("timestamps missing: {state:?}");
    };
    assert_eq!(s.migration_method.as_deref(), Some("BlockMigration"));
    assert_eq!(
        moved.labels().get(contract::labels::NODE_NAME),
        Some(&target_node)
    );

    // The console on the target: the counter goes on, same RAM token, uptime grows.
    let after = console_counts(&target_node, &uid, 3, Duration::from_secs(60)).await;
    let first = after[0].clone();
    assert_eq!(
        first.token, last_before.token,
        "the RAM token changed: the guest rebooted"
    );
    assert!(
        first.n > last_before.n,
        "the counter restarted: {first:?} after {last_before:?}"
    );
    assert!(
        first.uptime > last_before.uptime,
        "the uptime went back: {first:?}"
    );
    assert!(after
        .windows(2)
        .all(|w| w[1].n > w[0].n && w[1].uptime >= w[0].uptime));

    // The source Pod goes; the target Pod is the VMI's launcher.
    wait_for("the source Pod to go", Duration::from_secs(120), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("{}={uid}", contract::labels::CREATED_BY)))
            .await
            .ok()?;
        let on_source = list.items.iter().any(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(source_node.as_str())
        });
        (!on_source).then_some(())
    })
    .await;

    // What the guest wrote to its emptyDisk on the source is in the target's copy.
    let deadline = Instant::now() + Duration::from_secs(90);
    let pid = loop {
        let pids = launcher_pids(&uid);
        if pids.len() == 1 {
            break pids[0];
        }
        let described: Vec<String> = pids
            .iter()
            .map(|p| {
                let cgroup =
                    std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
                format!("{p}: {}", cgroup.lines().last().unwrap_or_default())
            })
            .collect();
        assert!(
            Instant::now() < deadline,
            "not one virt-launcher for {uid} after the migration: {described:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // (`/var/run` is a symlink to `/run` in the launcher image.)
    let disk = format!("/proc/{pid}/root/run/kubevirt-ephemeral-disks/emptydisk.img");
    let mut head = vec![0u8; DISK_MARKER.len()];
    let read = std::fs::File::open(&disk).and_then(|mut f| f.read_exact(&mut head));
    assert!(read.is_ok(), "reading {disk}: {read:?}");
    assert_eq!(
        String::from_utf8_lossy(&head),
        DISK_MARKER,
        "the target's emptyDisk lacks what the guest wrote on the source"
    );

    // The handler's figures.
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let note = wait_for("the Migrated event", Duration::from_secs(30), || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Migrated"))
            .filter_map(|e| e.message)
            .find(|m| m.contains("downtime"))
    })
    .await;
    println!(
        "migrated {source_node} -> {target_node}: virtctl to Succeeded {total:?}; \
         migrationState {} -> {}; handler: {note}",
        start.0, end.0
    );
    println!("last count on the source {last_before:?}, first on the target {first:?}");

    // And back: a second migration of the same VMI returns it to the first node.
    let last_there = console_counts(&target_node, &uid, 1, Duration::from_secs(30))
        .await
        .last()
        .cloned()
        .expect("counts");
    let back_started = Instant::now();
    let out = virtctl(ns, &["migrate", "vm-counter"]);
    assert_eq!(out.code, Some(0), "second virtctl migrate: {out:?}");
    let second = wait_for(
        "the second migration object",
        Duration::from_secs(20),
        || async {
            migrations
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|m| m.name_any() != migration.name_any())
        },
    )
    .await;
    let back = wait_for(
        "the second migration to end",
        Duration::from_secs(300),
        || async {
            let m = migrations.get(&second.name_any()).await.ok()?;
            phase(&m).is_some_and(MigrationPhase::is_final).then_some(m)
        },
    )
    .await;
    assert_eq!(
        phase(&back),
        Some(MigrationPhase::Succeeded),
        "{:?}",
        back.status
    );
    wait_for(
        "the VMI back on the first node",
        Duration::from_secs(60),
        || async {
            let v = vmis.get("vm-counter").await.ok()?;
            (v.status.as_ref()?.node_name.as_deref() == Some(source_node.as_str())).then_some(())
        },
    )
    .await;
    let home = console_counts(&source_node, &uid, 3, Duration::from_secs(60)).await;
    assert_eq!(
        home[0].token, last_there.token,
        "the guest rebooted on the way back"
    );
    assert!(home[0].n > last_there.n && home[0].uptime > last_there.uptime);
    wait_for("one launcher Pod", Duration::from_secs(120), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("{}={uid}", contract::labels::CREATED_BY)))
            .await
            .ok()?;
        (list.items.len() == 1).then_some(())
    })
    .await;
    println!(
        "migrated back to {source_node} in {:?}",
        back_started.elapsed()
    );
}

/// Starts VM `name` with a large sparse emptyDisk, so that its block migration lasts long
/// enough to be interrupted, runs `virtctl migrate` and returns once the stream runs.
async fn migration_under_way(client: &Client, ns: &str, name: &str) -> UnderWay {
    two_schedulable_nodes(client).await;
    let (vmi, source_node, _) = running_vm(client, ns, name, "64Gi").await;
    let out = virtctl(ns, &["migrate", name]);
    assert_eq!(out.code, Some(0), "virtctl migrate: {out:?}");
    let migration = migration_of(client, ns, name).await.name_any();
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    let target_pod = wait_for("the migration to run", Duration::from_secs(300), || async {
        let m = migrations.get(&migration).await.ok()?;
        let p = phase(&m)?;
        assert!(
            !p.is_final(),
            "the migration ended before it could be interrupted: {:?}",
            m.status
        );
        let state = m.status.as_ref()?.migration_state.as_ref()?;
        (p == MigrationPhase::Running).then(|| state.target_pod.clone())?
    })
    .await;
    UnderWay {
        uid: vmi.uid().expect("uid"),
        source_node,
        migration,
        target_pod,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_target_pod_fails_the_migration_and_the_vm_stays() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-migkill").await;
    let ns = namespace.name.as_str();
    let under = migration_under_way(&client, ns, "vm-kill").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete(&under.target_pod, &now)
        .await
        .expect("target Pod deleted");
    println!(
        "killed the target Pod {} while it received",
        under.target_pod
    );
    failed_and_still_counting_on_the_source(&client, ns, "vm-kill", &under).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_handler_restarted_mid_migration_settles_it_and_the_vm_stays() {
    let _alone = ClusterChange::begin().await;
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-mighandler").await;
    let ns = namespace.name.as_str();
    let under = migration_under_way(&client, ns, "vm-handler").await;
    // The relay dies with the handler; its successor finds the launcher's record of the
    // broken stream and reports it, rather than leaving the migration Running for ever.
    restart_handler(&client, &under.source_node, Some(0)).await;
    println!(
        "restarted virt-handler on {} while it sent",
        under.source_node
    );
    let state = failed_and_still_counting_on_the_source(&client, ns, "vm-handler", &under).await;
    println!("reported after the restart: {:?}", state.failure_reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vmi_with_a_read_write_once_pvc_is_refused_with_the_reason() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-nomig").await;
    let ns = namespace.name.as_str();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "local-disk"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}
            }))
            .expect("a PVC"),
        )
        .await
        .expect("PVC created");
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi-rwo"},
        "spec": {
            "domain": {"devices": {"disks": [{"name": "disk0", "disk": {"bus": "virtio"}}]},
                       "memory": {"guest": "128Mi"}, "resources": {}},
            "volumes": [{"name": "disk0", "persistentVolumeClaim": {"claimName": "local-disk"}}]
        }
    }))
    .expect("a VMI");
    vmis.create(&PostParams::default(), &vmi)
        .await
        .expect("VMI created");
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    let request: VirtualMachineInstanceMigration = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "mig-rwo"},
        "spec": {"vmiName": "vmi-rwo"}
    }))
    .expect("a migration");
    migrations
        .create(&PostParams::default(), &request)
        .await
        .expect("migration created");
    let failed = wait_for(
        "the migration to be refused",
        Duration::from_secs(60),
        || async {
            let m = migrations.get("mig-rwo").await.ok()?;
            phase(&m).is_some_and(MigrationPhase::is_final).then_some(m)
        },
    )
    .await;
    let status = failed.status.clone().unwrap_or_default();
    assert_eq!(status.phase, Some(MigrationPhase::Failed), "{status:?}");
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert!(reason.contains("PVC local-disk is not shared"), "{reason}");
    let vmi = vmis.get("vmi-rwo").await.expect("VMI");
    let condition = vmi
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "LiveMigratable")
                .cloned()
        })
        .expect("LiveMigratable condition");
    assert!(!condition.is_true());
    assert_eq!(condition.reason.as_deref(), Some("DisksNotLiveMigratable"));
    println!("refused: {reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtctl_migrate_cancel_stops_a_running_migration() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-migcancel").await;
    let ns = namespace.name.as_str();
    let under = migration_under_way(&client, ns, "vm-cancel").await;
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    // KubeVirt's virtctl cancels by deleting the migration object.
    let out = virtctl(ns, &["migrate-cancel", "vm-cancel"]);
    assert_eq!(out.code, Some(0), "virtctl migrate-cancel: {out:?}");
    assert_eq!(
        out.stdout.trim(),
        "VM vm-cancel was scheduled to migrate-cancel"
    );
    // The object stays (finalizer) until the source handler has stopped the stream.
    let state = failed_and_still_counting_on_the_source(&client, ns, "vm-cancel", &under).await;
    assert_eq!(state.abort_requested, Some(true), "{state:?}");
    assert_eq!(
        state.abort_status.as_deref(),
        Some("Succeeded"),
        "{state:?}"
    );
    println!("cancelled: {:?}", state.failure_reason);
    wait_for(
        "the migration object to go",
        Duration::from_secs(60),
        || async { matches!(migrations.get_opt(&under.migration).await, Ok(None)).then_some(()) },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for("the target Pod to go", Duration::from_secs(120), || async {
        matches!(pods.get_opt(&under.target_pod).await, Ok(None)).then_some(())
    })
    .await;
    let out = virtctl(ns, &["migrate-cancel", "vm-cancel"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "Found no migration to cancel for vm-cancel"
    );
}
