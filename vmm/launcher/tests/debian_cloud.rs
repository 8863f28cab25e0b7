//! A real Debian 12 cloud image boots from its own `/boot` on QEMU TCG, driven over gRPC as
//! virt-handler drives it (ARCHITECTURE.md, "How a VM boots", step 2), and cloud-init applies
//! the VMI's cloudInitNoCloud userData.
//!
//! The image is what `guest-images/debian-cloud/build.sh` builds from Debian packages with
//! mmdebstrap, as a user's `debian-12-genericcloud` is made: Debian's cloud kernel, the
//! initramfs Debian's initramfs-tools generated in the image, systemd, cloud-init (NoCloud),
//! a `/boot/grub/grub.cfg` written by grub-mkconfig, GPT with an ext4 root. Nothing in it is
//! made for Ferrovirt. The test checks, on the serial console: Debian's kernel banner, systemd
//! starting, the `runcmd` of the userData (cloud-init ran it), the `login:` prompt; then logs in
//! with the user and password the userData created and runs a command. The image has
//! qemu-guest-agent: the launcher's poller connects to it over the VM's
//! `org.qemu.guest_agent.0` channel and reports what it says in the domain (Debian 12, the
//! image's kernel, the root filesystem on the disk whose serial is `rootdisk`, the user logged
//! in on the console); SoftReboot reboots the guest through the agent once it is up, in the same
//! QEMU. Then a graceful Shutdown reaches systemd, which powers the VM
//! off within the grace period.

mod common;

use std::time::{Duration, Instant};

use common::debian_cloud::{
    console_line, debian_cloud_image, debian_vmi, wait_after, PASSWORD, RUNCMD_MARKER, USER,
};
use common::*;
use contract::proto::v1;
use tonic::transport::Channel;
use v1::DomainState;

type Client = v1::launcher_client::LauncherClient<Channel>;

