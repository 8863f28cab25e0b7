//! A full host disk, on QEMU TCG with a real guest: the launcher's disk directory is a small
//! tmpfs (the Pod's ephemeral storage running out).
//!
//! - Too small for the containerDisk's private copy: `SyncVMI` fails and says so ("No space
//!   left on device", the volume), and succeeds once there is room.
//! - Room for the copy but not for what the guest writes to its emptyDisk: QEMU stops the guest
//!   at the failed write (`werror=enospc`), the domain is Paused with `io_error` set and a
//!   reason that names the VMI's disk. With room again, Unpause retries the write: the guest's 24 MiB
//!   read back from the disk match what it wrote, so no write was lost.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use contract::proto::v1;
use v1::DomainState;

const MIB: u64 = 1 << 20;

/// The guest writes 24 MiB of a known pattern to its emptyDisk (`/dev/vdc`), then reads the
/// disk back past its page cache, and prints both digests.
const USER_DATA: &str = "#!/bin/sh\n\
want=$(yes ferrovirt-full-disk | head -c 25165824 | md5sum | cut -d' ' -f1)\n\
echo \"fulldisk-want $want\" >/dev/console\n\
yes ferrovirt-full-disk | head -c 25165824 | dd of=/dev/vdc bs=1048576 conv=fsync 2>/dev/console\n\
sync; echo 3 >/proc/sys/vm/drop_caches\n\
got=$(dd if=/dev/vdc bs=1048576 count=24 2>/dev/null | md5sum | cut -d' ' -f1)\n\
echo \"fulldisk-got $got\" >/dev/console\n";

/// A tmpfs of a given size on a directory, unmounted when dropped.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    fn mount(dir: &Path, bytes: u64) -> SmallDisk {
        mount(&[
            "-t",
            "tmpfs",
            "-o",
            &format!("size={bytes}"),
            "tmpfs",
            &dir.display().to_string(),
        ]);
        SmallDisk {
            dir: dir.to_path_buf(),
        }
    }

    /// Makes room: the same tmpfs, larger (its files stay).
    fn grow(&self, bytes: u64) {
        mount(&[
            "-o",
            &format!("remount,size={bytes}"),
            &self.dir.display().to_string(),
        ]);
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn mount(args: &[&str]) {
    let out = Command::new("mount")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
    assert!(
        out.status.success(),
        "mount {args:?} failed (this test needs root to mount a tmpfs): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn vmi() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi-full-disk", "namespace": "default", "uid": "full-disk-uid"},
        "spec": {
            "domain": {
                "devices": {
                    "autoattachPodInterface": false,
                    "disks": [
                        {"name": "containerdisk", "disk": {"bus": "virtio"}},
                        {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                        {"name": "emptydisk", "disk": {"bus": "virtio"}}
                    ]
                },
                "memory": {"guest": "128Mi"}
            },
            "terminationGracePeriodSeconds": 0,
            "volumes": [
                {"name": "containerdisk", "containerDisk": {"image": "registry:5000/guest:devel"}},
                {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": USER_DATA}},
                {"name": "emptydisk", "emptyDisk": {"capacity": "64Mi"}}
            ]
        }
    })
}

async fn sync(
    client: &mut v1::launcher_client::LauncherClient<tonic::transport::Channel>,
) -> Result<v1::Domain, tonic::Status> {
    let vmi = serde_json::to_vec(&vmi()).expect("json");
    sync_emulated(client, vmi, "")
        .await
        .map(|r| r.domain.expect("domain"))
}

/// The guest's line `<label> <digest>` on the console.
fn digest(console: &ConsoleReader, label: &str) -> String {
    let text = console.text();
    let line = text
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no {label} line on the console"));
    line.split(label)
        .nth(1)
        .map(|rest| rest.trim().chars().take(32).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_copy_then_pauses_the_guest_and_loses_no_write() {
    require_qemu();
    let artifacts = artifacts();
    let dirs = TestDirs::new("fulldisk");
    let rootdisk = artifacts.rootdisk();
    dirs.container_disk("containerdisk", &rootdisk);
    // What the private copy of the containerDisk takes (it is copied sparsely).
    let copy_bytes = std::fs::metadata(&rootdisk).expect("rootdisk").blocks() * 512;
    let disk = SmallDisk::mount(&dirs.root.join("disks"), MIB);

    let mut process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;

    // 1. No room for the containerDisk's copy: a clear error, and nothing started.
    let refused = sync(&mut client).await.expect_err("SyncVMI on a full disk");
    let message = refused.message();
    assert!(
        message.contains("No space left on device") && message.contains("containerdisk"),
        "{message}"
    );
    println!("SyncVMI on a 1 MiB disk: {message}");
    let none = client
        .get_domain(v1::GetDomainRequest {})
        .await
        .expect("GetDomain")
        .into_inner();
    assert!(none.domain.is_none(), "a VM started: {none:?}");

    // 2. Room for the copy and 8 MiB more: the guest boots, then fills the disk.
    disk.grow(copy_bytes + 8 * MIB);
    let console = ConsoleReader::connect(&dirs);
    sync(&mut client)
        .await
        .unwrap_or_else(|e| panic!("SyncVMI: {e}\nlauncher log:\n{}", process.log_text()));
    console
        .wait_for("fulldisk-want", Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}\nlauncher log:\n{}", process.log_text()));
    let deadline = Instant::now() + Duration::from_secs(120);
    let paused = loop {
        let domain = client
            .get_domain(v1::GetDomainRequest {})
            .await
            .expect("GetDomain")
            .into_inner()
            .domain
            .expect("domain");
        if domain.io_error {
            break domain;
        }
        assert!(
            Instant::now() < deadline && !console.text().contains("fulldisk-got"),
            "the guest was not paused on the full disk: {domain:?}\nconsole:\n{}",
            console.text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(paused.state, DomainState::Paused as i32, "{paused:?}");
    assert!(
        paused
            .reason
            .contains("write on disk emptydisk: No space left on device"),
        "{}",
        paused.reason
    );
    println!("paused: {}", paused.reason);

    // 3. Room again: Unpause retries the write, and every byte arrives.
    disk.grow(copy_bytes + 256 * MIB);
    let resumed = client
        .unpause(v1::VmiRequest { vmi: String::new() })
        .await
        .expect("Unpause")
        .into_inner()
        .domain
        .expect("domain");
    assert!(!resumed.io_error, "{resumed:?}");
    console
        .wait_for("fulldisk-got", Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{e}\nconsole:\n{}", console.text()));
    let (want, got) = (
        digest(&console, "fulldisk-want"),
        digest(&console, "fulldisk-got"),
    );
    assert_eq!(want.len(), 32, "{}", console.text());
    assert_eq!(got, want, "the guest read back other data than it wrote");
    let running = wait_state(&mut client, DomainState::Running, Duration::from_secs(5)).await;
    assert!(!running.io_error);
    assert!(process.alive());
    drop(process);
}
