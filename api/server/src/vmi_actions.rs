//! VMI subresources: `pause`, `unpause`, `reset` (done by virt-handler through the launcher),
//! `softreboot` (through the guest agent, or without it as the launcher's backend can), the
//! guest agent's `guestosinfo`, `userlist` and `filesystemlist` (what the launcher last heard
//! from the agent, through virt-handler) and the checks the console, VNC and the screenshot
//! make before they are relayed.

use api::{Condition, VirtualMachineInstance, VmiPhase};
use kube::{Api, Client};

use crate::handler_client::HandlerAction;
use crate::status::ApiError;

/// Reads the VMI.
pub async fn load(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<VirtualMachineInstance, ApiError> {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    vmis.get_opt(name)
        .await
        .map_err(|e| ApiError::from_kube("reading the VMI", e))?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "virtualmachineinstances.kubevirt.io \"{name}\" not found"
            ))
        })
}

fn condition_true(vmi: &VirtualMachineInstance, kind: &str) -> bool {
    vmi.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c: &Condition| c.type_ == kind && c.status == "True")
    })
}

fn is_running(vmi: &VirtualMachineInstance) -> bool {
    vmi.status.as_ref().and_then(|s| s.phase) == Some(VmiPhase::Running)
}

/// Whether the VMI is paused (its `Paused` condition).
pub fn is_paused(vmi: &VirtualMachineInstance) -> bool {
    condition_true(vmi, "Paused")
}

/// Checks that the action makes sense in the VMI's state, with KubeVirt's messages.
pub fn check_action(vmi: &VirtualMachineInstance, action: HandlerAction) -> Result<(), ApiError> {
    if !is_running(vmi) {
        return Err(ApiError::conflict("VMI is not running"));
    }
    match action {
        HandlerAction::Pause if is_paused(vmi) => Err(ApiError::conflict("VMI is already paused")),
        HandlerAction::Unpause if !is_paused(vmi) => Err(ApiError::conflict("VMI is not paused")),
        _ => Ok(()),
    }
}

/// The console needs a running VMI with a serial console, with KubeVirt's answers
/// (`validateVMIForConsole`): 400 "No serial consoles are present." when
/// `autoattachSerialConsole` is false, 409 for a Failed VMI, 400 "VMI is not running" otherwise;
/// KubeVirt's virtctl retries a 400 until its `--timeout`.
pub fn check_console(vmi: &VirtualMachineInstance) -> Result<(), ApiError> {
    if vmi.spec.domain.devices.autoattach_serial_console == Some(false) {
        return Err(ApiError::bad_request("No serial consoles are present."));
    }
    let phase = vmi.status.as_ref().and_then(|s| s.phase);
    if phase == Some(VmiPhase::Failed) {
        return Err(ApiError::conflict("VMI is in failed status"));
    }
    if !is_running(vmi) {
        return Err(ApiError::bad_request("VMI is not running"));
    }
    Ok(())
}

/// KubeVirt's answer when the VMI has no graphics device.
pub const NO_GRAPHICS: &str = "No graphics devices are present.";

/// `vnc` and `vnc/screenshot` need a running VMI with a graphics device, with KubeVirt's
/// answers (`validateVMIForVNC`, both 400 as there). KubeVirt attaches a graphics device unless
/// `autoattachGraphicsDevice` is false; Ferrovirt's VM has one only when it is true, so an unset
/// field means no display here.
pub fn check_vnc(vmi: &VirtualMachineInstance) -> Result<(), ApiError> {
    if vmi.spec.domain.devices.autoattach_graphics_device != Some(true) {
        return Err(ApiError::bad_request(NO_GRAPHICS));
    }
    if !is_running(vmi) {
        return Err(ApiError::bad_request("VMI is not running"));
    }
    Ok(())
}

/// The query of `vnc/screenshot`. KubeVirt's `moveCursor=true` moves the pointer to wake the
/// screen before it is read over VNC; Ferrovirt's launcher takes the screenshot from QEMU
/// without a VNC client, so it refuses the parameter rather than ignore it.
pub fn check_screenshot_query(query: Option<&str>) -> Result<(), ApiError> {
    let move_cursor = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .any(|(key, value)| key == "moveCursor" && value == "true");
    if move_cursor {
        return Err(ApiError::bad_request(
            "moveCursor=true is not supported by ferrovirt: the screenshot is taken as the \
             screen is",
        ));
    }
    Ok(())
}

