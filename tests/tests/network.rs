//! The pod network of the masquerade binding on the local cluster, end to end: virt-handler
//! prepares the launcher Pod's network namespace (the tap, forwarding, NAT; `contract::podnet`),
//! and the launcher Pod itself asks for no sysctl, adds no capability but KubeVirt's
//! `NET_BIND_SERVICE` and runs without
//! `CAP_NET_ADMIN`. What a user of KubeVirt's masquerade binding relies on must hold:
//! - the guest gets `10.0.2.2/24` via `10.0.2.1` from the launcher's DHCP responder;
//! - the guest reaches another Pod through the NAT (its answer shows on the guest's console);
//! - another Pod reaches the guest's port at the launcher Pod's IP (DNAT).
//!
//! The namespace enforces the Pod Security `baseline` level: the launcher Pod has no hostPath
//! (virt-handler reaches its sockets through the kubelet's directory) and no added capability
//! but `NET_BIND_SERVICE`, so the API server admits it there. Its containers run as KubeVirt's
//! non-root user 107 with no capability held and no privilege escalation; virt-handler hands
//! that user the tap, the Pod's `/dev/net/tun` and DHCP's port.

use std::time::{Duration, Instant};

use api::VirtualMachineInstance;
use ferrovirt_tests::{
    client, launcher_pids, read_console, run_pod, tiny_vmi_spec, wait_for, wait_running,
    TestNamespace, BUSYBOX_IMAGE,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};

const PORT: u16 = 8080;
/// What the tiny guest's init prints when its DHCP client got the lease.
const LEASE_LINE: &str = "eth0 dhcp 10.0.2.2/24 via 10.0.2.1";
/// Linux's `CAP_NET_ADMIN`.
const CAP_NET_ADMIN: u32 = 12;

/// A shell script that answers every connection to [`PORT`] with `answer`, for busybox's nc.
fn serve(answer: &str) -> String {
    format!(
        "printf '#!/bin/sh\\necho {answer}\\n' >/tmp/answer; chmod +x /tmp/answer; \
         nc -ll -p {PORT} -e /tmp/answer"
    )
}

/// A script that connects to `address` port [`PORT`] until it answers (up to 60 tries, 2 s
/// apart) and prints `<prefix><answer>`.
fn fetch(address: &str, prefix: &str) -> String {
    format!(
        "i=0; a=''; while [ $i -lt 60 ] && [ -z \"$a\" ]; do \
         a=$(nc -w 5 {address} {PORT} </dev/null 2>/dev/null); i=$((i+1)); \
         [ -n \"$a\" ] || sleep 2; done; echo \"{prefix}$a\""
    )
}

fn busybox_pod(name: &str, script: &str, restart: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": name, "image": BUSYBOX_IMAGE, "command": ["sh", "-c", script],
                            "securityContext": {"allowPrivilegeEscalation": false,
                                                "capabilities": {"drop": ["ALL"]}}}],
        }
    }))
    .expect("a Pod")
}

/// The capability sets' bits in a `/proc/<pid>/status` text: (effective, bounding).
fn capabilities(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{status}"))
    };
    (field("CapEff:"), field("CapBnd:"))
}

