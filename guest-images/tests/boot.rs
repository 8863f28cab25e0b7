//! Boots the built guest artifacts under QEMU TCG (`-M microvm -accel tcg`) and checks what the
//! tiny guest promises: the ready marker, cloud-init (hostname, password, user-data script,
//! runcmd, static network-config), the login prompt, and `poweroff -f` ending QEMU.
//!
//! The artifacts come from `guest-images/build.sh`; when they are missing every test fails with
//! a message naming that command. The timeouts are deadlines against hangs, not speed checks.

use std::time::Duration;

use guest_images::scratch::ScratchDir;
use guest_images::{Artifacts, GuestSpec, NoCloudSeed, RunningGuest, SeedFormat, READY_MARKER};

/// Deadline for one console wait; TCG on two shared cores can be slow.
const WAIT: Duration = Duration::from_secs(180);

fn artifacts() -> Artifacts {
    Artifacts::locate().unwrap_or_else(|e| panic!("{e}"))
}

fn seed(scratch: &ScratchDir, seed: NoCloudSeed, format: SeedFormat) -> std::path::PathBuf {
    seed.write(scratch.path(), format)
        .unwrap_or_else(|e| panic!("writing the NoCloud seed: {e}"))
}

fn spawn(spec: &GuestSpec) -> RunningGuest {
    spec.spawn().unwrap_or_else(|e| panic!("{e}"))
}

fn wait(guest: &mut RunningGuest, text: &str) {
    guest.wait_for(text, WAIT).unwrap_or_else(|e| panic!("{e}"));
}

/// At a login prompt: logs in as root and powers off; QEMU must then exit by itself.
fn login_and_power_off(guest: &mut RunningGuest) {
    guest
        .login("root", "gocubsgo", WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    guest
        .send_line("poweroff -f")
        .unwrap_or_else(|e| panic!("{e}"));
    let status = guest.wait_exit(WAIT).unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "QEMU exited with {status}");
}

fn script_seed(hostname: &str, token: &str) -> NoCloudSeed {
    NoCloudSeed {
        user_data: format!(
            "#!/bin/sh\necho \"USER-DATA-OUTPUT {token} on $(hostname) as $(id -un)\"\n"
        ),
        meta_data: format!("instance-id: iid-{token}\nlocal-hostname: {hostname}\n"),
        network_config: Some("version: 2\nethernets:\n  eth0:\n    dhcp4: true\n".to_string()),
    }
}

#[test]
fn our_kernel_and_initramfs_apply_user_data_and_power_off() {
    let artifacts = artifacts();
    let scratch = ScratchDir::new("boot-initramfs").expect("scratch dir");
    let seed = seed(
        &scratch,
        script_seed("ferro-initramfs", "t1-5b1d"),
        SeedFormat::Iso9660,
    );
    let spec = GuestSpec::new(artifacts.vmlinux())
        .initrd(artifacts.initramfs())
        .readonly_disk(seed)
        .user_net();
    let mut guest = spawn(&spec);

    wait(&mut guest, "datasource NoCloud on /dev/vda");
    wait(&mut guest, "eth0 dhcp 10.0.2.15/24 via 10.0.2.2");
    wait(
        &mut guest,
        "USER-DATA-OUTPUT t1-5b1d on ferro-initramfs as root",
    );
    wait(&mut guest, READY_MARKER);
    wait(&mut guest, "ferro-initramfs login: ");
    login_and_power_off(&mut guest);
}

