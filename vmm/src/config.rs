//! `VmConfig`: what a VM is made of, as plain serde data.
//!
//! The launcher's converter emits it from a VMI; both backends (the in-process KVM VMM and QEMU
//! TCG) accept it; the standalone `vmm` command reads it from JSON. Its shape follows
//! cloud-hypervisor's `VmConfig`. `validate()` checks it as a whole and returns errors that carry
//! the offending values.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Smallest guest memory we accept: below this a Linux guest cannot even decompress. A guestless
/// VM would do with less (its idle code sits at 1 MiB), but one floor serves every VM: virt-api
/// admits less and the launcher rounds up to this (`contract::limits::boot_memory_bytes`).
pub const MIN_MEMORY_BYTES: u64 = 16 << 20;
/// Most vCPUs one VM may have (one thread each).
pub const MAX_VCPUS: u8 = 32;

/// A whole VM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    pub payload: PayloadConfig,
    #[serde(default)]
    pub cpus: CpusConfig,
    #[serde(default)]
    pub memory: MemoryConfig,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net: Vec<NetConfig>,
    /// The 16550 UART (ttyS0).
    #[serde(default)]
    pub serial: ConsoleConfig,
    /// The virtio console (hvc0); off unless asked for.
    #[serde(default = "ConsoleConfig::off")]
    pub console: ConsoleConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rng: Option<RngConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vsock: Option<VsockConfig>,
    /// The guest agent channel: a virtio-console port named `org.qemu.guest_agent.0` whose
    /// host side is a unix socket (QEMU's `virtserialport` on a `socket,server=on,wait=off`
    /// chardev); virt-launcher talks to qemu-guest-agent through it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentChannelConfig>,
    /// How the virtio devices reach the guest; PCI (with ACPI) unless the config says otherwise.
    #[serde(default)]
    pub transport: Transport,
    /// What the guest's SMBIOS tables say about the machine (`/sys/class/dmi/id/`); none when
    /// unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smbios: Option<SmbiosConfig>,
}

/// How the virtio devices reach the guest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// virtio-pci with MSI-X on a PCI root bus, described by ACPI tables (which also give the
    /// guest a power button): what stock distro kernels expect.
    #[default]
    Pci,
    /// virtio-mmio announced on the kernel command line (`virtio_mmio.device=`), no ACPI: the
    /// project's own kernel and test guests.
    Mmio,
}

impl Transport {
    /// How many virtio devices a VM can have on this transport: PCI slots 1 to 31 (slot 0 is
    /// the host bridge), or one IOAPIC pin each from 5 to 23 for mmio.
    pub const fn max_devices(self) -> usize {
        match self {
            Transport::Pci => crate::devices::pci::MAX_DEVICES,
            Transport::Mmio => (crate::arch::LAST_IRQ - crate::arch::VIRTIO_FIRST_IRQ + 1) as usize,
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Pci => "pci",
            Transport::Mmio => "mmio",
        })
    }
}

impl std::str::FromStr for Transport {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pci" => Ok(Transport::Pci),
            "mmio" => Ok(Transport::Mmio),
            other => Err(format!("transport {other:?} is neither pci nor mmio")),
        }
    }
}

/// How many virtio devices (disks, NICs, rng, vsock and the agent channel together) a VM can
/// have with
/// `transport`: what the API derives its device limit from.
pub const fn max_virtio_devices(transport: Transport) -> usize {
    transport.max_devices()
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            payload: PayloadConfig::default(),
            cpus: CpusConfig::default(),
            memory: MemoryConfig::default(),
            disks: Vec::new(),
            net: Vec::new(),
            serial: ConsoleConfig::default(),
            console: ConsoleConfig::Off,
            rng: None,
            vsock: None,
            agent: None,
            transport: Transport::default(),
            smbios: None,
        }
    }
}

/// What the VM boots: direct kernel boot, or nothing ([`PayloadConfig::guestless`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadConfig {
    /// bzImage or ELF (PVH) kernel; empty for a guestless VM.
    #[serde(default, skip_serializing_if = "path_is_empty")]
    pub kernel: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initramfs: Option<PathBuf>,
    /// Kernel command line, without the virtio-mmio device entries the VMM appends itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cmdline: String,
    /// No kernel: the VM runs no guest and its vCPUs idle (KubeVirt's "guestless" VMIs, which
    /// have no disk to boot). The KVM VMM loads a few bytes of idle code instead of a kernel
    /// (`hlt` in a loop, [`crate::loader::IDLE_CODE`]); QEMU runs its machine's firmware, which
    /// finds nothing to boot and halts. `kernel`, `initramfs` and `cmdline` are then empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub guestless: bool,
}

impl PayloadConfig {
    /// The payload of a guestless VM.
    pub fn guestless() -> PayloadConfig {
        PayloadConfig {
            guestless: true,
            ..PayloadConfig::default()
        }
    }
}

