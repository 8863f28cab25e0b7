//! virt-operator on the local cluster, end to end (it uninstalls Ferrovirt, so hack/test.sh
//! runs it alone, after the other tests):
//!
//! 1. installed from whatever state the cluster is in, as hack/up.sh does; a VM runs;
//! 2. children are kept in shape: virt-controller scaled to 0 comes back to 1, the deleted
//!    ValidatingWebhookConfiguration comes back;
//! 3. `uninstallStrategy: BlockUninstallIfWorkloadsExist`: deleting the CR while VMs exist
//!    keeps everything and says why (condition Degraded, reason DeletionBlocked, a Warning
//!    event); once the VMs are deleted, the removal goes on;
//! 4. the CR gone, nothing the operator created is left (CRDs, workloads, RBAC, webhooks,
//!    APIService, certificates); then `kubectl delete -f ferrovirt-operator.yaml` leaves no
//!    trace of Ferrovirt;
//! 5. as a new user: `kubectl create -f ferrovirt-operator.yaml`, `kubectl create -f
//!    kubevirt-cr.yaml`, `kubectl -n kubevirt wait kv kubevirt --for condition=Available`,
//!    examples/vm-cirros.yaml Running and `virtctl console` reaching its guest. The cluster
//!    ends as hack/up.sh leaves it.
//!
//! The cluster lock is held throughout (`ClusterChange`); when an assertion fails half-way,
//! Ferrovirt is installed again all the same ([`Reinstall`]).

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use api::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use api::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use common::*;
use ferrovirt_tests::{client, patch_kubevirt_cr, tiny_vm, wait_for, ClusterChange, TestNamespace};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

const MANAGED: &str = "app.kubernetes.io/managed-by=virt-operator";

async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    matches!(api.get_opt(name).await, Ok(Some(_)))
}

/// Everything the operator creates that is still there, as `Kind/name`.
async fn leftovers(client: &Client) -> Vec<String> {
    let mut left = Vec::new();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in operator::install::workload_crds() {
        if exists(&crds, &name).await {
            left.push(format!("CustomResourceDefinition/{name}"));
        }
    }
    let by_label = ListParams::default().labels(MANAGED);
    macro_rules! labelled {
        ($ty:ty, $api:expr) => {
            let api: Api<$ty> = $api;
            for o in api
                .list_metadata(&by_label)
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                left.push(format!(
                    "{}/{}",
                    stringify!($ty),
                    o.metadata.name.unwrap_or_default()
                ));
            }
        };
    }
    // Namespaced: in the install's namespace (other tests make objects with the same label in
    // namespaces of their own).
    labelled!(Deployment, Api::namespaced(client.clone(), NS));
    labelled!(DaemonSet, Api::namespaced(client.clone(), NS));
    labelled!(Secret, Api::namespaced(client.clone(), NS));
    labelled!(ConfigMap, Api::namespaced(client.clone(), NS));
    labelled!(ClusterRole, Api::all(client.clone()));
    labelled!(ClusterRoleBinding, Api::all(client.clone()));
    labelled!(APIService, Api::all(client.clone()));
    labelled!(MutatingWebhookConfiguration, Api::all(client.clone()));
    labelled!(ValidatingWebhookConfiguration, Api::all(client.clone()));
    // By name too, in case a label was lost.
    let apiservices: Api<APIService> = Api::all(client.clone());
    if exists(&apiservices, "v1.subresources.kubevirt.io").await {
        left.push("APIService//v1.subresources.kubevirt.io".into());
    }
    let validators: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if exists(&validators, "virt-api-validator").await {
        left.push("ValidatingWebhookConfiguration//virt-api-validator".into());
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    for name in [
        "kubevirt-ca",
        "kubevirt-virt-api-certs",
        "kubevirt-virt-handler-server-certs",
        "kubevirt-virt-handler-certs",
    ] {
        if exists(&secrets, name).await {
            left.push(format!("Secret/{NS}/{name}"));
        }
    }
    left.sort();
    left.dedup();
    left
}

/// When dropped during a panic (an assertion failed half-way through the removal), installs
/// Ferrovirt again as hack/up.sh does, without waiting for it: a deletion still blocked is let
/// go on (the uninstall strategy removed), the operator's manifest applied, the CR created
/// once the old one is gone, and examples/vm-cirros.yaml applied.
struct Reinstall;

