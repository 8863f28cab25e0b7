//! The stand-ins for KubeVirt's `alpine-container-disk-demo`, `cirros-container-disk-demo`,
//! `fedora-with-test-tooling-container-disk` and `alpine-with-test-tooling-container-disk`
//! (`guest-images/standins/build.sh`, pushed by the cluster's bring-up under the names KubeVirt's
//! documentation and functional suite use) boot as a user's image does: from the kernel,
//! initramfs and command line their own boot configuration names (Alpine's
//! `/boot/extlinux.conf`, CirrOS's `/boot/grub/grub.cfg`, Fedora's BLS entry through the ESP's
//! grub.cfg, `/boot`'s grub.cfg, grubenv and `blscfg`), on a partitioned disk or, for the Alpine
//! that alpine-make-vm-image lays out, a filesystem on the whole disk, never from Ferrovirt's
//! bundled kernel. The VMIs are like those KubeVirt's suite makes with `libvmifact.NewAlpine()`,
//! `NewCirros()`, `NewFedora()` (128Mi, the containerDisk alone) and `NewAlpineWithTestTooling()`
//! (also its dummy cloud-init user-data); their consoles behave as the originals', as KubeVirt's
//! `console.LoginToAlpine`, `LoginToCirros` and `LoginToFedora` expect, and the test-tooling
//! Alpine's `nc` serves as KubeVirt's `vmnetserver` starts it.

use std::time::{Duration, Instant};

use api::VirtualMachineInstance;
use ferrovirt_tests::console::ConsoleSession;
use ferrovirt_tests::{boot_source, client, wait_running, TestNamespace};
use kube::api::PostParams;
use kube::Api;

const ALPINE: &str = "quay.io/kubevirt/alpine-container-disk-demo:latest";
/// As KubeVirt's suite names it with this cluster's container prefix and tag.
const CIRROS: &str = "registry:5000/kubevirt/cirros-container-disk-demo:devel";
const FEDORA: &str = "registry:5000/kubevirt/fedora-with-test-tooling-container-disk:devel";
const ALPINE_TEST_TOOLING: &str =
    "registry:5000/kubevirt/alpine-with-test-tooling-container-disk:devel";
/// Pulling the image and booting Debian's kernel under QEMU TCG on a loaded host.
const BOOT: Duration = Duration::from_secs(300);
/// The root filesystem's UUID that the Alpine image's extlinux.conf names (build.sh's
/// `root_uuid`).
const ROOT_UUID: &str = "5a1f1e2d-3c4b-4a59-8e7f-a1b2c3d4e5f6";
/// The root filesystem's UUID that the Fedora image's BLS entry names.
const FEDORA_ROOT_UUID: &str = "f3d0a9e1-7c2b-4e5d-9a8f-1b2c3d4e5f60";
/// The whole-disk filesystem's UUID that the test-tooling Alpine's extlinux.conf names.
const ALPINE_TEST_TOOLING_ROOT_UUID: &str = "a1e57d00-7e57-4a11-8c0d-15c0ffee0001";
/// `libvmifact.WithDummyCloudForFastBoot()`'s user-data, which NewAlpineWithTestTooling adds.
const DUMMY_USER_DATA_BASE64: &str = "IyEvYmluL2Jhc2gKZWNobyAnaGVsbG8nCg==";
/// What CirrOS's console shows above its login prompt; KubeVirt's LoginToCirros waits for it.
const CIRROS_BANNER: &str =
    "login as 'cirros' user. default password: 'gocubsgo'. use 'sudo' for root.";

fn standin_vmi(name: &str, image: &str) -> VirtualMachineInstance {
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
            "volumes": [{"name": "disk0", "containerDisk": {"image": image}}]
        }
    }))
    .expect("a VirtualMachineInstance")
}

