//! End-to-end tests of Ferrovirt on the local cluster (`tests/cluster/`), brought up with
//! Ferrovirt installed by `hack/up.sh`. Helpers: a client for that cluster (failing with what to
//! run when it is not up), a namespace per test that is deleted even when the test fails, waits
//! on conditions with deadlines, the guest's serial console read from its node, a guest that
//! counts on it to tell one boot from the next (`counter`), and the one lock that tests
//! changing cluster-wide objects hold (`cluster_lock`).
#![forbid(unsafe_code)]

pub mod claims;
pub mod cluster_lock;
pub mod console;
pub mod counter;
pub mod faults;
pub mod forward;
pub mod kvm_node;
pub mod metrics;
pub mod migration;
pub mod pty;
pub mod screen;

pub use cluster_lock::{ClusterChange, ClusterLock};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};

/// The admin kubeconfig of the local cluster.
pub const KUBECONFIG: &str = "/var/lib/ferrovirt-cluster/kubeconfig/admin.kubeconfig";
/// Where hack/up.sh writes the release manifests of the build it installed.
pub const RELEASE_DIR: &str = "/var/lib/ferrovirt-cluster/release";
/// Where the cluster keeps each node's state (`<node>/holder.ready` has the pid whose mount
/// namespace is the node's).
pub const NODES_DIR: &str = "/var/lib/ferrovirt-cluster/nodes";
/// The local cluster's busybox image (tests/cluster's bring-up pushes it), for Pods of the tests.
pub const BUSYBOX_IMAGE: &str = "docker.io/library/busybox:latest";
/// The ready marker of the project's tiny guest (guest-images/README.md).
pub const GUEST_READY_MARKER: &str = "FERROVIRT-GUEST-READY";

/// A client for the local cluster from its admin kubeconfig.
async fn admin_client() -> Result<Client, String> {
    let kubeconfig = Kubeconfig::read_from(KUBECONFIG).map_err(|e| e.to_string())?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| e.to_string())
}

/// A client for the local cluster. Panics with what to run when the cluster is not up or
/// Ferrovirt is not installed.
pub async fn client() -> Client {
    let missing = "the local cluster with Ferrovirt is not up: run hack/up.sh first";
    assert!(
        Path::new(KUBECONFIG).exists(),
        "{missing} ({KUBECONFIG} does not exist)"
    );
    let client = admin_client()
        .await
        .unwrap_or_else(|e| panic!("{missing}: {e}"));
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.get("virtualmachineinstances.kubevirt.io")
        .await
        .unwrap_or_else(|e| panic!("{missing}: the kubevirt.io CRDs are not installed: {e}"));
    wait_for_virt_api(&client).await;
    client
}

/// How long a test waits for virt-api to have a ready endpoint before it starts.
const VIRT_API_READY: Duration = Duration::from_secs(60);

