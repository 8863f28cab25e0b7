//! The Debian 12 cloud image that `guest-images/debian-cloud/build.sh` builds from Debian
//! packages (systemd, cloud-init, Debian's cloud kernel and its initramfs-tools initramfs,
//! grub.cfg by grub-mkconfig), found in its cache.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{ConsoleReader, LauncherProcess};

/// The command that builds the image.
pub const BUILD_COMMAND: &str = "guest-images/debian-cloud/build.sh";

/// The built image and what `info.txt` says of it.
pub struct DebianCloudImage {
    pub disk: PathBuf,
    /// `6.1.0-57-cloud-amd64`
    pub kernel_release: String,
    pub root_uuid: String,
}

/// The image of the last successful build (`<cache>/debian-cloud/current`), or a failure that
/// names the command that builds it.
pub fn debian_cloud_image() -> DebianCloudImage {
    let cache = std::env::var_os("FERROVIRT_GUEST_IMAGES_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(guest_images::artifacts::DEFAULT_CACHE_DIR));
    let dir = cache.join("debian-cloud/current");
    let missing = |what: &str| -> ! {
        panic!(
            "the Debian cloud image is missing ({what}): build it with `{BUILD_COMMAND}` (as root)"
        )
    };
    let disk = dir.join("disk.img");
    if !disk.exists() {
        missing(&disk.display().to_string());
    }
    let info_path = dir.join("info.txt");
    let info = std::fs::read_to_string(&info_path)
        .unwrap_or_else(|e| missing(&format!("{}: {e}", info_path.display())));
    let info: BTreeMap<&str, &str> = info.lines().filter_map(|l| l.split_once('=')).collect();
    let field = |name: &str| {
        info.get(name)
            .map(|v| v.to_string())
            .unwrap_or_else(|| missing(&format!("{name} in {}", info_path.display())))
    };
    DebianCloudImage {
        kernel_release: field("kernel_release"),
        root_uuid: field("root_uuid"),
        disk,
    }
}

pub const USER: &str = "fvuser";
pub const PASSWORD: &str = "fv-Secret-42";
/// What the userData's runcmd prints to /dev/console: computed by the guest's shell, so the
/// console shows it only if the command ran, followed by what the guest reads in its SMBIOS
/// tables (`/sys/class/dmi/id/`): the VMI's firmware UUID and serial, KubeVirt's manufacturer.
pub const RUNCMD_MARKER: &str =
    "ferrovirt-runcmd-42 dmi=5d307ca9-b3ef-428c-8861-06e72d69f223 fv-serial-1 KubeVirt";
/// The VMI's `firmware.uuid` and `firmware.serial`.
pub const FIRMWARE_UUID: &str = "5d307ca9-b3ef-428c-8861-06e72d69f223";
pub const FIRMWARE_SERIAL: &str = "fv-serial-1";
pub const USER_DATA: &str = r#"#cloud-config
users:
  - name: fvuser
    lock_passwd: false
    shell: /bin/bash
chpasswd:
  expire: false
  users:
    - name: fvuser
      password: fv-Secret-42
      type: text
runcmd:
  - [ sh, -c, 'cd /sys/class/dmi/id; echo "ferrovirt-runcmd-$((40 + 2)) dmi=$(cat product_uuid) $(cat product_serial) $(cat sys_vendor)" > /dev/console' ]
"#;

/// The VMI of the image: the image as a containerDisk, the userData above as its cloud-init
/// seed, no network, [`FIRMWARE_UUID`] and [`FIRMWARE_SERIAL`]; `firmware` adds to its
/// `spec.domain.firmware`.
pub fn debian_vmi(name: &str, firmware: Option<serde_json::Value>) -> serde_json::Value {
    let mut vmi = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": { "name": name, "namespace": "default", "uid": format!("4d2b7c1e-{name}") },
        "spec": {
            "domain": {
                "devices": {
                    "autoattachPodInterface": false,
                    "disks": [
                        { "name": "rootdisk", "disk": { "bus": "virtio" } },
                        { "name": "cloudinit", "disk": { "bus": "virtio" } }
                    ]
                },
                "memory": { "guest": "1Gi" }
            },
            "volumes": [
                { "name": "rootdisk", "containerDisk": { "image": "registry/debian-12-genericcloud:latest" } },
                { "name": "cloudinit", "cloudInitNoCloud": { "userData": USER_DATA } }
            ]
        }
    });
    let mut all = serde_json::json!({ "uuid": FIRMWARE_UUID, "serial": FIRMWARE_SERIAL });
    if let Some(serde_json::Value::Object(fields)) = firmware {
        all.as_object_mut().expect("an object").extend(fields);
    }
    vmi["spec"]["domain"]["firmware"] = all;
    vmi
}

/// Where `needle` ends in `text` at or after byte `from`, read as a terminal would show it: a
/// control sequence (`ESC [ ... final`, ECMA-48 CSI) between two of its bytes is skipped.
/// SeaBIOS's serial console (sercon) keeps the last character grub wrote until the cursor
/// moves on, and also writes it out on its 18.2 Hz timer tick: a tick between grub's "write
/// character" and "move cursor" calls puts cursor moves (`ESC [ row ; col H`) inside a word,
/// the more often the slower the guest runs.
pub fn find_on_terminal(text: &str, from: usize, needle: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let wanted = needle.as_bytes();
    let first = *wanted.first()?;
    let skip_sequences = |mut at: usize| {
        while bytes.get(at) == Some(&0x1b) && bytes.get(at + 1) == Some(&b'[') {
            let end = bytes[at + 2..]
                .iter()
                .position(|b| (0x40..=0x7e).contains(b));
            match end {
                Some(end) => at += 2 + end + 1,
                None => break,
            }
        }
        at
    };
    (from..bytes.len())
        .filter(|&start| bytes[start] == first)
        .find_map(|start| {
            let mut at = start + 1;
            for &b in &wanted[1..] {
                at = skip_sequences(at);
                if bytes.get(at) != Some(&b) {
                    return None;
                }
                at += 1;
            }
            Some(at)
        })
}

/// The console's text with its control characters shown, for a failure message.
pub fn visible(text: &str) -> String {
    text.replace('\x1b', "\\e")
}

/// Waits until the console shows `needle` after byte `from` of its text (as a terminal shows
/// it, see [`find_on_terminal`]); returns where it ends.
pub fn wait_after(
    console: &ConsoleReader,
    from: usize,
    needle: &str,
    timeout: Duration,
    process: &LauncherProcess,
) -> usize {
    let start = Instant::now();
    loop {
        let text = console.text();
        if let Some(end) = find_on_terminal(&text, from, needle) {
            return end;
        }
        if start.elapsed() > timeout {
            let tail: String = text
                .chars()
                .skip(text.chars().count().saturating_sub(4000))
                .collect();
            panic!(
                "{needle:?} not on the console within {timeout:?}; console tail (ESC shown as \\e):\n{}\n\
                 launcher log:\n{}",
                visible(&tail),
                process.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The first whole console line after byte `from` that contains `needle`, once its end (the
/// newline) has arrived too: a line read as soon as it starts can be cut short.
pub fn console_line(
    console: &ConsoleReader,
    from: usize,
    needle: &str,
    timeout: Duration,
    process: &LauncherProcess,
) -> String {
    let at = wait_after(console, from, needle, timeout, process);
    let end = wait_after(console, at, "\n", timeout, process);
    let text = console.text();
    let start = text[..at].rfind('\n').map_or(0, |n| n + 1);
    text[start..end].trim().to_string()
}
