//! VMI subresources: `pause`, `unpause`, `reset` (done by virt-handler through the launcher),
//! `softreboot` (through the guest agent), the guest agent's `guestosinfo`, `userlist` and
//! `filesystemlist` (what the launcher last heard from the agent, through virt-handler) and the
//! checks the console makes before it is relayed.

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

/// A port-forward needs a running VMI (KubeVirt's message), and reaches only the ports a
/// masquerade interface declares when it declares some, as the Pod's NAT does in KubeVirt.
pub fn check_port_forward(vmi: &VirtualMachineInstance, port: u16) -> Result<(), ApiError> {
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
    let tcp = |p: &&api::domain::Port| {
        p.protocol
            .as_deref()
            .is_none_or(|proto| proto.eq_ignore_ascii_case("TCP"))
    };
    if interface
        .ports
        .iter()
        .filter(tcp)
        .any(|p| i64::from(p.port) == i64::from(port))
    {
        return Ok(());
    }
    let declared: Vec<String> = interface
        .ports
        .iter()
        .map(|p| format!("{}/{}", p.port, p.protocol.as_deref().unwrap_or("TCP")))
        .collect();
    Err(ApiError::bad_request(format!(
        "port {port}/TCP is not among the ports interface {} forwards ({})",
        interface.name,
        declared.join(", ")
    )))
}

/// KubeVirt's answer when the VMI has no connected guest agent.
pub const NO_AGENT: &str = "VMI does not have guest agent connected";

/// The guest-agent subresources (`guestosinfo`, `userlist`, `filesystemlist`) and `softreboot`
/// need a running VMI whose agent is connected (its `AgentConnected` condition), with KubeVirt's
/// messages; a paused VMI cannot reboot.
pub fn check_agent(vmi: &VirtualMachineInstance, soft_reboot: bool) -> Result<(), ApiError> {
    if !is_running(vmi) {
        return Err(ApiError::conflict("VMI is not running"));
    }
    if soft_reboot && is_paused(vmi) {
        return Err(ApiError::conflict("VMI is paused"));
    }
    if !condition_true(vmi, "AgentConnected") {
        return Err(ApiError::conflict(if soft_reboot {
            "VMI does not have guest agent connected: soft reboot without a guest agent (through \
             ACPI) is not supported by ferrovirt (use the reset subresource for a hardware reset)"
        } else {
            NO_AGENT
        }));
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
    fn a_port_forward_reaches_the_declared_ports_only_when_some_are() {
        let mut running = vmi("Running", json!([]));
        assert!(check_port_forward(&running, 22).is_ok());
        running.spec.domain.devices.interfaces = serde_json::from_value(json!([
            {"name": "default", "masquerade": {}, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}
        ]))
        .unwrap();
        assert!(check_port_forward(&running, 80).is_ok());
        let refused = check_port_forward(&running, 53).unwrap_err();
        assert_eq!(refused.code, http::StatusCode::BAD_REQUEST);
        assert!(
            refused.message.contains("80/TCP, 53/UDP"),
            "{}",
            refused.message
        );
        let stopped = vmi("Succeeded", json!([]));
        assert_eq!(
            check_port_forward(&stopped, 80).unwrap_err().message,
            "VMI is not running"
        );
    }

    #[test]
    fn the_agent_subresources_need_a_running_vmi_with_its_agent() {
        let no_agent = vmi("Running", json!([]));
        let e = check_agent(&no_agent, false).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (http::StatusCode::CONFLICT, NO_AGENT)
        );
        let e = check_agent(&no_agent, true).unwrap_err();
        assert!(e.message.starts_with(NO_AGENT), "{}", e.message);
        assert!(
            e.message.contains("not supported by ferrovirt"),
            "{}",
            e.message
        );
        let connected = json!([{"type": "AgentConnected", "status": "True"}]);
        assert!(check_agent(&vmi("Running", connected.clone()), true).is_ok());
        let e = check_agent(&vmi("Scheduled", connected), false).unwrap_err();
        assert_eq!(e.message, "VMI is not running");
        let paused = json!([{"type": "AgentConnected", "status": "True"},
                            {"type": "Paused", "status": "True"}]);
        assert!(check_agent(&vmi("Running", paused.clone()), false).is_ok());
        assert_eq!(
            check_agent(&vmi("Running", paused), true)
                .unwrap_err()
                .message,
            "VMI is paused"
        );
    }
}