/// A port-forward needs a running VMI (KubeVirt's message), and reaches only the ports a
/// masquerade interface declares for its `protocol` (`tcp` or `udp`) when it declares some, as
/// the Pod's NAT does in KubeVirt.
pub fn check_port_forward(
    vmi: &VirtualMachineInstance,
    port: u16,
    protocol: &str,
) -> Result<(), ApiError> {
    if !is_running(vmi) {
        return Err(ApiError::conflict("VMI is not running"));
    }
    let interfaces = &vmi.spec.domain.devices.interfaces;
    let Some(interface) = interfaces.iter().find(|i| i.masquerade.is_some()) else {
        return Ok(());
    };
    if interface.ports.is_empty() {
        return Ok(());
    }
    let declared = |p: &api::domain::Port| {
        i64::from(p.port) == i64::from(port)
            && p.protocol
                .as_deref()
                .unwrap_or("TCP")
                .eq_ignore_ascii_case(protocol)
    };
    if interface.ports.iter().any(declared) {
        return Ok(());
    }
    let ports: Vec<String> = interface
        .ports
        .iter()
        .map(|p| format!("{}/{}", p.port, p.protocol.as_deref().unwrap_or("TCP")))
        .collect();
    Err(ApiError::bad_request(format!(
        "port {port}/{} is not among the ports interface {} forwards ({})",
        protocol.to_ascii_uppercase(),
        interface.name,
        ports.join(", ")
    )))
}

/// KubeVirt's answer when the VMI has no connected guest agent.
pub const NO_AGENT: &str = "VMI does not have guest agent connected";

/// The guest-agent subresources (`guestosinfo`, `userlist`, `filesystemlist`) need a running
/// VMI whose agent is connected (its `AgentConnected` condition), with KubeVirt's messages.
pub fn check_agent(vmi: &VirtualMachineInstance) -> Result<(), ApiError> {
    if !is_running(vmi) {
        return Err(ApiError::conflict("VMI is not running"));
    }
    if !condition_true(vmi, "AgentConnected") {
        return Err(ApiError::conflict(NO_AGENT));
    }
    Ok(())
}

