//! Firmware boots the user's own OS (ARCHITECTURE.md, "How a VM boots", step 3): the Debian 12
//! cloud image that `guest-images/debian-cloud/build.sh` builds, with
//! `firmware.bootloader.bios` (SeaBIOS, which runs grub's boot.img and i386-pc core image from
//! the image's BIOS boot partition) and with `firmware.bootloader.efi.secureBoot: false`
//! (OVMF, which runs grub's `EFI/BOOT/BOOTX64.EFI` from the image's EFI system partition), on
//! QEMU TCG's q35 machine, driven over gRPC as virt-handler drives it. In both the grub on the
//! disk reads the image's own `/boot/grub/grub.cfg` and boots Debian's kernel; the test checks,
//! on the serial console, the firmware's own output (SeaBIOS's banner, OVMF's boot manager), grub,
//! Debian's kernel banner started by grub, the `login:` prompt and the runcmd of the
//! userData (cloud-init ran), that the boot report names the firmware, and prints the time
//! from SyncVMI to the login prompt (TCG: minutes; printed, never asserted). The SeaBIOS VM has
//! a graphics device (`autoattachGraphicsDevice: true`): Screenshot is a PNG of its screen and
//! QEMU's VNC server greets on `vnc-sock`; the OVMF VM has none, and Screenshot is refused. A
//! launcher whose OVMF files are missing fails SyncVMI, naming the file and the Debian package
//! `ovmf`.

mod common;

use std::time::{Duration, Instant};

use common::debian_cloud::{
    console_line, debian_cloud_image, debian_vmi, find_on_terminal, visible, wait_after,
    RUNCMD_MARKER,
};
use common::*;
use contract::proto::v1;
use v1::DomainState;

