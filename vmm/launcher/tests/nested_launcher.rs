//! The nested-KVM tier for virt-launcher: its KVM backend driven over gRPC as virt-handler
//! drives it, with a real Linux guest, inside an L1 VM whose `/dev/kvm` is hardware
//! virtualization (nested SVM; `hack/kvm-host.sh`, `guest_images::l1`).
//!
//! The launcher probes the L1's `/dev/kvm` itself and must pick the KVM backend without being
//! told. The VMI has a containerDisk (the tiny guest's root disk), a cloudInitNoCloud volume
//! (the launcher writes the seed with genisoimage, which is copied into the L1 with its
//! libraries) and an emptyDisk; the console shows the guest switching to its root disk, running
//! the user-data and seeing the emptyDisk. Pod networking (masquerade) needs iptables and the
//! netfilter modules in the L1 and is not covered here.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{client, sync_native, wait_state, ConsoleReader, LauncherProcess, TestDirs, LAUNCHER};
use contract::proto::v1;
use guest_images::l1::nested_test;
use v1::DomainState;

fn image(name: &str) -> PathBuf {
    let path = PathBuf::from(guest_images::artifacts::DEFAULT_CACHE_DIR)
        .join("current")
        .join(name);
    assert!(
        path.exists(),
        "guest image {} is missing: build the guest images with `guest-images/build.sh`",
        path.display()
    );
    path
}

/// A host program the launcher runs, to copy into the L1.
fn program(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{name} is not in PATH (hack/install-deps.sh installs it)"))
}

#[test]
fn kvm_backend_runs_a_vmi_with_container_disk_cloud_init_and_empty_disk() {
    let name = "kvm_backend_runs_a_vmi_with_container_disk_cloud_init_and_empty_disk";
    let files = [
        PathBuf::from(LAUNCHER),
        program("genisoimage"),
        program("qemu-img"),
        image("vmlinux"),
        image("initramfs.cpio.gz"),
        image("rootdisk.img"),
    ];
    nested_test(name, &files, Duration::from_secs(600), || {
        tokio::runtime::Runtime::new()
            .expect("a tokio runtime")
            .block_on(kvm_backend_body());
    });
}

/// A launcher with the project's kernel and initramfs as its bundled ones and `root` as
/// containerDisk volume `rootdisk`; its directories, process, client and console.
async fn launcher_with_root_disk(
    name: &str,
    root: &std::path::Path,
) -> (
    TestDirs,
    LauncherProcess,
    v1::launcher_client::LauncherClient<tonic::transport::Channel>,
    ConsoleReader,
) {
    let dirs = TestDirs::new(name);
    dirs.container_disk("rootdisk", root);
    let process = LauncherProcess::start(
        &dirs,
        &image("vmlinux"),
        Some(&image("initramfs.cpio.gz")),
        &[],
    );
    let client = client(&dirs).await;
    let console = ConsoleReader::connect(&dirs);
    (dirs, process, client, console)
}

async fn kvm_backend_body() {
    // `_dirs` lives to the end: dropping it removes the launcher's directories.
    let (_dirs, mut process, mut client, console) =
        launcher_with_root_disk("nested", &image("rootdisk.img")).await;
    let vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "vmi-nested", "namespace": "default" },
        "spec": {
            "domain": {
                "devices": {
                    "autoattachPodInterface": false,
                    "disks": [
                        { "name": "rootdisk", "disk": { "bus": "virtio" } },
                        { "name": "cloudinit", "disk": { "bus": "virtio" } },
                        { "name": "scratch", "disk": { "bus": "virtio" } }
                    ]
                },
                "memory": { "guest": "256Mi" }
            },
            "terminationGracePeriodSeconds": 60,
            "volumes": [
                { "name": "rootdisk", "containerDisk": { "image": "kubevirt/cirros-container-disk-demo" } },
                { "name": "cloudinit", "cloudInitNoCloud": {
                    "userData": "#!/bin/sh\necho NESTED-USER-DATA ran on $(hostname)\necho NESTED-DISKS $(ls /sys/block | tr '\\n' ' ')\n"
                } },
                { "name": "scratch", "emptyDisk": { "capacity": "16Mi" } }
            ]
        }
    });
    let started = Instant::now();
    let domain = sync_native(&mut client, &vmi, &process).await;
    assert_eq!(
        domain.backend,
        v1::Backend::Kvm as i32,
        "the launcher did not pick KVM on hardware virtualization: {}",
        domain.backend_reason
    );
    println!("nested: backend reason: {}", domain.backend_reason);
    wait_state(&mut client, DomainState::Running, Duration::from_secs(30)).await;
    for needle in [
        "ferrovirt: switching to root disk /dev/vda",
        "NESTED-USER-DATA ran on vmi-nested",
        guest_images::READY_MARKER,
    ] {
        if let Err(e) = console.wait_for(needle, Duration::from_secs(180)) {
            panic!("{e}\nlauncher log:\n{}", process.log_text());
        }
    }
    println!(
        "nested: VMI on the KVM backend ready {:.2} s after SyncVMI",
        started.elapsed().as_secs_f64()
    );
    let disks = console
        .text()
        .lines()
        .find_map(|l| {
            l.trim_end_matches('\r')
                .strip_prefix("NESTED-DISKS ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    assert!(
        ["vda", "vdb", "vdc"]
            .iter()
            .all(|d| disks.split_whitespace().any(|x| x == *d)),
        "the guest does not see the root disk, the seed and the emptyDisk: {disks:?}"
    );
    client
        .shutdown(v1::ShutdownRequest::default())
        .await
        .expect("Shutdown");
    let domain = wait_state(&mut client, DomainState::Shutoff, Duration::from_secs(90)).await;
    println!(
        "nested: after Shutdown: {:?} ({})",
        domain.state, domain.reason
    );
    assert!(process.alive(), "the launcher exited after Shutdown");
}

/// Where the outer run builds what the L1 needs for test `name`; the same path inside it.
fn work_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from("/var/tmp/ferrovirt-nested").join(name);
    if !guest_images::l1::in_l1() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the work directory");
    }
    dir
}