/// How long after the call the guest agent report first says connected (GetDomain every
/// 250 ms), or `None` within `timeout`.
async fn first_connected(mut client: Client, timeout: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        let report = domain(&mut client).await.guest_agent;
        if report.is_some_and(|a| a.connected) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debian_cloud_image_boots_and_applies_its_cloud_init() {
    require_qemu();
    let image = debian_cloud_image();
    let artifacts = artifacts();
    let dirs = TestDirs::new("debian");
    dirs.container_disk("rootdisk", &image.disk);

    let process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;
    let console = ConsoleReader::connect(&dirs);
    let synced = Instant::now();
    let domain = sync_emulated_domain(&mut client, &debian_vmi("vmi-debian", None), &process).await;
    println!("SyncVMI took {:?}; boot: {}", synced.elapsed(), domain.boot);
    assert_eq!(domain.boot_origin, v1::BootOrigin::UserDisk as i32);
    let release = &image.kernel_release;
    let uuid = &image.root_uuid;
    assert!(
        domain.boot.starts_with(&format!(
            "disk rootdisk: kernel /boot/vmlinuz-{release} from partition 1 (ext4, UUID {uuid}, \
             label \"root\") per /boot/grub/grub.cfg on partition 1 entry 'Debian GNU/Linux'"
        )),
        "{}",
        domain.boot
    );
    wait_state(&mut client, DomainState::Running, Duration::from_secs(60)).await;
    // The QEMU VM has the guest agent channel; nothing answers on it yet (the guest takes
    // minutes to boot under TCG).
    let agent = domain.guest_agent.clone().expect("a guest agent report");
    assert!(!agent.connected, "{agent:?}");
    // When the agent connects, seen from GetDomain while the guest boots.
    let agent_watch = tokio::spawn(first_connected(client.clone(), Duration::from_secs(300)));

    // Everything under TCG is slow (systemd, four cloud-init stages in Python): generous
    // deadlines, times printed, never asserted.
    let boot = Duration::from_secs(900);
    let banner = wait_after(
        &console,
        0,
        &format!("Linux version {release}"),
        boot,
        &process,
    );
    println!(
        "Debian's kernel banner {:?} after SyncVMI",
        synced.elapsed()
    );
    let command_line = console_line(&console, banner, "Command line:", boot, &process);
    println!("{command_line}");
    for option in [&format!("root=UUID={uuid}"), "ro", "console=ttyS0,115200"] {
        assert!(
            command_line.split_whitespace().any(|o| o == option),
            "{option} missing from {command_line:?}"
        );
    }
    // systemd from the image's root, found by Debian's own initramfs.
    wait_after(&console, banner, "running in system mode", boot, &process);
    // "Welcome to \e[1mDebian GNU/Linux 12 (bookworm)\e[0m!"
    let welcome = wait_after(&console, banner, "Welcome to ", boot, &process);
    wait_after(
        &console,
        welcome,
        "Debian GNU/Linux 12 (bookworm)",
        boot,
        &process,
    );
    println!("systemd started {:?} after SyncVMI", synced.elapsed());
    // The serial getty asks for a login (systemd starts it once cloud-init's config stage has
    // created the user), and cloud-init's final stage runs the userData's runcmd.
    let prompt = wait_after(&console, banner, "login: ", boot, &process);
    println!("login prompt {:?} after SyncVMI", synced.elapsed());
    wait_after(&console, banner, RUNCMD_MARKER, boot, &process);
    println!("the runcmd marker {:?} after SyncVMI", synced.elapsed());
    if std::env::var_os("FERROVIRT_SHOW_CONSOLE").is_some() {
        println!("console:\n{}", console.text());
    }

    // Log in on the serial console with the user and password cloud-init created.
    let text = console.text();
    let prompt = text[prompt..]
        .rfind("login: ")
        .map_or(prompt, |at| prompt + at + 7);
    console.send(&format!("{USER}\n"));
    let asked = wait_after(
        &console,
        prompt,
        "Password:",
        Duration::from_secs(120),
        &process,
    );
    console.send(&format!("{PASSWORD}\n"));
    let shell = wait_after(&console, asked, "$ ", Duration::from_secs(180), &process);
    assert!(
        !console.text()[asked..].contains("Login incorrect"),
        "the login failed:\n{}",
        &console.text()[asked..]
    );
    console.send(
        "echo \"who=$(id -un) debian=$(cat /etc/debian_version) init=$(cat /proc/1/comm)\"\n",
    );
    let end = wait_after(
        &console,
        shell,
        "init=systemd",
        Duration::from_secs(120),
        &process,
    );
    let text = console.text();
    let line = text[shell..end]
        .lines()
        .rfind(|l| l.contains("who="))
        .expect("the command's output line");
    println!("in the guest: {}", line.trim());
    assert!(line.contains(&format!("who={USER} ")), "{line}");
    assert!(line.contains("debian=12."), "{line}");

    // The guest agent (Debian's qemu-guest-agent, started by udev when the port appears)
    // answers the launcher's poller; the report says what the guest is.
    match agent_watch.await.expect("the agent watch") {
        Some(after) => println!("guest agent connected {after:?} after SyncVMI"),
        None => println!("guest agent not connected within 300 s of SyncVMI"),
    }
    let logged_in = Instant::now();
    let agent = wait_agent(
        &mut client,
        "connected",
        Duration::from_secs(300),
        &process,
        |a| a.connected,
    )
    .await;
    println!(
        "guest agent {} connected (seen {:?} after SyncVMI, {:?} after the login)",
        agent.version,
        synced.elapsed(),
        logged_in.elapsed()
    );
    let os = agent.os.clone().expect("the guest's OS info");
    println!("guest OS: {os:?}, hostname {:?}", agent.hostname);
    assert_eq!(os.id, "debian", "{os:?}");
    assert_eq!(os.version_id, "12", "{os:?}");
    assert!(os.name.contains("Debian"), "{os:?}");
    assert_eq!(&os.kernel_release, release, "{os:?}");
    assert!(!agent.hostname.is_empty(), "{agent:?}");
    let root = agent
        .filesystems
        .iter()
        .find(|fs| fs.mount_point == "/")
        .unwrap_or_else(|| panic!("no / among {:?}", agent.filesystems));
    println!("guest root filesystem: {root:?}");
    assert_eq!(root.file_system_type, "ext4", "{root:?}");
    assert!(
        root.disks.iter().any(|d| d.serial == "rootdisk"),
        "the root filesystem is not on the disk with serial rootdisk: {root:?}"
    );
    // The console login shows among the users (the report of a poll after the login).
    let agent = wait_agent(
        &mut client,
        "the console user",
        Duration::from_secs(60),
        &process,
        |a| a.connected && a.users.iter().any(|u| u.user_name == USER),
    )
    .await;
    println!("guest users: {:?}", agent.users);

    // SoftReboot: the agent reboots the guest; the VM stays, the same QEMU runs on.
    let before = common::domain(&mut client).await;
    let before_reboot = console.text().len();
    let asked = Instant::now();
    let rebooted = client
        .soft_reboot(v1::VmiRequest::default())
        .await
        .unwrap_or_else(|s| {
            panic!(
                "SoftReboot: {s}
launcher log:
{}",
                process.log_text()
            )
        })
        .into_inner()
        .domain
        .expect("domain");
    assert_eq!(
        rebooted.state,
        DomainState::Running as i32,
        "{}",
        rebooted.reason
    );
    let banner_again = wait_after(
        &console,
        before_reboot,
        &format!("Linux version {release}"),
        boot,
        &process,
    );
    println!(
        "the kernel banner again {:?} after SoftReboot",
        asked.elapsed()
    );
    assert!(
        console.text()[before_reboot..banner_again].contains("reboot"),
        "no reboot before the second banner:
{}",
        &console.text()[before_reboot..banner_again]
    );
    // systemd is up again (the power button of the Shutdown below needs logind).
    wait_after(&console, banner_again, "login: ", boot, &process);
    println!("login prompt again {:?} after SoftReboot", asked.elapsed());
    let after = wait_state(&mut client, DomainState::Running, Duration::from_secs(10)).await;
    let pid = |d: &v1::Domain| d.stats.as_ref().map_or(0, |s| s.vmm_pid);
    let uptime = |d: &v1::Domain| d.stats.as_ref().map_or(0, |s| s.uptime_ms);
    assert_eq!(pid(&after), pid(&before), "a new QEMU");
    assert!(uptime(&after) > uptime(&before), "the domain was restarted");

    // Only Debian's kernel booted, never the launcher's bundled one.
    let text = console.text();
    assert!(
        text.lines()
            .filter(|l| l.contains("Linux version "))
            .all(|l| l.contains(release.as_str())),
        "another kernel booted:\n{text}"
    );

    // A graceful shutdown reaches systemd (the ACPI power button alone: with Ctrl-Alt-Del too,
    // systemd would also start a reboot), which powers the VM off within the grace period.
    let before_shutdown = console.text().len();
    let asked = Instant::now();
    let off = client
        .shutdown(v1::ShutdownRequest {
            vmi: String::new(),
            grace_period_seconds: Some(300),
        })
        .await
        .expect("Shutdown")
        .into_inner()
        .domain
        .expect("domain");
    println!("shutdown after {:?}: {}", asked.elapsed(), off.reason);
    // What systemd said while it stopped (or did not), for a failure.
    let stopping = || console.text()[before_shutdown..].to_string();
    assert_eq!(
        off.state,
        DomainState::Shutoff as i32,
        "{}; the console since Shutdown:\n{}",
        off.reason,
        stopping()
    );
    assert!(
        !off.reason.contains("by force"),
        "{}; the console since Shutdown:\n{}",
        off.reason,
        stopping()
    );
    // It was systemd that ended the VM: its shutdown ran to the kernel's last words.
    wait_after(
        &console,
        before_shutdown,
        "reboot: ",
        Duration::from_secs(30),
        &process,
    );
    let text = console.text();
    let after = &text[before_shutdown..];
    assert!(
        after.contains("systemd-shutdown") || after.contains("Reached target"),
        "no systemd shutdown on the console:\n{after}"
    );
}
