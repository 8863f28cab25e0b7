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
//!
//! The image's qemu-guest-agent (started by udev and systemd when its virtio-serial port
//! appears) reaches virt-handler through the launcher: on the first VM the test waits for the
//! VMI's `AgentConnected` condition and `status.guestOSInfo`, then checks what `virtctl
//! guestosinfo`, `userlist` (the user logged in on the console) and `fslist` (the root
//! filesystem) print, that `freeze` (the VMI's `fsFreezeStatus`) holds a write in the guest until
//! `unfreeze`, and that `virtctl soft-reboot` reboots the guest from inside (the kernel's
//! "reboot: Restarting system" and a new boot on the console, the same VMI still Running). On the
//! SeaBIOS VM the agent is stopped on the console, and `virtctl soft-reboot` goes through ACPI:
//! the guest powers off and boots again in the same VMI. That VM also has a graphics device
//! (`autoattachGraphicsDevice: true`): `virtctl vnc screenshot` writes a PNG of its screen, and
//! a VNC client's RFB handshake goes through `virtctl vnc --proxy-only` to QEMU's VNC server.

use std::time::{Duration, Instant};

use api::{VirtualMachine, VirtualMachineInstance};
use ferrovirt_tests::console::ConsoleSession;
use ferrovirt_tests::forward::{free_port, tcp_banner, udp_exchange, with_virtctl};
use ferrovirt_tests::{boot_source, client, virtctl, wait_for, wait_running, TestNamespace};
use kube::api::PostParams;
use kube::Api;

#[path = "debian_cloud/agent.rs"]
mod agent;

const IMAGE: &str = "registry:5000/ferrovirt/debian-cloud-container-disk:latest";
/// Pulling the image, copying its 770 MiB and booting systemd under QEMU TCG on a loaded host.
const BOOT: Duration = Duration::from_secs(600);
const USER: &str = "fvuser";
const PASSWORD: &str = "fv-Secret-42";
/// The guest's UDP port [`UDP_SERVER`] answers on.
const GUEST_UDP_PORT: u16 = 7777;
/// Started over ssh: a UDP server that answers each datagram with `guest-got-` and the
/// datagram reversed, so only the guest's answer matches.
const UDP_SERVER: &str = "setsid python3 -c 'import socket; s = socket.socket(socket.AF_INET, \
    socket.SOCK_DGRAM); s.bind((\"0.0.0.0\", 7777)); [s.sendto(b\"guest-got-\" + d[::-1], a) \
    for d, a in iter(lambda: s.recvfrom(2048), None)]' </dev/null >/dev/null 2>&1 &";
/// Printed by the userData's runcmd; the guest's shell computes it, so it shows only if it ran.
const RUNCMD_MARKER: &str = "ferrovirt-runcmd-42";
/// The userData: the user with a password (for the console) and `public_key` (for ssh).
fn user_data(public_key: &str) -> String {
    format!(
        r#"#cloud-config
users:
  - name: fvuser
    lock_passwd: false
    shell: /bin/bash
    sudo: ALL=(ALL) NOPASSWD:ALL
    ssh_authorized_keys:
      - {public_key}
chpasswd:
  expire: false
  users:
    - name: fvuser
      password: fv-Secret-42
      type: text
runcmd:
  - [ sh, -c, 'echo "ferrovirt-runcmd-$((40 + 2))" > /dev/console' ]
"#
    )
}

/// A key pair made for this run by ssh-keygen: the guest's user accepts it.
struct SshKey {
    _dir: tempfile::TempDir,
    private: std::path::PathBuf,
    public: String,
}

impl SshKey {
    fn new() -> SshKey {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let private = dir.path().join("id_ed25519");
        let out = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "ferrovirt-e2e", "-f"])
            .arg(&private)
            .output()
            .unwrap_or_else(|e| panic!("running ssh-keygen (Debian package openssh-client): {e}"));
        assert!(out.status.success(), "ssh-keygen: {out:?}");
        let public = std::fs::read_to_string(private.with_extension("pub"))
            .expect("the public key")
            .trim()
            .to_string();
        SshKey {
            _dir: dir,
            private,
            public,
        }
    }
}