/// [`standin_vmi`] with the cloud-init NoCloud volume that `NewAlpineWithTestTooling()` adds.
fn standin_vmi_with_dummy_cloud_init(name: &str, image: &str) -> VirtualMachineInstance {
    let mut vmi = serde_json::to_value(standin_vmi(name, image)).expect("VMI as JSON");
    vmi["spec"]["domain"]["devices"]["disks"]
        .as_array_mut()
        .expect("disks")
        .push(serde_json::json!({"name": "cloudinitdisk", "disk": {"bus": "virtio"}}));
    vmi["spec"]["volumes"]
        .as_array_mut()
        .expect("volumes")
        .push(serde_json::json!({
            "name": "cloudinitdisk",
            "cloudInitNoCloud": {"userDataBase64": DUMMY_USER_DATA_BASE64}
        }));
    serde_json::from_value(vmi).expect("a VirtualMachineInstance")
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

/// Waits for CirrOS's rc.sysinit boot line, logs in as KubeVirt's LoginToCirros does (the
/// banner, `<hostname> login:`, cirros and gocubsgo, a prompt ending in `$ `) and asks the guest
/// what booted it, who sudo makes it and its host name (the VMI's, from the DHCP lease).
fn cirros_session(namespace: &str, vmi: &str) -> Result<(String, Duration), String> {
    let started = Instant::now();
    let mut console = ConsoleSession::open(namespace, vmi)?;
    // CirrOS's boot line that KubeVirt's boot-order spec waits for, before the banner.
    console.shown("info: /etc/init.d/rc.sysinit: up at ", BOOT)?;
    console.prompt(CIRROS_BANNER, BOOT)?;
    console.prompt(&format!("{vmi} login: "), BOOT)?;
    let to_login = started.elapsed();
    console.login("cirros", "gocubsgo", BOOT)?;
    console.run(
        "echo \"kernel=$(uname -r | grep -c cloud-amd64)$((0)) $(grep -o 'root=LABEL=[a-z-]*' /proc/cmdline)\"",
        "kernel=10 root=LABEL=cirros-rootfs",
    )?;
    console.run(
        "echo \"sudo=$(sudo id -u)$((0)) host=$(hostname)\"",
        &format!("sudo=00 host={vmi}"),
    )?;
    Ok((console.escape()?, to_login))
}

/// Logs in as KubeVirt's LoginToFedora does (`<hostname> login:`, fedora and fedora, the
/// prompt `[fedora@<hostname> ~]$ `, `sudo su` to `[root@<hostname> fedora]# `) and asks the
/// guest what booted it.
fn fedora_session(namespace: &str, vmi: &str) -> Result<(String, Duration), String> {
    let started = Instant::now();
    let mut console = ConsoleSession::open(namespace, vmi)?;
    console.prompt(&format!("{vmi} login: "), BOOT)?;
    let to_login = started.elapsed();
    console.login("fedora", "fedora", BOOT)?;
    console.prompt(&format!("[fedora@{vmi} ~]$ "), Duration::from_secs(30))?;
    console.run_within("sudo su", &format!("[root@{vmi} fedora]# "), BOOT)?;
    console.run(
        "echo \"kernel=$(uname -r | grep -c cloud-amd64)$((0)) $(grep -o 'root=UUID=[0-9a-f-]*' /proc/cmdline) id=$(id -u)$((0))\"",
        &format!("kernel=10 root=UUID={FEDORA_ROOT_UUID} id=00"),
    )?;
    console.run("exit", &format!("[fedora@{vmi} ~]$ "))?;
    Ok((console.escape()?, to_login))
}

/// Logs in as KubeVirt's LoginToAlpine does, under the host name cloud-init's meta-data gives
/// (the VMI's), asks the guest what booted it from where, and starts busybox's nc as KubeVirt's
/// vmnetserver does (`nc -s ADDR -klp PORT -e sh -c ...`): bound to the guest's address only, it
/// answers two connections in a row and refuses one to the loopback.
fn alpine_test_tooling_session(namespace: &str, vmi: &str) -> Result<(String, Duration), String> {
    let started = Instant::now();
    let mut console = ConsoleSession::open(namespace, vmi)?;
    console.login_without_password(
        &format!("{vmi} login: "),
        "root",
        &format!("{vmi}:~# "),
        BOOT,
    )?;
    let to_login = started.elapsed();
    // The root filesystem is vda itself: the disk has no partition.
    console.run(
        "echo \"kernel=$(uname -r | grep -c cloud-amd64)$((0)) $(grep -o 'root=UUID=[0-9a-f-]*' /proc/cmdline) partitions=$(ls /sys/block/vda | grep -c '^vda')$((0))\"",
        &format!("kernel=10 root=UUID={ALPINE_TEST_TOOLING_ROOT_UUID} partitions=00"),
    )?;
    console.run(
        "nc -s 10.0.2.2 -klp 1501 -e sh -c \"printf 'served'; sleep 2\"& sleep 1; echo \"one=$(nc 10.0.2.2 1501 </dev/null)$((1)) two=$(nc 10.0.2.2 1501 </dev/null)$((2)) lo=$(nc 127.0.0.1 1501 </dev/null 2>/dev/null; echo $?)$((0))\"",
        "one=served1 two=served2 lo=10",
    )?;
    Ok((console.escape()?, to_login))
}

/// A console session, given the namespace and the VMI: what the console showed, and how long the
/// login prompt took.
type Session = fn(&str, &str) -> Result<(String, Duration), String>;

/// Creates `vmi` (named `what`), checks its BootSource names each of `boot_files`, runs `session`
/// on its console and returns what the console showed.
async fn boot_standin(
    what: &str,
    vmi: VirtualMachineInstance,
    boot_files: &[&str],
    session: Session,
) -> String {
    let client = client().await;
    let namespace = TestNamespace::create(&client, &format!("e2e-standin-{what}")).await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let name = what;
    let created = Instant::now();
    vmis.create(&PostParams::default(), &vmi)
        .await
        .unwrap_or_else(|e| panic!("VMI {name} created: {e}"));
    let running = wait_running(&vmis, name, BOOT).await;
    let to_running = created.elapsed();
    let (reason, message) = boot_source(&running);
    let says = format!("{reason} {message:?}");
    assert_eq!(reason, "UserDisk", "{says}");
    for part in boot_files {
        assert!(
            message.contains(part),
            "BootSource does not name {part}: {says}"
        );
    }
    let (ns, vmi) = (namespace.name.clone(), name.to_string());
    let (transcript, to_login) = tokio::task::spawn_blocking(move || session(&ns, &vmi))
        .await
        .expect("the console session thread")
        .unwrap_or_else(|e| panic!("virtctl console {name}: {e}"));
    println!(
        "standins: {what}: VMI Running {:.1} s after creation, login prompt {:.1} s after it; \
         BootSource: {says}",
        to_running.as_secs_f64(),
        (to_running + to_login).as_secs_f64()
    );
    transcript
}

#[tokio::test]
async fn the_alpine_stand_in_boots_its_own_kernel_and_logs_in_as_kubevirts_suite_expects() {
    let transcript = boot_standin(
        "alpine",
        standin_vmi("alpine", ALPINE),
        &["/boot/vmlinuz-virt", "/boot/extlinux.conf"],
        alpine_session,
    )
    .await;
    assert!(
        transcript.contains("Welcome to Alpine Linux"),
        "the image's /etc/issue is not on the console:\n{transcript}"
    );
}

#[tokio::test]
async fn the_cirros_stand_in_boots_its_own_kernel_and_logs_in_as_kubevirts_suite_expects() {
    let transcript = boot_standin(
        "cirros",
        standin_vmi("cirros", CIRROS),
        &["/boot/vmlinuz-", "/boot/grub/grub.cfg", "cirros-rootfs"],
        cirros_session,
    )
    .await;
    // The logo's backslashes survive getty's escapes.
    assert!(
        transcript.contains("\\___//_//_/  /_/   \\____/___/"),
        "CirrOS's logo is not on the console as written:\n{transcript}"
    );
}

#[tokio::test]
async fn the_fedora_stand_in_boots_its_bls_entry_and_logs_in_as_kubevirts_suite_expects() {
    let transcript = boot_standin(
        "fedora",
        standin_vmi("fedora", FEDORA),
        &[
            "/vmlinuz-",
            "/loader/entries/",
            "/EFI/fedora/grub.cfg",
            "/grub2/grub.cfg",
        ],
        fedora_session,
    )
    .await;
    assert!(
        transcript.contains("Fedora Linux 39 (Cloud Edition)"),
        "the image's /etc/issue is not on the console:\n{transcript}"
    );
}

#[tokio::test]
async fn the_alpine_test_tooling_stand_in_boots_from_its_whole_disk_and_serves_with_alpines_nc() {
    let transcript = boot_standin(
        "alpine-test-tooling",
        standin_vmi_with_dummy_cloud_init("alpine-test-tooling", ALPINE_TEST_TOOLING),
        &[
            "/boot/vmlinuz-virt",
            "the whole disk",
            "/boot/extlinux.conf",
        ],
        alpine_test_tooling_session,
    )
    .await;
    assert!(
        transcript.contains(
            "Welcome to Alpine Linux (Ferrovirt's stand-in for KubeVirt's alpine-with-test-tooling-container-disk)"
        ),
        "the image's /etc/issue is not on the console:\n{transcript}"
    );
}