/// Waits until the virt-api Service has a ready endpoint (every VM and VMI passes its
/// webhooks), for a while after an upgrade or a busy spell; panics with the state of virt-api's
/// Pods and of the nodes when it has none by then.
async fn wait_for_virt_api(client: &Client) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "kubevirt");
    let by_service = ListParams::default().labels("kubernetes.io/service-name=virt-api");
    let deadline = Instant::now() + VIRT_API_READY;
    loop {
        let ready = slices.list(&by_service).await.is_ok_and(|list| {
            list.items
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
        });
        if ready {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kubevirt");
    let pods = pods
        .list(&ListParams::default().labels("kubevirt.io=virt-api"))
        .await
        .map(|list| {
            list.items
                .iter()
                .map(|p| {
                    let status = p.status.clone().unwrap_or_default();
                    format!(
                        "{} on {}: phase {}, conditions {:?}, containers {:?}",
                        p.name_any(),
                        p.spec
                            .as_ref()
                            .and_then(|s| s.node_name.clone())
                            .unwrap_or_default(),
                        status.phase.unwrap_or_default(),
                        status
                            .conditions
                            .unwrap_or_default()
                            .iter()
                            .map(|c| format!(
                                "{}={} {}",
                                c.type_,
                                c.status,
                                c.message.clone().unwrap_or_default()
                            ))
                            .collect::<Vec<_>>(),
                        status
                            .container_statuses
                            .unwrap_or_default()
                            .iter()
                            .map(|c| format!(
                                "ready={} restarts={} state={:?}",
                                c.ready, c.restart_count, c.state
                            ))
                            .collect::<Vec<_>>(),
                    )
                })
                .collect::<Vec<_>>()
        });
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes.list(&ListParams::default()).await.map(|list| {
        list.items
            .iter()
            .map(|n| {
                let ready = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                    .map(|c| c.status.clone())
                    .unwrap_or_default();
                format!("{} Ready={ready}", n.name_any())
            })
            .collect::<Vec<_>>()
    });
    panic!(
        "virt-api has no ready endpoint after {VIRT_API_READY:?}, so no VM or VMI can pass its webhooks; its Pods: {pods:?}; the nodes: {nodes:?}"
    );
}

/// Sets a VM's `spec.runStrategy` by a merge patch.
pub async fn set_run_strategy(vms: &Api<api::VirtualMachine>, name: &str, strategy: &str) {
    let patch = serde_json::json!({"spec": {"runStrategy": strategy}});
    vms.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap_or_else(|e| panic!("runStrategy {strategy} patched into VM {name}: {e}"));
}

/// A namespace that is deleted when dropped, whatever the test's outcome.
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> TestNamespace {
        Self::create_labelled(client, prefix, &[]).await
    }

    /// A namespace with `labels` (e.g. a Pod Security level to enforce).
    pub async fn create_labelled(
        client: &Client,
        prefix: &str,
        labels: &[(&str, &str)],
    ) -> TestNamespace {
        let name = format!("{prefix}-{}", std::process::id() % 100_000);
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let namespace = serde_json::from_value(
            serde_json::json!({"metadata": {"name": name, "labels": labels}}),
        )
        .expect("a namespace object");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        TestNamespace { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        clean_up(move |client| async move {
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
            let _ = namespaces.delete(&name, &DeleteParams::default()).await;
        });
    }
}

/// Runs a clean-up from a `Drop`: that runs inside the test's runtime, which this thread
/// blocks, so the clean-up runs on a thread with its own runtime and its own admin client (the
/// test's client needs the test's runtime). Best effort: a failure is ignored.
pub(crate) fn clean_up<F, Fut>(work: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let _ = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        if let Ok(runtime) = runtime {
            runtime.block_on(async {
                if let Ok(client) = admin_client().await {
                    work(client).await;
                }
            });
        }
    })
    .join();
}

/// Polls `check` until it returns `Some`, or panics after `timeout` with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs `pod` (with `restartPolicy: Never`) in `namespace` to its end and returns its log; an
/// error when it failed (with the log) or did not end within five minutes. The Pod is deleted.
pub async fn run_pod(client: &Client, namespace: &str, pod: Pod) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let name = pod.name_any();
    pods.create(&PostParams::default(), &pod)
        .await
        .map_err(|e| format!("creating Pod {name}: {e}"))?;
    let phase = wait_for(
        &format!("Pod {name} to finish"),
        Duration::from_secs(300),
        || async {
            let pod = pods.get_opt(&name).await.ok()??;
            let phase = pod.status?.phase?;
            matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
        },
    )
    .await;
    let logs = pods
        .logs(&name, &kube::api::LogParams::default())
        .await
        .map_err(|e| format!("the logs of Pod {name}: {e}"));
    let _ = pods.delete(&name, &DeleteParams::default()).await;
    let logs = logs?;
    if phase == "Succeeded" {
        Ok(logs)
    } else {
        Err(format!("Pod {name} {phase}:\n{logs}"))
    }
}

/// Waits until VMI `name` is Running and returns it; fails at once if it fails.
pub async fn wait_running(
    vmis: &Api<api::VirtualMachineInstance>,
    name: &str,
    timeout: Duration,
) -> api::VirtualMachineInstance {
    wait_for(&format!("VMI {name} Running"), timeout, || async {
        let vmi = vmis.get_opt(name).await.ok()??;
        let status = vmi.status.as_ref()?;
        assert_ne!(
            status.phase,
            Some(api::VmiPhase::Failed),
            "VMI {name} failed: {status:?}"
        );
        (status.phase == Some(api::VmiPhase::Running)).then_some(vmi)
    })
    .await
}

