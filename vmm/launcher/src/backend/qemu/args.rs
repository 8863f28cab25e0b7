//! `VmConfig` -> `qemu-system-x86_64` arguments (pure).
//!
//! The machine is `microvm` under TCG, every device on virtio-mmio. For Ferrovirt's own kernel
//! (bundled or from a kernelBoot image) the devices are described on its command line
//! (`acpi=off`: QEMU appends the `virtio_mmio.device=` entries; our kernel has
//! `CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES`). A distribution kernel found on the user's disk gets
//! ACPI tables instead ([`Acpi::On`]): Debian's lacks that option and finds virtio-mmio devices
//! only in the DSDT. An i8042 controller is added so that the launcher can press Ctrl-Alt-Del
//! for a graceful shutdown (with ACPI on, our kernel fails to probe it; a distribution kernel
//! with ACPI also gets the power button of `system_powerdown`). QEMU starts with its vCPUs
//! stopped (`-S`) and serves QMP and the serial port on unix sockets; the launcher connects to
//! both before it lets the vCPUs run, so no console byte is lost. The kernel command line gets
//! `tsc_early_khz=` (TCG's TSC calibration hangs about one boot in three without it) and
//! `panic=-1` (a panicking guest resets, which the launcher sees, instead of spinning). A guestless
//! VM has no `-kernel`: microvm's firmware (qboot) finds nothing to boot and halts.

use std::path::{Path, PathBuf};

use vmm::config::{ConsoleConfig, VmConfig};

/// Why a `VmConfig` cannot run on QEMU.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("{0} is not supported by the QEMU TCG backend ({1})")]
    Unsupported(&'static str, &'static str),
}

/// Whether the machine has ACPI tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acpi {
    /// `microvm,acpi=off`: for Ferrovirt's own kernel.
    Off,
    /// `microvm,acpi=on`: for a distribution kernel (the user's own, found on the boot disk).
    On,
}

/// Where QEMU's own sockets go.
#[derive(Clone, Debug)]
pub struct QemuPaths {
    pub qmp: PathBuf,
}

/// The arguments (after the program name).
pub fn qemu_args(
    config: &VmConfig,
    paths: &QemuPaths,
    tsc_khz: Option<u64>,
    acpi: Acpi,
) -> Result<Vec<String>, ArgsError> {
    if config.vsock.is_some() {
        return Err(ArgsError::Unsupported(
            "vsock",
            "QEMU's vhost-vsock needs /dev/vhost-vsock",
        ));
    }
    let mut args: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
    let machine = match acpi {
        Acpi::Off => "microvm,acpi=off",
        Acpi::On => "microvm,acpi=on",
    };
    push(&["-M", machine, "-accel", "tcg", "-device", "i8042"]);
    push(&["-nodefaults", "-no-user-config", "-display", "none", "-S"]);
    let mib = config.memory.size.div_ceil(1 << 20);
    push(&["-m", &format!("{mib}M")]);
    push(&["-smp", &config.cpus.boot_vcpus.to_string()]);
    push(&[
        "-qmp",
        &format!("unix:{},server=on,wait=off", escape(&paths.qmp)),
    ]);
    if config.console != ConsoleConfig::Off {
        return Err(ArgsError::Unsupported(
            "the virtio console",
            "the serial port is the console",
        ));
    }
    args.extend(serial_args(&config.serial));
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
    // A guestless VM gets no kernel: microvm then runs its firmware (qboot, Debian's
    // qemu-system-data /usr/share/qemu/bios-microvm.bin), which finds nothing to boot and
    // halts the vCPU with interrupts off. QMP's stop, cont, quit and system_reset work on it.
    if !config.payload.guestless {
        let mut cmdline = config.payload.cmdline.clone();
        if let Some(khz) = tsc_khz {
            cmdline.push_str(&format!(" tsc_early_khz={khz}"));
        }
        cmdline.push_str(" panic=-1");
        push(&["-kernel", &config.payload.kernel.display().to_string()]);
        if let Some(initramfs) = &config.payload.initramfs {
            push(&["-initrd", &initramfs.display().to_string()]);
        }
        push(&["-append", cmdline.trim()]);
    }
    for (index, disk) in config.disks.iter().enumerate() {
        let id = format!("disk{index}");
        let readonly = if disk.readonly { ",readonly=on" } else { "" };
        push(&[
            "-drive",
            &format!(
                "id={id},file={},format=raw,if=none,cache=none,aio=threads{readonly}",
                escape(&disk.path)
            ),
        ]);
        push(&[
            "-device",
            &format!(
                "virtio-blk-device,drive={id},serial={}",
                serial_number(&disk.id)
            ),
        ]);
    }
    for (index, net) in config.net.iter().enumerate() {
        let id = format!("net{index}");
        push(&[
            "-netdev",
            &format!("tap,id={id},ifname={},script=no,downscript=no", net.tap),
        ]);
        push(&[
            "-device",
            &format!("virtio-net-device,netdev={id},mac={}", net.mac),
        ]);
    }
    if let Some(rng) = &config.rng {
        push(&[
            "-object",
            &format!("rng-random,id=rng0,filename={}", escape(&rng.src)),
        ]);
        push(&["-device", "virtio-rng-device,rng=rng0"]);
    }
    Ok(args)
}

