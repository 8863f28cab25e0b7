//! The domain: the launcher's record of its VM (which VMI, which backend and why, how it boots
//! and why, the state and the reason for it), and its translation to the `launcher.v1`
//! messages.

use std::time::Instant;

use contract::proto::v1;

use crate::backend::{BackendChoice, BackendKind, VmmStats};
use crate::converter::{BootChoice, KernelOrigin};

/// States of a domain, as KubeVirt's launcher reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainState {
    Starting,
    Running,
    Paused,
    ShuttingDown,
    Shutoff,
    Crashed,
}

impl DomainState {
    pub fn to_proto(self) -> v1::DomainState {
        match self {
            DomainState::Starting => v1::DomainState::Starting,
            DomainState::Running => v1::DomainState::Running,
            DomainState::Paused => v1::DomainState::Paused,
            DomainState::ShuttingDown => v1::DomainState::ShuttingDown,
            DomainState::Shutoff => v1::DomainState::Shutoff,
            DomainState::Crashed => v1::DomainState::Crashed,
        }
    }

    /// Shutoff and Crashed are final: the VM is gone.
    pub fn is_final(self) -> bool {
        matches!(self, DomainState::Shutoff | DomainState::Crashed)
    }
}

/// Which VMI the domain runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmiRef {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

impl VmiRef {
    /// Whether a request's `vmi` field names this VMI (empty names any).
    pub fn matches(&self, requested: &str) -> bool {
        requested.is_empty() || requested == self.uid || requested == self.name
    }
}

/// What the launcher knows about its VM.
#[derive(Clone, Debug)]
pub struct DomainInfo {
    pub vmi: VmiRef,
    pub state: DomainState,
    pub reason: String,
    pub backend: BackendChoice,
    pub boot: BootChoice,
    pub vcpus: u32,
    pub memory_bytes: u64,
    pub started: Instant,
    pub grace_period_seconds: i64,
    /// Paused by the VMM on a disk write the host had no room for.
    pub io_error: bool,
}

impl DomainInfo {
    pub fn to_proto(&self, stats: &VmmStats, console_socket: &str) -> v1::Domain {
        v1::Domain {
            vmi_name: self.vmi.name.clone(),
            vmi_namespace: self.vmi.namespace.clone(),
            vmi_uid: self.vmi.uid.clone(),
            state: self.state.to_proto().into(),
            reason: self.reason.clone(),
            backend: match self.backend.kind {
                BackendKind::Kvm => v1::Backend::Kvm,
                BackendKind::QemuTcg => v1::Backend::QemuTcg,
            }
            .into(),
            backend_reason: self.backend.reason.clone(),
            stats: Some(v1::DomainStats {
                vcpus: self.vcpus,
                memory_bytes: self.memory_bytes,
                uptime_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                vmm_pid: stats.pid,
                vmm_cpu_ms: stats.cpu_ms,
                vmm_rss_bytes: stats.rss_bytes,
            }),
            console_socket: console_socket.to_string(),
            migration: None,
            io_error: self.io_error,
            boot: self.boot.description.clone(),
            boot_origin: match self.boot.origin {
                KernelOrigin::KernelBoot => v1::BootOrigin::KernelBoot,
                // The user's own OS, loaded by its own boot loader: `boot` names the firmware.
                KernelOrigin::UserDisk | KernelOrigin::Firmware => v1::BootOrigin::UserDisk,
                KernelOrigin::Bundled => v1::BootOrigin::Bundled,
                KernelOrigin::Guestless => v1::BootOrigin::Guestless,
            }
            .into(),
            // The launcher adds the guest agent's report, which it keeps apart.
            guest_agent: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmi_matching() {
        let vmi = VmiRef {
            name: "a".into(),
            namespace: "ns".into(),
            uid: "123".into(),
        };
        for (requested, want) in [("", true), ("a", true), ("123", true), ("b", false)] {
            assert_eq!(vmi.matches(requested), want, "{requested}");
        }
        assert!(DomainState::Crashed.is_final() && !DomainState::Paused.is_final());
    }

    #[test]
    fn the_boot_choice_goes_to_the_domain() {
        let info = |origin| DomainInfo {
            vmi: VmiRef::default(),
            state: DomainState::Running,
            reason: "booted".into(),
            backend: BackendChoice {
                kind: BackendKind::QemuTcg,
                reason: "r".into(),
            },
            boot: BootChoice {
                origin,
                description: "disk rootdisk: kernel /boot/vmlinuz from partition 1".into(),
            },
            vcpus: 1,
            memory_bytes: 1 << 27,
            started: Instant::now(),
            grace_period_seconds: 30,
            io_error: false,
        };
        let cases = [
            (KernelOrigin::KernelBoot, v1::BootOrigin::KernelBoot),
            (KernelOrigin::UserDisk, v1::BootOrigin::UserDisk),
            (KernelOrigin::Firmware, v1::BootOrigin::UserDisk),
            (KernelOrigin::Bundled, v1::BootOrigin::Bundled),
            (KernelOrigin::Guestless, v1::BootOrigin::Guestless),
        ];
        for (origin, want) in cases {
            let domain = info(origin).to_proto(&VmmStats::default(), "console-sock");
            assert_eq!(domain.boot_origin, want as i32);
            assert_eq!(
                domain.boot,
                "disk rootdisk: kernel /boot/vmlinuz from partition 1"
            );
        }
    }
}
