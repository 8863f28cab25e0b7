//! The launcher boots what the user's image holds (ARCHITECTURE.md, "How a VM boots", step 2),
//! on QEMU TCG, driven over gRPC as virt-handler drives it.
//!
//! The containerDisk is a cloud image the test builds: a GPT disk whose partition 1 is an ext4
//! root (`mkfs.ext4 -d`) holding the tiny guest's userland, Debian's stock cloud kernel and an
//! initramfs in `/boot`, and a Debian-style `/boot/grub/grub.cfg` whose default entry boots them
//! with `root=UUID=<the partition>` and a marker on its command line. The launcher is started
//! with the project's own kernel as its bundled kernel, which must not boot:
//! - with the kernel in `/boot`: the console shows the stock kernel's banner and its command
//!   line with the marker, the image's own init starts from partition 1 (the ready marker), the
//!   domain says which kernel, from which partition, per which configuration, and a graceful
//!   shutdown reaches that init;
//! - the same disk without `/boot`: SyncVMI fails (INVALID_ARGUMENT) with the reason, and no VM
//!   is started.

mod common;

use std::time::Duration;

use common::cloud_image::{cloud_image, stock_release, ENTRY, MARKER, ROOT_UUID};
use common::*;
use contract::proto::v1;
use v1::DomainState;

fn cloud_vmi() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "vmi-cloud", "namespace": "default", "uid": "1e5a9c0d-user-os" },
        "spec": {
            "domain": {
                "devices": {
                    "autoattachPodInterface": false,
                    "disks": [{ "name": "rootdisk", "disk": { "bus": "virtio" } }]
                },
                "memory": { "guest": "256Mi" }
            },
            "volumes": [{ "name": "rootdisk", "containerDisk": { "image": "registry/cloud:latest" } }]
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_cloud_image_boots_its_own_kernel() {
    require_qemu();
    let artifacts = artifacts();
    let release = stock_release(&artifacts);
    let dirs = TestDirs::new("useros");
    let image = cloud_image(&dirs.root, true);
    dirs.container_disk("rootdisk", &image);

    let process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;
    let console = ConsoleReader::connect(&dirs);
    let domain = sync_emulated_domain(&mut client, &cloud_vmi(), &process).await;
    println!("boot: {}", domain.boot);
    assert_eq!(domain.boot_origin, v1::BootOrigin::UserDisk as i32);
    assert_eq!(
        domain.boot,
        format!(
            "disk rootdisk: kernel /boot/vmlinuz-{release} from partition 1 (ext4, UUID \
             {ROOT_UUID}, label \"user-root\") per /boot/grub/grub.cfg on partition 1 entry \
             '{ENTRY}'"
        )
    );
    assert!(
        process.log_text().contains("microvm,acpi=on"),
        "QEMU was not given ACPI tables for the stock kernel:\n{}",
        process.log_text()
    );
    wait_state(&mut client, DomainState::Running, Duration::from_secs(30)).await;

    let boot = Duration::from_secs(240);
    let wait = |needle: &str| {
        console
            .wait_for(needle, boot)
            .unwrap_or_else(|e| panic!("{e}\nlauncher log:\n{}", process.log_text()))
    };
    // The stock kernel's banner, then its command line: the image's own options, whole.
    let took = wait(&format!("Linux version {release}"));
    println!("stock kernel banner {took:?} after the console wait began");
    wait(MARKER);
    let text = console.text();
    let command_line = text
        .lines()
        .find(|l| l.contains("Command line:"))
        .unwrap_or_else(|| panic!("no \"Command line:\" on the console:\n{text}"));
    println!("{}", command_line.trim());
    for option in [
        &format!("root=UUID={ROOT_UUID}"),
        "ro",
        "console=tty0",
        "console=ttyS0,115200",
        MARKER,
    ] {
        assert!(
            command_line.split_whitespace().any(|o| o == option),
            "{option} missing from {command_line:?}"
        );
    }
    // The image's own init, from its root partition.
    wait("switching to root disk /dev/vda1");
    let took = wait(guest_images::READY_MARKER);
    println!("the image's init reached the ready marker {took:?} after the console wait began");
    // Only the stock kernel booted, never the bundled one.
    let text = console.text();
    if std::env::var_os("FERROVIRT_SHOW_CONSOLE").is_some() {
        println!("console:\n{text}");
    }
    assert!(
        text.lines()
            .filter(|l| l.contains("Linux version "))
            .all(|l| l.contains(&release)),
        "another kernel booted:\n{text}"
    );

    // With ACPI tables the graceful shutdown is the ACPI power button, which acpid in the
    // image's userland answers with a power-off.
    let off = client
        .shutdown(v1::ShutdownRequest {
            vmi: String::new(),
            grace_period_seconds: Some(120),
        })
        .await
        .expect("Shutdown")
        .into_inner()
        .domain
        .expect("domain");
    println!("shutdown: {}", off.reason);
    assert_eq!(off.state, DomainState::Shutoff as i32, "{}", off.reason);
    assert!(!off.reason.contains("by force"), "{}", off.reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_disk_without_a_kernel_fails_with_the_reason() {
    let artifacts = artifacts();
    let dirs = TestDirs::new("nokernel");
    let image = cloud_image(&dirs.root, false);
    dirs.container_disk("rootdisk", &image);

    let process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;
    let status = sync_emulated(
        &mut client,
        serde_json::to_vec(&cloud_vmi()).expect("json"),
        "",
    )
    .await
    .expect_err("a partitioned disk without a kernel must not boot");
    println!("SyncVMI: {status}");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");
    let want = format!(
        "spec.domain.devices.disks[0]: disk rootdisk is a partitioned disk (GPT: partition 1 \
         (ext4, UUID {ROOT_UUID}, label \"user-root\")) without a kernel"
    );
    assert!(status.message().contains(&want), "{}", status.message());
    // No VM: neither the bundled kernel nor anything else was started.
    let domain = client
        .get_domain(v1::GetDomainRequest {})
        .await
        .expect("GetDomain")
        .into_inner()
        .domain;
    assert!(domain.is_none(), "{domain:?}");
    assert!(
        !process.log_text().contains("-M microvm"),
        "QEMU was started:\n{}",
        process.log_text()
    );
}
