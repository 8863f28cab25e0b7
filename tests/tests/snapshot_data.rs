//! Volume data in snapshots, restores and clones on the local cluster: a running VM's guest
//! writes its claim's disk; a snapshot taken while it runs holds that data (the VM paused while
//! virt-controller's copy Pod copies the claim's `disk.img` into the claim's
//! `.ferrovirt-snapshots/`), with the spec the VMI was started from (the VM's was changed
//! since); the guest then writes something else; a restore into the stopped
//! VM puts the first data back on the same claim; a clone copies the data into a new claim
//! (bound here to a spare PersistentVolume) and boots; deleting the snapshot removes its
//! backup from the claim. A backup that does not fit its claim (a tmpfs) fails with the copy's
//! reason, and loses nothing: the VM runs on unpaused, its disk unchanged, no partial copy left.
//!
//! The claims are on hostPath PersistentVolumes (the local cluster has no provisioner): the
//! nodes share this host's filesystem, so the test reads the disks here.

use std::os::unix::fs::chown;
use std::path::Path;
use std::time::Duration;

use api::clone::VirtualMachineClone;
use api::snapshot::{
    backup_path, VirtualMachineRestore, VirtualMachineSnapshot, VirtualMachineSnapshotContent,
};
use api::{VirtualMachine, VirtualMachineInstance};
use ferrovirt_tests::claims::HostVolumes;
use ferrovirt_tests::{
    client, set_run_strategy, tiny_vmi_spec, wait_for, wait_running, ClusterLock, TestNamespace,
};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(300);
const DISK_BYTES: u64 = 4 << 20;

/// The VM whose guest writes `mark` at the start of its claim's disk (`/dev/vdc`) at boot.
fn writer(name: &str, claim: &str, mark: &str, run_strategy: &str) -> VirtualMachine {
    let mut spec = tiny_vmi_spec(&format!(
        "#!/bin/sh\necho {mark} > /dev/vdc && sync && echo DATA-WRITE-DONE\n"
    ));
    spec["domain"]["devices"]["disks"]
        .as_array_mut()
        .expect("disks")
        .push(json!({"name": "data", "disk": {"bus": "virtio"}}));
    spec["volumes"]
        .as_array_mut()
        .expect("volumes")
        .push(json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}));
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"runStrategy": run_strategy,
                 "template": {"metadata": {"labels": {"kubevirt.io/vm": name}}, "spec": spec}},
    }))
    .expect("a VM")
}

/// Snapshot `snap` of VM `writer`, admitted.
async fn snapshot_writer(snapshots: &Api<VirtualMachineSnapshot>) {
    let snapshot: VirtualMachineSnapshot = serde_json::from_value(json!({
        "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineSnapshot",
        "metadata": {"name": "snap"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "writer"}},
    }))
    .expect("a snapshot");
    snapshots
        .create(&PostParams::default(), &snapshot)
        .await
        .expect("snapshot admitted");
}

