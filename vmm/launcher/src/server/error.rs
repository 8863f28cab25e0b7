//! The errors of the launcher's operations and their gRPC status codes: a request that can never
//! work is INVALID_ARGUMENT, one this host or this state cannot serve is FAILED_PRECONDITION,
//! a backend that failed while working is INTERNAL. The status message is the whole error chain.

use std::path::PathBuf;

use tonic::{Code, Status};

use crate::backend::qemu::QemuStartError;
use crate::backend::{BackendError, MissingFile};
use crate::console::ConsoleError;
use crate::converter::{AdmitError, ConvertError};
use crate::discovery::DiscoveryError;
use crate::network::NetworkError;
pub use crate::util::chain;
use crate::volumes::prepare::PrepareError;

/// Why `SyncVMI` failed, by step.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("admit the VMI")]
    Admit(#[from] AdmitError),
    #[error("examine the boot disk")]
    Discovery(#[from] DiscoveryError),
    #[error("convert the VMI")]
    Convert(#[from] ConvertError),
    #[error("{0}")]
    SocketPath(String),
    #[error("prepare volumes")]
    Prepare(#[from] PrepareError),
    #[error("set up the pod network")]
    Network(#[from] NetworkError),
    #[error("start QEMU")]
    Qemu(#[from] QemuStartError),
    #[error("start the KVM VMM")]
    Kvm(#[from] vmm::builder::StartVmError),
    #[error("missing file")]
    MissingFile(#[source] MissingFile),
    #[error("cannot create the run directory {0}")]
    RunDir(PathBuf, #[source] std::io::Error),
    #[error("attach the serial console")]
    Console(#[from] ConsoleError),
    #[error("boot")]
    Boot(#[source] BackendError),
    #[error("this launcher already runs VMI {0:?}")]
    OtherVmi(String),
    #[error("firmware.bootloader ({0}) runs on the QEMU backend only, and {1}")]
    FirmwareNeedsQemu(&'static str, &'static str),
    #[error("{0}")]
    MigrationBackend(String),
}

impl SyncError {
    pub fn code(&self) -> Code {
        match self {
            SyncError::Admit(_) | SyncError::Convert(_) | SyncError::SocketPath(_) => {
                Code::InvalidArgument
            }
            SyncError::Qemu(QemuStartError::Args(_)) => Code::InvalidArgument,
            SyncError::Prepare(_)
            | SyncError::Discovery(_)
            | SyncError::MissingFile(_)
            | SyncError::Qemu(QemuStartError::QemuMissing)
            | SyncError::Qemu(QemuStartError::MissingFile(_))
            | SyncError::Qemu(QemuStartError::OvmfMissing(_))
            | SyncError::FirmwareNeedsQemu(..)
            | SyncError::MigrationBackend(_) => Code::FailedPrecondition,
            SyncError::Network(e) if e.is_precondition() => Code::FailedPrecondition,
            SyncError::OtherVmi(_) => Code::FailedPrecondition,
            _ => Code::Internal,
        }
    }
}

/// Why an operation on the running VM failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("this launcher runs no VM yet: call SyncVMI first")]
    NoVm,
    #[error("this launcher does not run VMI {0:?} (it runs {1:?})")]
    OtherVmi(String, String),
    #[error("the VM is gone: {0}")]
    Gone(String),
    #[error("backend")]
    Backend(#[from] BackendError),
    #[error("{0}")]
    Migration(String),
    /// KubeVirt's words for a soft reboot without an agent.
    #[error("VMI does not have guest agent connected")]
    GuestAgentNotConnected,
    #[error(
        "the VM has no graphics device (a VMI with firmware.bootloader gets one with \
         spec.domain.devices.autoattachGraphicsDevice: true)"
    )]
    NoGraphics,
    /// KubeVirt's words for a soft reboot with neither an agent nor ACPI, and why.
    #[error(
        "VMI neither have the agent connected nor the ACPI feature enabled: the KVM backend has \
         no way to ask the guest to reboot without its agent (use the reset subresource for a \
         hardware reset)"
    )]
    CannotSoftReboot,
    /// libvirt's words, which KubeVirt passes on, for a freeze or thaw without an agent.
    #[error("QEMU guest agent is not connected")]
    NoGuestAgentToFreeze,
    #[error("guest agent")]
    GuestAgent(#[source] crate::agent::ChannelError),
}

impl OpError {
    pub fn code(&self) -> Code {
        match self {
            OpError::NoVm
            | OpError::Gone(_)
            | OpError::Migration(_)
            | OpError::GuestAgentNotConnected
            | OpError::CannotSoftReboot
            | OpError::NoGraphics
            | OpError::NoGuestAgentToFreeze => Code::FailedPrecondition,
            OpError::OtherVmi(..) => Code::NotFound,
            OpError::Backend(BackendError::Exited(_)) => Code::FailedPrecondition,
            OpError::Backend(BackendError::Unsupported(_)) => Code::Unimplemented,
            OpError::Backend(_) | OpError::GuestAgent(_) => Code::Internal,
        }
    }
}

impl From<SyncError> for Status {
    fn from(e: SyncError) -> Status {
        Status::new(e.code(), chain(&e))
    }
}

impl From<OpError> for Status {
    fn from(e: OpError) -> Status {
        Status::new(e.code(), chain(&e))
    }
}