fn serial_args(serial: &ConsoleConfig) -> Vec<String> {
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
    match serial {
        ConsoleConfig::Off => v(&["-serial", "none"]),
        ConsoleConfig::Null => v(&["-serial", "null"]),
        ConsoleConfig::Tty => v(&["-serial", "stdio"]),
        ConsoleConfig::File { path } => v(&[
            "-chardev",
            &format!("file,id=serial0,path={}", escape(path)),
            "-serial",
            "chardev:serial0",
        ]),
        ConsoleConfig::Socket { path } => v(&[
            "-chardev",
            &format!("socket,id=serial0,path={},server=on,wait=off", escape(path)),
            "-serial",
            "chardev:serial0",
        ]),
    }
}

/// QEMU option values escape `,` as `,,`.
fn escape(path: &Path) -> String {
    path.display().to_string().replace(',', ",,")
}

/// virtio-blk serials are at most 20 bytes of printable ASCII without commas.
fn serial_number(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(20)
        .collect()
}

#[cfg(test)]
mod tests {
    use vmm::config::{DiskConfig, NetConfig, PayloadConfig, RngConfig, VsockConfig};

    use super::*;

    fn config() -> VmConfig {
        VmConfig {
            payload: PayloadConfig {
                kernel: "/k/vmlinux".into(),
                initramfs: Some("/k/initrd".into()),
                cmdline: "console=ttyS0 root=/dev/vda rw".into(),
                guestless: false,
            },
            disks: vec![
                DiskConfig {
                    id: "root".into(),
                    path: "/d/root,1.img".into(),
                    readonly: false,
                },
                DiskConfig {
                    id: "cloudinitdisk".into(),
                    path: "/d/ci.img".into(),
                    readonly: true,
                },
            ],
            net: vec![NetConfig {
                id: "default".into(),
                tap: "tap0".into(),
                mac: "02:00:00:00:00:01".into(),
            }],
            serial: ConsoleConfig::Socket {
                path: "/run/serial.sock".into(),
            },
            rng: Some(RngConfig::default()),
            ..VmConfig::default()
        }
    }

    fn paths() -> QemuPaths {
        QemuPaths {
            qmp: "/run/qmp.sock".into(),
        }
    }

    fn has_pair(args: &[String], flag: &str, value: &str) -> bool {
        args.windows(2).any(|w| w[0] == flag && w[1] == value)
    }

