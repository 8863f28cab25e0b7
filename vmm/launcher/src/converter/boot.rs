//! Boot: what the VM boots and why, by direct kernel boot, in the order of ARCHITECTURE.md's
//! "How a VM boots":
//! 1. `firmware.kernelBoot`: the kernel (and initrd) of the kernel-boot container the Pod
//!    mounts, with its `kernelArgs`.
//! 2. The user's own OS: the kernel, initrd and command line of the default boot entry that the
//!    launcher's boot discovery found on the boot disk ([`BootDiscovery::Found`]). The image's
//!    command line is kept whole; `console=ttyS0` is added when it names no ttyS0 console, so
//!    that the serial console (`virtctl console`) shows the guest.
//! 3. `firmware.bootloader`: firmware boots the disk's own boot loader, on the QEMU backend's
//!    q35 machine ([`Firmware`]): `bios` is SeaBIOS (with `useSerial` its output on the serial
//!    console), `efi` with `secureBoot: false` OVMF (Debian's `ovmf`: `OVMF_CODE_4M.fd`
//!    read-only, the VM's own copy of `OVMF_VARS_4M.fd`). The launcher does not look for a
//!    kernel on the disk and gives QEMU none ([`PayloadConfig::guestless`]: no kernel for the VMM
//!    to load); the boot loader on the disk (grub) finds and starts it. Secure Boot is refused by
//!    validation. With `kernelBoot` as well (KubeVirt accepts both) the firmware runs and boots
//!    the kernelBoot kernel, which QEMU hands it.
//! 4. A bare root filesystem (no partition table, no kernel, Firecracker and Kata style): the
//!    kernel Ferrovirt ships, with that disk as `root=/dev/vda`.
//! 5. A VMI without an OS disk (no disk, or only emptyDisks and cloud-init seeds) has nothing
//!    of its own to boot. It runs "guestless", as KubeVirt runs such VMIs (its functional suite
//!    makes most of its VMIs so): no kernel ([`PayloadConfig::guestless`]), its vCPUs idle, and
//!    it answers pause, unpause, shutdown (nothing in it reacts: it is stopped when the grace
//!    period ends) and kill like any VM. A launcher given a bundled initramfs
//!    ([`HostFacts::default_initramfs`], `--initramfs`: the project's test guests run that way)
//!    boots its bundled kernel and initramfs alone instead; the launcher Pod gives none.
//!
//! Anything else is an error with the reason, so that the VMI fails with it: a partitioned disk
//! without a kernel, or a disk that holds nothing to boot, never boots the bundled kernel (its
//! initramfs would run the project's own init, not the user's OS).

use std::path::PathBuf;

use api::domain::BootloaderKind;
use api::VirtualMachineInstanceSpec;
use vmm::config::{DiskConfig, PayloadConfig};

use super::host::{BootDiscovery, FoundKernel};
use super::{FieldProblem, HostFacts};

/// Command line of the bundled kernel before the root disk: the serial console is ttyS0.
pub const DEFAULT_CMDLINE: &str = "console=ttyS0";

/// Where the kernel the VM boots comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOrigin {
    /// `firmware.kernelBoot`.
    KernelBoot,
    /// `firmware.bootloader`: the firmware runs the disk's own boot loader, which loads the
    /// kernel of the user's disk.
    Firmware,
    /// Found on the boot disk: the user's own OS.
    UserDisk,
    /// The kernel Ferrovirt ships.
    Bundled,
    /// No kernel: a guestless VM.
    Guestless,
}

/// How the VM boots and why, as the VMI reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootChoice {
    pub origin: KernelOrigin,
    pub description: String,
}

/// The firmware of a VMI with `firmware.bootloader` (QEMU's q35 machine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Firmware {
    /// SeaBIOS; with `serial` its output goes to the serial console (`bios.useSerial`).
    SeaBios { serial: bool },
    /// OVMF without Secure Boot: its code, and the variables template each VM gets a copy of.
    Ovmf {
        code: PathBuf,
        vars_template: PathBuf,
    },
}

/// OVMF's code (Debian's `ovmf`, 4 MiB flash layout, no Secure Boot), in [`HostFacts::ovmf_dir`].
pub const OVMF_CODE: &str = "OVMF_CODE_4M.fd";
/// OVMF's empty variable store, copied for each VM.
pub const OVMF_VARS: &str = "OVMF_VARS_4M.fd";

impl Firmware {
    /// How the boot report names it.
    pub fn name(&self) -> &'static str {
        match self {
            Firmware::SeaBios { .. } => "SeaBIOS",
            Firmware::Ovmf { .. } => "OVMF (UEFI)",
        }
    }
}

