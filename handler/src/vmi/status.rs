//! The VMI status virt-handler reports, as a pure function of the VMI, the launcher's domain and
//! the launcher Pod.
//!
//! Domain state -> VMI: starting/running/paused/shutting down -> Running (with Ready and Paused
//! conditions); shut off -> Succeeded (the guest powered off); crashed -> Failed with the
//! launcher's reason. The backend and its reason are the `SoftwareEmulation` condition, how the
//! VM boots and why the `BootSource` condition.
//!
//! A failed `SyncVMI` is the `Synchronized` condition (`SyncFailed`, the launcher's message); when
//! the launcher says the VMI can never run (INVALID_ARGUMENT: the converter refused it, or its
//! boot disk holds nothing to boot) the VMI fails with that message as its reason
//! ([`status_after_sync_failure`]).

use api::condition::Condition;
use api::vmi::{set_condition, set_phase, GuestOsInfo, VmiNetworkInterface, SOFTWARE_EMULATION};
use api::{VirtualMachineInstance, VirtualMachineInstanceStatus, VmiPhase};
use contract::proto::v1::{Backend, BootOrigin, Domain, DomainState, GuestAgent};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;

/// What the handler knows besides the domain.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub node: String,
    pub pod_ip: Option<String>,
    pub launcher_version: Option<String>,
}

/// The new status of `vmi` given its domain.
pub fn status_from_domain(
    vmi: &VirtualMachineInstance,
    domain: &Domain,
    observed: &Observed,
    now: Timestamp,
) -> VirtualMachineInstanceStatus {
    let mut status = vmi.status.clone().unwrap_or_default();
    if status.phase.is_some_and(VmiPhase::is_final) {
        return status;
    }
    let state = DomainState::try_from(domain.state).unwrap_or(DomainState::NoState);
    let phase = match state {
        DomainState::NoState => return status,
        DomainState::Starting
        | DomainState::Running
        | DomainState::Paused
        | DomainState::ShuttingDown => VmiPhase::Running,
        DomainState::Shutoff => VmiPhase::Succeeded,
        DomainState::Crashed => VmiPhase::Failed,
    };
    set_phase(&mut status, phase, now);
    if phase == VmiPhase::Failed {
        status.reason = Some(domain.reason.clone());
    }
    status.node_name = Some(observed.node.clone());
    if let Some(version) = &observed.launcher_version {
        status.launcher_container_image_version = Some(version.clone());
    }

    let running = state == DomainState::Running;
    let ready_reason = if running { "" } else { state.as_str_name() };
    set_condition(
        &mut status,
        Condition::new(
            "Ready",
            running,
            ready_reason,
            if running { "" } else { &domain.reason },
        ),
    );
    if state == DomainState::Paused {
        // KubeVirt's reasons and messages.
        let (reason, message) = if domain.io_error {
            (
                "PausedIOError",
                "VMI was paused, low-level IO error detected",
            )
        } else {
            ("PausedByUser", "the VMI was paused")
        };
        set_condition(&mut status, Condition::new("Paused", true, reason, message));
    } else {
        status.conditions.retain(|c| c.type_ != "Paused");
    }
    let backend = Backend::try_from(domain.backend).unwrap_or(Backend::Unspecified);
    if backend != Backend::Unspecified {
        let emulated = backend == Backend::QemuTcg;
        set_condition(
            &mut status,
            Condition::new(
                SOFTWARE_EMULATION,
                emulated,
                if emulated { "QemuTcg" } else { "Kvm" },
                &domain.backend_reason,
            ),
        );
    }
    let boot_reason = match BootOrigin::try_from(domain.boot_origin) {
        Ok(BootOrigin::KernelBoot) => Some("KernelBoot"),
        Ok(BootOrigin::UserDisk) => Some("UserDisk"),
        Ok(BootOrigin::Bundled) => Some("BundledKernel"),
        Ok(BootOrigin::Guestless) => Some("Guestless"),
        // A launcher older than the field.
        Ok(BootOrigin::Unspecified) | Err(_) => None,
    };
    if let Some(reason) = boot_reason {
        set_condition(
            &mut status,
            Condition::new("BootSource", true, reason, &domain.boot),
        );
    }
    if phase == VmiPhase::Running {
        status.interfaces = interfaces(vmi, observed);
    }
    guest_agent(
        &mut status,
        domain
            .guest_agent
            .as_ref()
            .filter(|_| phase == VmiPhase::Running),
    );
    // What the guest got: the VMI's memory rounded up to what the backend needs (a guestless
    // VMI asks for 1Mi and gets the VMM's minimum).
    if let Some(bytes) = domain
        .stats
        .as_ref()
        .map(|s| s.memory_bytes)
        .filter(|b| *b > 0)
    {
        let got = Some(Quantity(bytes.to_string()));
        let memory = status.memory.get_or_insert_with(Default::default);
        memory
            .guest_at_boot
            .get_or_insert_with(|| Quantity(bytes.to_string()));
        memory.guest_current = got;
        memory.guest_requested = vmi
            .spec
            .domain
            .memory
            .as_ref()
            .and_then(|m| m.guest.clone());
    }
    status
}

