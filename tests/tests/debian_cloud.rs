//! The user's own OS on the local cluster: a VirtualMachine whose containerDisk is a real Debian
//! 12 cloud image (`guest-images/debian-cloud/build.sh`, pushed to the local registry by the
//! cluster's bring-up as `registry:5000/ferrovirt/debian-cloud-container-disk`), booted from
//! the image's own `/boot` (its grub.cfg's default entry: Debian's kernel and the initramfs
//! initramfs-tools made in the image). cloud-init applies the VM's userData: the user it
//! creates logs in on `virtctl console`, and the console shows its `runcmd`'s output. The VMI's
//! `BootSource` condition names the kernel from the user's disk. The same image also boots
//! through firmware, as KubeVirt boots it: `firmware.bootloader.bios` (SeaBIOS) and
//! `bootloader.efi` with `secureBoot: false` (OVMF), each running the image's own grub. The
//! three VMs boot one after another (three TCG guests at once on two cores, beside the rest of
//! a CI run, once left the SeaBIOS guest's console silent from 10 s into its boot until the
//! deadline); the time from creation to each login prompt is printed.

use std::time::{Duration, Instant};

use api::{VirtualMachine, VirtualMachineInstance};
use ferrovirt_tests::console::ConsoleSession;
use ferrovirt_tests::{boot_source, client, wait_running, TestNamespace};
use kube::api::PostParams;
use kube::Api;

const IMAGE: &str = "registry:5000/ferrovirt/debian-cloud-container-disk:latest";
/// Pulling the image, copying its 770 MiB and booting systemd under QEMU TCG on a loaded host.
const BOOT: Duration = Duration::from_secs(600);
const USER: &str = "fvuser";
const PASSWORD: &str = "fv-Secret-42";
/// Printed by the userData's runcmd; the guest's shell computes it, so it shows only if it ran.
const RUNCMD_MARKER: &str = "ferrovirt-runcmd-42";
const USER_DATA: &str = r#"#cloud-config
users:
  - name: fvuser
    lock_passwd: false
    shell: /bin/bash
chpasswd:
  expire: false
  users:
    - name: fvuser
      password: fv-Secret-42
      type: text
runcmd:
  - [ sh, -c, 'echo "ferrovirt-runcmd-$((40 + 2))" > /dev/console' ]
"#;

/// One way to boot the image: the VM's name, its `firmware` (none: the kernel from its /boot),
/// and what the VMI's `BootSource` message must name.
struct Boot {
    vm: &'static str,
    firmware: Option<serde_json::Value>,
    boot_source: &'static str,
}

fn boots() -> [Boot; 3] {
    [
        Boot {
            vm: "debian",
            firmware: None,
            boot_source: "per /boot/grub/grub.cfg",
        },
        Boot {
            vm: "debian-bios",
            firmware: Some(serde_json::json!({"bootloader": {"bios": {"useSerial": true}}})),
            boot_source: "SeaBIOS",
        },
        Boot {
            vm: "debian-efi",
            firmware: Some(serde_json::json!({"bootloader": {"efi": {"secureBoot": false}}})),
            boot_source: "OVMF",
        },
    ]
}

fn debian_vm(boot: &Boot) -> VirtualMachine {
    let vm = boot.vm;
    let mut vm: VirtualMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": vm},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": vm}},
                "spec": {
                    "domain": {
                        "devices": {"disks": [
                            {"name": "containerdisk", "disk": {"bus": "virtio"}},
                            {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}
                        ]},
                        "memory": {"guest": "1Gi"},
                        "resources": {}
                    },
                    "terminationGracePeriodSeconds": 30,
                    "volumes": [
                        {"name": "containerdisk", "containerDisk": {"image": IMAGE}},
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": USER_DATA}}
                    ]
                }
            }
        }
    }))
    .expect("a VirtualMachine");
    if let Some(firmware) = &boot.firmware {
        let spec = vm.spec.template.spec.as_mut().expect("a template spec");
        spec.domain.firmware =
            Some(serde_json::from_value(firmware.clone()).expect("a firmware object"));
    }
    vm
}