/// One TCG boot at a time: the two firmware boots would share two cores otherwise.
static ONE_BOOT_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Boots the image with `firmware` and checks it up to the login prompt and the runcmd marker;
/// the boot report must start with `report`, the console show `firmware_says` first (if any).
/// With `graphics`, the VMI asks for a graphics device: QEMU's VNC server answers on
/// `vnc-sock` in the socket directory, and Screenshot is a PNG of the screen; without, Screenshot
/// is refused.
async fn boots_to_login(
    name: &str,
    firmware: serde_json::Value,
    report: &str,
    firmware_says: &str,
    graphics: bool,
) {
    require_qemu();
    let image = debian_cloud_image();
    let artifacts = artifacts();
    let _one = ONE_BOOT_AT_A_TIME.lock().await;
    let dirs = TestDirs::new(name);
    dirs.container_disk("rootdisk", &image.disk);

    let process = LauncherProcess::start_with_guest(&dirs, &artifacts);
    let mut client = client(&dirs).await;
    let console = ConsoleReader::connect(&dirs);
    let synced = Instant::now();
    let mut vmi = debian_vmi(&format!("vmi-{name}"), Some(firmware));
    if graphics {
        vmi["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = true.into();
    }
    let domain = sync_emulated_domain(&mut client, &vmi, &process).await;
    println!(
        "{name}: SyncVMI took {:?}; boot: {}",
        synced.elapsed(),
        domain.boot
    );
    assert_eq!(domain.boot_origin, v1::BootOrigin::UserDisk as i32);
    assert!(
        domain.boot.starts_with(report),
        "the boot report {:?} does not start with {report:?}",
        domain.boot
    );
    assert!(domain.boot.contains("disk rootdisk"), "{}", domain.boot);
    assert_eq!(domain.backend, v1::Backend::QemuTcg as i32);
    let log = process.log_text();
    assert!(log.contains("-M q35"), "QEMU is not a q35 machine:\n{log}");
    wait_state(&mut client, DomainState::Running, Duration::from_secs(60)).await;

    // Firmware, grub, Debian's kernel, systemd and cloud-init, all under TCG: generous deadlines.
    let boot = Duration::from_secs(1200);
    let release = &image.kernel_release;
    // The firmware itself on the serial console, then grub from the disk.
    let firmware_spoke = wait_after(&console, 0, firmware_says, boot, &process);
    let grub = wait_after(&console, firmware_spoke, "Welcome to GRUB!", boot, &process);
    println!("{name}: grub {:?} after SyncVMI", synced.elapsed());
    let text = console.text();
    if !text[firmware_spoke..grub].contains("Welcome to GRUB!") {
        let start = text[..grub].rfind('W').unwrap_or(firmware_spoke);
        println!(
            "{name}: grub's banner came with control sequences inside (ESC as \\e): {}",
            visible(&text[start..grub])
        );
    }
    let banner = wait_after(
        &console,
        grub,
        &format!("Linux version {release}"),
        boot,
        &process,
    );
    println!(
        "{name}: Debian's kernel banner {:?} after SyncVMI",
        synced.elapsed()
    );
    // grub's own menu entry, from the image's grub.cfg, started it.
    let command_line = console_line(&console, banner, "Command line:", boot, &process);
    println!("{name}: {command_line}");
    assert!(
        command_line.contains(&format!("BOOT_IMAGE=/boot/vmlinuz-{release}")),
        "not booted by grub: {command_line:?}"
    );
    assert!(
        command_line.contains(&format!("root=UUID={}", image.root_uuid)),
        "{command_line:?}"
    );
    wait_after(&console, banner, "login: ", boot, &process);
    println!("{name}: login prompt {:?} after SyncVMI", synced.elapsed());
    wait_after(&console, banner, RUNCMD_MARKER, boot, &process);
    println!(
        "{name}: the runcmd marker {:?} after SyncVMI",
        synced.elapsed()
    );
    screen(&mut client, &dirs, graphics).await;
    if std::env::var_os("FERROVIRT_SHOW_CONSOLE").is_some() {
        println!("console:\n{}", console.text());
    }
    // Only Debian's kernel booted, once.
    let text = console.text();
    let banners: Vec<_> = text
        .lines()
        .filter(|l| l.contains("Linux version "))
        .collect();
    assert!(
        banners.iter().all(|l| l.contains(release.as_str())),
        "another kernel booted: {banners:?}"
    );
    client
        .kill(v1::VmiRequest { vmi: String::new() })
        .await
        .expect("Kill");
}

/// With a graphics device: Screenshot is a PNG (checked up to its IHDR) of a text-mode or larger
/// screen, and QEMU's VNC server greets a client on `vnc-sock`. Without: Screenshot is
/// FAILED_PRECONDITION, naming the field that would give the VM one.
async fn screen(
    client: &mut v1::launcher_client::LauncherClient<tonic::transport::Channel>,
    dirs: &TestDirs,
    graphics: bool,
) {
    let answer = client.screenshot(v1::VmiRequest::default()).await;
    if !graphics {
        let refused = answer.expect_err("Screenshot without a graphics device");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused}");
        assert!(
            refused.message().contains("autoattachGraphicsDevice"),
            "{refused}"
        );
        return;
    }
    let png = answer.expect("Screenshot").into_inner().png;
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG: {:02x?}",
        &png[..png.len().min(16)]
    );
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    let (width, height) = (be(16), be(20));
    assert!(width >= 320 && height >= 200, "a {width}x{height} screen");
    println!("screenshot: a {width}x{height} PNG of {} bytes", png.len());
    let socket = dirs
        .root
        .join("sockets")
        .join(contract::sockets::VNC_SOCKET);
    let mut vnc = std::os::unix::net::UnixStream::connect(&socket)
        .unwrap_or_else(|e| panic!("{}: {e}", socket.display()));
    vnc.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    let mut greeting = [0u8; 12];
    std::io::Read::read_exact(&mut vnc, &mut greeting).expect("QEMU's RFB greeting");
    assert_eq!(&greeting, b"RFB 003.008\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seabios_boots_the_debian_image_from_its_bios_boot_partition() {
    boots_to_login(
        "seabios",
        serde_json::json!({ "bootloader": { "bios": { "useSerial": true } } }),
        "firmware: SeaBIOS, its output on the serial console, booting the boot loader of disk \
         rootdisk",
        // SeaBIOS's banner: useSerial put its screen on the serial port.
        "SeaBIOS (version",
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ovmf_boots_the_debian_image_from_its_efi_system_partition() {
    boots_to_login(
        "ovmf",
        serde_json::json!({ "bootloader": { "efi": { "secureBoot": false } } }),
        "firmware: OVMF (UEFI), Secure Boot off, booting the boot loader of disk rootdisk",
        // OVMF's boot manager starting the disk's removable-media loader.
        "BdsDxe: starting",
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ovmf_files_syncvmi_fails_naming_the_package() {
    require_qemu();
    let image = debian_cloud_image();
    let artifacts = artifacts();
    let dirs = TestDirs::new("no-ovmf");
    dirs.container_disk("rootdisk", &image.disk);
    let missing = dirs.root.join("no-ovmf-here");
    let missing_flag = missing.display().to_string();
    let process = LauncherProcess::start(
        &dirs,
        &artifacts.vmlinux(),
        Some(&artifacts.initramfs()),
        &["--ovmf-dir", &missing_flag],
    );
    let mut client = client(&dirs).await;
    let vmi = debian_vmi(
        "vmi-no-ovmf",
        Some(serde_json::json!({ "bootloader": { "efi": { "secureBoot": false } } })),
    );
    let status = match sync_emulated(&mut client, serde_json::to_vec(&vmi).expect("json"), "").await
    {
        Ok(response) => panic!(
            "SyncVMI succeeded without OVMF: {:?}\nlauncher log:\n{}",
            response.domain,
            process.log_text()
        ),
        Err(status) => status,
    };
    println!("SyncVMI: {status}");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
    let message = status.message();
    assert!(
        message.contains(&missing.join("OVMF_CODE_4M.fd").display().to_string()),
        "{message}"
    );
    assert!(message.contains("Debian package ovmf"), "{message}");
}

/// SeaBIOS's serial console also flushes grub's screen on its timer tick; a tick inside a word
/// puts cursor moves there (`ESC [ 03 ; 05 H`: seen here at a different place of grub's menu
/// from one boot to the next). The terminal shows the word whole, and so does the search.
#[test]
fn a_banner_split_by_cursor_moves_is_found_where_it_ends() {
    let raw = "SeaBIOS\r\n\x1b[0;37;40mWelc\x1b[03;05H\x1b[03;06Home to GRUB!\x1b[04;01H rest";
    let end = find_on_terminal(raw, 0, "Welcome to GRUB!").expect("the banner");
    assert_eq!(&raw[end..end + 8], "\x1b[04;01H");
    assert_eq!(find_on_terminal(raw, 0, "SeaBIOS"), Some(7));
    // Only control sequences are skipped, never text, and only after `from`.
    assert_eq!(find_on_terminal("Welc-ome to GRUB!", 0, "Welcome"), None);
    assert_eq!(find_on_terminal(raw, 20, "SeaBIOS"), None);
    // An unterminated sequence at the end is not skipped into.
    assert_eq!(find_on_terminal("ab\x1b[1;", 0, "ab"), Some(2));
    assert_eq!(find_on_terminal("a\x1b[1;", 0, "ab"), None);
}