    #[test]
    fn translation() {
        let args = qemu_args(&config(), &paths(), Some(2_600_000), Acpi::Off).unwrap();
        let cases = [
            ("-M", "microvm,acpi=off"),
            ("-device", "i8042"),
            ("-accel", "tcg"),
            ("-m", "512M"),
            ("-smp", "1"),
            ("-qmp", "unix:/run/qmp.sock,server=on,wait=off"),
            (
                "-chardev",
                "socket,id=serial0,path=/run/serial.sock,server=on,wait=off",
            ),
            ("-serial", "chardev:serial0"),
            ("-kernel", "/k/vmlinux"),
            ("-initrd", "/k/initrd"),
            (
                "-append",
                "console=ttyS0 root=/dev/vda rw tsc_early_khz=2600000 panic=-1",
            ),
            (
                "-drive",
                "id=disk0,file=/d/root,,1.img,format=raw,if=none,cache=none,aio=threads",
            ),
            ("-device", "virtio-blk-device,drive=disk0,serial=root"),
            (
                "-drive",
                "id=disk1,file=/d/ci.img,format=raw,if=none,cache=none,aio=threads,readonly=on",
            ),
            ("-netdev", "tap,id=net0,ifname=tap0,script=no,downscript=no"),
            (
                "-device",
                "virtio-net-device,netdev=net0,mac=02:00:00:00:00:01",
            ),
            ("-object", "rng-random,id=rng0,filename=/dev/urandom"),
            ("-device", "virtio-rng-device,rng=rng0"),
        ];
        for (flag, value) in cases {
            assert!(
                has_pair(&args, flag, value),
                "{flag} {value} missing from {args:?}"
            );
        }
        assert!(args.contains(&"-S".to_string()));
        // The boot disk's device comes before the others.
        let first_blk = args.iter().position(|a| a.contains("drive=disk0")).unwrap();
        let second_blk = args.iter().position(|a| a.contains("drive=disk1")).unwrap();
        assert!(first_blk < second_blk);
    }

    #[test]
    fn a_guestless_vm_has_no_kernel_and_the_machines_firmware() {
        let guestless = VmConfig {
            payload: PayloadConfig::guestless(),
            memory: vmm::config::MemoryConfig { size: 16 << 20 },
            disks: Vec::new(),
            net: Vec::new(),
            rng: None,
            ..config()
        };
        let args = qemu_args(&guestless, &paths(), Some(2_600_000), Acpi::Off).unwrap();
        for flag in ["-kernel", "-initrd", "-append", "-bios", "-drive"] {
            assert!(!args.contains(&flag.to_string()), "{flag} in {args:?}");
        }
        for (flag, value) in [
            ("-M", "microvm,acpi=off"),
            ("-device", "i8042"),
            ("-m", "16M"),
            ("-serial", "chardev:serial0"),
        ] {
            assert!(
                has_pair(&args, flag, value),
                "{flag} {value} missing from {args:?}"
            );
        }
        assert!(args.contains(&"-S".to_string()));
    }

    #[test]
    fn acpi_for_distribution_kernels_only() {
        for (acpi, machine) in [
            (Acpi::Off, "microvm,acpi=off"),
            (Acpi::On, "microvm,acpi=on"),
        ] {
            let args = qemu_args(&config(), &paths(), None, acpi).unwrap();
            assert!(has_pair(&args, "-M", machine), "{args:?}");
            // The i8042 stays: Ctrl-Alt-Del is the graceful shutdown either way.
            assert!(has_pair(&args, "-device", "i8042"), "{args:?}");
        }
    }

    #[test]
    fn serial_modes() {
        let cases = [
            (ConsoleConfig::Null, "null"),
            (ConsoleConfig::Off, "none"),
            (ConsoleConfig::Tty, "stdio"),
        ];
        for (serial, want) in cases {
            let args =
                qemu_args(&VmConfig { serial, ..config() }, &paths(), None, Acpi::Off).unwrap();
            assert!(has_pair(&args, "-serial", want), "{args:?}");
            assert!(!args.iter().any(|a| a.contains("tsc_early_khz")));
        }
    }

    #[test]
    fn unsupported_devices_are_refused() {
        let vsock = VmConfig {
            vsock: Some(VsockConfig {
                cid: 3,
                socket: "/v".into(),
            }),
            ..config()
        };
        assert!(matches!(
            qemu_args(&vsock, &paths(), None, Acpi::Off),
            Err(ArgsError::Unsupported("vsock", _))
        ));
        let console = VmConfig {
            console: ConsoleConfig::Null,
            ..config()
        };
        assert!(qemu_args(&console, &paths(), None, Acpi::Off).is_err());
    }
}
