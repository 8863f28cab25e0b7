//! The pod network with the masquerade binding, end to end, inside network namespaces this test
//! creates (no traffic leaves the machine): a "pod" namespace where the launcher runs with
//! `--pod-network`, and a "client" namespace joined to it by a veth pair, standing for the rest
//! of the cluster. The guest must get its address from the launcher's DHCP responder, reach the
//! client through the NAT (ping), and serve a TCP port that the client reaches at the Pod's
//! address (DNAT).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use contract::proto::v1;

const POD_IP: &str = "10.99.0.1";
const CLIENT_IP: &str = "10.99.0.2";

fn ip(args: &[&str]) {
    let output = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (package iproute2)");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Two network namespaces joined by a veth pair; deleted on drop.
struct Namespaces {
    pod: String,
    client: String,
}

impl Namespaces {
    fn new() -> Namespaces {
        let id = std::process::id() % 100_000;
        let ns = Namespaces {
            pod: format!("fvl-pod-{id}"),
            client: format!("fvl-cli-{id}"),
        };
        for name in [&ns.pod, &ns.client] {
            let _ = Command::new("ip")
                .args(["netns", "del", name])
                .stderr(std::process::Stdio::null())
                .status();
            ip(&["netns", "add", name]);
            ip(&["-n", name, "link", "set", "lo", "up"]);
        }
        let (a, b) = (format!("fvp{id}"), format!("fvc{id}"));
        ip(&[
            "link", "add", &a, "netns", &ns.pod, "type", "veth", "peer", "name", &b, "netns",
            &ns.client,
        ]);
        ip(&["-n", &ns.pod, "link", "set", &a, "name", "eth0"]);
        ip(&["-n", &ns.client, "link", "set", &b, "name", "eth0"]);
        ip(&[
            "-n",
            &ns.pod,
            "addr",
            "add",
            &format!("{POD_IP}/24"),
            "dev",
            "eth0",
        ]);
        ip(&[
            "-n",
            &ns.client,
            "addr",
            "add",
            &format!("{CLIENT_IP}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns.pod, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns.client, "link", "set", "eth0", "up"]);
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in [&self.pod, &self.client] {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masquerade_dhcp_nat_and_port_forwarding() {
    require_qemu();
    let artifacts = artifacts();
    let dirs = TestDirs::new("net");
    dirs.container_disk("containerdisk", &artifacts.rootdisk());
    let namespaces = Namespaces::new();
    let mut process = LauncherProcess::start_in(
        Some(&namespaces.pod),
        &dirs,
        &artifacts.vmlinux(),
        Some(&artifacts.initramfs()),
        &["--pod-network"],
        &[],
    );
    let mut client = client(&dirs).await;

    let user_data = format!(
        "#!/bin/sh\n\
         echo 'printed from cloud-init userdata'\n\
         printf '#!/bin/sh\\necho hello-from-guest\\n' >/tmp/hello; chmod +x /tmp/hello\n\
         nc -ll -p 8080 -e /tmp/hello </dev/null >/dev/null 2>&1 &\n\
         ping -c 3 -W 3 {CLIENT_IP} >/dev/null 2>&1 && echo GUEST-REACHED-CLIENT\n"
    );
    let vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "vmi-net", "namespace": "default" },
        "spec": {
            "domain": {
                "devices": {
                    "disks": [
                        { "name": "containerdisk", "disk": { "bus": "virtio" } },
                        { "name": "cloudinitdisk", "disk": { "bus": "virtio" } }
                    ]
                },
                "memory": { "guest": "128Mi" }
            },
            "volumes": [
                { "name": "containerdisk", "containerDisk": { "image": "registry:5000/tiny:devel" } },
                { "name": "cloudinitdisk", "cloudInitNoCloud": { "userData": user_data } }
            ]
        }
    });
    let console = ConsoleReader::connect(&dirs);
    if let Err(status) = client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&vmi).expect("json"),
            options: Some(v1::SyncOptions {
                use_emulation: true,
                notify_socket: String::new(),
            }),
        })
        .await
    {
        panic!("SyncVMI: {status}\nlauncher log:\n{}", process.log_text());
    }
    let boot = Duration::from_secs(180);
    let fail = |e: String, process: &LauncherProcess| -> ! {
        panic!("{e}\nlauncher log:\n{}", process.log_text())
    };
    if let Err(e) = console.wait_for("eth0 dhcp 10.0.2.2/24 via 10.0.2.1", boot) {
        fail(e, &process);
    }
    if let Err(e) = console.wait_for("GUEST-REACHED-CLIENT", boot) {
        fail(e, &process);
    }
    if let Err(e) = console.wait_for(guest_images::READY_MARKER, boot) {
        fail(e, &process);
    }

    // The client reaches the guest's port at the Pod's address.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let output = Command::new("ip")
            .args([
                "netns",
                "exec",
                &namespaces.client,
                "busybox",
                "nc",
                "-w",
                "5",
                POD_IP,
                "8080",
            ])
            .output()
            .expect("run busybox nc in the client namespace");
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        if text.contains("hello-from-guest") || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        answer.contains("hello-from-guest"),
        "no answer through DNAT: {answer:?}\n{}",
        console.text()
    );
    // With the guest's DHCP lease, NAT and port forwarding served, the launcher holds only
    // what the tap takes.
    process.assert_confined(vmm::capabilities::mask(vmm::capabilities::CAP_NET_ADMIN));
    client.kill(v1::VmiRequest::default()).await.expect("Kill");
    assert!(process.alive());
}