/// One way to boot the image: the VM's name, its `firmware` (none: the kernel from its /boot),
/// what the VMI's `BootSource` message must name, and whether the guest agent is checked on it.
struct Boot {
    vm: &'static str,
    firmware: Option<serde_json::Value>,
    boot_source: &'static str,
    agent: bool,
    /// Soft reboot with the guest agent stopped: through ACPI.
    acpi_reboot: bool,
    /// `autoattachGraphicsDevice: true`: a VGA card, its screen over VNC.
    graphics: bool,
}

fn boots() -> [Boot; 3] {
    [
        Boot {
            vm: "debian",
            firmware: None,
            boot_source: "per /boot/grub/grub.cfg",
            agent: true,
            acpi_reboot: false,
            graphics: false,
        },
        Boot {
            vm: "debian-bios",
            firmware: Some(serde_json::json!({"bootloader": {"bios": {"useSerial": true}}})),
            boot_source: "SeaBIOS",
            agent: false,
            acpi_reboot: true,
            graphics: true,
        },
        Boot {
            vm: "debian-efi",
            firmware: Some(serde_json::json!({"bootloader": {"efi": {"secureBoot": false}}})),
            boot_source: "OVMF",
            agent: false,
            acpi_reboot: false,
            graphics: false,
        },
    ]
}

fn debian_vm(boot: &Boot, public_key: &str) -> VirtualMachine {
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
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": user_data(public_key)}}
                    ]
                }
            }
        }
    }))
    .expect("a VirtualMachine");
    if boot.graphics {
        let spec = vm.spec.template.spec.as_mut().expect("a template spec");
        spec.domain.devices.autoattach_graphics_device = Some(true);
    }
    // The SMBIOS serial number; the UUID is the one virt-controller derives from the VM's name.
    let mut firmware = boot
        .firmware
        .clone()
        .unwrap_or_else(|| serde_json::json!({}));
    firmware["serial"] = serial_of(vm.metadata.name.as_deref().unwrap_or_default()).into();
    let spec = vm.spec.template.spec.as_mut().expect("a template spec");
    spec.domain.firmware = Some(serde_json::from_value(firmware).expect("a firmware object"));
    vm
}

/// The `firmware.serial` each VM is given.
fn serial_of(vm: &str) -> String {
    format!("fv-serial-{vm}")
}