/// The cloud-init user data of a VM's spec.
fn user_data(spec: &api::vm::VirtualMachineSpec) -> String {
    let spec = serde_json::to_value(spec).expect("a spec is JSON");
    spec["template"]["spec"]["volumes"][1]["cloudInitNoCloud"]["userData"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Waits until the disk at `path` starts with `mark`.
async fn wait_disk(what: &str, path: &Path, mark: &str) {
    wait_for(what, TIMEOUT, || async {
        let bytes = std::fs::read(path).ok()?;
        bytes.starts_with(mark.as_bytes()).then_some(())
    })
    .await;
}

async fn wait_stopped(vmis: &Api<VirtualMachineInstance>, name: &str) {
    wait_for(&format!("VMI {name} gone"), TIMEOUT, || async {
        vmis.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// The reasons of the events about `name`, oldest first.
async fn event_reasons(events: &Api<Event>, name: &str) -> Vec<String> {
    let mut list = events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .expect("events")
        .items;
    list.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    list.into_iter().filter_map(|e| e.reason).collect()
}

#[tokio::test]
async fn a_written_claim_is_snapshotted_running_restored_in_place_and_cloned_into_a_new_claim() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-snapdata").await;
    let ns = namespace.name.as_str();
    let mut host = HostVolumes::new(ns);
    let (data, spare) = (host.dir.join("data"), host.dir.join("spare"));
    let id = contract::layout::LAUNCHER_USER_ID;
    for dir in [&data, &spare] {
        std::fs::create_dir_all(dir).expect("the volumes' host directories");
        // The copy Pods run as the launcher's user: the claims' roots are theirs to write.
        chown(dir, Some(id), Some(id)).expect("the volumes' owner");
    }
    let disk = data.join("disk.img");
    std::fs::File::create(&disk)
        .and_then(|f| f.set_len(DISK_BYTES))
        .expect("the claim's disk.img");
    let (data_pv, spare_pv) = (format!("{ns}-data"), format!("{ns}-spare"));
    host.bound_claim(&client, ns, &data_pv, &data).await;
    host.volume(&client, &spare_pv, &spare, None).await;

    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let snapshots: Api<VirtualMachineSnapshot> = Api::namespaced(client.clone(), ns);
    let contents: Api<VirtualMachineSnapshotContent> = Api::namespaced(client.clone(), ns);
    let restores: Api<VirtualMachineRestore> = Api::namespaced(client.clone(), ns);
    let clones: Api<VirtualMachineClone> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();

    // The guest writes FIRST; the VM's claim is listed as snapshottable.
    vms.create(&pp, &writer("writer", &data_pv, "FIRST", "Always"))
        .await
        .expect("VM created");
    wait_running(&vmis, "writer", TIMEOUT).await;
    wait_disk("the guest's first write", &disk, "FIRST").await;
    let statuses = vms
        .get("writer")
        .await
        .unwrap()
        .status
        .unwrap()
        .volume_snapshot_statuses;
    let data_status = statuses
        .iter()
        .find(|s| s.name == "data")
        .expect("data listed");
    assert!(
        data_status.enabled && data_status.reason.is_none(),
        "{data_status:?}"
    );

    // The VM's spec changes while it runs (the next boot writes SECOND): a snapshot stores the
    // spec its VMI started from.
    let mut second = writer("writer", &data_pv, "SECOND", "Always");
    let current = vms.get("writer").await.unwrap();
    second.metadata.resource_version = current.metadata.resource_version.clone();
    vms.replace("writer", &pp, &second)
        .await
        .expect("VM updated");

    // A snapshot while it runs: the claim's data is in the content's backup.
    snapshot_writer(&snapshots).await;
    let taken = wait_for("the snapshot ready", TIMEOUT, || async {
        let s = snapshots.get("snap").await.ok()?;
        (s.status.as_ref()?.ready_to_use == Some(true)).then_some(s)
    })
    .await;
    let status = taken.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(status.indications, ["NoGuestAgent", "Online"]);
    let lists = status.snapshot_volumes.unwrap();
    assert_eq!(lists.included_volumes, ["data"]);
    assert_eq!(lists.excluded_volumes, ["containerdisk", "cloudinitdisk"]);
    let content = contents
        .get(&status.virtual_machine_snapshot_content_name.unwrap())
        .await
        .expect("the content");
    let backups = &content.spec.volume_backups;
    assert_eq!(backups.len(), 1);
    assert_eq!(backups[0].volume_name, "data");
    assert_eq!(
        backups[0].persistent_volume_claim.metadata.name.as_deref(),
        Some(data_pv.as_str())
    );
    let snapshot_name = backups[0].volume_snapshot_name.clone().unwrap();
    let content_status = content.status.clone().unwrap();
    assert_eq!(
        content_status.volume_snapshot_status[0]["volumeSnapshotName"],
        snapshot_name.as_str()
    );
    assert_eq!(content_status.volume_snapshot_status[0]["readyToUse"], true);
    let stored = &content.spec.source.virtual_machine.as_ref().unwrap().spec;
    let stored_data = user_data(stored);
    assert!(
        stored_data.contains("echo FIRST"),
        "not the started spec: {stored_data}"
    );
    let backup = data.join(backup_path(&snapshot_name));
    let backed_up = std::fs::read(&backup).expect("the backup in the claim");
    assert!(
        backed_up.starts_with(b"FIRST"),
        "the backup does not hold the write"
    );
    assert_eq!(backed_up.len() as u64, DISK_BYTES);
    // The VM was paused for the copy and runs again; the copy Pod is gone.
    let vmi = vmis.get("writer").await.unwrap();
    let paused = api::condition::find(&vmi.status.unwrap().conditions, "Paused")
        .is_some_and(|c| c.is_true());
    assert!(!paused, "the VM was left paused");
    let reasons = event_reasons(&events, &content.name_any()).await;
    let paused_at = reasons.iter().position(|r| r == "VolumeBackupQuiesced");
    let resumed_at = reasons.iter().position(|r| r == "VolumeBackupReleased");
    assert!(
        paused_at.is_some() && resumed_at > paused_at,
        "the content's events do not show a pause and a resume: {reasons:?}"
    );
    assert!(pods
        .list(&ListParams::default().labels("snapshot.ferrovirt.io/volume-copy"))
        .await
        .unwrap()
        .items
        .is_empty());
    println!(
        "snapshot: {} bytes backed up from the running VM",
        backed_up.len()
    );

    // The guest writes SECOND over it (a new boot, of the changed spec).
    set_run_strategy(&vms, "writer", "Halted").await;
    wait_stopped(&vmis, "writer").await;
    set_run_strategy(&vms, "writer", "Always").await;
    wait_running(&vmis, "writer", TIMEOUT).await;
    wait_disk("the guest's second write", &disk, "SECOND").await;
    set_run_strategy(&vms, "writer", "Halted").await;
    wait_stopped(&vmis, "writer").await;

    // The restore puts FIRST back on the same claim, and the spec that wrote it.
    let restore: VirtualMachineRestore = serde_json::from_value(json!({
        "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineRestore",
        "metadata": {"name": "back"},
        "spec": {"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "writer"},
                 "virtualMachineSnapshotName": "snap"},
    }))
    .unwrap();
    restores
        .create(&pp, &restore)
        .await
        .expect("restore admitted");
    let restored = wait_for("the restore complete", TIMEOUT, || async {
        let r = restores.get("back").await.ok()?;
        (r.status.as_ref()?.complete == Some(true)).then_some(r)
    })
    .await;
    let entries = restored.status.unwrap().restores;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["volumeName"], "data");
    assert_eq!(entries[0]["persistentVolumeClaim"], data_pv.as_str());
    let now = std::fs::read(&disk).unwrap();
    assert!(
        now.starts_with(b"FIRST"),
        "the restore did not put the first write back"
    );
    assert_eq!(now, backed_up, "the restored disk differs from the backup");
    let restored_data = user_data(&vms.get("writer").await.unwrap().spec);
    assert!(restored_data.contains("echo FIRST"), "{restored_data}");

    // A clone of the VM: its claim's data in a new claim, which the spare volume takes.
    let clone: VirtualMachineClone = serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": {"name": "copy"},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "writer"},
                 "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy"}},
    }))
    .unwrap();
    clones.create(&pp, &clone).await.expect("clone admitted");
    wait_for("the clone succeeded", TIMEOUT, || async {
        let c = clones.get("copy").await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Succeeded")).then_some(())
    })
    .await;
    let copy = serde_json::to_value(vms.get("copy").await.expect("the clone's VM")).unwrap();
    let claim = copy["spec"]["template"]["spec"]["volumes"][2]["persistentVolumeClaim"]
        ["claimName"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        claim.starts_with("restore-") && claim.ends_with("-data"),
        "{claim}"
    );
    let cloned =
        std::fs::read(spare.join("disk.img")).expect("the clone's disk on the spare volume");
    assert_eq!(
        cloned, backed_up,
        "the clone's disk differs from the source's"
    );
    set_run_strategy(&vms, "copy", "Always").await;
    wait_running(&vmis, "copy", TIMEOUT).await;
    println!("clone: claim {claim} with the source's data; it runs");
    set_run_strategy(&vms, "copy", "Halted").await;
    wait_stopped(&vmis, "copy").await;

    // Deleting the snapshot removes its backup from the claim.
    snapshots
        .delete("snap", &DeleteParams::default())
        .await
        .expect("snapshot deleted");
    let backup_dir = backup.parent().unwrap().to_path_buf();
    wait_for("the backup removed from the claim", TIMEOUT, || async {
        (!backup_dir.exists()).then_some(())
    })
    .await;
    assert!(disk.exists(), "the claim's disk went with the backup");

    drop(namespace);
    drop(host);
}

