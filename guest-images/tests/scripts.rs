//! Syntax checks of the build scripts (bash) and of the guest's scripts (busybox sh), so a
//! broken script fails here rather than in a boot.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check_syntax(shell: &str, script: &Path) {
    let output = Command::new(shell)
        .arg("-n")
        .arg(script)
        .output()
        .unwrap_or_else(|e| panic!("running {shell} -n {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "{shell} -n {}: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn build_scripts_parse_with_bash() {
    let dir = crate_dir();
    for script in [
        "build.sh",
        "bench-boot.sh",
        "kernel/build-kernel.sh",
        "tiny/build-tiny.sh",
        "oci/make-oci-image.sh",
    ] {
        check_syntax("bash", &dir.join(script));
    }
}

#[test]
fn guest_scripts_parse_with_busybox_sh() {
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "/bin/busybox is missing: run `guest-images/build.sh` (it installs busybox-static)"
    );
    let dir = crate_dir().join("tiny");
    for script in [
        "init",
        "overlay/etc/init.d/rcS",
        "overlay/sbin/ferrovirt-cloud-init",
        "overlay/sbin/ferrovirt-net",
        "overlay/sbin/ferrovirt-getty",
        "overlay/usr/share/udhcpc/default.script",
    ] {
        let path = dir.join(script);
        let output = Command::new(busybox)
            .args(["sh", "-n"])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("running busybox sh -n {}: {e}", path.display()));
        assert!(
            output.status.success(),
            "busybox sh -n {}: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
