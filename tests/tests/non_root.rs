//! A launcher that is not root (KubeVirt's user 107) with a PVC disk prepared by root, on the
//! local cluster: virt-handler hands the volume's `disk.img` to the launcher's user before the
//! VM starts, so the guest writes to it; a `disk.img` that is a symlink is refused, and the
//! VMI fails with the reason instead of virt-handler changing the owner of what it points to.
//!
//! The PVCs are bound to hostPath PersistentVolumes (the local cluster has no provisioner):
//! the nodes share the host's filesystem, so the test prepares and reads them here.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use api::{VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::claims::HostVolumes;
use ferrovirt_tests::{client, tiny_vmi_spec, wait_for, wait_running, TestNamespace};
use kube::api::PostParams;
use kube::Api;

/// What the guest writes at the start of the PVC disk.
const MARK: &str = "FERROVIRT-NON-ROOT-PVC-WRITE";
const DISK_BYTES: u64 = 4 << 20;

/// The tiny guest with volume `data` (claim `claim`) as its third disk (`/dev/vdc`), writing
/// [`MARK`] at its start.
fn vmi_with_claim(name: &str, claim: &str) -> VirtualMachineInstance {
    let mut spec = tiny_vmi_spec(&format!(
        "#!/bin/sh\necho {MARK} > /dev/vdc && sync && echo PVC-WRITE-DONE\n"
    ));
    spec["domain"]["devices"]["disks"]
        .as_array_mut()
        .expect("disks")
        .push(serde_json::json!({"name": "data", "disk": {"bus": "virtio"}}));
    spec["volumes"]
        .as_array_mut()
        .expect("volumes")
        .push(serde_json::json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}));
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a VMI")
}

fn owner(path: &Path) -> (u32, u32) {
    let meta =
        std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (meta.uid(), meta.gid())
}

#[tokio::test]
async fn a_non_root_launcher_writes_a_pvc_disk_prepared_by_root_and_refuses_a_symlinked_one() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-nonroot").await;
    let ns = namespace.name.as_str();
    let mut host = HostVolumes::new(ns);
    let (plain, linked) = (host.dir.join("plain"), host.dir.join("linked"));
    for dir in [&plain, &linked] {
        std::fs::create_dir_all(dir).expect("the volumes' host directories");
    }
    // A disk image as root makes it: root's, 0644, which user 107 cannot write.
    let disk = plain.join("disk.img");
    std::fs::File::create(&disk)
        .and_then(|f| f.set_len(DISK_BYTES))
        .expect("the PVC's disk.img");
    assert_eq!(owner(&disk), (0, 0));
    // And one that is a symlink to a file of root's outside the volume.
    let outside = host.dir.join("outside");
    std::fs::write(&outside, b"not a disk").expect("a file outside the volume");
    std::os::unix::fs::symlink(&outside, linked.join("disk.img")).expect("the symlink");

    let (plain_pv, linked_pv) = (format!("{ns}-plain"), format!("{ns}-linked"));
    host.bound_claim(&client, ns, &plain_pv, &plain).await;
    host.bound_claim(&client, ns, &linked_pv, &linked).await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    for (name, claim) in [("vmi-plain", &plain_pv), ("vmi-linked", &linked_pv)] {
        vmis.create(&PostParams::default(), &vmi_with_claim(name, claim))
            .await
            .unwrap_or_else(|e| panic!("creating VMI {name}: {e}"));
    }

    // The plain disk: handed to the launcher's user, written by the guest.
    wait_running(&vmis, "vmi-plain", Duration::from_secs(300)).await;
    let id = contract::layout::LAUNCHER_USER_ID;
    assert_eq!(
        owner(&disk),
        (id, id),
        "disk.img was not handed to user {id}"
    );
    let written = wait_for(
        "the guest's write at the start of the PVC disk",
        Duration::from_secs(300),
        || async {
            let bytes = std::fs::read(&disk).ok()?;
            bytes.starts_with(MARK.as_bytes()).then_some(bytes.len())
        },
    )
    .await;
    assert_eq!(written as u64, DISK_BYTES, "the disk changed size");

    // The symlink: the VMI fails and says why; the file it names keeps its owner.
    let failed = wait_for(
        "vmi-linked to fail with the reason",
        Duration::from_secs(300),
        || async {
            let vmi = vmis.get_opt("vmi-linked").await.ok()??;
            let status = vmi.status?;
            (status.phase == Some(VmiPhase::Failed)).then_some(status.reason.unwrap_or_default())
        },
    )
    .await;
    assert!(
        failed.contains("vmi-disks/data/disk.img") && failed.contains("a symlink"),
        "{failed}"
    );
    assert_eq!(
        owner(&outside),
        (0, 0),
        "the symlink's target changed owner"
    );
    println!("non-root: PVC disk handed to {id} and written; symlinked disk refused: {failed}");

    drop(namespace);
    drop(host);
}