#[test]
fn our_kernel_boots_the_root_disk_with_cloud_config_and_static_network() {
    let artifacts = artifacts();
    let scratch = ScratchDir::new("boot-rootdisk").expect("scratch dir");
    let seed = seed(
        &scratch,
        NoCloudSeed {
            user_data: "#cloud-config\nhostname: ferro-rootdisk\npassword: s3cret-pw\n\
                        chpasswd: { expire: False }\nruncmd:\n  - echo RUNCMD-OUTPUT $(hostname)\n"
                .to_string(),
            meta_data: "{\"instance-id\": \"iid-t2\"}\n".to_string(),
            network_config: Some(
                "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    subnets:\n      \
                 - type: static\n        address: 10.0.2.50/24\n        gateway: 10.0.2.2\n"
                    .to_string(),
            ),
        },
        SeedFormat::Vfat,
    );
    // No initramfs: the kernel mounts the first disk itself and runs its /sbin/init.
    let spec = GuestSpec::new(artifacts.vmlinux())
        .kernel_arg("root=/dev/vda")
        .kernel_arg("rw")
        .disk(artifacts.rootdisk())
        .readonly_disk(seed)
        .user_net();
    let mut guest = spawn(&spec);

    wait(&mut guest, "datasource NoCloud on /dev/vdb");
    wait(&mut guest, "hostname ferro-rootdisk");
    wait(&mut guest, "eth0 static 10.0.2.50/24 via 10.0.2.2");
    wait(&mut guest, "password set for cirros");
    wait(&mut guest, "RUNCMD-OUTPUT ferro-rootdisk");
    wait(&mut guest, READY_MARKER);
    wait(&mut guest, "ferro-rootdisk login: ");
    guest
        .login("cirros", "s3cret-pw", WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    guest
        .send_line(
            "echo \"IDENTITY $(id -un) $(hostname) $(ip -4 -o addr show eth0 | awk '{print $4}')\"",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    wait(&mut guest, "IDENTITY cirros ferro-rootdisk 10.0.2.50/24");
    guest.send_line("exit").unwrap_or_else(|e| panic!("{e}"));
    wait(&mut guest, "ferro-rootdisk login: ");
    login_and_power_off(&mut guest);
}

/// The KVM VMM's way: no ACPI, virtio-mmio devices on the command line, no initramfs.
#[test]
fn our_kernel_boots_without_acpi_with_a_login_on_hvc0() {
    let artifacts = artifacts();
    let scratch = ScratchDir::new("boot-no-acpi").expect("scratch dir");
    let hvc0_log = scratch.path().join("hvc0.log");
    let spec = GuestSpec::new(artifacts.vmlinux())
        .kernel_arg("root=/dev/vda")
        .kernel_arg("rw")
        .disk(artifacts.rootdisk())
        .virtio_console_log(&hvc0_log)
        .without_acpi();
    let mut guest = spawn(&spec);
    wait(&mut guest, "virtio_mmio.device=");
    wait(&mut guest, READY_MARKER);
    wait(&mut guest, "ferrovirt login: ");

    // The second login prompt, on the virtio console.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let hvc0 = std::fs::read_to_string(&hvc0_log).unwrap_or_default();
        if hvc0.contains("ferrovirt login: ") {
            assert!(hvc0.contains("on /dev/hvc0"), "{hvc0}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no login prompt on hvc0 within {WAIT:?}; hvc0 printed:\n{hvc0}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Without ACPI, poweroff halts; reboot resets, which ends QEMU under -no-reboot.
    guest
        .login("root", "gocubsgo", WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    guest
        .send_line("reboot -f")
        .unwrap_or_else(|e| panic!("{e}"));
    guest.wait_exit(WAIT).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn our_initramfs_switches_to_the_labelled_root_disk() {
    let artifacts = artifacts();
    let spec = GuestSpec::new(artifacts.vmlinux())
        .initrd(artifacts.initramfs())
        .disk(artifacts.rootdisk());
    let mut guest = spawn(&spec);
    wait(&mut guest, "switching to root disk /dev/vda");
    wait(&mut guest, READY_MARKER);
    wait(&mut guest, "ferrovirt login: ");
}

#[test]
fn our_bzimage_reaches_the_ready_marker() {
    let artifacts = artifacts();
    let spec = GuestSpec::new(artifacts.bzimage()).initrd(artifacts.initramfs());
    let mut guest = spawn(&spec);
    wait(&mut guest, READY_MARKER);
    wait(&mut guest, "ferrovirt login: ");
}

#[test]
fn stock_debian_kernel_boots_the_root_disk_with_user_data() {
    let artifacts = artifacts();
    let scratch = ScratchDir::new("boot-stock").expect("scratch dir");
    let seed = seed(
        &scratch,
        script_seed("ferro-stock", "t5-93c2"),
        SeedFormat::Iso9660,
    );
    let spec = GuestSpec::new(artifacts.stock_kernel())
        .initrd(artifacts.stock_initramfs())
        .disk(artifacts.rootdisk())
        .readonly_disk(seed)
        .user_net();
    let mut guest = spawn(&spec);

    wait(&mut guest, "switching to root disk /dev/vda");
    wait(
        &mut guest,
        "USER-DATA-OUTPUT t5-93c2 on ferro-stock as root",
    );
    wait(&mut guest, READY_MARKER);
    wait(&mut guest, "ferro-stock login: ");
    login_and_power_off(&mut guest);
}
