//! A preference's requirements (`spec.requirements`) checked against the instance type, or
//! without one against the VM's template: KubeVirt's rules and messages.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use super::apply::{preferred_topology, spread_options};
use crate::quantity;

/// Why a preference's requirements are not met: the field and KubeVirt's message (without its
/// `failure checking preference requirements: ` prefix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmet {
    pub field: String,
    pub message: String,
}

/// Checks `preference`'s requirements against the instance type, or, without one, the VM's
/// template `spec` (with its defaults applied), KubeVirt's way: CPU, then memory, then the
/// architecture.
pub fn check_requirements(
    instancetype: Option<&Value>,
    preference: Option<&Value>,
    spec: &Value,
) -> Result<(), Unmet> {
    let Some(requirements) = preference
        .map(|p| &p["requirements"])
        .filter(|r| r.is_object())
    else {
        return Ok(());
    };
    let unmet = |field: &str, message: String| {
        Err(Unmet {
            field: field.to_string(),
            message,
        })
    };
    if let Some(required) = requirements["cpu"]["guest"].as_u64() {
        match instancetype {
            Some(it) => {
                let provided = it["cpu"]["guest"].as_u64().unwrap_or(0);
                if provided < required {
                    return unmet(
                        "spec.instancetype",
                        format!("insufficient CPU resources of {provided} vCPU provided by instance type, preference requires {required} vCPU"),
                    );
                }
            }
            None => {
                let cpu = &spec["domain"]["cpu"];
                if !cpu.is_object() {
                    return unmet(
                        "spec.template.spec.domain.cpu",
                        format!("no CPU resources provided by VirtualMachine, preference requires {required} vCPU"),
                    );
                }
                let count = |f: &str| cpu[f].as_u64().unwrap_or(0);
                let (provided, field, what) = match preferred_topology(preference).as_str() {
                    "threads" | "preferThreads" => {
                        (count("threads"), "threads", "threads".to_string())
                    }
                    "cores" | "preferCores" => (count("cores"), "cores", "cores".to_string()),
                    "any" | "preferAny" => (
                        count("sockets") * count("cores") * count("threads"),
                        "",
                        "cores, sockets and threads".to_string(),
                    ),
                    "spread" | "preferSpread" => {
                        let (_, across) = spread_options(preference);
                        let provided = match across.as_str() {
                            "CoresThreads" => count("cores") * count("threads"),
                            "SocketsCoresThreads" => {
                                count("sockets") * count("cores") * count("threads")
                            }
                            _ => count("sockets") * count("cores"),
                        };
                        (provided, "", across)
                    }
                    _ => (count("sockets"), "sockets", "sockets".to_string()),
                };
                if provided < required {
                    let field = if field.is_empty() {
                        "spec.template.spec.domain.cpu".to_string()
                    } else {
                        format!("spec.template.spec.domain.cpu.{field}")
                    };
                    return unmet(
                        &field,
                        format!("insufficient CPU resources of {provided} vCPU provided by VirtualMachine, preference requires {required} vCPU provided as {what}"),
                    );
                }
            }
        }
    }
    if let Some(required) = requirements["memory"]["guest"]
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            requirements["memory"]["guest"]
                .as_u64()
                .map(|n| n.to_string())
        })
    {
        let bytes = |text: &str| quantity::to_u64(&Quantity(text.to_string())).unwrap_or(0);
        let (mut provided, mut field, mut by) = (
            "0".to_string(),
            "spec.template.spec.domain.memory",
            "VirtualMachine",
        );
        if let Some(it) = instancetype {
            provided = quantity_text(&it["memory"]["guest"]);
            field = "spec.instancetype";
            by = "instance type";
        }
        if let Some(guest) = spec["domain"]["memory"]
            .get("guest")
            .filter(|g| !g.is_null())
        {
            provided = quantity_text(guest);
        }
        if bytes(&provided) < bytes(&required) {
            return unmet(
                field,
                format!("insufficient Memory resources of {provided} provided by {by}, preference requires {required}"),
            );
        }
    }
    if let Some(arch) = requirements["architecture"]
        .as_str()
        .filter(|a| !a.is_empty())
    {
        let have = spec["architecture"].as_str().unwrap_or_default();
        if have != arch {
            return unmet(
                "spec.template.spec.architecture",
                format!("preference requires architecture {arch} but {have} is being requested"),
            );
        }
    }
    Ok(())
}

fn quantity_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "0".to_string(),
    }
}