fn path_is_empty(path: &std::path::Path) -> bool {
    path.as_os_str().is_empty()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpusConfig {
    pub boot_vcpus: u8,
    pub max_vcpus: u8,
}

impl Default for CpusConfig {
    fn default() -> Self {
        CpusConfig {
            boot_vcpus: 1,
            max_vcpus: 1,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Guest RAM in bytes.
    pub size: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig { size: 512 << 20 }
    }
}

/// A virtio-blk device backed by a raw file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskConfig {
    /// Stable name of the device (the VMI's disk name); also the virtio-blk serial.
    pub id: String,
    pub path: PathBuf,
    #[serde(default)]
    pub readonly: bool,
}

/// A virtio-net device backed by a tap interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetConfig {
    pub id: String,
    /// Name of an existing tap device on the host (in the launcher's network namespace).
    pub tap: String,
    /// Guest MAC address, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
}

/// Where a console's bytes go.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum ConsoleConfig {
    Off,
    /// Discard output, no input.
    Null,
    /// The VMM's own stdin/stdout.
    #[default]
    Tty,
    /// Append output to a file; no input.
    File {
        path: PathBuf,
    },
    /// A unix socket the VMM listens on; one client at a time reads output and writes input.
    Socket {
        path: PathBuf,
    },
}

impl ConsoleConfig {
    fn off() -> Self {
        ConsoleConfig::Off
    }
}

/// A virtio-rng device fed from a host entropy source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RngConfig {
    #[serde(default = "RngConfig::default_src")]
    pub src: PathBuf,
}

impl RngConfig {
    fn default_src() -> PathBuf {
        PathBuf::from("/dev/urandom")
    }
}

impl Default for RngConfig {
    fn default() -> Self {
        RngConfig {
            src: Self::default_src(),
        }
    }
}

/// A virtio-vsock device whose host side is a unix socket (Firecracker's hybrid vsock).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VsockConfig {
    /// Guest context id, >= 3.
    pub cid: u64,
    /// Host unix socket; host-initiated connections write `CONNECT <port>\n` first.
    pub socket: PathBuf,
}

/// The longest path of a unix socket the VMM listens on, in bytes: what `sun_path` of a
/// `sockaddr_un` holds (108) less the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// The guest agent channel (see [`VmConfig::agent`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentChannelConfig {
    /// The unix socket the VMM listens on (a stale one is replaced); one client at a time,
    /// a new connection replaces the old one.
    pub socket: PathBuf,
}

/// The SMBIOS System Information (type 1) of the VM, and the BIOS Information (type 0) beside
/// it: KubeVirt's `firmware.uuid` and `firmware.serial` and the KubeVirt CR's `smBIOS`
/// settings. Unset strings are left out of the tables (the guest reads "not specified").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmbiosConfig {
    /// The system UUID, `8-4-4-4-12` hexadecimal digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
}

impl SmbiosConfig {
    /// The strings of the System Information by name, in the table's order.
    pub fn strings(&self) -> [(&'static str, Option<&str>); 6] {
        [
            ("manufacturer", self.manufacturer.as_deref()),
            ("product", self.product.as_deref()),
            ("version", self.version.as_deref()),
            ("serial", self.serial.as_deref()),
            ("sku", self.sku.as_deref()),
            ("family", self.family.as_deref()),
        ]
    }

    fn validate(&self) -> Result<(), ValidationError> {
        if let Some(uuid) = &self.uuid {
            if contract::smbios::parse_uuid(uuid).is_none() {
                return Err(ValidationError::SmbiosUuid(uuid.clone()));
            }
        }
        for (field, value) in self.strings() {
            if let Some(problem) = value.and_then(contract::smbios::string_problem) {
                return Err(ValidationError::SmbiosString { field, problem });
            }
        }
        Ok(())
    }
}

/// Why a `VmConfig` cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValidationError {
    #[error("payload.kernel is empty")]
    KernelMissing,
    #[error("payload.guestless runs no kernel, yet payload.{0} is set")]
    GuestlessWithKernel(&'static str),
    #[error("cpus.boot_vcpus is 0")]
    CpusBootZero,
    #[error("cpus.max_vcpus {max} is lower than cpus.boot_vcpus {boot}")]
    CpusMaxLowerThanBoot { max: u8, boot: u8 },
    #[error("cpus.max_vcpus {0} is above the limit of {MAX_VCPUS}")]
    CpusTooMany(u8),
    #[error("memory.size {0} bytes is below the minimum of {MIN_MEMORY_BYTES}")]
    MemoryTooSmall(u64),
    #[error("memory.size {0} bytes is not a multiple of 4 KiB")]
    MemoryUnaligned(u64),
    #[error("device id {0:?} is used twice")]
    DuplicateId(String),
    #[error("device id is empty")]
    EmptyId,
    #[error("net {id:?}: mac {mac:?} is not of the form aa:bb:cc:dd:ee:ff")]
    BadMac { id: String, mac: String },
    #[error("net {id:?}: tap name {tap:?} is empty or longer than 15 bytes")]
    BadTapName { id: String, tap: String },
    #[error("vsock cid {0} is reserved (must be >= 3)")]
    VsockCidReserved(u64),
    #[error("agent.socket is empty")]
    AgentSocketEmpty,
    #[error(
        "agent.socket {path:?} is {len} bytes, longer than the {MAX_SOCKET_PATH} a unix socket \
         address holds"
    )]
    AgentSocketTooLong { path: PathBuf, len: usize },
    #[error("serial and console both use the VMM's stdin/stdout")]
    TwoTtys,
    #[error("smbios.uuid {0:?} is not a UUID (8-4-4-4-12 hexadecimal digits)")]
    SmbiosUuid(String),
    #[error("smbios.{field} {problem}")]
    SmbiosString {
        field: &'static str,
        problem: String,
    },
    #[error("{count} virtio devices, more than the {max} the {transport} transport has room for")]
    TooManyDevices {
        transport: Transport,
        count: usize,
        max: usize,
    },
}