/// The boot piece's result: the payload, the firmware if any, and the choice behind them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootPlan {
    pub payload: PayloadConfig,
    pub firmware: Option<Firmware>,
    pub choice: BootChoice,
}

/// What the VM boots; `disks` are the VM's disks, boot disk first.
pub fn plan(
    spec: &VirtualMachineInstanceSpec,
    facts: &HostFacts,
    disks: &[DiskConfig],
) -> Result<BootPlan, FieldProblem> {
    let firmware = spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.bootloader_kind())
        .map(|kind| firmware(kind, facts))
        .transpose()?;
    let kernel_boot = spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.kernel_boot.as_ref());
    if let Some(kernel_boot) = kernel_boot {
        let mut plan = kernel_boot_plan(kernel_boot, facts)?;
        if let Some(firmware) = firmware {
            plan.choice.description = format!(
                "firmware: {}, booting the {}",
                firmware.name(),
                plan.choice.description
            );
            plan.firmware = Some(firmware);
        }
        return Ok(plan);
    }
    if let Some(firmware) = firmware {
        let disk = disks.first().map_or_else(
            || "no disk".to_string(),
            |d| format!("the boot loader of disk {}", d.id),
        );
        let serial = match firmware {
            Firmware::SeaBios { serial: true } => ", its output on the serial console",
            Firmware::SeaBios { serial: false } => "",
            Firmware::Ovmf { .. } => ", Secure Boot off",
        };
        let description = format!("firmware: {}{serial}, booting {disk}", firmware.name());
        return Ok(BootPlan {
            payload: PayloadConfig::guestless(),
            firmware: Some(firmware),
            choice: BootChoice {
                origin: KernelOrigin::Firmware,
                description,
            },
        });
    }
    let disk_path = |disk: &str| {
        spec.domain
            .devices
            .disks
            .iter()
            .position(|d| d.name == disk)
            .map_or_else(
                || "spec.domain.devices.disks".to_string(),
                |index| format!("spec.domain.devices.disks[{index}]"),
            )
    };
    match &facts.boot {
        BootDiscovery::Found(found) => Ok(user_disk_plan(found)),
        BootDiscovery::BareFilesystem { disk, filesystem } => {
            let mut cmdline = DEFAULT_CMDLINE.to_string();
            if let Some(root) = disks.first() {
                let mode = if root.readonly { "ro" } else { "rw" };
                cmdline.push_str(&format!(" root=/dev/vda {mode}"));
            }
            Ok(bundled(
                cmdline,
                facts,
                format!(
                    "the bundled kernel: disk {disk} is a bare filesystem ({filesystem}) without \
                     a kernel, booted as its root (root=/dev/vda)"
                ),
            ))
        }
        BootDiscovery::NoOsDisk { reason }
            if facts.default_initramfs.is_some() || facts.no_os_disk_boots_kernel =>
        {
            Ok(bundled(
                DEFAULT_CMDLINE.to_string(),
                facts,
                format!("the bundled kernel and initramfs: {reason}"),
            ))
        }
        BootDiscovery::NoOsDisk { reason } => Ok(BootPlan {
            firmware: None,
            payload: PayloadConfig::guestless(),
            choice: BootChoice {
                origin: KernelOrigin::Guestless,
                description: format!(
                    "guestless: {reason}, so nothing boots (no kernel; the vCPUs idle)"
                ),
            },
        }),
        BootDiscovery::PartitionedWithoutKernel { disk, layout } => Err(FieldProblem::new(
            disk_path(disk),
            format!(
                "disk {disk} is a partitioned disk ({layout}) without a kernel: no grub.cfg, \
                 BLS entry, extlinux.conf or /vmlinuz on any partition, so there is no OS on it \
                 to boot"
            ),
        )),
        BootDiscovery::Nothing { disk, reason } => Err(FieldProblem::new(
            disk_path(disk),
            format!("disk {disk} holds nothing to boot: {reason}"),
        )),
        BootDiscovery::NotLooked => Err(FieldProblem::new(
            "spec.domain.devices.disks",
            "the launcher did not examine the boot disk (a launcher bug)",
        )),
    }
}

fn firmware(kind: BootloaderKind, facts: &HostFacts) -> Result<Firmware, FieldProblem> {
    match kind {
        BootloaderKind::Bios { use_serial } => Ok(Firmware::SeaBios { serial: use_serial }),
        BootloaderKind::Efi { secure_boot: false } => Ok(Firmware::Ovmf {
            code: facts.ovmf_dir.join(OVMF_CODE),
            vars_template: facts.ovmf_dir.join(OVMF_VARS),
        }),
        // Validation refuses it; a launcher given it anyway says so.
        BootloaderKind::Efi { secure_boot: true } => Err(FieldProblem::new(
            "spec.domain.firmware.bootloader.efi.secureBoot",
            "Secure Boot is not supported by ferrovirt: set secureBoot: false",
        )),
    }
}

