//! VMI subresources: `pause`, `unpause`, `reset` (done by virt-handler through the launcher),
//! `softreboot` (refused: it needs a guest agent, which Ferrovirt's guests do not have),
//! `guestosinfo` (from the VMI status, when a guest agent reported it) and the checks the
//! console makes before it is relayed.

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

/// `softreboot` asks the guest agent (or ACPI) to reboot from inside; Ferrovirt has neither.
pub fn soft_reboot(vmi: &VirtualMachineInstance) -> Result<(), ApiError> {
    if !is_running(vmi) {
        return Err(ApiError::conflict("VMI is not running"));
    }
    Err(ApiError::conflict(
        "VMI does not have guest agent connected: softreboot is not supported by ferrovirt \
         (use `virtctl restart` for the VM, or the reset subresource for a hardware reset)",
    ))
}

/// `guestosinfo`: a `v1.VirtualMachineInstanceGuestAgentInfo` when a guest agent reported.
pub fn guest_os_info(vmi: &VirtualMachineInstance) -> Result<serde_json::Value, ApiError> {
    if !condition_true(vmi, "AgentConnected") {
        return Err(ApiError::conflict(
            "VMI does not have guest agent connected",
        ));
    }
    let os = vmi
        .status
        .as_ref()
        .and_then(|s| s.guest_os_info.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceGuestAgentInfo",
        "os": os.unwrap_or_default(),
    }))
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
    fn softreboot_is_refused_clearly() {
        let e = soft_reboot(&vmi("Running", json!([]))).unwrap_err();
        assert_eq!(e.code, http::StatusCode::CONFLICT);
        assert!(e.message.contains("not supported by ferrovirt"));
    }

    #[test]
    fn guestosinfo_needs_an_agent() {
        assert!(guest_os_info(&vmi("Running", json!([]))).is_err());
        let with_agent = vmi(
            "Running",
            json!([{"type": "AgentConnected", "status": "True"}]),
        );
        let info = guest_os_info(&with_agent).unwrap();
        assert_eq!(info["os"]["name"], "Debian");
    }
}
