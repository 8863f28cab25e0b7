//! KVM worker nodes for a test's length. A KVM node (`tests/cluster/cluster.sh add-node --kvm`,
//! tests/cluster/lib/kvm-node.sh) is an L1 VM under QEMU TCG `-cpu max` with real, nested KVM,
//! tainted [`TAINT_KEY`]; its virt-handler labels it `ferrovirt.io/kvm=hardware`, and launcher
//! Pods prefer such nodes, where the VM runs on Ferrovirt's own VMM.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use api::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::Api;

use crate::{getting_started_vm, virtctl, vmi_condition, wait_for};

/// The taint of a KVM node: only what tolerates it runs there.
pub const TAINT_KEY: &str = "ferrovirt.io/nested-kvm";
/// Adding a node: the L1 boots under TCG, then containerd, the kubelet and virt-handler.
pub const NODE_UP: Duration = Duration::from_secs(1200);

fn cluster_sh() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cluster/cluster.sh")
}

/// A KVM node for the test's length: added when the cluster has none of that name, and then
/// removed when the test ends, passed or failed (a node added by hand is kept).
pub struct KvmNode {
    pub name: String,
    added: bool,
}

impl KvmNode {
    /// Adds KVM node `name` unless it exists, and waits until it is Ready.
    pub async fn ensure(client: &kube::Client, name: &str) -> KvmNode {
        let nodes: Api<Node> = Api::all(client.clone());
        let existed = nodes.get_opt(name).await.expect("get node").is_some();
        let started = Instant::now();
        let node = name.to_string();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(cluster_sh())
                .args(["add-node", "--kvm", &node])
                .output()
        })
        .await
        .expect("the add-node thread")
        .unwrap_or_else(|e| panic!("running {}: {e}", cluster_sh().display()));
        assert!(
            out.status.success(),
            "cluster.sh add-node --kvm {name} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!(
            "KVM node {name} Ready {:.1}s after `cluster.sh add-node --kvm` (it existed before: {existed})",
            started.elapsed().as_secs_f64()
        );
        KvmNode {
            name: name.to_string(),
            added: !existed,
        }
    }

    /// The node's labels once virt-handler has probed its KVM and the node offers the
    /// device-plugin resources a launcher Pod asks for: until then the scheduler has to put the
    /// Pod elsewhere.
    pub async fn labels(&self, client: &kube::Client) -> BTreeMap<String, String> {
        let nodes: Api<Node> = Api::all(client.clone());
        let name = self.name.as_str();
        wait_for(
            &format!("virt-handler to label node {name} and its device plugins to offer /dev/kvm and /dev/net/tun"),
            NODE_UP,
            || async {
                let node = nodes.get(name).await.ok()?;
                let allocatable = node.status.as_ref()?.allocatable.as_ref()?;
                // "1k" on a node with the plugin, "0" while it registers.
                let offers =
                    |resource: &str| allocatable.get(resource).is_some_and(|q| q.0 != "0");
                if !offers(contract::resources::KVM) || !offers(contract::resources::TUN) {
                    return None;
                }
                let labels = node.metadata.labels?;
                labels
                    .contains_key(contract::labels::KVM)
                    .then_some(labels)
            },
        )
        .await
    }
}

impl Drop for KvmNode {
    fn drop(&mut self) {
        if self.added {
            let name = &self.name;
            match Command::new(cluster_sh())
                .args(["remove-node", name])
                .output()
            {
                Ok(out) if out.status.success() => println!("removed KVM node {name}"),
                Ok(out) => eprintln!(
                    "cluster.sh remove-node {name}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
                Err(e) => eprintln!("cluster.sh remove-node {name}: {e}"),
            }
        }
    }
}

/// What tolerates a KVM node's taint.
pub fn tolerations() -> serde_json::Value {
    serde_json::json!([{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}])
}

/// Creates `examples/vm-cirros.yaml` as VM `name` in `ns`, with a toleration of the KVM nodes'
/// taint and no node selector or affinity of its own, runs `virtctl start` and waits up to
/// `within` for its VMI to run with its backend reported (`SoftwareEmulation`). Panics when the
/// VMI fails.
pub async fn start_getting_started_vm(
    client: &kube::Client,
    ns: &str,
    name: &str,
    within: Duration,
) -> VirtualMachineInstance {
    let mut vm = getting_started_vm(name);
    vm["spec"]["template"]["spec"]["tolerations"] = tolerations();
    let vm: VirtualMachine = serde_json::from_value(vm).expect("a VirtualMachine");
    Api::<VirtualMachine>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &vm)
        .await
        .expect("VM created");
    let out = virtctl(ns, &["start", name]);
    assert_eq!(out.code, Some(0), "virtctl start: {out:?}");
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("VMI {name} Running"), within, || async {
        let vmi = vmis.get_opt(name).await.ok()??;
        let status = vmi.status.as_ref()?;
        if status.phase == Some(VmiPhase::Failed) {
            panic!("VMI {name} failed: {:?}", status.conditions);
        }
        (status.phase? == VmiPhase::Running && vmi_condition(&vmi, "SoftwareEmulation").is_some())
            .then_some(vmi)
    })
    .await
}