/// Logs in on the console and checks what only the image's own userland answers.
fn console_session(namespace: &str, vm: &str) -> Result<(String, Duration), String> {
    let started = Instant::now();
    let mut console = ConsoleSession::open(namespace, vm)?;
    console.login(USER, PASSWORD, BOOT)?;
    let to_login = started.elapsed();
    console.run(
        "echo \"who=$(id -un) debian=$(cut -d. -f1 /etc/debian_version) init=$(cat /proc/1/comm)\"",
        "who=fvuser debian=12 init=systemd",
    )?;
    // runcmd runs in cloud-init's last stage, which may end after the login prompt: wait for
    // cloud-init to finish; its output went to the console this session shows.
    console.run_within(
        "cloud-init status --wait >/dev/null; echo cloud-init-done-$((1 + 1))",
        "cloud-init-done-2",
        BOOT,
    )?;
    if !console.output().contains(RUNCMD_MARKER) {
        return Err(format!(
            "the userData's runcmd output {RUNCMD_MARKER:?} is not on the console:\n{}",
            console.output()
        ));
    }
    Ok((console.escape()?, to_login))
}

/// Fails at once, saying what to run, when the local registry does not have the image.
fn require_image_in_registry() {
    let url = "http://127.0.0.1:5000/v2/ferrovirt/debian-cloud-container-disk/manifests/latest";
    let status = std::process::Command::new("curl")
        .args(["-sf", "-o", "/dev/null", "-H"])
        .arg("Accept: application/vnd.oci.image.manifest.v1+json")
        .arg(url)
        .status()
        .unwrap_or_else(|e| panic!("running curl (Debian package curl): {e}"));
    assert!(
        status.success(),
        "{IMAGE} is not in the local registry ({url}): build it with \
         `guest-images/debian-cloud/build.sh` and push it with \
         `tests/cluster/cluster.sh push-guest-images` (hack/test.sh does both)"
    );
}

/// Boots one VM and logs in; returns what to print.
async fn boot_and_log_in(
    vmis: Api<VirtualMachineInstance>,
    namespace: String,
    boot: Boot,
) -> String {
    let created = Instant::now();
    let vm = boot.vm;
    let running = wait_running(&vmis, vm, BOOT).await;
    let (reason, message) = boot_source(&running);
    let says = format!("{reason} {message:?}");
    assert!(
        reason == "UserDisk" && message.contains(boot.boot_source),
        "VMI {vm} does not say it boots the image by {:?}: {says}",
        boot.boot_source
    );
    let (transcript, to_login) =
        tokio::task::spawn_blocking(move || console_session(&namespace, vm))
            .await
            .expect("the console session thread")
            .unwrap_or_else(|e| panic!("virtctl console {vm}: {e}"));
    // systemd's banner, `Welcome to \e[1mDebian GNU/Linux 12 (bookworm)\e[0m!` (bold name).
    let banner = transcript.split("Welcome to ").skip(1).any(|after| {
        after
            .trim_start_matches("\u{1b}[1m")
            .starts_with("Debian GNU/Linux 12")
    });
    assert!(
        banner,
        "systemd's banner is not on {vm}'s console:\n{transcript}"
    );
    if boot.firmware.is_some() {
        assert!(
            transcript.contains("GRUB"),
            "{vm}: the image's grub is not on the console:\n{transcript}"
        );
    }
    format!(
        "debian_cloud: {vm}: VMI Running {:.1} s after the VM was created; login prompt {:.1} s \
         after creation; BootSource: {says}",
        (created.elapsed() - to_login).as_secs_f64(),
        created.elapsed().as_secs_f64()
    )
}

#[tokio::test]
async fn a_debian_cloud_image_boots_its_own_kernel_and_through_firmware_and_cloud_init_creates_the_user(
) {
    let client = client().await;
    require_image_in_registry();
    let namespace = TestNamespace::create(&client, "e2e-debian").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let mut failures = Vec::new();
    for boot in boots() {
        let vm = boot.vm;
        vms.create(&PostParams::default(), &debian_vm(&boot))
            .await
            .unwrap_or_else(|e| panic!("VM {vm} created: {e}"));
        // Its own task: a failed boot is reported, and the next one still runs.
        let task = tokio::spawn(boot_and_log_in(vmis.clone(), namespace.name.clone(), boot));
        match task.await {
            Ok(line) => println!("{line}"),
            Err(e) => failures.push(e.to_string()),
        }
        let _ = vms.delete(vm, &Default::default()).await;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