/// `examples/vm-cirros.yaml` (KubeVirt's getting-started VM) named `name`, with
/// `runStrategy: Halted`, as JSON for a test to adjust.
pub fn getting_started_vm(name: &str) -> serde_json::Value {
    let text = include_str!("../../examples/vm-cirros.yaml");
    let mut vm: serde_json::Value = serde_yaml::from_str(text).expect("examples/vm-cirros.yaml");
    vm["metadata"]["name"] = name.into();
    vm["metadata"]["labels"]["kubevirt.io/vm"] = name.into();
    vm["spec"]["template"]["metadata"]["labels"]["kubevirt.io/vm"] = name.into();
    vm["spec"]["runStrategy"] = "Halted".into();
    vm
}

/// The VMI's condition of type `type_`, when it has one.
pub fn vmi_condition<'a>(
    vmi: &'a api::VirtualMachineInstance,
    type_: &str,
) -> Option<&'a api::condition::Condition> {
    vmi.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// The VMI's `BootSource` condition (what the launcher booted, and from where) as
/// `(reason, message)`; panics when it has none.
pub fn boot_source(vmi: &api::VirtualMachineInstance) -> (String, String) {
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let source = vmi
        .status
        .as_ref()
        .and_then(|s| api::condition::find(&s.conditions, "BootSource").cloned())
        .unwrap_or_else(|| panic!("VMI {name} has no BootSource condition"));
    (
        source.reason.unwrap_or_default(),
        source.message.unwrap_or_default(),
    )
}

/// Deletes the virt-handler Pod on `node` (`grace`: its grace period in seconds) and waits
/// for its DaemonSet's replacement to run there.
pub async fn restart_handler(client: &Client, node: &str, grace: Option<u32>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kubevirt");
    let on_node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
    let handlers = pods
        .list(&ListParams::default().labels("kubevirt.io=virt-handler"))
        .await
        .expect("virt-handler Pods");
    let old = handlers
        .items
        .iter()
        .find(|p| on_node(p))
        .and_then(|p| p.metadata.name.clone())
        .unwrap_or_else(|| panic!("no virt-handler on {node}"));
    let params = DeleteParams {
        grace_period_seconds: grace,
        ..DeleteParams::default()
    };
    pods.delete(&old, &params).await.expect("handler deleted");
    wait_for(
        "a new virt-handler Running on the node",
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&ListParams::default().labels("kubevirt.io=virt-handler"))
                .await
                .ok()?;
            list.items.into_iter().find(|p| {
                p.metadata.name.as_deref() != Some(old.as_str())
                    && on_node(p)
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
        },
    )
    .await;
}

/// Panics, saying how to add one, unless two nodes of the cluster run VMs.
pub async fn two_schedulable_nodes(client: &Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    let schedulable = nodes
        .list(&ListParams::default().labels(&format!("{}=true", contract::labels::SCHEDULABLE)))
        .await
        .expect("nodes listed")
        .items;
    assert!(
        schedulable.len() >= 2,
        "live migration needs two nodes that run VMs; found {:?} (add one with \
         `tests/cluster/cluster.sh add-node ferrovirt-worker1` and re-run hack/up.sh)",
        schedulable.iter().map(|n| n.name_any()).collect::<Vec<_>>()
    );
}

/// The pid that holds node `node`'s mount namespace.
pub fn node_pid(node: &str) -> u32 {
    let path = PathBuf::from(NODES_DIR).join(node).join("holder.ready");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("node {node} is not running ({}: {e})", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Reads the serial console of VMI `uid` on `node` for up to `duration`, returning what the
/// guest printed (the launcher keeps a backlog, so earlier output is included).
pub fn read_console(node: &str, uid: &str, duration: Duration) -> String {
    let socket = format!(
        "{}/{uid}/{}",
        contract::layout::HOST_SOCKET_ROOT,
        contract::sockets::CONSOLE_SOCKET
    );
    let output = std::process::Command::new("nsenter")
        .args([
            "-t",
            &node_pid(node).to_string(),
            "-m",
            "--",
            "timeout",
            "-s",
            "INT",
        ])
        .arg(format!("{}", duration.as_secs().max(1)))
        .args(["socat", "-u", &format!("UNIX-CONNECT:{socket}"), "-"])
        .output()
        .unwrap_or_else(|e| {
            panic!("running nsenter/socat (Debian packages util-linux, socat): {e}")
        });
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A VirtualMachine named `name` running the project's tiny guest with cloud-init `user_data`.
pub fn tiny_vm(name: &str, run_strategy: &str, user_data: &str) -> api::VirtualMachine {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": run_strategy,
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": tiny_vmi_spec(user_data),
            }
        }
    }))
    .expect("a VirtualMachine")
}