/// `softreboot` needs a running VMI that is not paused. The agent is not required: without it
/// the launcher asks the guest as its backend can (QEMU: ACPI's power button, or Ctrl-Alt-Del
/// on a machine without ACPI), and says so when it cannot.
pub fn check_soft_reboot(vmi: &VirtualMachineInstance) -> Result<(), ApiError> {
    if !is_running(vmi) {
        return Err(ApiError::conflict("VMI is not running"));
    }
    if is_paused(vmi) {
        return Err(ApiError::conflict("VMI is paused"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(phase: &str, conditions: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "uid": "u"},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase, "conditions": conditions,
                       "guestOSInfo": {"name": "Debian", "id": "debian"}}
        }))
        .unwrap()
    }

    #[test]
    fn pause_unpause_follow_the_paused_condition() {
        let running = vmi("Running", json!([]));
        let paused = vmi("Running", json!([{"type": "Paused", "status": "True"}]));
        assert!(check_action(&running, HandlerAction::Pause).is_ok());
        assert_eq!(
            check_action(&paused, HandlerAction::Pause)
                .unwrap_err()
                .message,
            "VMI is already paused"
        );
        assert!(check_action(&paused, HandlerAction::Unpause).is_ok());
        assert_eq!(
            check_action(&running, HandlerAction::Unpause)
                .unwrap_err()
                .message,
            "VMI is not paused"
        );
        let pending = vmi("Pending", json!([]));
        assert_eq!(
            check_action(&pending, HandlerAction::Reset)
                .unwrap_err()
                .message,
            "VMI is not running"
        );
        let refused = check_console(&pending).unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_str()),
            (http::StatusCode::BAD_REQUEST, "VMI is not running")
        );
        let refused = check_console(&vmi("Failed", json!([]))).unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_str()),
            (http::StatusCode::CONFLICT, "VMI is in failed status")
        );
        let mut headless = vmi("Running", json!([]));
        headless.spec.domain.devices.autoattach_serial_console = Some(false);
        let refused = check_console(&headless).unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_str()),
            (
                http::StatusCode::BAD_REQUEST,
                "No serial consoles are present."
            )
        );
        assert!(check_console(&running).is_ok());
    }

    #[test]
    fn vnc_needs_a_running_vmi_with_a_graphics_device() {
        let with_graphics = |phase: &str, graphics: Option<bool>| {
            let mut vmi = vmi(phase, json!([]));
            vmi.spec.domain.devices.autoattach_graphics_device = graphics;
            vmi
        };
        assert!(check_vnc(&with_graphics("Running", Some(true))).is_ok());
        for graphics in [None, Some(false)] {
            let refused = check_vnc(&with_graphics("Running", graphics)).unwrap_err();
            assert_eq!(
                (refused.code, refused.message.as_str()),
                (http::StatusCode::BAD_REQUEST, NO_GRAPHICS),
                "{graphics:?}"
            );
        }
        for phase in ["Scheduled", "Succeeded", "Failed"] {
            let refused = check_vnc(&with_graphics(phase, Some(true))).unwrap_err();
            assert_eq!(
                (refused.code, refused.message.as_str()),
                (http::StatusCode::BAD_REQUEST, "VMI is not running"),
                "{phase}"
            );
        }
        // As in KubeVirt, the missing device is said first.
        let refused = check_vnc(&with_graphics("Pending", Some(false))).unwrap_err();
        assert_eq!(refused.message, NO_GRAPHICS);
    }

    #[test]
    fn a_screenshot_cannot_move_the_cursor() {
        for fine in [
            None,
            Some(""),
            Some("moveCursor=false"),
            Some("x=1&moveCursor"),
        ] {
            assert!(check_screenshot_query(fine).is_ok(), "{fine:?}");
        }
        let refused = check_screenshot_query(Some("a=b&moveCursor=true")).unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_str()),
            (
                http::StatusCode::BAD_REQUEST,
                "moveCursor=true is not supported by ferrovirt: the screenshot is taken as the \
                 screen is"
            )
        );
    }

    #[test]
    fn a_port_forward_reaches_the_declared_ports_only_when_some_are() {
        let mut running = vmi("Running", json!([]));
        assert!(check_port_forward(&running, 22, "tcp").is_ok());
        assert!(check_port_forward(&running, 53, "udp").is_ok());
        running.spec.domain.devices.interfaces = serde_json::from_value(json!([
            {"name": "default", "masquerade": {}, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}
        ]))
        .unwrap();
        assert!(check_port_forward(&running, 80, "tcp").is_ok());
        assert!(check_port_forward(&running, 53, "udp").is_ok());
        for (port, protocol) in [(53, "tcp"), (80, "udp")] {
            let refused = check_port_forward(&running, port, protocol).unwrap_err();
            assert_eq!(refused.code, http::StatusCode::BAD_REQUEST);
            assert_eq!(
                refused.message,
                format!(
                    "port {port}/{} is not among the ports interface default forwards \
                     (80/TCP, 53/UDP)",
                    protocol.to_ascii_uppercase()
                )
            );
        }
        let stopped = vmi("Succeeded", json!([]));
        assert_eq!(
            check_port_forward(&stopped, 80, "tcp").unwrap_err().message,
            "VMI is not running"
        );
    }

    #[test]
    fn the_agent_subresources_need_a_running_vmi_with_its_agent() {
        let no_agent = vmi("Running", json!([]));
        let e = check_agent(&no_agent).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (http::StatusCode::CONFLICT, NO_AGENT)
        );
        let connected = json!([{"type": "AgentConnected", "status": "True"}]);
        assert!(check_agent(&vmi("Running", connected.clone())).is_ok());
        let e = check_agent(&vmi("Scheduled", connected)).unwrap_err();
        assert_eq!(e.message, "VMI is not running");
        let paused = json!([{"type": "AgentConnected", "status": "True"},
                            {"type": "Paused", "status": "True"}]);
        assert!(check_agent(&vmi("Running", paused)).is_ok());
    }

    #[test]
    fn a_soft_reboot_needs_a_running_unpaused_vmi_but_no_agent() {
        assert!(check_soft_reboot(&vmi("Running", json!([]))).is_ok());
        let paused = json!([{"type": "Paused", "status": "True"}]);
        let e = check_soft_reboot(&vmi("Running", paused)).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (http::StatusCode::CONFLICT, "VMI is paused")
        );
        let e = check_soft_reboot(&vmi("Scheduled", json!([]))).unwrap_err();
        assert_eq!(e.message, "VMI is not running");
    }
}