/// Logs in on the console and checks what only the image's own userland answers.
/// `dmi` is what the guest must read in `/sys/class/dmi/id/`: product_uuid, product_serial and
/// sys_vendor, space-separated.
fn console_session(namespace: &str, vm: &str, dmi: &str) -> Result<(String, Duration), String> {
    let started = Instant::now();
    let mut console = ConsoleSession::open(namespace, vm)?;
    console.login(USER, PASSWORD, BOOT)?;
    let to_login = started.elapsed();
    console.run(
        "echo \"who=$(id -un) debian=$(cut -d. -f1 /etc/debian_version) init=$(cat /proc/1/comm)\"",
        "who=fvuser debian=12 init=systemd",
    )?;
    console.run(
        "echo \"dmi=$(cd /sys/class/dmi/id && sudo cat product_uuid product_serial sys_vendor | \
         tr '\\n' ' ')\"",
        &format!("dmi={dmi} "),
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
    key: std::sync::Arc<SshKey>,
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
    // The guest's SMBIOS tables carry the VMI's firmware UUID and serial on every boot path
    // (microvm's qboot, SeaBIOS and OVMF on q35).
    let firmware = running.spec.domain.firmware.as_ref();
    let uuid = firmware.and_then(|f| f.uuid.clone()).unwrap_or_default();
    assert_eq!(
        uuid.len(),
        36,
        "VMI {vm} has no firmware UUID from its VM: {firmware:?}"
    );
    let dmi = format!("{uuid} {} KubeVirt", serial_of(vm));
    let console_namespace = namespace.clone();
    let (transcript, to_login) =
        tokio::task::spawn_blocking(move || console_session(&console_namespace, vm, &dmi))
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
    let logged_in = created.elapsed();
    let mut agent = if boot.agent {
        let reached = ssh_port_forward_and_scp(&namespace, vm, &key).await;
        reached + &agent::guest_agent(&vmis, &namespace, vm).await
    } else {
        String::new()
    };
    if boot.graphics {
        agent += &vnc_screen(&namespace, vm).await;
    }
    if boot.acpi_reboot {
        agent += &agent::soft_reboot_through_acpi(&vmis, &namespace, vm).await;
    }
    format!(
        "debian_cloud: {vm}: VMI Running {:.1} s after the VM was created; login prompt {:.1} s \
         after creation; BootSource: {says}{agent}",
        (logged_in - to_login).as_secs_f64(),
        logged_in.as_secs_f64()
    )
}

/// The guest's sshd through virtctl: `virtctl port-forward` from a local port reaches it (its
/// banner), `virtctl ssh` runs a command with the userData's key, `virtctl scp` copies a file
/// there (read back with ssh); a `udp/` port-forward reaches a UDP server started over ssh.
/// Returns what to print.
async fn ssh_port_forward_and_scp(namespace: &str, vm: &str, key: &SshKey) -> String {
    let known_hosts = key._dir.path().join("known_hosts");
    let ssh_options = |args: &mut Vec<String>| {
        args.extend(
            [
                "-i",
                &key.private.display().to_string(),
                &format!("--known-hosts={}", known_hosts.display()),
                "-t",
                "-o StrictHostKeyChecking=no",
                "-t",
                "-o BatchMode=yes",
                "-t",
                "-o ConnectTimeout=60",
            ]
            .map(String::from),
        );
    };
    let started = Instant::now();
    // sshd starts with the system; the console's login may come first.
    let marker = "ferrovirt-ssh-42";
    let mut args = vec!["ssh".to_string()];
    ssh_options(&mut args);
    args.extend([
        format!("{USER}@vmi/{vm}"),
        "-c".into(),
        "echo ferrovirt-ssh-$((40 + 2)) $(id -un)".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ssh = wait_for(
        "virtctl ssh to run a command in the guest",
        Duration::from_secs(180),
        || async {
            let out = virtctl(namespace, &args);
            (out.code == Some(0)).then_some(out)
        },
    )
    .await;
    assert_eq!(
        ssh.stdout.trim(),
        format!("{marker} {USER}"),
        "virtctl ssh ran the command as the user: {ssh:?}"
    );
    let to_ssh = started.elapsed();

    let local = key._dir.path().join("copied.txt");
    std::fs::write(&local, "ferrovirt-scp-payload\n").expect("the file to copy");
    let mut args = vec!["scp".to_string()];
    ssh_options(&mut args);
    args.extend([
        local.display().to_string(),
        format!("{USER}@vmi/{vm}:/tmp/copied.txt"),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = virtctl(namespace, &args);
    assert_eq!(out.code, Some(0), "virtctl scp: {out:?}");
    let mut args = vec!["ssh".to_string()];
    ssh_options(&mut args);
    args.extend([
        format!("{USER}@vmi/{vm}"),
        "-c".into(),
        "cat /tmp/copied.txt".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = virtctl(namespace, &args);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "ferrovirt-scp-payload\n"),
        "the copied file in the guest: {out:?}"
    );

    // A local port: the banner sshd sends first comes through.
    let port = free_port("tcp");
    let banner = tcp_banner(namespace, vm, port, 22)
        .unwrap_or_else(|e| panic!("virtctl port-forward vmi/{vm} {port}:22: {e}"));
    assert!(
        banner.starts_with("SSH-2.0-OpenSSH"),
        "port-forward reached sshd: {banner:?}"
    );

    // A UDP server in the guest (python3, which cloud-init needs), started over ssh: a `udp/`
    // port-forward carries each datagram to it and its answer back, one by one.
    let mut args = vec!["ssh".to_string()];
    ssh_options(&mut args);
    args.extend([format!("{USER}@vmi/{vm}"), "-c".into(), UDP_SERVER.into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = virtctl(namespace, &args);
    assert_eq!(
        out.code,
        Some(0),
        "starting the guest's UDP server: {out:?}"
    );
    let udp_port = free_port("udp");
    let exchanges = [("ping-1", "guest-got-1-gnip"), ("two", "guest-got-owt")];
    udp_exchange(
        namespace,
        vm,
        (udp_port, GUEST_UDP_PORT),
        &exchanges,
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| {
        panic!("virtctl port-forward vmi/{vm} udp/{udp_port}:{GUEST_UDP_PORT}: {e}")
    });
    format!(
        "; virtctl ssh ran a command {:.1} s after the login, scp copied a file, port-forward \
         {port}:22 showed {:?}, udp/{udp_port}:{GUEST_UDP_PORT} answered {exchanges:?}",
        to_ssh.as_secs_f64(),
        banner.trim()
    )
}

/// The VM's screen through virtctl: `virtctl vnc screenshot -f FILE` writes a PNG of it (not
/// blank), and `virtctl vnc --proxy-only` relays a VNC client to QEMU's server: the RFB
/// handshake both ways (versions, security "None", ClientInit) up to the ServerInit, whose
/// framebuffer is the size of the screenshot. Returns what to print.
async fn vnc_screen(namespace: &str, vm: &str) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("screen.png");
    let out = virtctl(
        namespace,
        &["vnc", "screenshot", vm, "-f", &file.display().to_string()],
    );
    assert_eq!(out.code, Some(0), "virtctl vnc screenshot: {out:?}");
    let png = std::fs::read(&file).expect("the screenshot file");
    let (width, height) = ferrovirt_tests::screen::png_size(&png)
        .unwrap_or_else(|e| panic!("{vm}: the screenshot: {e}"));
    assert!(
        width >= 320 && height >= 200,
        "{vm}: a {width}x{height} screen"
    );
    // The kernel's console and the login prompt on the VGA text screen (console=tty0).
    assert!(
        ferrovirt_tests::screen::png_shows_something(&png)
            .unwrap_or_else(|e| panic!("{vm}: the screenshot: {e}")),
        "{vm}: the screenshot is blank"
    );
    let (ns, name) = (namespace.to_string(), vm.to_string());
    let (version, screen) = tokio::task::spawn_blocking(move || vnc_handshake(&ns, &name))
        .await
        .expect("the VNC client thread")
        .unwrap_or_else(|e| panic!("{vm}: virtctl vnc --proxy-only: {e}"));
    assert_eq!(version, "RFB 003.008\n", "{vm}: QEMU's RFB version");
    assert_eq!(
        screen,
        (width, height),
        "{vm}: ServerInit's framebuffer against the screenshot"
    );
    format!(
        "; vnc: a {width}x{height} PNG screenshot ({} bytes), the RFB handshake through the proxy",
        png.len()
    )
}

/// `virtctl vnc --proxy-only`: the port it prints, then the RFB handshake as a VNC viewer makes
/// it. Returns the server's version line and the framebuffer size of its ServerInit.
fn vnc_handshake(namespace: &str, vm: &str) -> Result<(String, (u32, u32)), String> {
    with_virtctl(namespace, &["vnc", vm, "--proxy-only"], |line| {
        let printed: serde_json::Value =
            serde_json::from_str(line.trim()).map_err(|e| format!("{line:?}: {e}"))?;
        let port = printed["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or(format!("no port in {line:?}"))?;
        ferrovirt_tests::screen::rfb_handshake(("127.0.0.1", port))
    })
}

#[tokio::test]
async fn a_debian_cloud_image_boots_its_own_kernel_and_through_firmware_and_cloud_init_creates_the_user(
) {
    let client = client().await;
    require_image_in_registry();
    let namespace = TestNamespace::create(&client, "e2e-debian").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let key = std::sync::Arc::new(SshKey::new());
    let mut failures = Vec::new();
    for boot in boots() {
        let vm = boot.vm;
        vms.create(&PostParams::default(), &debian_vm(&boot, &key.public))
            .await
            .unwrap_or_else(|e| panic!("VM {vm} created: {e}"));
        // Its own task: a failed boot is reported, and the next one still runs.
        let task = tokio::spawn(boot_and_log_in(
            vmis.clone(),
            namespace.name.clone(),
            boot,
            key.clone(),
        ));
        match task.await {
            Ok(line) => println!("{line}"),
            Err(e) => failures.push(e.to_string()),
        }
        let _ = vms.delete(vm, &Default::default()).await;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