/// A tmpfs mounted in one node's mount namespace (each netns node of the local cluster has its
/// own: a mount on this host is not seen by its Pods), unmounted when dropped. This host reaches
/// it through the node's `/proc/<pid>/root`.
struct NodeTmpfs {
    pid: u32,
    dir: std::path::PathBuf,
}

impl NodeTmpfs {
    fn mount(node: &str, dir: &Path, size: &str) -> NodeTmpfs {
        let pid = ferrovirt_tests::node_pid(node);
        let status = std::process::Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-m", "--"])
            .args([
                "sh",
                "-c",
                "mkdir -p \"$1\" && mount -t tmpfs -o size=\"$2\" tmpfs \"$1\"",
            ])
            .arg("mount-tmpfs")
            .arg(dir)
            .arg(size)
            .status()
            .expect("running nsenter (util-linux)");
        assert!(
            status.success(),
            "mounting a tmpfs on {} in node {node}: {status}",
            dir.display()
        );
        NodeTmpfs {
            pid,
            dir: dir.to_path_buf(),
        }
    }

    /// The path of `file` in the tmpfs, as this host reaches it.
    fn path(&self, file: &str) -> std::path::PathBuf {
        let inside = self.dir.join(file);
        Path::new(&format!("/proc/{}/root", self.pid))
            .join(inside.strip_prefix("/").expect("an absolute path"))
    }
}