/// The status of `vmi` after its `SyncVMI` failed with `message`: `Synchronized` is false with
/// reason `SyncFailed`; when the launcher said the VMI can never run (`can_never_run`: its
/// INVALID_ARGUMENT) the VMI is Failed with the message as its reason, otherwise the next sync
/// tries again.
pub fn status_after_sync_failure(
    vmi: &VirtualMachineInstance,
    can_never_run: bool,
    message: &str,
    now: Timestamp,
) -> VirtualMachineInstanceStatus {
    let mut status = vmi.status.clone().unwrap_or_default();
    if status.phase.is_some_and(VmiPhase::is_final) {
        return status;
    }
    set_condition(
        &mut status,
        Condition::new("Synchronized", false, "SyncFailed", message),
    );
    if can_never_run {
        set_phase(&mut status, VmiPhase::Failed, now);
        status.reason = Some(message.to_string());
    }
    status
}

/// What the guest agent said: the `AgentConnected` condition (present and true only while the
/// agent answers, as in KubeVirt), `guestOSInfo`, `fsFreezeStatus`, and on each interface the guest's own name
/// for it (`infoSource: domain, guest-agent`). The interface's addresses stay the Pod's: with
/// the masquerade binding the guest is reached there, not at the address the agent sees.
fn guest_agent(status: &mut VirtualMachineInstanceStatus, agent: Option<&GuestAgent>) {
    let Some(agent) = agent.filter(|a| a.connected) else {
        status.conditions.retain(|c| c.type_ != "AgentConnected");
        status.guest_os_info = None;
        status.fs_freeze_status = None;
        return;
    };
    set_condition(status, Condition::new("AgentConnected", true, "", ""));
    // As KubeVirt: set while frozen, absent once thawed.
    status.fs_freeze_status = (agent.fs_freeze_status == "frozen").then(|| "frozen".to_string());
    status.guest_os_info = agent.os.as_ref().map(|os| GuestOsInfo {
        name: non_empty(&os.name),
        pretty_name: non_empty(&os.pretty_name),
        id: non_empty(&os.id),
        version: non_empty(&os.version),
        version_id: non_empty(&os.version_id),
        kernel_release: non_empty(&os.kernel_release),
        kernel_version: non_empty(&os.kernel_version),
        machine: non_empty(&os.machine),
    });
    // The guest's interfaces but loopback; matched by MAC when the VMI sets one, else the only
    // interface to the only guest interface.
    let guest: Vec<_> = agent.interfaces.iter().filter(|i| i.name != "lo").collect();
    let single = status.interfaces.len() == 1 && guest.len() == 1;
    for interface in &mut status.interfaces {
        let found = match &interface.mac {
            Some(mac) => guest.iter().find(|g| g.mac.eq_ignore_ascii_case(mac)),
            None if single => guest.first(),
            None => None,
        };
        if let Some(found) = found {
            interface.interface_name = Some(found.name.clone());
            interface.info_source = Some("domain, guest-agent".into());
        }
    }
}

fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

