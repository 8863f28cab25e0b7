//! The stand-in for KubeVirt's `alpine-container-disk-demo` (`guest-images/standins/build.sh`,
//! pushed by the cluster's bring-up as `quay.io/kubevirt/alpine-container-disk-demo:latest`, the
//! name KubeVirt's documentation and functional suite use) boots as a user's image does: from
//! the kernel, initramfs and command line its own `/boot/extlinux.conf` names, on a partitioned
//! disk, never from Ferrovirt's bundled kernel. The VMI is the one KubeVirt's suite makes with
//! `libvmifact.NewAlpine()` (128Mi, the containerDisk alone); its console behaves as the
//! original's, as KubeVirt's `console.LoginToAlpine` expects it.

use std::time::{Duration, Instant};

use api::VirtualMachineInstance;
use ferrovirt_tests::console::ConsoleSession;
use ferrovirt_tests::{boot_source, client, wait_running, TestNamespace};
use kube::api::PostParams;
use kube::Api;

const IMAGE: &str = "quay.io/kubevirt/alpine-container-disk-demo:latest";
/// Pulling the image and booting Debian's kernel under QEMU TCG on a loaded host.
const BOOT: Duration = Duration::from_secs(300);
/// The root filesystem's UUID that the image's extlinux.conf names (build.sh's `root_uuid`).
const ROOT_UUID: &str = "5a1f1e2d-3c4b-4a59-8e7f-a1b2c3d4e5f6";

fn alpine_vmi(name: &str) -> VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "disk0", "disk": {"bus": "virtio"}}]},
                "resources": {"requests": {"memory": "128Mi"}}
            },
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "disk0", "containerDisk": {"image": IMAGE}}]
        }
    }))
    .expect("a VirtualMachineInstance")
}

/// Logs in as KubeVirt's LoginToAlpine does and asks the guest what booted it.
fn alpine_session(namespace: &str, vmi: &str) -> Result<(String, Duration), String> {
    let started = Instant::now();
    let mut console = ConsoleSession::open(namespace, vmi)?;
    console.login_without_password("localhost login: ", "root", "localhost:~# ", BOOT)?;
    let to_login = started.elapsed();
    // Computed by the guest's shell, so the typed line never matches the answer.
    console.run(
        "echo \"kernel=$(uname -r | grep -c cloud-amd64)$((0)) root=$(grep -o 'root=UUID=[0-9a-f-]*' /proc/cmdline)\"",
        &format!("kernel=10 root=root=UUID={ROOT_UUID}"),
    )?;
    console.run("dmesg -n 1; echo \"rc=$?$((7 * 6))\"", "rc=042")?;
    Ok((console.escape()?, to_login))
}

#[tokio::test]
async fn the_alpine_stand_in_boots_its_own_kernel_and_logs_in_as_kubevirts_suite_expects() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-standin").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let name = "alpine";
    let created = Instant::now();
    vmis.create(&PostParams::default(), &alpine_vmi(name))
        .await
        .unwrap_or_else(|e| panic!("VMI {name} created: {e}"));
    let running = wait_running(&vmis, name, BOOT).await;
    let to_running = created.elapsed();
    let (reason, message) = boot_source(&running);
    let says = format!("{reason} {message:?}");
    assert_eq!(reason, "UserDisk", "{says}");
    for part in ["/boot/vmlinuz-virt", "/boot/extlinux.conf"] {
        assert!(
            message.contains(part),
            "BootSource does not name {part}: {says}"
        );
    }
    let ns = namespace.name.clone();
    let (transcript, to_login) = tokio::task::spawn_blocking(move || alpine_session(&ns, name))
        .await
        .expect("the console session thread")
        .unwrap_or_else(|e| panic!("virtctl console {name}: {e}"));
    assert!(
        transcript.contains("Welcome to Alpine Linux"),
        "the image's /etc/issue is not on the console:\n{transcript}"
    );
    println!(
        "standins: alpine: VMI Running {:.1} s after creation, login prompt {:.1} s after it; \
         BootSource: {says}",
        to_running.as_secs_f64(),
        (to_running + to_login).as_secs_f64()
    );
}
