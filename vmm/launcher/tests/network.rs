//! The pod network with the masquerade binding, end to end, inside network namespaces this test
//! creates (no traffic leaves the machine): a "pod" namespace where the launcher runs with
//! `--pod-network`, and a "client" namespace joined to it by a veth pair, standing for the rest
//! of the cluster. The guest must get its address from the launcher's DHCP responder, reach the
//! client through the NAT (ping), and serve a TCP port that the client reaches at the Pod's
//! address (DNAT). Twice: with the namespace prepared as virt-handler prepares a launcher Pod's
//! (`contract::podnet`: the tap owned by the launcher's user, forwarding, NAT), the launcher
//! started without `CAP_NET_ADMIN` (as in its Pod); and alone, making it all itself.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use contract::podnet::CommandLine;
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
    fn new(preparer: Preparer) -> Namespaces {
        let id = std::process::id() % 100_000;
        let tag = match preparer {
            Preparer::Handler => "h",
            Preparer::Launcher => "l",
        };
        let ns = Namespaces {
            pod: format!("fvl-pod{tag}-{id}"),
            client: format!("fvl-cli{tag}-{id}"),
        };
        for name in [&ns.pod, &ns.client] {
            let _ = Command::new("ip")
                .args(["netns", "del", name])
                .stderr(std::process::Stdio::null())
                .status();
            ip(&["netns", "add", name]);
            ip(&["-n", name, "link", "set", "lo", "up"]);
        }
        let (a, b) = (format!("fvp{tag}{id}"), format!("fvc{tag}{id}"));
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

/// Who makes the tap, forwarding and NAT in the Pod's namespace.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Preparer {
    /// The test, with `contract::podnet`'s commands, as virt-handler does; the launcher runs
    /// without `CAP_NET_ADMIN`.
    Handler,
    /// The launcher itself (outside a cluster).
    Launcher,
}

/// Makes the tap (owned by root, the launcher's user here), forwarding and NAT for `vmi` in
/// network namespace `netns`, as virt-handler does in a launcher Pod's.
fn prepare_as_the_handler(netns: &str, vmi: &serde_json::Value) {
    let mut vmi: api::VirtualMachineInstance = serde_json::from_value(vmi.clone()).expect("a VMI");
    // The pod interface with masquerade, as virt-api's defaults give it.
    api::defaults::default_vmi(&mut vmi);
    let plan = api::masquerade::plan(&vmi, contract::podnet::TAP_DEVICE).expect("a plan");
    let forwarding = format!("{}=1", contract::podnet::IP_FORWARD_SYSCTL);
    let localnet = format!("{}=1", contract::podnet::route_localnet_sysctl(&plan.tap));
    let mut commands = vec![CommandLine::new(["sysctl", "-w", &forwarding])];
    commands.extend(plan.setup_commands(Some(0)));
    commands.push(CommandLine::new(["sysctl", "-w", &localnet]));
    for command in commands {
        let in_netns = command.run_by(vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            netns.into(),
        ]);
        if let Err(e) = contract::podnet::run_command(&in_netns) {
            panic!("{e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masquerade_prepared_as_virt_handler_does_runs_without_cap_net_admin() {
    masquerade_dhcp_nat_and_port_forwarding(Preparer::Handler).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masquerade_made_by_the_launcher_alone() {
    masquerade_dhcp_nat_and_port_forwarding(Preparer::Launcher).await;
}

async fn masquerade_dhcp_nat_and_port_forwarding(preparer: Preparer) {
    require_qemu();
    let artifacts = artifacts();
    let dirs = TestDirs::new(match preparer {
        Preparer::Handler => "net-prepared",
        Preparer::Launcher => "net",
    });
    dirs.container_disk("containerdisk", &artifacts.rootdisk());
    let namespaces = Namespaces::new(preparer);

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
    // In its Pod the launcher has no CAP_NET_ADMIN: its bounding set loses it before it runs.
    let wrapper: &[&str] = match preparer {
        Preparer::Handler => {
            prepare_as_the_handler(&namespaces.pod, &vmi);
            &["setpriv", "--bounding-set", "-net_admin", "--"]
        }
        Preparer::Launcher => &[],
    };
    let mut process = LauncherProcess::start_wrapped(
        Some(&namespaces.pod),
        wrapper,
        &dirs,
        &artifacts.vmlinux(),
        Some(&artifacts.initramfs()),
        &["--pod-network"],
        &[],
    );
    if preparer == Preparer::Handler {
        process.assert_capabilities_without(vmm::capabilities::CAP_NET_ADMIN);
    }
    let mut client = client(&dirs).await;
    let console = ConsoleReader::connect(&dirs);
    if let Err(status) = client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json: serde_json::to_vec(&vmi).expect("json"),
            options: Some(v1::SyncOptions {
                use_emulation: true,
                notify_socket: String::new(),
                smbios: None,
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

    // The client reaches the guest's port at the Pod's address, and so does the Pod at its own
    // 127.0.0.1 (what `kubectl port-forward` to the launcher Pod dials).
    for (netns, address) in [(&namespaces.client, POD_IP), (&namespaces.pod, "127.0.0.1")] {
        let deadline = Instant::now() + Duration::from_secs(60);
        let answer = loop {
            let output = Command::new("ip")
                .args([
                    "netns", "exec", netns, "busybox", "nc", "-w", "5", address, "8080",
                ])
                .output()
                .expect("run busybox nc in a network namespace");
            let text = String::from_utf8_lossy(&output.stdout).to_string();
            if text.contains("hello-from-guest") || Instant::now() > deadline {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert!(
            answer.contains("hello-from-guest"),
            "no answer through DNAT at {address} from {netns}: {answer:?}\n{}",
            console.text()
        );
    }
    // With the guest's DHCP lease, NAT and port forwarding served, the launcher holds only
    // what the tap takes, and nothing when it never had it.
    let keep = match preparer {
        Preparer::Handler => {
            let log = process.log_text();
            assert!(
                log.contains("was prepared by virt-handler"),
                "the launcher made its own network:\n{log}"
            );
            0
        }
        Preparer::Launcher => vmm::capabilities::mask(vmm::capabilities::CAP_NET_ADMIN),
    };
    process.assert_confined(keep);
    client.kill(v1::VmiRequest::default()).await.expect("Kill");
    assert!(process.alive());
}