impl Drop for Reinstall {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let (_, deleting, _) = kubectl(&[
            "-n",
            NS,
            "get",
            "kv",
            "kubevirt",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ]);
        if !deleting.trim().is_empty() {
            let _ = patch_kubevirt_cr(&serde_json::json!({"spec": {"uninstallStrategy": null}}));
            let _ = kubectl(&[
                "-n",
                NS,
                "wait",
                "--for=delete",
                "kv/kubevirt",
                "--timeout=300s",
            ]);
        }
        let operator = Path::new(RELEASE_DIR).join("ferrovirt-operator.yaml");
        let cr = Path::new(RELEASE_DIR).join("kubevirt-cr.yaml");
        let vm = repo().join("examples/vm-cirros.yaml");
        for args in [
            vec![
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                path(&operator),
            ],
            vec![
                "wait",
                "--for",
                "condition=Established",
                "--timeout=60s",
                "crd/kubevirts.kubevirt.io",
            ],
            vec!["create", "-f", path(&cr)],
            vec!["apply", "-f", path(&vm)],
        ] {
            let (ok, out, err) = kubectl(&args);
            if !ok {
                eprintln!("reinstalling: kubectl {}: {out}{err}", args.join(" "));
            }
        }
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// `virtctl console NAME` with stdin piped: presses Enter until the guest's login prompt
/// shows, then closes. Returns what the console printed.
fn virtctl_console(namespace: &str, name: &str, timeout: Duration) -> String {
    let exe = std::env::current_exe().expect("the test executable's path");
    let virtctl = exe
        .parent()
        .and_then(std::path::Path::parent)
        .map(|d| d.join("virtctl"))
        .expect("the target directory");
    assert!(
        virtctl.exists(),
        "{} is missing: build it with `cargo build -p virtctl`",
        virtctl.display()
    );
    let mut child = Command::new(&virtctl)
        .args(["--kubeconfig", ferrovirt_tests::KUBECONFIG, "-n", namespace])
        .args(["console", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", virtctl.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut stdin = child.stdin.take().expect("piped stdin");
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let _ = stdin.write_all(b"\r");
        let _ = stdin.flush();
        while let Ok(chunk) = rx.recv_timeout(Duration::from_millis(1000)) {
            seen.extend(chunk);
        }
        if String::from_utf8_lossy(&seen).contains("login:") {
            break;
        }
    }
    let _ = child.kill();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let _ = child.wait();
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(
        text.contains("login:"),
        "virtctl console {name} showed no login prompt in {timeout:?}: {text:?}; stderr: {stderr}"
    );
    text
}

#[tokio::test]
async fn install_keep_in_shape_block_uninstall_remove_and_reinstall() {
    let _change = ClusterChange::begin().await;
    let client = client().await;
    let tag = ensure_installed(&client).await;
    let _reinstall = Reinstall;
    let kvs = kubevirts(&client);

    // 1. A VM runs on the install.
    let ns = TestNamespace::create(&client, "operator").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    vms.create(
        &PostParams::default(),
        &tiny_vm("op-vm", "Always", "#!/bin/sh\necho operator\n"),
    )
    .await
    .expect("creating VM op-vm");
    wait_for("VMI op-vm Running", START, || async {
        let vmi = vmis.get_opt("op-vm").await.ok()??;
        (vmi.status?.phase? == VmiPhase::Running).then_some(())
    })
    .await;

    // 2a. virt-controller scaled to 0 by hand comes back to 1 replica.
    kubectl_ok(&[
        "-n",
        NS,
        "scale",
        "deployment/virt-controller",
        "--replicas=0",
    ]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    wait_for(
        "virt-controller back at 1 replica and available",
        Duration::from_secs(120),
        || async {
            let d = deployments.get_opt("virt-controller").await.ok()??;
            let replicas = d.spec?.replicas?;
            let available = d.status?.available_replicas.unwrap_or(0);
            (replicas == 1 && available == 1).then_some(())
        },
    )
    .await;

    // 2b. A deleted webhook configuration comes back (a new object).
    let validators: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let old_uid = validators
        .get("virt-api-validator")
        .await
        .expect("virt-api-validator exists")
        .metadata
        .uid;
    kubectl_ok(&[
        "delete",
        "validatingwebhookconfiguration",
        "virt-api-validator",
    ]);
    wait_for(
        "virt-api-validator recreated",
        Duration::from_secs(60),
        || async {
            let v = validators.get_opt("virt-api-validator").await.ok()??;
            (v.metadata.uid != old_uid).then_some(())
        },
    )
    .await;
    wait_deployed(&client, &tag).await;

    // A finished migration object stays, as users keep them; it must not hold the uninstall.
    let migrations: Api<VirtualMachineInstanceMigration> =
        Api::namespaced(client.clone(), &ns.name);
    let leftover: VirtualMachineInstanceMigration = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "leftover"},
        "spec": {"vmiName": "no-such-vmi"}
    }))
    .expect("a migration");
    migrations
        .create(&PostParams::default(), &leftover)
        .await
        .expect("creating a migration");
    wait_for(
        "the leftover migration Failed",
        Duration::from_secs(60),
        || async {
            let m = migrations.get_opt("leftover").await.ok()??;
            let finished = m.status?.phase? == MigrationPhase::Failed;
            (finished && !m.metadata.finalizers?.is_empty()).then_some(())
        },
    )
    .await;

    // 3. BlockUninstallIfWorkloadsExist keeps everything while a VM exists.
    kvs.patch(
        "kubevirt",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"spec": {"uninstallStrategy": "BlockUninstallIfWorkloadsExist"}}),
        ),
    )
    .await
    .expect("setting uninstallStrategy");
    kubectl_ok(&["-n", NS, "delete", "kv", "kubevirt", "--wait=false"]);
    let blocked = wait_for(
        "the deletion reported blocked",
        Duration::from_secs(60),
        || async {
            let kv = kvs.get_opt("kubevirt").await.ok()??;
            let status = kv.status?;
            let degraded = api::condition::find(&status.conditions, "Degraded")?.clone();
            (degraded.is_true() && degraded.reason.as_deref() == Some("DeletionBlocked"))
                .then_some((status.phase, degraded.message.unwrap_or_default()))
        },
    )
    .await;
    assert_eq!(blocked.0, Some(api::kubevirt::KubeVirtPhase::Deleting));
    assert!(blocked.1.contains("VirtualMachine"), "{}", blocked.1);
    // Still blocked a while later, with everything in place.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let kv = kvs
        .get("kubevirt")
        .await
        .expect("the CR is kept while VMs exist");
    assert!(kv.metadata.deletion_timestamp.is_some());
    assert!(exists(&deployments, "virt-api").await);
    assert!(exists(&deployments, "virt-controller").await);
    assert!(exists(&validators, "virt-api-validator").await);
    let vmi = vmis.get("op-vm").await.expect("the VMI is kept");
    assert_eq!(vmi.status.and_then(|s| s.phase), Some(VmiPhase::Running));
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let warned = events
        .list(&ListParams::default())
        .await
        .expect("listing events")
        .items
        .iter()
        .any(|e| {
            e.reason.as_deref() == Some("DeletionBlocked") && e.type_.as_deref() == Some("Warning")
        });
    assert!(warned, "no Warning event DeletionBlocked in {NS}");

    // Deleting every VM (and so every VMI) lets the removal go on.
    let all_vms: Api<VirtualMachine> = Api::all(client.clone());
    for vm in all_vms
        .list(&ListParams::default())
        .await
        .expect("listing VMs")
        .items
    {
        let (name, namespace) = (
            vm.metadata.name.unwrap_or_default(),
            vm.metadata.namespace.unwrap_or_default(),
        );
        let _ = Api::<VirtualMachine>::namespaced(client.clone(), &namespace)
            .delete(&name, &DeleteParams::default())
            .await;
    }
    let all_vmis: Api<VirtualMachineInstance> = Api::all(client.clone());
    for vmi in all_vmis
        .list(&ListParams::default())
        .await
        .expect("listing VMIs")
        .items
    {
        let (name, namespace) = (
            vmi.metadata.name.unwrap_or_default(),
            vmi.metadata.namespace.unwrap_or_default(),
        );
        let _ = Api::<VirtualMachineInstance>::namespaced(client.clone(), &namespace)
            .delete(&name, &DeleteParams::default())
            .await;
    }

    // 4. The CR goes, and everything the operator created with it.
    wait_for(
        "the KubeVirt CR removed",
        Duration::from_secs(300),
        || async { matches!(kvs.get_opt("kubevirt").await, Ok(None)).then_some(()) },
    )
    .await;
    let left = leftovers(&client).await;
    assert!(left.is_empty(), "left after the CR was deleted: {left:?}");
    let handler_pods = wait_for(
        "the components' pods gone",
        Duration::from_secs(180),
        || async {
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
            let list = pods.list_metadata(&ListParams::default()).await.ok()?;
            let components: Vec<String> = list
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .filter(|n| !n.starts_with("virt-operator"))
                .collect();
            components.is_empty().then_some(components)
        },
    )
    .await;
    assert!(handler_pods.is_empty());
    // The operator itself stays until its own manifest is deleted.
    assert!(exists(&deployments, "virt-operator").await);

    // Removing the operator's manifest leaves no trace of Ferrovirt.
    let operator_yaml = release_file("ferrovirt-operator.yaml");
    kubectl_ok(&[
        "delete",
        "-f",
        &operator_yaml,
        "--wait=true",
        "--timeout=300s",
    ]);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_for(
        "namespace kubevirt gone",
        Duration::from_secs(300),
        || async { matches!(namespaces.get_opt(NS).await, Ok(None)).then_some(()) },
    )
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let kubevirt_crds: Vec<String> = crds
        .list_metadata(&ListParams::default())
        .await
        .expect("listing CRDs")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n.ends_with(".kubevirt.io"))
        .collect();
    assert!(kubevirt_crds.is_empty(), "{kubevirt_crds:?}");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    assert!(!exists(&roles, "kubevirt-operator").await);

    // 5. A new user's install: the two manifests, wait Available, the getting-started VM.
    kubectl_ok(&["create", "-f", &operator_yaml]);
    kubectl_ok(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout=60s",
        "crd/kubevirts.kubevirt.io",
    ]);
    kubectl_ok(&["create", "-f", &release_file("kubevirt-cr.yaml")]);
    let started = Instant::now();
    wait_for(
        "the KubeVirt CR to get a status",
        Duration::from_secs(120),
        || async { kvs.get_opt("kubevirt").await.ok()??.status.map(|_| ()) },
    )
    .await;
    kubectl_ok(&[
        "-n",
        NS,
        "wait",
        "kv",
        "kubevirt",
        "--for",
        "condition=Available",
        "--timeout=420s",
    ]);
    eprintln!("fresh install Available in {:?}", started.elapsed());
    let kv = wait_deployed(&client, &tag).await;
    let status = kv.status.expect("a status");
    assert_eq!(
        status.target_kube_virt_version.as_deref(),
        Some(tag.as_str())
    );
    assert_eq!(status.operator_version.as_deref(), Some(tag.as_str()));
    assert!(kv
        .metadata
        .finalizers
        .unwrap_or_default()
        .contains(&"foregroundDeleteKubeVirt".to_string()));
    for (name, image) in component_images(&client).await {
        assert_eq!(
            image,
            Some(format!("registry:5000/ferrovirt/{name}:{tag}")),
            "{name}"
        );
    }
    // Every certificate of the contract, generated by the operator.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    for name in [
        "kubevirt-ca",
        "kubevirt-virt-api-certs",
        "kubevirt-virt-handler-server-certs",
        "kubevirt-virt-handler-certs",
    ] {
        let s = secrets
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
        let data = s.data.unwrap_or_default();
        assert!(
            data.contains_key("tls.crt") && data.contains_key("tls.key"),
            "{name}"
        );
    }
    let bundle: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let bundle = bundle
        .get("kubevirt-ca")
        .await
        .expect("ConfigMap kubevirt-ca");
    assert!(bundle.data.unwrap_or_default()["ca-bundle"].contains("BEGIN CERTIFICATE"));

    ensure_vm_cirros(&client).await;
    let console = virtctl_console("default", "vm-cirros", Duration::from_secs(120));
    assert!(console.contains("login:"));
    drop(ns);
}
