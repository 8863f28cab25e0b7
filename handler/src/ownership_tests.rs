use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::*;

fn vmi(read_only: bool) -> VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "namespace": "default"},
        "spec": {"domain": {"devices": {}},
                 "volumes": [{"name": "data", "persistentVolumeClaim":
                              {"claimName": "c", "readOnly": read_only}}]}
    }))
    .unwrap()
}

/// The user the tests hand files to: 107 as root (as on a node), else the test's own user,
/// whose primary group has the same number in the unprivileged tier (`nobody`), where only
/// [`Outcome::Owned`] can be seen.
fn target() -> u32 {
    match rustix::process::geteuid().as_raw() {
        0 => contract::layout::LAUNCHER_USER_ID,
        uid => uid,
    }
}

/// A container root laid out as the launcher image's: `/var/run` an absolute symlink to
/// `/run`, the PVC volume `data` mounted below it.
fn container_root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("var")).unwrap();
    std::os::unix::fs::symlink("/run", dir.path().join("var/run")).unwrap();
    let data = dir.path().join("run/kubevirt-private/vmi-disks/data");
    std::fs::create_dir_all(&data).unwrap();
    (dir, data)
}

fn open(path: &Path) -> File {
    File::open(path).unwrap()
}

#[test]
fn a_pvc_disk_is_found_through_the_images_absolute_symlinks_and_handed_over() {
    let (root, data) = container_root();
    std::fs::write(data.join("disk.img"), b"disk").unwrap();
    let found = claim(&vmi(false), &open(root.path()), target()).unwrap();
    let disk = format!("{PVC_DISK_DIR}/data/disk.img");
    let outcome = found.iter().find(|(p, _)| *p == disk).map(|(_, o)| *o);
    let expected = if rustix::process::geteuid().is_root() {
        Outcome::Changed
    } else {
        Outcome::Owned
    };
    assert_eq!(outcome, Some(expected), "{found:?}");
    let meta = std::fs::metadata(data.join("disk.img")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (target(), target()));
    // No device nodes in this root: left for the launcher to report.
    for device in DEVICES {
        assert!(
            found.contains(&(device.to_string(), Outcome::Missing)),
            "{found:?}"
        );
    }
}

#[test]
fn a_read_only_pvc_and_a_root_launcher_are_left_alone() {
    let (root, data) = container_root();
    std::fs::write(data.join("disk.img"), b"disk").unwrap();
    let found = claim(&vmi(true), &open(root.path()), target()).unwrap();
    assert!(
        found.iter().all(|(p, _)| !p.ends_with("disk.img")),
        "{found:?}"
    );
    assert_eq!(claim(&vmi(false), &open(root.path()), 0).unwrap(), []);
}

#[test]
fn a_disk_img_that_is_a_symlink_is_refused_and_its_target_keeps_its_owner() {
    let (root, data) = container_root();
    let outside = tempfile::NamedTempFile::new().unwrap();
    let before = std::fs::metadata(outside.path()).unwrap();
    std::os::unix::fs::symlink(outside.path(), data.join("disk.img")).unwrap();
    let err = claim(&vmi(false), &open(root.path()), target()).unwrap_err();
    assert!(
        matches!(
            &err,
            OwnershipError::Kind {
                found: "a symlink",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("disk.img"), "{err}");
    let after = std::fs::metadata(outside.path()).unwrap();
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
}

#[test]
fn a_dev_kvm_that_is_not_a_device_is_refused() {
    let (root, _) = container_root();
    std::fs::create_dir_all(root.path().join("dev")).unwrap();
    std::fs::write(root.path().join("dev/kvm"), b"").unwrap();
    let err = claim(&vmi(false), &open(root.path()), target()).unwrap_err();
    assert!(
        matches!(
            &err,
            OwnershipError::Kind {
                found: "a regular file",
                expected: "a character device",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_symlink_out_of_the_root_resolves_inside_it() {
    // `/dev` an absolute symlink that names the host's `/dev` from the host's root: resolved in
    // the container's root (which has no `/sys`) it names nothing, and the host's devices are
    // not touched.
    let (root, _) = container_root();
    std::os::unix::fs::symlink("/sys/../dev", root.path().join("dev")).unwrap();
    let found = claim(&vmi(false), &open(root.path()), target()).unwrap();
    for device in DEVICES {
        assert!(
            found.contains(&(device.to_string(), Outcome::Missing)),
            "{found:?}"
        );
    }
}
