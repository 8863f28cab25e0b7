use std::process::{Child, Command};
use std::time::Duration;

use super::*;

fn temp_dir(name: &str) -> PathBuf {
    crate::util::scratch_dir(&format!("container-disk-{name}"))
}

#[test]
fn disk_file_lookup() {
    let dir = temp_dir("lookup");
    std::fs::create_dir_all(dir.join("disk")).unwrap();
    assert_eq!(find_container_disk(&dir, None), None);
    std::fs::write(dir.join("top.img"), b"x").unwrap();
    assert_eq!(find_container_disk(&dir, None), Some(dir.join("top.img")));
    std::fs::write(dir.join("disk/b.qcow2"), b"x").unwrap();
    std::fs::write(dir.join("disk/a.img"), b"x").unwrap();
    assert_eq!(
        find_container_disk(&dir, None),
        Some(dir.join("disk/a.img"))
    );
    assert_eq!(
        find_container_disk(&dir, Some("/disk/b.qcow2")),
        Some(dir.join("disk/b.qcow2"))
    );
    assert_eq!(find_container_disk(&dir, Some("/disk/none")), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `/proc` laid out by hand: the process whose environment names the volume, exactly, is
/// the one whose root is used; unreadable and other entries are passed over.
#[test]
fn the_container_is_found_by_its_environment() {
    let proc = temp_dir("proc");
    let process = |pid: &str, environ: Option<&[u8]>| {
        std::fs::create_dir_all(proc.join(pid).join("root/disk")).unwrap();
        if let Some(environ) = environ {
            std::fs::write(proc.join(pid).join("environ"), environ).unwrap();
        }
    };
    process("1", None);
    process("7", Some(b"PATH=/bin\0FERROVIRT_CONTAINER_DISK=rootfs\0"));
    process(
        "42",
        Some(b"PATH=/bin\0FERROVIRT_CONTAINER_DISK=root\0HOME=/\0"),
    );
    process("self", Some(b"FERROVIRT_CONTAINER_DISK=root\0"));
    std::fs::write(proc.join("42/root/disk/cirros.qcow2"), b"x").unwrap();
    std::fs::write(proc.join("7/root/disk/other.img"), b"x").unwrap();

    let absent = proc.join("container-disks/root");
    assert_eq!(container_root(&proc, "root"), Some(proc.join("42/root")));
    assert_eq!(
        locate_in(&proc, Duration::ZERO, "root", &absent, None).unwrap(),
        proc.join("42/root/disk/cirros.qcow2")
    );
    assert_eq!(
        locate_in(&proc, Duration::ZERO, "rootfs", &absent, None).unwrap(),
        proc.join("7/root/disk/other.img")
    );
    let err = locate_in(&proc, Duration::ZERO, "data", &absent, None).unwrap_err();
    assert!(matches!(err, LocateError::NoContainer { .. }), "{err}");
    assert!(
        err.to_string().contains("FERROVIRT_CONTAINER_DISK=data"),
        "{err}"
    );
    let err = locate_in(
        &proc,
        Duration::ZERO,
        "root",
        &absent,
        Some("/disk/gone.img"),
    )
    .unwrap_err();
    assert!(matches!(err, LocateError::NoDisk { .. }), "{err}");
    assert!(err.to_string().contains("42/root"), "{err}");

    // A container whose program runs a moment later is waited for.
    let later = proc.clone();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        std::fs::create_dir_all(later.join("99/root/disk")).unwrap();
        std::fs::write(later.join("99/root/disk/late.img"), b"x").unwrap();
        std::fs::write(later.join("99/environ"), b"FERROVIRT_CONTAINER_DISK=late\0").unwrap();
    });
    assert_eq!(
        locate_in(&proc, Duration::from_secs(30), "late", &absent, None).unwrap(),
        proc.join("99/root/disk/late.img")
    );
    starter.join().unwrap();

    // A directory at the mount (a launcher outside a Pod) comes first.
    std::fs::create_dir_all(absent.join("disk")).unwrap();
    std::fs::write(absent.join("disk/local.img"), b"x").unwrap();
    assert_eq!(
        locate_in(&proc, Duration::ZERO, "root", &absent, None).unwrap(),
        absent.join("disk/local.img")
    );
    std::fs::remove_dir_all(&proc).unwrap();
}

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real `/proc`: a process of this user started with the variable is found, and its root
/// is readable through it (as the launcher reads its containerDisk's container).
#[test]
fn a_real_process_is_found_in_proc() {
    let volume = format!("test-{}", std::process::id());
    let child = Reaped(
        Command::new("sleep")
            .arg("600")
            .env(CONTAINER_DISK_ENV, &volume)
            .spawn()
            .expect("sleep (coreutils) runs"),
    );
    // `spawn` returns once the child is inside execve, before the kernel has set up the new
    // program's environment: the launcher polls for the same reason.
    let root = wait_for_container(Path::new(PROC), &volume, CONTAINER_WAIT);
    assert_eq!(
        root,
        Some(PathBuf::from(format!("/proc/{}/root", child.0.id())))
    );
    let here = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).unwrap();
    let through_root = root.unwrap().join(here.strip_prefix("/").unwrap());
    assert!(through_root.join("Cargo.toml").is_file());
    assert_eq!(
        container_root(Path::new(PROC), &format!("{volume}-no")),
        None
    );
}