/// The spec of a VMI running the project's tiny guest (containerDisk + cloud-init).
pub fn tiny_vmi_spec(user_data: &str) -> serde_json::Value {
    serde_json::json!({
        "domain": {
            "devices": {"disks": [
                {"name": "containerdisk", "disk": {"bus": "virtio"}},
                {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}
            ]},
            "memory": {"guest": "128Mi"},
            "resources": {}
        },
        "terminationGracePeriodSeconds": 0,
        "volumes": [
            {"name": "containerdisk",
             "containerDisk": {"image": "registry:5000/ferrovirt/tiny-container-disk:devel"}},
            {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": user_data}}
        ]
    })
}

/// The pids of the virt-launcher of VMI `uid` (Pods share the host's pid namespace).
pub fn launcher_pids(uid: &str) -> Vec<u32> {
    let output = std::process::Command::new("pgrep")
        .args(["-f", &format!("virt-launcher .*--uid {uid}")])
        .output()
        .unwrap_or_else(|e| panic!("running pgrep (Debian package procps): {e}"));
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Kills the virt-launcher of VMI `uid` with SIGKILL, as a crash would.
pub fn kill_launcher(uid: &str) {
    let pids = launcher_pids(uid);
    assert!(!pids.is_empty(), "no virt-launcher process for VMI {uid}");
    sigkill(&pids);
}

/// Kills `pids` with SIGKILL.
pub fn sigkill(pids: &[u32]) {
    for pid in pids {
        let status = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap_or_else(|e| panic!("running kill: {e}"));
        assert!(status.success(), "kill -KILL {pid} failed");
    }
}

/// The migration of VMI `name` in `namespace` (`virtctl migrate` made it), once it exists.
pub async fn migration_of(
    client: &Client,
    namespace: &str,
    name: &str,
) -> api::migration::VirtualMachineInstanceMigration {
    let migrations: Api<api::migration::VirtualMachineInstanceMigration> =
        Api::namespaced(client.clone(), namespace);
    wait_for(
        &format!("the migration of {name}"),
        Duration::from_secs(60),
        || async {
            migrations
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|m| m.spec.vmi_name.as_deref() == Some(name))
        },
    )
    .await
}

/// The phase of migration `m`, once it has one.
pub fn migration_phase(
    m: &api::migration::VirtualMachineInstanceMigration,
) -> Option<api::migration::MigrationPhase> {
    m.status.as_ref().and_then(|s| s.phase)
}

/// What a command printed and how it exited.
#[derive(Debug)]
pub struct CommandOutput {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// virtctl as `cargo build -p virtctl` builds it, beside the test binaries (`target/debug/`).
/// Panics with the command to run when it is missing.
pub fn virtctl_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let virtctl = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("virtctl"))
        .expect("the target directory");
    assert!(
        virtctl.exists(),
        "{} is missing: build it with `cargo build -p virtctl`",
        virtctl.display()
    );
    virtctl
}

/// The arguments that point virtctl at the local cluster and `namespace`.
pub fn virtctl_args<'a>(namespace: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--kubeconfig", KUBECONFIG, "-n", namespace];
    all.extend_from_slice(args);
    all
}

fn run(program: &Path, args: &[&str]) -> CommandOutput {
    let output = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    CommandOutput {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs virtctl with the local cluster's kubeconfig in `namespace`.
pub fn virtctl(namespace: &str, args: &[&str]) -> CommandOutput {
    run(&virtctl_binary(), &virtctl_args(namespace, args))
}

/// Runs kubectl with the local cluster's kubeconfig in `namespace`.
pub fn kubectl(namespace: &str, args: &[&str]) -> CommandOutput {
    let mut all = vec!["--kubeconfig", KUBECONFIG, "-n", namespace];
    all.extend_from_slice(args);
    run(Path::new("kubectl"), &all)
}

/// Merges `patch` into the KubeVirt CR (`kubevirt/kubevirt`) with kubectl, as a user would.
pub fn patch_kubevirt_cr(patch: &serde_json::Value) -> CommandOutput {
    kubectl(
        "kubevirt",
        &[
            "patch",
            "kv",
            "kubevirt",
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ],
    )
}
