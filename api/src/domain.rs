//! `spec.domain`: the virtual hardware of a VMI (`v1.DomainSpec` and what it holds).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::other::Other;

/// The VM's hardware (`v1.DomainSpec`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainSpec {
    /// vCPU topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    /// Guest memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// Resources of the launcher Pod; `requests.memory` is the guest memory when `memory.guest`
    /// is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// How the guest boots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Firmware>,
    /// Disks, interfaces and other devices.
    #[serde(default)]
    pub devices: Devices,
    /// Fields KubeVirt has that Ferrovirt does not model; validation rejects them.
    #[serde(flatten)]
    pub other: Other,
}

/// vCPU topology (`v1.CPU`). vCPUs = cores x sockets x threads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// `host-passthrough` or `host-model`: the guest sees the CPUID that KVM supports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

impl DomainSpec {
    /// `memory.guest`, when given.
    pub fn guest_memory(&self) -> Option<&Quantity> {
        self.memory.as_ref()?.guest.as_ref()
    }

    /// `resources.requests.memory`, when given.
    pub fn memory_request(&self) -> Option<&Quantity> {
        self.resources.as_ref()?.requests.as_ref()?.get("memory")
    }

    /// `resources.limits.memory`, when given.
    pub fn memory_limit(&self) -> Option<&Quantity> {
        self.resources.as_ref()?.limits.as_ref()?.get("memory")
    }
}

impl Cpu {
    /// Number of vCPUs the topology asks for (unset or 0 parts count as 1, as in KubeVirt).
    pub fn vcpus(&self) -> u64 {
        [self.cores, self.sockets, self.threads]
            .iter()
            .map(|n| u64::from(n.filter(|&n| n > 0).unwrap_or(1)))
            .product()
    }
}

/// Guest memory (`v1.Memory`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// Memory the guest sees, e.g. `128Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Quantity>,
    #[serde(flatten)]
    pub other: Other,
}

/// Launcher Pod resources (`v1.ResourceRequirements`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// Do not add the VMM's overhead to the Pod's memory request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overcommit_guest_overhead: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

/// Boot firmware (`v1.Firmware`). Without either of `bootloader` and `kernelBoot` the launcher
/// boots the kernel of the user's disk directly (no firmware runs); `bootloader` runs firmware
/// (on QEMU), `kernelBoot` boots the kernel of a container image. `uuid` and `serial` are the
/// guest's SMBIOS system UUID and serial number (`/sys/class/dmi/id/product_uuid` and
/// `product_serial`), on every backend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Firmware {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootloader: Option<Bootloader>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_boot: Option<KernelBoot>,
    /// The SMBIOS system UUID, `8-4-4-4-12` hexadecimal digits. A VM's VMI gets one derived
    /// from the VM's name when the template has none (KubeVirt's legacy firmware UUID, stable
    /// across restarts); a VMI of its own gets its `metadata.uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The SMBIOS system serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

impl Firmware {
    /// The firmware the VMI asks for, if any.
    pub fn bootloader_kind(&self) -> Option<BootloaderKind> {
        let bootloader = self.bootloader.as_ref()?;
        match (&bootloader.bios, &bootloader.efi) {
            (_, Some(efi)) => Some(BootloaderKind::Efi {
                secure_boot: efi.secure_boot.unwrap_or(true),
            }),
            (bios, None) => Some(BootloaderKind::Bios {
                use_serial: bios.as_ref().and_then(|b| b.use_serial) == Some(true),
            }),
        }
    }
}

/// Which firmware boots the VM (of a validated [`Bootloader`]: `efi` when set, `bios`
/// otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootloaderKind {
    /// SeaBIOS; its output on the serial port when `use_serial`.
    Bios { use_serial: bool },
    /// OVMF (UEFI); `secure_boot` defaults to true, as in KubeVirt.
    Efi { secure_boot: bool },
}

/// The firmware that boots the VM (`v1.Bootloader`): one of `bios` and `efi`; neither is
/// `bios` (KubeVirt's default).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootloader {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<Bios>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efi: Option<Efi>,
    #[serde(flatten)]
    pub other: Other,
}

/// BIOS firmware, SeaBIOS (`v1.BIOS`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bios {
    /// The BIOS's output on the serial console.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_serial: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

/// UEFI firmware, OVMF (`v1.EFI`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Efi {
    /// Secure Boot; KubeVirt's default is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
    /// Keep the NVRAM across reboots of the VMI (KubeVirt's default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

/// A kernel (and initrd) taken from a container image (`v1.KernelBoot`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KernelBoot {
    /// Kernel command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_args: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<KernelBootContainer>,
    #[serde(flatten)]
    pub other: Other,
}

/// The image that holds the kernel (`v1.KernelBootContainer`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KernelBootContainer {
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secret: Option<String>,
    /// Path of the kernel inside the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_path: Option<String>,
    /// Path of the initrd inside the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initrd_path: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// The VM's devices (`v1.Devices`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Devices {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<Disk>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    /// A virtio-rng device fed from the host's entropy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rng: Option<Rng>,
    /// Attach the serial console (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_serial_console: Option<bool>,
    /// Attach an interface on the pod network when `interfaces` is empty (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_pod_interface: Option<bool>,
    /// Attach a virtio-vsock device (default false).
    #[serde(
        rename = "autoattachVSOCK",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub autoattach_vsock: Option<bool>,
    /// Ferrovirt has no balloon: only `false` is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_mem_balloon: Option<bool>,
    /// A VGA card shown by VNC (the `vnc` subresource): `true` only with
    /// `firmware.bootloader` (QEMU's q35 machine). Unset is false here, unlike KubeVirt: a
    /// microVM has no graphics, and a firmware-booted VM gets them when it asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_graphics_device: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

/// A disk of the VM, backed by the volume of the same name (`v1.Disk`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    pub name: String,
    /// Attach as a disk (the only target Ferrovirt has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskTarget>,
    /// Lowest boots first; without kernelBoot the boot disk is the root of the bundled kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_order: Option<u32>,
    /// Serial number the guest sees (virtio-blk ID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// How a disk is attached (`v1.DiskTarget`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskTarget {
    /// `virtio` (the only bus of a microVM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readonly: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

/// The six bytes of an interface's `macAddress`, written as KubeVirt accepts it (Go's
/// `net.ParseMAC` with six bytes): hexadecimal pairs separated by `:` or all by `-`.
pub fn parse_mac_address(text: &str) -> Option<[u8; 6]> {
    let separator = if text.contains('-') { '-' } else { ':' };
    let mut out = [0u8; 6];
    let mut parts = text.split(separator);
    for byte in out.iter_mut() {
        let part = parts.next()?;
        if part.len() != 2 || !part.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// A network interface of the VM, connected to the network of the same name (`v1.Interface`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    pub name: String,
    /// NAT between the guest and the Pod's address (the only binding Ferrovirt has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masquerade: Option<InterfaceMasquerade>,
    /// `virtio` (the only model of a microVM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// Ports forwarded to the guest; all ports when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
    #[serde(flatten)]
    pub other: Other,
}

/// The masquerade binding (`v1.InterfaceMasquerade`, no fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InterfaceMasquerade {
    #[serde(flatten)]
    pub other: Other,
}

/// A port forwarded to the guest (`v1.Port`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub port: i32,
    /// `TCP` (default) or `UDP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// The virtio-rng device (`v1.Rng`, no fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Rng {
    #[serde(flatten)]
    pub other: Other,
}