fn bundled(cmdline: String, facts: &HostFacts, description: String) -> BootPlan {
    BootPlan {
        firmware: None,
        payload: PayloadConfig {
            kernel: facts.default_kernel.clone(),
            initramfs: facts.default_initramfs.clone(),
            cmdline,
            guestless: false,
        },
        choice: BootChoice {
            origin: KernelOrigin::Bundled,
            description,
        },
    }
}

fn user_disk_plan(found: &FoundKernel) -> BootPlan {
    let (cmdline, added) = with_serial_console(&found.cmdline);
    let mut description = format!("disk {}: {}", found.disk, found.source);
    if added {
        description.push_str(", with console=ttyS0 added for the serial console");
    }
    BootPlan {
        firmware: None,
        payload: PayloadConfig {
            kernel: found.kernel.clone(),
            initramfs: found.initrd.clone(),
            cmdline,
            guestless: false,
        },
        choice: BootChoice {
            origin: KernelOrigin::UserDisk,
            description,
        },
    }
}

/// `cmdline` with `console=ttyS0` appended when none of its `console=` options is ttyS0 (with
/// or without options such as `,115200n8`); whether it was added. Nothing is removed: a
/// `console=tty0` stays, and the last `console=` is the one `/dev/console` follows.
pub fn with_serial_console(cmdline: &str) -> (String, bool) {
    let cmdline = cmdline.trim();
    let has_serial = cmdline.split_whitespace().any(|option| {
        option
            .strip_prefix("console=")
            .is_some_and(|c| c == "ttyS0" || c.starts_with("ttyS0,"))
    });
    if has_serial {
        (cmdline.to_string(), false)
    } else if cmdline.is_empty() {
        (DEFAULT_CMDLINE.to_string(), true)
    } else {
        (format!("{cmdline} {DEFAULT_CMDLINE}"), true)
    }
}

fn kernel_boot_plan(
    kernel_boot: &api::domain::KernelBoot,
    facts: &HostFacts,
) -> Result<BootPlan, FieldProblem> {
    const PATH: &str = "spec.domain.firmware.kernelBoot";
    let container = kernel_boot.container.as_ref().ok_or_else(|| {
        FieldProblem::new(
            format!("{PATH}.container"),
            "is required: ferrovirt boots the kernel of a container image",
        )
    })?;
    let in_image = |field: &str, path: &str| -> Result<PathBuf, FieldProblem> {
        let relative = path.trim_start_matches('/');
        if relative.is_empty() || relative.split('/').any(|c| c == "..") {
            return Err(FieldProblem::new(
                format!("{PATH}.container.{field}"),
                format!("{path:?} is not a path inside the image"),
            ));
        }
        Ok(facts.kernel_boot_dir.join(relative))
    };
    let kernel_path = container
        .kernel_path
        .as_deref()
        .ok_or_else(|| FieldProblem::new(format!("{PATH}.container.kernelPath"), "is required"))?;
    let kernel = in_image("kernelPath", kernel_path)?;
    let initramfs = container
        .initrd_path
        .as_deref()
        .map(|p| in_image("initrdPath", p))
        .transpose()?;
    let cmdline = kernel_boot
        .kernel_args
        .clone()
        .unwrap_or_else(|| DEFAULT_CMDLINE.to_string());
    let mut description = format!("kernelBoot: kernel {kernel_path}");
    if let Some(initrd) = &container.initrd_path {
        description.push_str(&format!(" and initrd {initrd}"));
    }
    description.push_str(&format!(" of the container image {}", container.image));
    Ok(BootPlan {
        firmware: None,
        payload: PayloadConfig {
            kernel,
            initramfs,
            cmdline,
            guestless: false,
        },
        choice: BootChoice {
            origin: KernelOrigin::KernelBoot,
            description,
        },
    })
}

/// The virtio transport for a kernel of `origin` on the KVM VMM: Ferrovirt's own kernel (bundled
/// or a kernelBoot container's) finds its devices through `virtio_mmio.device=`; a distribution
/// kernel from the user's disk lacks that and finds them on PCI, described by ACPI.
pub fn transport(origin: KernelOrigin) -> vmm::config::Transport {
    match origin {
        // Firmware runs on QEMU's q35, on PCI; the config says so too.
        KernelOrigin::UserDisk | KernelOrigin::Firmware => vmm::config::Transport::Pci,
        // A guestless VM has no driver for either: mmio needs no ACPI tables.
        KernelOrigin::KernelBoot | KernelOrigin::Bundled | KernelOrigin::Guestless => {
            vmm::config::Transport::Mmio
        }
    }
}

#[cfg(test)]
#[path = "boot_tests.rs"]
mod tests;