/// The guest's interfaces: with the masquerade binding the guest is reached at the Pod's IP.
fn interfaces(vmi: &VirtualMachineInstance, observed: &Observed) -> Vec<VmiNetworkInterface> {
    vmi.spec
        .domain
        .devices
        .interfaces
        .iter()
        .map(|interface| VmiNetworkInterface {
            name: Some(interface.name.clone()),
            ip_address: observed.pod_ip.clone(),
            ip_addresses: observed.pod_ip.iter().cloned().collect(),
            mac: interface.mac_address.clone().filter(|m| !m.is_empty()),
            interface_name: Some("eth0".into()),
            pod_interface_name: Some("eth0".into()),
            info_source: Some("domain".into()),
            link_state: None,
            queue_count: Some(1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(phase: VmiPhase) -> VirtualMachineInstance {
        let mut vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "default", "uid": "u"},
            "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                     "networks": [{"name": "default", "pod": {}}]}
        }))
        .unwrap();
        vmi.status = Some(VirtualMachineInstanceStatus {
            phase: Some(phase),
            ..Default::default()
        });
        vmi
    }

    fn domain(state: DomainState, backend: Backend) -> Domain {
        Domain {
            state: state as i32,
            reason: "why".into(),
            backend: backend as i32,
            backend_reason: "/dev/kvm is PVM".into(),
            ..Domain::default()
        }
    }

    fn observed() -> Observed {
        Observed {
            node: "node01".into(),
            pod_ip: Some("10.244.0.7".into()),
            launcher_version: Some("v1".into()),
        }
    }

    fn now() -> Timestamp {
        "2026-11-29T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn running_domain_makes_a_ready_running_vmi() {
        let status = status_from_domain(
            &vmi(VmiPhase::Scheduled),
            &domain(DomainState::Running, Backend::QemuTcg),
            &observed(),
            now(),
        );
        assert_eq!(status.phase, Some(VmiPhase::Running));
        assert_eq!(status.node_name.as_deref(), Some("node01"));
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert!(ready.is_true());
        let emulation = status
            .conditions
            .iter()
            .find(|c| c.type_ == "SoftwareEmulation")
            .unwrap();
        assert!(emulation.is_true());
        assert_eq!(emulation.message.as_deref(), Some("/dev/kvm is PVM"));
        assert_eq!(
            status.interfaces[0].ip_address.as_deref(),
            Some("10.244.0.7")
        );
        assert_eq!(
            status.phase_transition_timestamps.last().unwrap().phase,
            VmiPhase::Running
        );
    }

    #[test]
    fn paused_domain_is_running_not_ready_and_paused() {
        let status = status_from_domain(
            &vmi(VmiPhase::Running),
            &domain(DomainState::Paused, Backend::Kvm),
            &observed(),
            now(),
        );
        assert_eq!(status.phase, Some(VmiPhase::Running));
        assert!(!status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap()
            .is_true());
        assert!(status
            .conditions
            .iter()
            .find(|c| c.type_ == "Paused")
            .unwrap()
            .is_true());
        let resumed = status_from_domain(
            &VirtualMachineInstance {
                status: Some(status),
                ..vmi(VmiPhase::Running)
            },
            &domain(DomainState::Running, Backend::Kvm),
            &observed(),
            now(),
        );
        assert!(resumed.conditions.iter().all(|c| c.type_ != "Paused"));
    }

    #[test]
    fn a_full_disk_pauses_with_kubevirts_io_error_reason() {
        let full = Domain {
            io_error: true,
            ..domain(DomainState::Paused, Backend::QemuTcg)
        };
        let status = status_from_domain(&vmi(VmiPhase::Running), &full, &observed(), now());
        let paused = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Paused")
            .unwrap();
        assert_eq!(paused.reason.as_deref(), Some("PausedIOError"));
        assert_eq!(
            paused.message.as_deref(),
            Some("VMI was paused, low-level IO error detected")
        );
        assert_eq!(status.phase, Some(VmiPhase::Running));
    }

    #[test]
    fn the_memory_status_is_what_the_guest_got() {
        let mut vmi = vmi(VmiPhase::Scheduled);
        vmi.spec.domain.memory = Some(api::domain::Memory {
            guest: Some(Quantity("1Mi".into())),
            ..Default::default()
        });
        let with_stats = Domain {
            stats: Some(contract::proto::v1::DomainStats {
                memory_bytes: 16 << 20,
                ..Default::default()
            }),
            ..domain(DomainState::Running, Backend::QemuTcg)
        };
        let status = status_from_domain(&vmi, &with_stats, &observed(), now());
        let memory = status.memory.expect("status.memory");
        let got = Some(Quantity((16u64 << 20).to_string()));
        assert_eq!(memory.guest_at_boot, got);
        assert_eq!(memory.guest_current, got);
        assert_eq!(memory.guest_requested, Some(Quantity("1Mi".into())));
        // No stats (an older launcher, or none yet): nothing is reported.
        let none = status_from_domain(
            &vmi,
            &domain(DomainState::Running, Backend::QemuTcg),
            &observed(),
            now(),
        );
        assert_eq!(none.memory, None);
    }

    #[test]
    fn the_boot_source_is_a_condition() {
        let description = "disk rootdisk: kernel /boot/vmlinuz-6.1.0-28-cloud-amd64 from \
                           partition 1 (ext4, UUID 6f1c) per /boot/grub/grub.cfg on partition 1 \
                           entry 'Debian GNU/Linux'";
        let cases = [
            (BootOrigin::UserDisk, Some("UserDisk")),
            (BootOrigin::KernelBoot, Some("KernelBoot")),
            (BootOrigin::Bundled, Some("BundledKernel")),
            (BootOrigin::Guestless, Some("Guestless")),
            (BootOrigin::Unspecified, None),
        ];
        for (origin, reason) in cases {
            let domain = Domain {
                boot: description.into(),
                boot_origin: origin as i32,
                ..domain(DomainState::Running, Backend::QemuTcg)
            };
            let status = status_from_domain(&vmi(VmiPhase::Scheduled), &domain, &observed(), now());
            let condition = status.conditions.iter().find(|c| c.type_ == "BootSource");
            match reason {
                Some(reason) => {
                    let condition = condition.unwrap();
                    assert!(condition.is_true());
                    assert_eq!(condition.reason.as_deref(), Some(reason));
                    assert_eq!(condition.message.as_deref(), Some(description));
                }
                None => assert!(condition.is_none(), "{origin:?}"),
            }
        }
    }

    #[test]
    fn a_vmi_that_can_never_run_fails_with_the_launchers_reason() {
        let message = "convert the VMI: boot: spec.domain.devices.disks[0]: disk rootdisk is a \
                       partitioned disk (GPT: partition 1 (ext4)) without a kernel";
        let failed = status_after_sync_failure(&vmi(VmiPhase::Scheduled), true, message, now());
        assert_eq!(failed.phase, Some(VmiPhase::Failed));
        assert_eq!(failed.reason.as_deref(), Some(message));
        let synchronized = failed
            .conditions
            .iter()
            .find(|c| c.type_ == "Synchronized")
            .unwrap();
        assert!(!synchronized.is_true());
        assert_eq!(synchronized.reason.as_deref(), Some("SyncFailed"));
        assert_eq!(synchronized.message.as_deref(), Some(message));

        // Anything else is tried again: the VMI stays Scheduled, with the reason.
        let retried = status_after_sync_failure(
            &vmi(VmiPhase::Scheduled),
            false,
            "prepare volumes: ...",
            now(),
        );
        assert_eq!(retried.phase, Some(VmiPhase::Scheduled));
        assert_eq!(retried.reason, None);
        assert!(retried.conditions.iter().any(|c| c.type_ == "Synchronized"));

        // A final VMI stays as it is.
        let done = vmi(VmiPhase::Succeeded);
        assert_eq!(
            Some(status_after_sync_failure(&done, true, message, now())),
            done.status
        );
    }

    #[test]
    fn shutoff_succeeds_crash_fails_final_stays() {
        let off = status_from_domain(
            &vmi(VmiPhase::Running),
            &domain(DomainState::Shutoff, Backend::Kvm),
            &observed(),
            now(),
        );
        assert_eq!(off.phase, Some(VmiPhase::Succeeded));
        let crashed = status_from_domain(
            &vmi(VmiPhase::Running),
            &domain(DomainState::Crashed, Backend::Kvm),
            &observed(),
            now(),
        );
        assert_eq!(crashed.phase, Some(VmiPhase::Failed));
        assert_eq!(crashed.reason.as_deref(), Some("why"));
        let failed = vmi(VmiPhase::Failed);
        let same = status_from_domain(
            &failed,
            &domain(DomainState::Running, Backend::Kvm),
            &observed(),
            now(),
        );
        assert_eq!(Some(same), failed.status);
    }

    #[test]
    fn a_connected_agent_is_a_condition_the_os_info_and_the_guests_interface_name() {
        use contract::proto::v1::{GuestInterface, GuestOsInfo as ProtoOs};
        let mut running = domain(DomainState::Running, Backend::QemuTcg);
        running.guest_agent = Some(GuestAgent {
            connected: true,
            os: Some(ProtoOs {
                id: "debian".into(),
                version_id: "12".into(),
                ..Default::default()
            }),
            interfaces: vec![
                GuestInterface {
                    name: "lo".into(),
                    ..Default::default()
                },
                GuestInterface {
                    name: "enp0s2".into(),
                    mac: "02:00:00:00:00:01".into(),
                    ip_addresses: vec!["10.0.2.2".into()],
                },
            ],
            ..Default::default()
        });
        let status = status_from_domain(&vmi(VmiPhase::Scheduled), &running, &observed(), now());
        let agent = status
            .conditions
            .iter()
            .find(|c| c.type_ == "AgentConnected")
            .unwrap();
        assert!(agent.is_true());
        let os = status.guest_os_info.as_ref().unwrap();
        assert_eq!(
            (
                os.id.as_deref(),
                os.version_id.as_deref(),
                os.name.as_deref()
            ),
            (Some("debian"), Some("12"), None)
        );
        let interface = &status.interfaces[0];
        assert_eq!(interface.interface_name.as_deref(), Some("enp0s2"));
        assert_eq!(
            interface.info_source.as_deref(),
            Some("domain, guest-agent")
        );
        // The Pod's address, where the masquerade binding reaches the guest.
        assert_eq!(interface.ip_address.as_deref(), Some("10.244.0.7"));

        // The agent stops answering: the condition and the OS go.
        let mut vmi = vmi(VmiPhase::Running);
        vmi.status = Some(status);
        running.guest_agent.as_mut().unwrap().connected = false;
        let status = status_from_domain(&vmi, &running, &observed(), now());
        assert!(!status
            .conditions
            .iter()
            .any(|c| c.type_ == "AgentConnected"));
        assert_eq!(status.guest_os_info, None);
        assert_eq!(status.interfaces[0].info_source.as_deref(), Some("domain"));
    }
}