#[tokio::test]
async fn masquerade_dhcp_nat_and_dnat_with_a_launcher_pod_without_net_admin() {
    let client = client().await;
    let namespace = TestNamespace::create_labelled(
        &client,
        "e2e-network",
        &[("pod-security.kubernetes.io/enforce", "baseline")],
    )
    .await;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);

    // A Pod the guest connects to through the NAT.
    pods.create(
        &PostParams::default(),
        &busybox_pod("server", &serve("hello-from-pod"), "Always"),
    )
    .await
    .expect("server Pod created");
    let server_ip = wait_for("the server Pod's IP", Duration::from_secs(180), || async {
        let pod = pods.get_opt("server").await.ok()??;
        let status = pod.status?;
        (status.phase.as_deref() == Some("Running"))
            .then_some(status.pod_ip)
            .flatten()
    })
    .await;

    let user_data = format!(
        "#!/bin/sh\n{} </dev/null >/dev/null 2>&1 &\n{}\n",
        serve("hello-from-guest"),
        fetch(&server_ip, "GUEST-GOT-")
    );
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi-net"},
        "spec": tiny_vmi_spec(&user_data),
    }))
    .expect("a VMI");
    let created = Instant::now();
    vmis.create(&PostParams::default(), &vmi)
        .await
        .expect("VMI created");
    let running = wait_running(&vmis, "vmi-net", Duration::from_secs(300)).await;
    let uid = running.uid().expect("a VMI has a UID");
    let node = running
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a Running VMI has a node");

    // The launcher Pod: no sysctl, no capability but NET_BIND_SERVICE; its process without
    // CAP_NET_ADMIN.
    let launcher = pods
        .list(&ListParams::default().labels(&format!("{}={uid}", contract::labels::CREATED_BY)))
        .await
        .expect("list launcher Pods")
        .items
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .expect("a Running launcher Pod");
    let spec = launcher.spec.as_ref().expect("a Pod spec");
    assert_eq!(
        spec.security_context
            .as_ref()
            .and_then(|s| s.sysctls.clone()),
        None,
        "the launcher Pod asks for a sysctl"
    );
    let host_paths: Vec<&str> = (spec.volumes.iter().flatten())
        .filter(|v| v.host_path.is_some())
        .map(|v| v.name.as_str())
        .collect();
    assert!(
        host_paths.is_empty(),
        "the launcher Pod mounts hostPaths {host_paths:?}"
    );
    for container in &spec.containers {
        let added = container
            .security_context
            .as_ref()
            .and_then(|s| s.capabilities.as_ref())
            .and_then(|c| c.add.clone())
            .unwrap_or_default();
        // KubeVirt's non-root compute container has NET_BIND_SERVICE (bounding set only).
        assert!(
            added.iter().all(|c| c == "NET_BIND_SERVICE"),
            "{} adds {added:?}",
            container.name
        );
    }
    // virt-handler handed the container's /dev/kvm to the launcher's user: the backend was
    // chosen by what this node's KVM can do, not by a device the launcher could not open.
    let emulation = (running.status.iter())
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == "SoftwareEmulation")
        .and_then(|c| c.message.clone())
        .expect("a SoftwareEmulation condition with the backend's reason");
    assert!(
        !emulation.contains("cannot open /dev/kvm"),
        "the launcher could not open its /dev/kvm: {emulation}"
    );
    let pids = launcher_pids(&uid);
    assert!(!pids.is_empty(), "no virt-launcher process for VMI {uid}");
    for pid in &pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
        let uid_line = status.lines().find(|l| l.starts_with("Uid:"));
        let ids: Vec<&str> = uid_line
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .collect();
        assert_eq!(
            ids,
            [contract::layout::LAUNCHER_USER_ID.to_string().as_str(); 4],
            "virt-launcher {pid} does not run as KubeVirt's non-root user: {uid_line:?}"
        );
        let (effective, bounding) = capabilities(&status);
        let bit = 1u64 << CAP_NET_ADMIN;
        assert_eq!(
            (effective & bit, bounding & bit),
            (0, 0),
            "virt-launcher {pid} holds CAP_NET_ADMIN"
        );
    }

    // The guest's lease and its connection out through the NAT, on its console.
    let (console_node, console_uid) = (node.clone(), uid.clone());
    let console = wait_for(
        "the guest's DHCP lease and the server Pod's answer on the console",
        Duration::from_secs(300),
        || {
            let (node, uid) = (console_node.clone(), console_uid.clone());
            async move {
                let text = tokio::task::spawn_blocking(move || {
                    read_console(&node, &uid, Duration::from_secs(3))
                })
                .await
                .ok()?;
                (text.contains(LEASE_LINE) && text.contains("GUEST-GOT-")).then_some(text)
            }
        },
    )
    .await;
    assert!(
        console.contains("GUEST-GOT-hello-from-pod"),
        "the guest did not reach the server Pod at {server_ip}:{PORT} through the NAT:\n{console}"
    );
    let out = Instant::now();

    // Another Pod reaches the guest's port at the launcher Pod's IP.
    let pod_ip = launcher
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("the launcher Pod has an IP");
    let logs = run_pod(
        &client,
        ns,
        busybox_pod("client", &fetch(&pod_ip, "CLIENT-GOT-"), "Never"),
    )
    .await
    .unwrap_or_else(|e| panic!("the client Pod: {e}"));
    assert!(
        logs.contains("CLIENT-GOT-hello-from-guest"),
        "the client Pod did not reach the guest at {pod_ip}:{PORT} (DNAT): {logs:?}"
    );
    println!(
        "network: VMI Running on {node}; lease and the server's answer on the console {:.1} s \
         after creation; the guest answered the client Pod at {pod_ip}:{PORT} {:.1} s after that",
        (out - created).as_secs_f64(),
        out.elapsed().as_secs_f64()
    );
}
