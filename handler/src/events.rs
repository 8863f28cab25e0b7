//! Kubernetes events on VMIs, recorded as virt-handler of this node.

use api::VirtualMachineInstance;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};

/// Records one event on `vmi`; a failure to record is logged, never the caller's error.
pub async fn record(
    recorder: &Recorder,
    vmi: &VirtualMachineInstance,
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &vmi.object_ref(&())).await {
        log::warn!("{}: cannot record event {reason}: {e}", vmi.name_any());
    }
}
