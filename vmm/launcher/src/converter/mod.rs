//! The converter: one pure function from a (defaulted, validated) VMI and the [`HostFacts`] to
//! the [`VmConfig`] both backends run, and how it boots ([`boot::BootChoice`], reported on the
//! VMI).
//!
//! It is made of one small piece per concern, each a pure function with its own table tests:
//! [`cpu`], [`memory`], [`boot`] (kernel, initramfs, command line: kernelBoot, the kernel found
//! on the boot disk, or the bundled kernel; or firmware), [`disks`] (with the volume
//! plan of [`volumes`]), [`network`], [`console`] (serial, virtio console, vsock), [`rng`] and
//! [`smbios`]. [`convert`] calls them in that order and validates the result as a whole. A VMI
//! feature Ferrovirt cannot run is an error naming its field path; nothing is silently dropped.

pub mod boot;
pub mod console;
pub mod cpu;
pub mod disks;
pub mod host;
pub mod memory;
pub mod network;
pub mod rng;
pub mod smbios;
pub mod volumes;

#[cfg(test)]
mod fixture_tests;

use api::VirtualMachineInstance;
use vmm::config::{AgentChannelConfig, ValidationError, VmConfig};

pub use boot::{BootChoice, Firmware, KernelOrigin};
pub use host::{BootDiscovery, FoundKernel, HostFacts};

/// A problem with one field of the VMI.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct FieldProblem {
    /// Field path in the VMI, e.g. `spec.domain.devices.disks[1]`.
    pub path: String,
    pub reason: String,
}

impl FieldProblem {
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldProblem {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// Why a VMI cannot be converted; one variant per piece of the converter.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("cpu")]
    Cpu(#[source] FieldProblem),
    #[error("memory")]
    Memory(#[source] FieldProblem),
    #[error("boot")]
    Boot(#[source] FieldProblem),
    #[error("disks")]
    Disks(#[source] FieldProblem),
    #[error("network")]
    Network(#[source] FieldProblem),
    #[error("the resulting VM config is invalid")]
    Config(#[source] ValidationError),
}

impl ConvertError {
    /// The VMI field path the error is about, if it is about one.
    pub fn field_path(&self) -> Option<&str> {
        match self {
            ConvertError::Cpu(p)
            | ConvertError::Memory(p)
            | ConvertError::Boot(p)
            | ConvertError::Disks(p)
            | ConvertError::Network(p) => Some(&p.path),
            ConvertError::Config(_) => None,
        }
    }
}

/// What a VMI converts to: the VM config and how (and why) it boots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Converted {
    pub config: VmConfig,
    pub boot: BootChoice,
    /// The firmware of a `firmware.bootloader` VMI: it runs on QEMU's q35 machine.
    pub firmware: Option<Firmware>,
}

/// Converts a VMI (after `api::defaults::default_vmi` and `api::validation::validate_vmi`) into
/// the VM config the backends run.
pub fn convert(vmi: &VirtualMachineInstance, facts: &HostFacts) -> Result<Converted, ConvertError> {
    let spec = &vmi.spec;
    let cpus = cpu::cpus(spec).map_err(ConvertError::Cpu)?;
    let memory = memory::memory(spec).map_err(ConvertError::Memory)?;
    let disks = disks::disks(vmi, facts).map_err(ConvertError::Disks)?;
    let boot = boot::plan(spec, facts, &disks).map_err(ConvertError::Boot)?;
    let net = network::net(vmi, facts).map_err(ConvertError::Network)?;
    let config = VmConfig {
        payload: boot.payload,
        cpus,
        memory,
        disks,
        net,
        serial: console::serial(spec, facts),
        console: console::virtio_console(spec),
        rng: rng::rng(spec),
        vsock: console::vsock(vmi, facts),
        agent: Some(AgentChannelConfig {
            socket: facts.run_dir.join(crate::backend::AGENT_SOCKET),
        }),
        transport: boot::transport(boot.choice.origin),
        smbios: Some(smbios::smbios(vmi, &facts.smbios)),
    };
    config.validate().map_err(ConvertError::Config)?;
    Ok(Converted {
        config,
        boot: boot.choice,
        firmware: boot.firmware,
    })
}

/// Parses a VMI from JSON, applies the defaults and validates it, as virt-api's
/// webhooks would have: what the launcher does with a VMI before it converts it.
pub fn admit_vmi(json: &[u8]) -> Result<VirtualMachineInstance, AdmitError> {
    let mut vmi: VirtualMachineInstance =
        serde_json::from_slice(json).map_err(|e| AdmitError::Parse(e.to_string()))?;
    api::defaults::default_vmi(&mut vmi);
    api::validation::validate_vmi(&vmi).map_err(|errors| {
        AdmitError::Validate(
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    Ok(vmi)
}

/// Why a VMI was refused before conversion.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("malformed VMI JSON: {0}")]
    Parse(String),
    #[error("invalid VMI: {0}")]
    Validate(String),
}
