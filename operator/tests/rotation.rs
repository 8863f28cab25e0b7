//! Certificate rotation on the local cluster (run alone by hack/test.sh: virt-api and
//! virt-handler restart onto new certificates several times).
//!
//! The KubeVirt CR is given short lifetimes, as a KubeVirt user would write them
//! (`certificateRotateStrategy.selfSigned`: CA `10m`, server certificates `1m` renewed `20s`
//! before they end): the operator replaces the longer-lived CA and certificates at once, keeps
//! the old CA in the `kubevirt-ca` bundle, and renews virt-api's certificate again before it
//! expires, with the CA kept. Through it the install stays Deployed, virt-api's pods restart
//! onto the new certificate, and kube-apiserver still reaches virt-api: a VM is admitted by its
//! webhooks and the subresources API answers. Afterwards the strategy is removed and the CA
//! Secret deleted, so the operator issues certificates with the default lifetimes again (also
//! when an assertion fails), with the cluster lock held throughout (`ClusterChange`).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use api::VirtualMachine;
use common::*;
use ferrovirt_tests::{client, patch_kubevirt_cr, tiny_vm, wait_for, ClusterChange, TestNamespace};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

const API_CERTS: &str = "kubevirt-virt-api-certs";

async fn secret(client: &Client, name: &str) -> BTreeMap<String, String> {
    Api::<Secret>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|s| s.data)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

async fn bundle(client: &Client) -> String {
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get_opt("kubevirt-ca")
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data?.get("ca-bundle").cloned())
        .unwrap_or_default()
}

async fn api_pods(client: &Client) -> Vec<String> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels("kubevirt.io=virt-api"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect()
}

/// Puts the CR back to the default lifetimes, even when the test fails.
struct DefaultLifetimes;

impl Drop for DefaultLifetimes {
    fn drop(&mut self) {
        let _ =
            patch_kubevirt_cr(&serde_json::json!({"spec": {"certificateRotateStrategy": null}}));
        let _ = kubectl(&["-n", NS, "delete", "secret", "kubevirt-ca"]);
    }
}

#[tokio::test]
async fn certificates_rotate_before_expiry_and_virt_api_stays_reachable() {
    let _change = ClusterChange::begin().await;
    let client = client().await;
    let tag = ensure_installed(&client).await;
    let ca0 = secret(&client, "kubevirt-ca").await["tls.crt"].clone();
    let cert0 = secret(&client, API_CERTS).await["tls.crt"].clone();
    let pods0 = api_pods(&client).await;

    let guard = DefaultLifetimes;
    let strategy = serde_json::json!({"spec": {"certificateRotateStrategy": {"selfSigned": {
        "ca": {"duration": "10m"},
        "server": {"duration": "1m", "renewBefore": "20s"}
    }}}});
    let out = patch_kubevirt_cr(&strategy);
    assert_eq!(out.code, Some(0), "patching the KubeVirt CR: {out:?}");

    // 1. Shorter lifetimes replace the CA and the certificates at once; the bundle keeps the
    //    old CA while clients move over.
    let (ca1, cert1) = wait_for(
        "a new CA and virt-api certificate",
        Duration::from_secs(120),
        || async {
            let ca = secret(&client, "kubevirt-ca")
                .await
                .get("tls.crt")
                .cloned()?;
            let api = secret(&client, API_CERTS).await;
            let cert = api.get("tls.crt")?.clone();
            (ca != ca0 && cert != cert0 && api.get("ca.crt") == Some(&ca)).then_some((ca, cert))
        },
    )
    .await;
    // The operator publishes the bundle before the Secrets, so it already leads with the new CA.
    let both = bundle(&client).await;
    assert!(both.starts_with(&ca1), "the bundle starts with the new CA");
    assert!(both.contains(&ca0), "the bundle keeps the old CA");

    // 2. 20 s before its minute is up, virt-api's certificate is renewed again; the CA is kept.
    let until1: i64 = Api::<Secret>::namespaced(client.clone(), NS)
        .get(API_CERTS)
        .await
        .expect("virt-api's Secret")
        .metadata
        .annotations
        .and_then(|a| a.get("kubevirt.io/cert-not-after")?.parse().ok())
        .expect("the certificate's not-after annotation");
    let cert2 = wait_for(
        "virt-api's certificate renewed before expiry",
        Duration::from_secs(150),
        || async {
            let cert = secret(&client, API_CERTS).await.get("tls.crt").cloned()?;
            (cert != cert1).then_some(cert)
        },
    )
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    assert!(now < until1, "renewed {} s after expiry", now - until1);
    assert_ne!(cert2, cert0);
    assert_eq!(secret(&client, "kubevirt-ca").await["tls.crt"], ca1);

    // 3. virt-api restarted onto it and is reachable through its webhooks and the aggregated
    //    API, which trust the bundle.
    // The rollout may start after the install last reported Deployed: wait for it to finish.
    wait_for(
        "virt-api's pods replaced",
        Duration::from_secs(120),
        || async {
            let pods = api_pods(&client).await;
            (!pods.is_empty() && pods.iter().all(|p| !pods0.contains(p))).then_some(())
        },
    )
    .await;
    wait_deployed(&client, &tag).await;
    let ns = TestNamespace::create(&client, "operator-rotation").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let admitted = vms
        .create(
            &PostParams::default(),
            &tiny_vm("rotated", "Halted", "#!/bin/sh\n"),
        )
        .await;
    assert!(
        admitted.is_ok(),
        "the webhooks refused a valid VM: {admitted:?}"
    );
    wait_for(
        "the subresources API answering",
        Duration::from_secs(60),
        || async {
            let (ok, _, _) = kubectl(&["get", "--raw", "/apis/subresources.kubevirt.io/v1"]);
            ok.then_some(())
        },
    )
    .await;

    // 4. Back to the defaults: a day-long certificate again.
    drop(guard);
    wait_for(
        "a certificate with the default lifetime",
        Duration::from_secs(180),
        || async {
            let s = Api::<Secret>::namespaced(client.clone(), NS)
                .get_opt(API_CERTS)
                .await
                .ok()??;
            let a = s.metadata.annotations?;
            let from: i64 = a.get("kubevirt.io/cert-not-before")?.parse().ok()?;
            let until: i64 = a.get("kubevirt.io/cert-not-after")?.parse().ok()?;
            (until - from > 23 * 3600).then_some(())
        },
    )
    .await;
    wait_deployed(&client, &tag).await;
    drop(ns);
}
