//! Objects the migration modules' unit tests share.

use api::VirtualMachineInstance;
use serde_json::json;

/// VMI `default/v` (UID `vmi-uid`), Running on `node-a`, with `volumes`.
pub(crate) fn vmi(volumes: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "namespace": "default", "uid": "vmi-uid"},
        "spec": {"domain": {"devices": {}, "memory": {"guest": "128Mi"}}, "volumes": volumes},
        "status": {"phase": "Running", "nodeName": "node-a"}
    }))
    .unwrap()
}