#[test]
fn a_cloud_image_boots_its_own_stock_kernel_on_the_kvm_vmm() {
    let name = "a_cloud_image_boots_its_own_stock_kernel_on_the_kvm_vmm";
    let dir = work_dir(name);
    if !guest_images::l1::in_l1() {
        // The image is built here: mkfs.ext4 and debugfs are not in the L1.
        common::cloud_image::cloud_image(&dir, true);
    }
    let files = [
        PathBuf::from(LAUNCHER),
        program("qemu-img"),
        image("vmlinux"),
        image("initramfs.cpio.gz"),
        dir.clone(),
    ];
    nested_test(name, &files, Duration::from_secs(600), || {
        tokio::runtime::Runtime::new()
            .expect("a tokio runtime")
            .block_on(cloud_image_body(dir.join("cloud.img")));
    });
}

async fn cloud_image_body(cloud: PathBuf) {
    use common::cloud_image::{ENTRY, MARKER};
    // The bundled kernel is the project's own: it must not be what boots.
    // `_dirs` lives to the end: dropping it removes the launcher's directories.
    let (_dirs, mut process, mut client, console) =
        launcher_with_root_disk("nested-cloud", &cloud).await;
    let vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": "vmi-cloud", "namespace": "default" },
        "spec": {
            "domain": {
                "devices": {
                    "autoattachPodInterface": false,
                    "disks": [{ "name": "rootdisk", "disk": { "bus": "virtio" } }]
                },
                "memory": { "guest": "512Mi" }
            },
            "terminationGracePeriodSeconds": 90,
            "volumes": [{ "name": "rootdisk", "containerDisk": { "image": "registry/cloud:latest" } }]
        }
    });
    let started = Instant::now();
    let domain = sync_native(&mut client, &vmi, &process).await;
    assert_eq!(
        domain.backend,
        v1::Backend::Kvm as i32,
        "{}",
        domain.backend_reason
    );
    assert_eq!(
        domain.boot_origin,
        v1::BootOrigin::UserDisk as i32,
        "{}",
        domain.boot
    );
    assert!(domain.boot.contains(ENTRY), "boot: {}", domain.boot);
    println!("nested: boot: {}", domain.boot);
    // Debian's kernel lacks virtio-mmio command-line devices: finding vda1 at all means it
    // found the disk on the VMM's PCI machine.
    for needle in [
        "Linux version 6.1.0",
        MARKER,
        "ferrovirt: switching to root disk /dev/vda1",
        guest_images::READY_MARKER,
    ] {
        if let Err(e) = console.wait_for(needle, Duration::from_secs(240)) {
            panic!("{e}\nlauncher log:\n{}", process.log_text());
        }
    }
    println!(
        "nested: the cloud image's own kernel on the KVM VMM (PCI machine) ready {:.2} s after \
         SyncVMI",
        started.elapsed().as_secs_f64()
    );
    // A graceful stop: the ACPI power button, which the guest answers with a power-off.
    client
        .shutdown(v1::ShutdownRequest::default())
        .await
        .expect("Shutdown");
    let domain = wait_state(&mut client, DomainState::Shutoff, Duration::from_secs(120)).await;
    println!("nested: after Shutdown: {}", domain.reason);
    assert!(
        console.text().contains("reboot: Power down"),
        "the guest did not power down on Shutdown: {}",
        domain.reason
    );
    assert!(process.alive(), "the launcher exited after Shutdown");
}
