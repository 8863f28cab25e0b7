//! What the operator's cluster tests share: kubectl as a user runs it (the cluster's own,
//! through tests/cluster/cluster.sh), the release manifests hack/up.sh wrote, and waits on the
//! KubeVirt CR.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use api::KubeVirt;
use ferrovirt_tests::wait_for;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kube::{Api, Client};

pub const NS: &str = "kubevirt";
pub use ferrovirt_tests::RELEASE_DIR;
/// Installing or rolling every component (image pulls, three workloads) on a loaded machine.
pub const DEPLOY: Duration = Duration::from_secs(420);
/// Starting a VMI.
pub const START: Duration = Duration::from_secs(300);

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("operator/ is in the repository")
        .to_path_buf()
}

pub fn release_file(name: &str) -> String {
    let path = Path::new(RELEASE_DIR).join(name);
    assert!(
        path.exists(),
        "{} is missing: run hack/up.sh (it writes the release manifests)",
        path.display()
    );
    path.display().to_string()
}

/// Runs the cluster's kubectl; returns (success, stdout, stderr).
pub fn kubectl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(repo().join("tests/cluster/cluster.sh"))
        .arg("kubectl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running tests/cluster/cluster.sh kubectl: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs kubectl and panics with its output when it fails.
pub fn kubectl_ok(args: &[&str]) -> String {
    let (ok, stdout, stderr) = kubectl(args);
    assert!(ok, "kubectl {}: {stdout}{stderr}", args.join(" "));
    stdout
}

pub fn kubevirts(client: &Client) -> Api<KubeVirt> {
    Api::namespaced(client.clone(), NS)
}

/// The tag of the image the operator Deployment runs.
pub async fn operator_tag(client: &Client) -> Option<String> {
    let d = Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt("virt-operator")
        .await
        .ok()??;
    let image = d.spec?.template.spec?.containers.first()?.image.clone()?;
    image.rsplit_once(':').map(|(_, tag)| tag.to_string())
}

/// Waits until the CR is Deployed at `tag` with Available true.
pub async fn wait_deployed(client: &Client, tag: &str) -> KubeVirt {
    let kvs = kubevirts(client);
    wait_for(&format!("KubeVirt Deployed at {tag}"), DEPLOY, || async {
        let kv = kvs.get_opt("kubevirt").await.ok()??;
        let status = kv.status.as_ref()?;
        let available = api::condition::find(&status.conditions, "Available")?.is_true();
        let deployed = status.phase == Some(api::kubevirt::KubeVirtPhase::Deployed);
        (available && deployed && status.observed_kube_virt_version.as_deref() == Some(tag))
            .then_some(kv)
    })
    .await
}

/// Installs from whatever state the cluster is in, as hack/up.sh does (the operator manifest
/// created or applied, the CR created when missing), and waits until it is Deployed.
pub async fn ensure_installed(client: &Client) -> String {
    let operator = release_file("ferrovirt-operator.yaml");
    let (installed, _, _) = kubectl(&["-n", NS, "get", "deployment", "virt-operator"]);
    if installed {
        kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &operator,
        ]);
    } else {
        let (ok, out, err) = kubectl(&["create", "-f", &operator]);
        // A namespace left by an older install is fine; anything else is not.
        assert!(
            ok || err
                .lines()
                .all(|l| l.contains("AlreadyExists") || l.trim().is_empty()),
            "kubectl create -f {operator}: {out}{err}"
        );
    }
    kubectl_ok(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout=60s",
        "crd/kubevirts.kubevirt.io",
    ]);
    let kvs = kubevirts(client);
    if let Ok(Some(kv)) = kvs.get_opt("kubevirt").await {
        if kv.metadata.deletion_timestamp.is_some() {
            kubectl_ok(&[
                "-n",
                NS,
                "wait",
                "--for=delete",
                "kv/kubevirt",
                "--timeout=300s",
            ]);
        }
    }
    if kvs.get_opt("kubevirt").await.ok().flatten().is_none() {
        kubectl_ok(&["create", "-f", &release_file("kubevirt-cr.yaml")]);
    }
    let tag = wait_for(
        "the operator Deployment's tag",
        Duration::from_secs(30),
        || operator_tag(client),
    )
    .await;
    wait_deployed(client, &tag).await;
    tag
}

/// The image of the first container of each component's workload.
pub async fn component_images(client: &Client) -> Vec<(String, Option<String>)> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let mut out = Vec::new();
    for name in ["virt-api", "virt-controller"] {
        let image = deployments
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone());
        out.push((name.to_string(), image));
    }
    let image = Api::<DaemonSet>::namespaced(client.clone(), NS)
        .get_opt("virt-handler")
        .await
        .ok()
        .flatten()
        .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone());
    out.push(("virt-handler".to_string(), image));
    out
}

/// Puts the cluster back in hack/up.sh's state: installed, examples/vm-cirros.yaml Running.
pub async fn ensure_vm_cirros(client: &Client) {
    kubectl_ok(&[
        "apply",
        "-f",
        &repo().join("examples/vm-cirros.yaml").display().to_string(),
    ]);
    let vmis: Api<api::VirtualMachineInstance> = Api::namespaced(client.clone(), "default");
    wait_for("vm-cirros Running", START, || async {
        let vmi = vmis.get_opt("vm-cirros").await.ok()??;
        (vmi.status?.phase? == api::VmiPhase::Running).then_some(())
    })
    .await;
}