impl Drop for NodeTmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nsenter")
            .args(["-t", &self.pid.to_string(), "-m", "--", "umount", "-l"])
            .arg(&self.dir)
            .status();
    }
}

#[tokio::test]
async fn a_backup_that_does_not_fit_its_claim_fails_with_the_reason_and_the_vm_runs_on() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-snapfull").await;
    let ns = namespace.name.as_str();
    let mut host = HostVolumes::new(ns);
    let data = host.dir.join("data");
    // A claim of 6 MiB holding a disk of 4 MiB that is all data: its backup cannot fit. The
    // tmpfs is in one node, which the VM is placed on.
    let nodes: Api<Node> = Api::all(client.clone());
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
        .iter()
        .map(|n| n.name_any())
        .filter(|n| n.starts_with("ferrovirt-"))
        .collect();
    names.sort();
    let node = names.first().expect("a node of the local cluster").clone();
    std::fs::create_dir_all(&data).expect("the volume's host directory");
    let tmpfs = NodeTmpfs::mount(&node, &data, "6m");
    let id = contract::layout::LAUNCHER_USER_ID;
    chown(tmpfs.path(""), Some(id), Some(id)).expect("the volume's owner");
    let disk = tmpfs.path("disk.img");
    let noise: Vec<u8> = (0..DISK_BYTES as u32)
        .map(|i| (i % 251) as u8 + 1)
        .collect();
    std::fs::write(&disk, &noise).expect("the claim's disk.img");
    let data_pv = format!("{ns}-data");
    host.bound_claim(&client, ns, &data_pv, &data).await;

    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let snapshots: Api<VirtualMachineSnapshot> = Api::namespaced(client.clone(), ns);
    let contents: Api<VirtualMachineSnapshotContent> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    let mut vm = writer("writer", &data_pv, "FULL", "Always");
    if let Some(spec) = vm.spec.template.spec.as_mut() {
        spec.node_selector = Some([("kubernetes.io/hostname".to_string(), node.clone())].into());
    }
    vms.create(&pp, &vm).await.expect("VM created");
    wait_running(&vmis, "writer", TIMEOUT).await;
    wait_disk("the guest's write", &disk, "FULL").await;
    let before = std::fs::read(&disk).unwrap();

    snapshot_writer(&snapshots).await;
    let failed = wait_for("the snapshot's error", TIMEOUT, || async {
        let s = snapshots.get("snap").await.ok()?;
        s.status
            .as_ref()?
            .error
            .as_ref()?
            .message
            .clone()
            .map(|m| (s, m))
    })
    .await;
    let (taken, message) = failed;
    assert!(message.contains("No space left on device"), "{message}");
    let status = taken.status.unwrap();
    assert_ne!(status.phase.as_deref(), Some("Succeeded"));
    assert_ne!(status.ready_to_use, Some(true));
    // Nothing lost: the VM runs on, unpaused, its disk as it was; no partial copy in the claim.
    wait_for("the VM unpaused", TIMEOUT, || async {
        let vmi = vmis.get("writer").await.ok()?;
        let conditions = vmi.status?.conditions;
        let paused = api::condition::find(&conditions, "Paused").is_some_and(|c| c.is_true());
        (!paused).then_some(())
    })
    .await;
    assert_eq!(std::fs::read(&disk).unwrap(), before, "the disk changed");
    let backups = tmpfs.path(".ferrovirt-snapshots");
    let left: Vec<String> = walk(&backups);
    assert!(left.is_empty(), "a partial backup was left: {left:?}");
    println!("a backup that does not fit: {message}");

    // Deleting the failed snapshot deletes its content and what it made in the claim.
    let content = status
        .virtual_machine_snapshot_content_name
        .unwrap_or_default();
    snapshots
        .delete("snap", &DeleteParams::default())
        .await
        .expect("snapshot deleted");
    wait_for("the content gone", TIMEOUT, || async {
        contents
            .get_opt(&content)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(std::fs::read(&disk).unwrap(), before, "the disk changed");
    set_run_strategy(&vms, "writer", "Halted").await;
    wait_stopped(&vmis, "writer").await;
    drop(namespace);
    drop(tmpfs);
    drop(host);
}

/// The files under `dir`, recursively (none when it does not exist).
fn walk(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| {
            let path = e.path();
            if path.is_dir() {
                walk(&path)
            } else {
                vec![path.display().to_string()]
            }
        })
        .collect()
}
