//! `expand-vm-spec` and `virtualmachines/{name}/expand-spec`: a VM with its instancetype and
//! preference applied, as KubeVirt's virt-api answers them.
//!
//! - `PUT .../namespaces/{ns}/expand-vm-spec` expands the VM in the body. The body must be a
//!   VirtualMachine (400 otherwise) whose `metadata.namespace` is empty or `{ns}` (400
//!   "VM namespace must be empty or {ns}"); the answer carries `{ns}`.
//!   Expansion errors are 400 with the error's text.
//! - `GET .../namespaces/{ns}/virtualmachines/{name}/expand-spec` expands the stored VM (with
//!   the ControllerRevisions its status records). Expansion errors are 500 InternalError.
//!
//! A VM that names neither an instance type nor a preference comes back unchanged (without
//! defaults). Otherwise both are found as virt-controller finds them, applied to the template
//! (KubeVirt's conflict message when the VM sets what the instance type owns), the VMI
//! defaults applied, and the references and their status removed.

use api::instancetype::{find, Reference};
use api::vm::VirtualMachine;
use kube::{Api, Client};

use crate::status::ApiError;

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

pub use api::instancetype::{expand_vm as expand_with, names_any};

/// The VM with its instance type and preference found and applied ([`api::instancetype::expand_vm`]); the
/// text of the error when either cannot be found or applied.
pub async fn expand(client: &Client, vm: VirtualMachine) -> Result<VirtualMachine, String> {
    if !names_any(&vm) {
        return Ok(vm);
    }
    let instancetype = find::find(client, &vm, Reference::Instancetype).await?;
    let preference = find::find(client, &vm, Reference::Preference).await?;
    expand_with(
        &vm,
        instancetype.as_ref().map(|f| &f.spec),
        preference.as_ref().map(|f| &f.spec),
    )
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
