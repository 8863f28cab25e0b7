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
//!
//! A VMI with `firmware.bootloader` gets a `q35` machine instead ([`Machine::Q35`]): every device
//! on PCI (virtio-blk-pci, virtio-net-pci without option ROM, virtio-rng-pci), the disks with
//! `bootindex` in boot order (the converter's disk order: `bootOrder`, then declaration order),
//! ACPI (q35's own, with its power button) and the PC's i8042. The firmware is SeaBIOS (QEMU's
//! default on q35; `useSerial` sets SeaBIOS's `etc/sercon-port` to COM1, so its screen goes to
//! the serial console) or OVMF: its code a read-only pflash, its variables a writable pflash,
//! the VM's own copy in the run directory. The firmware boots the disk's own boot loader; with
//! `kernelBoot` QEMU hands it the kernel, initrd and command line (fw_cfg) instead.
//!
//! The SMBIOS system information (`firmware.uuid`, `firmware.serial`) is `-smbios type=1` on
//! q35; on microvm, which has no `-smbios`, it is the VMM's own tables handed to qboot through
//! fw_cfg ([`smbios_files`]).
//!
//! Every VM gets the QEMU guest agent's channel: a virtio-serial controller
//! (`virtio-serial-device` on microvm, `virtio-serial-pci` on q35) with one port named
//! `org.qemu.guest_agent.0` (the name qemu-guest-agent looks for), backed by a unix socket the
//! launcher connects to ([`QemuPaths::agent`]). It comes after every other device, so that the
//! disks and NICs keep the order (and the guest its `vda`, `vdb`, ...) they had without it; a
//! migration's two sides build the same list.

use std::path::{Path, PathBuf};

use vmm::config::{ConsoleConfig, SmbiosConfig, VmConfig};
use vmm::smbios::{SmbiosError, SmbiosTables};

use crate::converter::boot::Firmware;

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

/// The machine QEMU emulates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Machine {
    /// `microvm`, every device on virtio-mmio, direct kernel boot (or none: guestless).
    Microvm(Acpi),
    /// `q35` with firmware, every device on PCI; with a graphics device (a VGA card) and QEMU's
    /// VNC server on the unix socket given, when the VMI asks for one.
    Q35(Firmware, Option<PathBuf>),
}

/// Where QEMU's own files go: its QMP socket, the guest agent's socket, and for q35 the VM's
/// copy of the OVMF variables and SeaBIOS's serial-console port (a 2-byte integer file).
#[derive(Clone, Debug)]
pub struct QemuPaths {
    pub qmp: PathBuf,
    /// The host end of the guest agent channel (QEMU listens, the launcher connects).
    pub agent: PathBuf,
    pub ovmf_vars: PathBuf,
    pub sercon_port: PathBuf,
    /// The SMBIOS entry point and structure table microvm's firmware (qboot) installs
    /// ([`smbios_files`]).
    pub smbios_anchor: PathBuf,
    pub smbios_tables: PathBuf,
}

/// The two files microvm's firmware (qboot) reads from fw_cfg, `etc/smbios/smbios-anchor` and
/// `etc/smbios/smbios-tables` (QEMU builds them itself for the PC machines only, and microvm
/// has no `-smbios`): the VMM's own tables, their address left to qboot, which places them in
/// the BIOS area. QEMU warns on stderr that the names lack the `opt/` prefix of user files;
/// these two are the names qboot looks for. None when the VM has no SMBIOS config, or is
/// guestless, or runs firmware (q35 gets `-smbios` instead).
pub fn smbios_files(
    config: &VmConfig,
    machine: &Machine,
) -> Result<Option<SmbiosTables>, SmbiosError> {
    match (&config.smbios, machine) {
        (Some(smbios), Machine::Microvm(_)) if !config.payload.guestless => {
            SmbiosTables::build(smbios, 0).map(Some)
        }
        _ => Ok(None),
    }
}

/// The name of the guest agent's virtio-serial port (qemu-guest-agent's default channel).
pub const AGENT_PORT_NAME: &str = "org.qemu.guest_agent.0";

/// SeaBIOS's `etc/sercon-port`: COM1's I/O port, little-endian (`romfile_loadint`).
pub const SERCON_PORT: [u8; 2] = 0x3f8u16.to_le_bytes();

