//! The validating webhooks of the instance type and preference kinds: KubeVirt's rules, and for
//! an instance type the fields Ferrovirt cannot run refused by path.
//!
//! A preference is not judged beyond KubeVirt's rules: it only fills in what a VM leaves unset,
//! and a VM that would get a field Ferrovirt does not run from it is refused when it is admitted
//! (virt-api validates the VM with its instance type and preference applied).

use serde_json::Value;

use crate::field_error::{FieldError, Path};

/// The instance type fields Ferrovirt applies and runs; the rest of KubeVirt's are refused.
const SUPPORTED_INSTANCETYPE: [(&str, &[&str]); 5] = [
    ("cpu", &["guest", "model"]),
    ("memory", &["guest", "overcommitPercent"]),
    ("annotations", &[]),
    ("nodeSelector", &[]),
    ("schedulerName", &[]),
];

/// Why Ferrovirt refuses an instance type field.
fn refusal(path: &str) -> &'static str {
    match path {
        "cpu.dedicatedCPUPlacement" | "cpu.isolateEmulatorThread" | "cpu.numa" | "cpu.realtime" => {
            "not supported by ferrovirt: the VMM does not pin vCPUs or expose host NUMA"
        }
        "cpu.maxSockets" | "memory.maxGuest" => {
            "not supported by ferrovirt: no CPU or memory hotplug"
        }
        "memory.hugepages" => "not supported by ferrovirt: guest memory is not backed by hugepages",
        "gpus" | "hostDevices" => "not supported by ferrovirt: no device passthrough",
        "launchSecurity" => "not supported by ferrovirt: no SEV or TDX guests",
        "ioThreads" | "ioThreadsPolicy" => {
            "not supported by ferrovirt: each virtio-blk device has its own worker"
        }
        _ => "not supported by ferrovirt",
    }
}

/// Validates the spec of a VirtualMachine(Cluster)Instancetype.
pub fn validate_instancetype(spec: &Value) -> Vec<FieldError> {
    let path = Path::root("spec");
    let mut errors = Vec::new();
    let Some(fields) = spec.as_object() else {
        errors.push(FieldError::required(path, "an instance type needs a spec"));
        return errors;
    };
    for (field, value) in fields {
        if value.is_null() {
            continue;
        }
        let Some((_, children)) = SUPPORTED_INSTANCETYPE.iter().find(|(f, _)| f == field) else {
            errors.push(FieldError::new(
                path.child(field),
                crate::field_error::FieldErrorKind::NotSupported,
                refusal(field),
            ));
            continue;
        };
        if children.is_empty() {
            continue;
        }
        for (child, value) in value.as_object().into_iter().flatten() {
            let unset = value.is_null() || value == &Value::Bool(false);
            if !children.contains(&child.as_str()) && !unset {
                errors.push(FieldError::new(
                    path.child(field).child(child),
                    crate::field_error::FieldErrorKind::NotSupported,
                    refusal(&format!("{field}.{child}")),
                ));
            }
        }
    }
    for required in ["cpu", "memory"] {
        match spec.get(required) {
            Some(v) if v.get("guest").is_some_and(|g| !g.is_null()) => {}
            Some(v) if v.is_object() => errors.push(FieldError::required(
                path.child(required).child("guest"),
                "Required value",
            )),
            _ => errors.push(FieldError::required(path.child(required), "Required value")),
        }
    }
    if let Some(percent) = spec["memory"]
        .get("overcommitPercent")
        .and_then(Value::as_i64)
    {
        if !(0..=100).contains(&percent) {
            errors.push(FieldError::invalid(
                path.child("memory").child("overcommitPercent"),
                format!("spec.memory.overcommitPercent '{percent}': must be in range between 0 and 100."),
            ));
        }
    }
    errors
}

/// KubeVirt's CPU topologies of a preference (the `prefer` forms are deprecated).
pub const TOPOLOGIES: [&str; 10] = [
    "preferSockets",
    "preferCores",
    "preferThreads",
    "preferSpread",
    "preferAny",
    "sockets",
    "cores",
    "threads",
    "spread",
    "any",
];

/// Validates the spec of a VirtualMachine(Cluster)Preference by KubeVirt's rules.
pub fn validate_preference(spec: &Value) -> Vec<FieldError> {
    let path = Path::root("spec").child("cpu");
    let mut errors = Vec::new();
    let Some(topology) = spec["cpu"]["preferredCPUTopology"].as_str() else {
        return errors;
    };
    if !TOPOLOGIES.contains(&topology) {
        errors.push(FieldError::invalid(
            path.child("preferredCPUTopology"),
            format!("unknown preferredCPUTopology {topology}"),
        ));
        return errors;
    }
    if topology == "spread" || topology == "preferSpread" {
        let options = &spec["cpu"]["spreadOptions"];
        let across = options["across"].as_str().unwrap_or("SocketsCores");
        match across {
            "SocketsCores" | "SocketsCoresThreads" => {}
            "CoresThreads" => {
                if options["ratio"].as_u64().is_some_and(|r| r != 2) {
                    errors.push(FieldError::invalid(
                        path.child("spreadOptions").child("ratio"),
                        "only a ratio of 2 (1 core 2 threads) is allowed when spreading vCPUs over cores and threads",
                    ));
                }
            }
            other => errors.push(FieldError::invalid(
                path.child("spreadOptions").child("across"),
                format!("across {other} is not supported"),
            )),
        }
    }
    errors
}
