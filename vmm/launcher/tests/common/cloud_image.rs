//! A cloud image the tests build: a GPT disk whose partition 1 is an ext4 root holding the tiny
//! guest's userland and, optionally, Debian's stock cloud kernel, an initramfs and a
//! Debian-style `/boot/grub/grub.cfg` whose default entry boots them with
//! `root=UUID=<the partition>` and [`MARKER`] on its command line.

use std::path::{Path, PathBuf};
use std::process::Command;

use bootdisk::testing::{gpt, gpt_total, Part};

use super::artifacts;

pub const MARKER: &str = "ferrovirt.test=user-os";
pub const ROOT_UUID: &str = "5e0c1a2b-3d4e-4f50-8a61-7b8c9d0e1f2a";
pub const ENTRY: &str = "Debian GNU/Linux (ferrovirt test)";
/// The root partition: 40 MiB from sector 2048.
const PART_START: u64 = 2048;
const PART_BYTES: u64 = 40 << 20;

/// Runs a tool the test needs; the failure names the Debian package that has it.
pub fn run(program: &str, package: &str, args: &[&str]) {
    assert!(
        launcher::backend::qemu::find_in_path(program).is_some(),
        "{program} is not in PATH: install the Debian package {package}"
    );
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The stock kernel's release (`6.1.0-57-cloud-amd64`), written beside it by guest-images.
pub fn stock_release(artifacts: &guest_images::artifacts::Artifacts) -> String {
    let path = artifacts.stock_kernel().with_file_name("kernelrelease");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run `{}`)",
                path.display(),
                guest_images::artifacts::BUILD_COMMAND
            )
        })
        .trim()
        .to_string()
}

/// Builds the cloud image in `dir` and returns its path: the tiny guest's root filesystem
/// (dumped from `rootdisk.img` with debugfs) plus, when `with_kernel`, `/boot` with the stock
/// kernel, its initramfs and grub.cfg; ext4 with a fixed UUID, on GPT partition 1.
pub fn cloud_image(dir: &Path, with_kernel: bool) -> PathBuf {
    let artifacts = artifacts();
    let tree = dir.join("tree");
    std::fs::create_dir_all(&tree).expect("create the image tree");
    let rootdisk = artifacts.rootdisk();
    let dump = format!("rdump / {}", tree.display());
    run(
        "debugfs",
        "e2fsprogs",
        &["-R", &dump, &rootdisk.display().to_string()],
    );
    assert!(
        tree.join("sbin/init").exists(),
        "debugfs did not dump the tiny guest's tree from {}",
        rootdisk.display()
    );
    if with_kernel {
        let release = stock_release(&artifacts);
        let boot = tree.join("boot");
        std::fs::create_dir_all(boot.join("grub")).expect("create /boot/grub");
        std::fs::copy(
            artifacts.stock_kernel(),
            boot.join(format!("vmlinuz-{release}")),
        )
        .expect("copy the stock kernel");
        std::fs::copy(
            artifacts.stock_initramfs(),
            boot.join(format!("initrd.img-{release}")),
        )
        .expect("copy the stock initramfs");
        let grub_cfg = format!(
            "set default=\"0\"\nset timeout=0\n\
             menuentry '{ENTRY}' --class debian --class gnu-linux {{\n\
             \tinsmod part_gpt\n\tinsmod ext2\n\
             \tsearch --no-floppy --fs-uuid --set=root {ROOT_UUID}\n\
             \techo 'Loading Linux {release} ...'\n\
             \tlinux /boot/vmlinuz-{release} root=UUID={ROOT_UUID} ro console=tty0 \
             console=ttyS0,115200 {MARKER}\n\
             \tinitrd /boot/initrd.img-{release}\n}}\n"
        );
        std::fs::write(boot.join("grub/grub.cfg"), grub_cfg).expect("write grub.cfg");
    }
    let fs = dir.join("root.ext4");
    run(
        "mkfs.ext4",
        "e2fsprogs",
        &[
            "-q",
            "-F",
            "-U",
            ROOT_UUID,
            "-L",
            "user-root",
            "-d",
            &tree.display().to_string(),
            &fs.display().to_string(),
            &format!("{}k", PART_BYTES >> 10),
        ],
    );
    let data = std::fs::read(&fs).expect("read the ext4 image");
    let disk = gpt(
        gpt_total(PART_START + PART_BYTES / 512),
        &[Part::new(1, PART_START, data).name("root")],
    );
    let image = dir.join("cloud.img");
    std::fs::write(&image, disk).expect("write the cloud image");
    image
}
