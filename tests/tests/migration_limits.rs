//! Migration limits on the two-node local cluster (QEMU TCG): the KubeVirt CR's
//! `bandwidthPerMigration` and `completionTimeoutPerGiB` reach the source, so that a migration
//! held to 256 KiB/s is cancelled at its completion timeout; so do a MigrationPolicy's, picked by
//! the namespace's label and named in `migrationState`; a policy asking for post-copy is refused
//! by KubeVirt's webhook.
//!
//! The CR's settings change the whole cluster: that test holds the cluster lock alone
//! (`ClusterChange`, which also puts the CR's spec back). The policy selects only its own test
//! namespace: that test holds it shared, beside the other migration tests.

use ferrovirt_tests::migration::{
    failed_and_still_counting_on_the_source, namespace_policy, running_vm, PolicyGuard, UnderWay,
};
use ferrovirt_tests::{
    client, migration_of, patch_kubevirt_cr, two_schedulable_nodes, virtctl, ClusterChange,
    ClusterLock, TestNamespace,
};
use kube::api::PostParams;
use kube::{Api, ResourceExt};

/// `spec.configuration.migrations` of the KubeVirt CR, removed again when dropped.
struct MigrationSettings;

impl MigrationSettings {
    fn set(settings: serde_json::Value) -> MigrationSettings {
        let patch = serde_json::json!({"spec": {"configuration": {"migrations": settings}}});
        let out = patch_kubevirt_cr(&patch);
        assert_eq!(out.code, Some(0), "patching the KubeVirt CR: {out:?}");
        MigrationSettings
    }
}

impl Drop for MigrationSettings {
    fn drop(&mut self) {
        let patch = serde_json::json!({"spec": {"configuration": {"migrations": null}}});
        let out = patch_kubevirt_cr(&patch);
        if out.code != Some(0) {
            eprintln!("could not remove the migration settings: {out:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crs_bandwidth_and_completion_timeout_cancel_a_slow_migration() {
    let _alone = ClusterChange::begin().await;
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-migslow").await;
    let ns = namespace.name.as_str();
    two_schedulable_nodes(&client).await;
    let (vmi, source_node, _) = running_vm(&client, ns, "vm-slow", "1Gi").await;
    // 256 KiB/s cannot move the guest's memory and disks within 5 s per GiB of them; without
    // the bandwidth limit the migration would finish in a few seconds.
    let _cr = MigrationSettings::set(serde_json::json!({
        "bandwidthPerMigration": "256Ki",
        "completionTimeoutPerGiB": 5
    }));
    let out = virtctl(ns, &["migrate", "vm-slow"]);
    assert_eq!(out.code, Some(0), "virtctl migrate: {out:?}");
    let under = UnderWay {
        uid: vmi.uid().expect("uid"),
        source_node,
        migration: migration_of(&client, ns, "vm-slow").await.name_any(),
        target_pod: String::new(),
    };
    let state = failed_and_still_counting_on_the_source(&client, ns, "vm-slow", &under).await;
    let reason = state.failure_reason.unwrap_or_default();
    assert!(
        reason.contains("not completed after") && reason.contains("completionTimeoutPerGiB 5 s"),
        "{reason}"
    );
    println!("{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_policy_picked_by_namespace_label_limits_the_migration() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    two_schedulable_nodes(&client).await;
    let namespace = TestNamespace::create(&client, "e2e-migpolicy").await;
    let ns = namespace.name.as_str();
    let policies: Api<api::MigrationPolicy> = Api::all(client.clone());

    // KubeVirt's webhook refuses what Ferrovirt cannot honour, by path.
    let post_copy: api::MigrationPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "migrations.kubevirt.io/v1alpha1",
        "kind": "MigrationPolicy",
        "metadata": {"name": "e2e-post-copy"},
        "spec": {"allowPostCopy": true, "selectors": {"namespaceSelector": {"x": "y"}}}
    }))
    .expect("a policy");
    let _refused_guard = PolicyGuard("e2e-post-copy");
    let refused = policies
        .create(&PostParams::default(), &post_copy)
        .await
        .expect_err("allowPostCopy is refused");
    let text = refused.to_string();
    assert!(
        text.contains("migration-policy-validator.kubevirt.io")
            && text.contains("spec.allowPostCopy"),
        "{text}"
    );

    // A policy for this namespace only: 256 KiB/s cannot move the guest within 5 s per GiB.
    let _guard = namespace_policy(
        &client,
        ns,
        "e2e-slow-policy",
        serde_json::json!({"bandwidthPerMigration": "256Ki", "completionTimeoutPerGiB": 5}),
    )
    .await;
    let (vmi, source_node, _) = running_vm(&client, ns, "vm-policy", "1Gi").await;
    let out = virtctl(ns, &["migrate", "vm-policy"]);
    assert_eq!(out.code, Some(0), "virtctl migrate: {out:?}");
    let under = UnderWay {
        uid: vmi.uid().expect("uid"),
        source_node,
        migration: migration_of(&client, ns, "vm-policy").await.name_any(),
        target_pod: String::new(),
    };
    let state = failed_and_still_counting_on_the_source(&client, ns, "vm-policy", &under).await;
    assert_eq!(
        state.migration_policy_name.as_deref(),
        Some("e2e-slow-policy")
    );
    let settings = state
        .migration_configuration
        .clone()
        .expect("migrationConfiguration");
    assert_eq!(settings.bandwidth_bytes_per_second(), 256 * 1024);
    let reason = state.failure_reason.unwrap_or_default();
    assert!(
        reason.contains("not completed after") && reason.contains("completionTimeoutPerGiB 5 s"),
        "{reason}"
    );
    println!("{reason}");
}
