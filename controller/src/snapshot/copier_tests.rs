use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use super::*;

fn job(node: Option<&str>) -> Job {
    Job {
        name: "vmsnapshot-uid-backup".into(),
        namespace: "ns".into(),
        purpose: "backup",
        node: node.map(str::to_string),
        ops: vec![
            Op::Copy {
                from: ClaimPath::new("data", "disk.img"),
                to: ClaimPath::new("data", ".ferrovirt-snapshots/s/disk.img"),
            },
            Op::Overwrite {
                from: ClaimPath::new("data", "x"),
                to: ClaimPath::new("other", "disk.img"),
            },
        ],
        owner: OwnerReference {
            api_version: "snapshot.kubevirt.io/v1beta1".into(),
            kind: "VirtualMachineSnapshotContent".into(),
            name: "content".into(),
            uid: "content-uid".into(),
            ..OwnerReference::default()
        },
    }
}

#[test]
fn the_pod_mounts_each_claim_once_runs_as_the_launcher_and_is_owned() {
    let cfg = ClusterConfig::default();
    let pod = serde_json::to_value(pod(&job(Some("node1")), &cfg)).unwrap();
    assert_eq!(pod["metadata"]["labels"][LABEL], "backup");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "content-uid");
    let spec = &pod["spec"];
    assert_eq!(spec["nodeName"], "node1");
    assert_eq!(spec["tolerations"][0]["operator"], "Exists");
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(
        spec["volumes"],
        json!([{"name": "claim0", "persistentVolumeClaim": {"claimName": "data"}},
               {"name": "claim1", "persistentVolumeClaim": {"claimName": "other"}}])
    );
    let container = &spec["containers"][0];
    assert_eq!(container["image"], cfg.launcher_image);
    assert_eq!(
        container["volumeMounts"],
        json!([{"name": "claim0", "mountPath": "/claims/data"},
               {"name": "claim1", "mountPath": "/claims/other"}])
    );
    let command: Vec<String> = serde_json::from_value(container["command"].clone()).unwrap();
    assert_eq!(command[..2], ["/bin/sh", "-c"]);
    assert_eq!(
        command[4..],
        [
            "copy",
            "/claims/data/disk.img",
            "/claims/data/.ferrovirt-snapshots/s/disk.img",
            "overwrite",
            "/claims/data/x",
            "/claims/other/disk.img"
        ]
    );
    assert_eq!(
        container["terminationMessagePolicy"],
        "FallbackToLogsOnError"
    );
    // Not root by default, as the launcher; as root under the `Root` gate.
    assert_eq!(spec["securityContext"]["runAsUser"], 107);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    let root = ClusterConfig {
        root_launcher: true,
        ..ClusterConfig::default()
    };
    let pod = serde_json::to_value(super::pod(&job(None), &root)).unwrap();
    assert!(pod["spec"]["securityContext"].is_null());
    assert!(pod["spec"]["nodeName"].is_null());
    assert!(pod["spec"]["tolerations"].is_null());
}

fn with_status(status: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
}

#[test]
fn progress_reads_the_phase_and_what_the_container_said() {
    assert_eq!(progress(&with_status(json!(null))), Progress::Running);
    assert_eq!(
        progress(&with_status(json!({"phase": "Pending"}))),
        Progress::Running
    );
    assert_eq!(
        progress(&with_status(json!({"phase": "Succeeded"}))),
        Progress::Done
    );
    let failed = with_status(json!({"phase": "Failed", "containerStatuses": [{
        "name": "volume-copy", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 1,
                                 "message": "cp: error writing 'x': No space left on device\n"}}}]}));
    assert_eq!(
        progress(&failed),
        Progress::Failed(
            "volume copy Pod p failed (exit code 1): cp: error writing 'x': No space left on device"
                .into()
        )
    );
    let evicted = with_status(json!({"phase": "Failed", "reason": "Evicted"}));
    assert_eq!(
        progress(&evicted),
        Progress::Failed("volume copy Pod p failed (exit code 0): Evicted".into())
    );
}

/// Runs the Pod's program here on `args`: its exit status and what it wrote.
fn run(args: &[&Path]) -> (bool, String) {
    let output = Command::new("/bin/sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("volume-copy")
        .args(args)
        .output()
        .expect("/bin/sh runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[test]
fn the_program_copies_sparsely_overwrites_in_place_removes_and_refuses_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    // 8 MiB with data at its start and end only.
    let mut image = vec![0u8; 8 << 20];
    image[..5].copy_from_slice(b"FIRST");
    image[(8 << 20) - 4..].copy_from_slice(b"LAST");
    std::fs::write(&disk, &image).unwrap();
    let backup_dir = dir.path().join(".ferrovirt-snapshots/snap");
    let backup = backup_dir.join("disk.img");
    let (ok, said) = run(&[Path::new("copy"), &disk, &backup]);
    assert!(ok, "{said}");
    assert!(said.contains("8388608 bytes"), "{said}");
    assert_eq!(std::fs::read(&backup).unwrap(), image);
    assert!(!backup_dir.join("disk.img.part").exists());
    let blocks = std::fs::metadata(&backup).unwrap().blocks();
    assert!(
        blocks * 512 < 1 << 20,
        "the copy is not sparse: {blocks} blocks"
    );

    // The VM writes on; the backup written back keeps the disk's inode.
    std::fs::write(&disk, b"SECOND").unwrap();
    let inode = std::fs::metadata(&disk).unwrap().ino();
    let (ok, said) = run(&[Path::new("overwrite"), &backup, &disk]);
    assert!(ok, "{said}");
    assert_eq!(std::fs::read(&disk).unwrap(), image);
    assert_eq!(std::fs::metadata(&disk).unwrap().ino(), inode);

    // A symlink is not followed: nothing is written.
    let link = dir.path().join("link.img");
    std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
    let elsewhere = dir.path().join("elsewhere/disk.img");
    let (ok, said) = run(&[Path::new("copy"), &link, &elsewhere]);
    assert!(!ok);
    assert!(said.contains("is a symlink"), "{said}");
    assert!(!elsewhere.exists());

    // The first failure stops it: what follows is not done.
    let missing = dir.path().join("missing.img");
    let (ok, said) = run(&[
        Path::new("copy"),
        &missing,
        &elsewhere,
        Path::new("remove"),
        &backup_dir,
    ]);
    assert!(!ok);
    assert!(said.contains("missing.img"), "{said}");
    assert!(backup.exists());

    // A copy that does not fit leaves nothing behind: the partial file here is /dev/full,
    // which answers every write with ENOSPC, as a full claim does.
    let full = dir.path().join("full/disk.img");
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink("/dev/full", dir.path().join("full/disk.img.part")).unwrap();
    let (ok, said) = run(&[Path::new("copy"), &disk, &full]);
    assert!(!ok);
    assert!(said.contains("No space left on device"), "{said}");
    let left: Vec<_> = std::fs::read_dir(full.parent().unwrap()).unwrap().collect();
    assert!(left.is_empty(), "a partial copy was left: {left:?}");

    let (ok, said) = run(&[Path::new("remove"), &backup_dir]);
    assert!(ok, "{said}");
    assert!(!backup_dir.exists());
    let (ok, said) = run(&[Path::new("unlink"), &disk]);
    assert!(!ok);
    assert!(said.contains("unknown operation unlink"), "{said}");
}
