//! Checks the containerDisk and kernelBoot OCI image layouts that `guest-images/build.sh`
//! writes: every digest matches its blob, and the layer holds KubeVirt's paths owned by 107.

use std::path::Path;
use std::process::Command;

use guest_images::Artifacts;

fn artifacts() -> Artifacts {
    Artifacts::locate().unwrap_or_else(|e| panic!("{e}"))
}

/// The `"key":"value"` string values of `key` in compact JSON, in order.
fn json_strings(json: &str, key: &str) -> Vec<String> {
    let pattern = format!("\"{key}\":\"");
    json.match_indices(&pattern)
        .map(|(start, _)| {
            let rest = &json[start + pattern.len()..];
            rest[..rest.find('"').expect("closing quote")].to_string()
        })
        .collect()
}

fn sha256(path: &Path) -> String {
    let output = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("running sha256sum");
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_string()
}

/// Checks the layout and returns `tar -tvz` of its single layer.
fn check_layout(layout: &Path) -> String {
    let oci_layout = std::fs::read_to_string(layout.join("oci-layout")).expect("oci-layout");
    assert!(oci_layout.contains("\"imageLayoutVersion\":\"1.0.0\""));
    let index = std::fs::read_to_string(layout.join("index.json")).expect("index.json");
    assert_eq!(
        json_strings(&index, "org.opencontainers.image.ref.name"),
        ["latest"]
    );
    let manifest_digest = &json_strings(&index, "digest")[0];
    let blob = |digest: &str| {
        let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
        let path = layout.join("blobs/sha256").join(hex);
        assert_eq!(
            sha256(&path),
            hex,
            "{} does not match its digest",
            path.display()
        );
        path
    };
    let manifest = std::fs::read_to_string(blob(manifest_digest)).expect("manifest");
    assert_eq!(
        json_strings(&manifest, "mediaType"),
        [
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.oci.image.config.v1+json",
            "application/vnd.oci.image.layer.v1.tar+gzip",
        ]
    );
    let digests = json_strings(&manifest, "digest");
    let config = std::fs::read_to_string(blob(&digests[0])).expect("config");
    assert!(config.contains("\"architecture\":\"amd64\""), "{config}");
    let layer = blob(&digests[1]);
    let listing = Command::new("tar")
        .arg("-tvzf")
        .arg(&layer)
        .arg("--numeric-owner")
        .output()
        .expect("running tar");
    assert!(listing.status.success());
    String::from_utf8_lossy(&listing.stdout).into_owned()
}

#[test]
fn containerdisk_holds_the_root_disk_at_disk_disk_img_owned_by_107() {
    let listing = check_layout(&artifacts().containerdisk_layout());
    let line = listing
        .lines()
        .find(|line| line.ends_with(" disk/disk.img"))
        .unwrap_or_else(|| panic!("no disk/disk.img in the layer:\n{listing}"));
    assert!(line.contains(" 107/107 "), "{line}");
}

#[test]
fn kernel_boot_image_holds_kernel_and_initramfs_under_boot() {
    let listing = check_layout(&artifacts().kernel_boot_layout());
    for path in ["boot/vmlinuz", "boot/vmlinux", "boot/initramfs"] {
        let line = listing
            .lines()
            .find(|line| line.ends_with(&format!(" {path}")))
            .unwrap_or_else(|| panic!("no {path} in the layer:\n{listing}"));
        assert!(line.contains(" 107/107 "), "{line}");
    }
}