/// The arguments (after the program name).
pub fn qemu_args(
    config: &VmConfig,
    paths: &QemuPaths,
    tsc_khz: Option<u64>,
    machine: &Machine,
) -> Result<Vec<String>, ArgsError> {
    if config.vsock.is_some() {
        return Err(ArgsError::Unsupported(
            "vsock",
            "QEMU's vhost-vsock needs /dev/vhost-vsock",
        ));
    }
    let mut args: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
    let q35 = matches!(machine, Machine::Q35(..));
    match machine {
        Machine::Microvm(Acpi::Off) => push(&["-M", "microvm,acpi=off"]),
        Machine::Microvm(Acpi::On) => push(&["-M", "microvm,acpi=on"]),
        Machine::Q35(..) => push(&["-M", "q35"]),
    }
    push(&["-accel", "tcg"]);
    match machine {
        // The PC's own i8042 is there already.
        Machine::Q35(..) => {}
        Machine::Microvm(_) => push(&["-device", "i8042"]),
    }
    match machine {
        Machine::Microvm(_) | Machine::Q35(Firmware::SeaBios { serial: false }, _) => {}
        Machine::Q35(Firmware::SeaBios { serial: true }, _) => push(&[
            "-fw_cfg",
            &format!("name=etc/sercon-port,file={}", escape(&paths.sercon_port)),
        ]),
        Machine::Q35(Firmware::Ovmf { code, .. }, _) => {
            push(&[
                "-drive",
                &format!(
                    "if=pflash,unit=0,format=raw,readonly=on,file={}",
                    escape(code)
                ),
            ]);
            push(&[
                "-drive",
                &format!(
                    "if=pflash,unit=1,format=raw,file={}",
                    escape(&paths.ovmf_vars)
                ),
            ]);
        }
    }
    match (&config.smbios, machine) {
        (Some(smbios), Machine::Q35(..)) => push(&["-smbios", &smbios_type1(smbios)]),
        (Some(_), Machine::Microvm(_)) if !config.payload.guestless => {
            for (name, file) in [
                ("smbios-anchor", &paths.smbios_anchor),
                ("smbios-tables", &paths.smbios_tables),
            ] {
                push(&[
                    "-fw_cfg",
                    &format!("name=etc/smbios/{name},file={}", escape(file)),
                ]);
            }
        }
        _ => {}
    }
    push(&["-nodefaults", "-no-user-config", "-display", "none", "-S"]);
    // The screen: KubeVirt's VGA card, shown by QEMU's VNC server only (no local display),
    // which virt-handler relays for the `vnc` subresource.
    if let Machine::Q35(_, Some(vnc)) = machine {
        push(&["-device", "VGA"]);
        push(&["-vnc", &format!("unix:{}", escape(vnc))]);
    }
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
        if let (Some(khz), false) = (tsc_khz, q35) {
            cmdline.push_str(&format!(" tsc_early_khz={khz}"));
        }
        cmdline.push_str(" panic=-1");
        push(&["-kernel", &config.payload.kernel.display().to_string()]);
        if let Some(initramfs) = &config.payload.initramfs {
            push(&["-initrd", &initramfs.display().to_string()]);
        }
        push(&["-append", cmdline.trim()]);
    }
    // The transport, and on q35 what the firmware boots from: the disks in their order.
    let (blk, net, rng, serial, bootindex) = if q35 {
        (
            "virtio-blk-pci",
            "virtio-net-pci",
            "virtio-rng-pci",
            "virtio-serial-pci",
            true,
        )
    } else {
        (
            "virtio-blk-device",
            "virtio-net-device",
            "virtio-rng-device",
            "virtio-serial-device",
            false,
        )
    };
    for (index, disk) in config.disks.iter().enumerate() {
        let id = format!("disk{index}");
        let boot = if bootindex {
            format!(",bootindex={}", index + 1)
        } else {
            String::new()
        };
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
            &format!("{blk},drive={id},serial={}{boot}", serial_number(&disk.id)),
        ]);
    }
    for (index, nic) in config.net.iter().enumerate() {
        let id = format!("net{index}");
        push(&[
            "-netdev",
            &format!("tap,id={id},ifname={},script=no,downscript=no", nic.tap),
        ]);
        push(&[
            "-device",
            &format!(
                "{net},netdev={id},mac={}{}",
                nic.mac,
                // No iPXE option ROM: the firmware boots the disks, never the network.
                if q35 { ",romfile=" } else { "" }
            ),
        ]);
    }
    if let Some(source) = &config.rng {
        push(&[
            "-object",
            &format!("rng-random,id=rng0,filename={}", escape(&source.src)),
        ]);
        push(&["-device", &format!("{rng},rng=rng0")]);
    }
    args.extend(agent_channel_args(serial, &paths.agent));
    Ok(args)
}

/// The guest agent's channel: a virtio-serial controller of type `controller` and its one port,
/// backed by a unix socket QEMU listens on at `socket` (without waiting for the launcher).
fn agent_channel_args(controller: &str, socket: &Path) -> Vec<String> {
    vec![
        "-chardev".to_string(),
        format!(
            "socket,id=agent0,path={},server=on,wait=off",
            escape(socket)
        ),
        "-device".to_string(),
        format!("{controller},id=agentserial0"),
        "-device".to_string(),
        format!("virtserialport,bus=agentserial0.0,chardev=agent0,name={AGENT_PORT_NAME}"),
    ]
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

/// QEMU's `-smbios type=1,...` of the PC machines: the system information SeaBIOS and OVMF
/// put in the tables QEMU builds.
fn smbios_type1(smbios: &SmbiosConfig) -> String {
    let mut value = String::from("type=1");
    let uuid = ("uuid", smbios.uuid.as_deref());
    for (key, text) in smbios.strings().into_iter().chain([uuid]) {
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            value.push_str(&format!(",{key}={}", text.replace(',', ",,")));
        }
    }
    value
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
#[path = "args_tests.rs"]
mod tests;
