//! `expand-vm-spec` and `virtualmachines/{name}/expand-spec`: a VM with its instancetype and
//! preference applied, as KubeVirt's virt-api answers them.
//!
//! - `PUT .../namespaces/{ns}/expand-vm-spec` expands the VM in the body. The body must be a
//!   VirtualMachine (400 otherwise) whose `metadata.namespace` is empty or `{ns}` (400
//!   "VM namespace must be empty or {ns}"); the answer carries `{ns}`.
//! - `GET .../namespaces/{ns}/virtualmachines/{name}/expand-spec` expands the stored VM.
//!
//! Ferrovirt has no instancetypes or preferences (their CRDs are served with a NotSupported
//! condition), so expanding is the identity: a VM without `spec.instancetype` and
//! `spec.preference` comes back unchanged, as in KubeVirt; one that names either is refused
//! with 422 Invalid and the field path, instead of being answered without what it asks for.

use api::vm::VirtualMachine;
use kube::{Api, Client};

use crate::status::ApiError;

/// The `spec` fields that refer to an instancetype or a preference.
const REFERENCES: [&str; 2] = ["instancetype", "preference"];

/// KubeVirt's message for a body it cannot unmarshal.
fn unmarshal_error(error: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "Can not unmarshal Request body to struct, error: {error}"
    ))
}

/// Reads the body of `expand-vm-spec` sent to `namespace`: a VirtualMachine whose namespace is
/// empty or `namespace`, returned with `namespace` set.
pub fn vm_from_body(body: &[u8], namespace: &str) -> Result<VirtualMachine, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("empty request body"));
    }
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(unmarshal_error)?;
    let mut vm: VirtualMachine = serde_json::from_value(object.into())
        .map_err(|e| ApiError::bad_request(format!("Object is not a valid VirtualMachine: {e}")))?;
    if namespace.is_empty() {
        return Err(ApiError::bad_request(
            "The request namespace must not be empty",
        ));
    }
    match vm.metadata.namespace.as_deref() {
        None | Some("") => vm.metadata.namespace = Some(namespace.to_string()),
        Some(ns) if ns == namespace => {}
        Some(_) => {
            return Err(ApiError::bad_request(format!(
                "VM namespace must be empty or {namespace}"
            )))
        }
    }
    Ok(vm)
}

/// The VM with its instancetype and preference applied: the VM itself when it has neither,
/// 422 naming each field it sets otherwise. A `null` field sets nothing.
pub fn expand(vm: VirtualMachine) -> Result<VirtualMachine, ApiError> {
    let refused: Vec<String> = REFERENCES
        .into_iter()
        .filter(|field| vm.spec.other.get(*field).is_some_and(|v| !v.is_null()))
        .map(|field| format!("spec.{field}: not supported by ferrovirt"))
        .collect();
    if refused.is_empty() {
        Ok(vm)
    } else {
        Err(ApiError::invalid(refused.join(", ")))
    }
}

/// Reads the stored VM for `expand-spec`; 404 when it does not exist.
pub async fn load(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<VirtualMachine, ApiError> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    vms.get_opt(name)
        .await
        .map_err(|e| ApiError::from_kube("reading the VM", e))?
        .ok_or_else(|| {
            ApiError::not_found(format!("virtualmachines.kubevirt.io \"{name}\" not found"))
        })
}

#[cfg(test)]
#[path = "expand_tests.rs"]
mod tests;