impl VmConfig {
    /// Checks the config as a whole; does no I/O (files are checked when the VM is built).
    pub fn validate(&self) -> Result<(), ValidationError> {
        let payload = &self.payload;
        if payload.guestless {
            let set = [
                ("kernel", !payload.kernel.as_os_str().is_empty()),
                ("initramfs", payload.initramfs.is_some()),
                ("cmdline", !payload.cmdline.is_empty()),
            ];
            if let Some((field, _)) = set.iter().find(|(_, set)| *set) {
                return Err(ValidationError::GuestlessWithKernel(field));
            }
        } else if payload.kernel.as_os_str().is_empty() {
            return Err(ValidationError::KernelMissing);
        }
        let CpusConfig {
            boot_vcpus,
            max_vcpus,
        } = self.cpus;
        if boot_vcpus == 0 {
            return Err(ValidationError::CpusBootZero);
        }
        if max_vcpus < boot_vcpus {
            return Err(ValidationError::CpusMaxLowerThanBoot {
                max: max_vcpus,
                boot: boot_vcpus,
            });
        }
        if max_vcpus > MAX_VCPUS {
            return Err(ValidationError::CpusTooMany(max_vcpus));
        }
        if self.memory.size < MIN_MEMORY_BYTES {
            return Err(ValidationError::MemoryTooSmall(self.memory.size));
        }
        if self.memory.size % 4096 != 0 {
            return Err(ValidationError::MemoryUnaligned(self.memory.size));
        }
        let mut ids = std::collections::BTreeSet::new();
        let all_ids = self
            .disks
            .iter()
            .map(|d| &d.id)
            .chain(self.net.iter().map(|n| &n.id));
        for id in all_ids {
            if id.is_empty() {
                return Err(ValidationError::EmptyId);
            }
            if !ids.insert(id) {
                return Err(ValidationError::DuplicateId(id.clone()));
            }
        }
        for net in &self.net {
            if parse_mac(&net.mac).is_none() {
                return Err(ValidationError::BadMac {
                    id: net.id.clone(),
                    mac: net.mac.clone(),
                });
            }
            if net.tap.is_empty() || net.tap.len() > 15 {
                return Err(ValidationError::BadTapName {
                    id: net.id.clone(),
                    tap: net.tap.clone(),
                });
            }
        }
        if let Some(vsock) = &self.vsock {
            if vsock.cid < 3 {
                return Err(ValidationError::VsockCidReserved(vsock.cid));
            }
        }
        if let Some(agent) = &self.agent {
            let len = agent.socket.as_os_str().len();
            if len == 0 {
                return Err(ValidationError::AgentSocketEmpty);
            }
            if len > MAX_SOCKET_PATH {
                return Err(ValidationError::AgentSocketTooLong {
                    path: agent.socket.clone(),
                    len,
                });
            }
        }
        if let Some(smbios) = &self.smbios {
            smbios.validate()?;
        }
        if self.serial == ConsoleConfig::Tty && self.console == ConsoleConfig::Tty {
            return Err(ValidationError::TwoTtys);
        }
        let count = self.virtio_device_count();
        let max = self.transport.max_devices();
        if count > max {
            return Err(ValidationError::TooManyDevices {
                transport: self.transport,
                count,
                max,
            });
        }
        Ok(())
    }

    /// The virtio devices the VM has: disks, NICs, rng, vsock and the agent channel.
    pub fn virtio_device_count(&self) -> usize {
        self.disks.len()
            + self.net.len()
            + usize::from(self.rng.is_some())
            + usize::from(self.vsock.is_some())
            + usize::from(self.agent.is_some())
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(mac: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = mac.split(':');
    for byte in out.iter_mut() {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
