//! Finding what a VM's `spec.instancetype` or `spec.preference` names, KubeVirt's way: the
//! ControllerRevision the matcher pins (`revisionName`), else the one the VM's status records
//! for the same name, else the object itself.

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::Client;
use serde_json::Value;

use super::{spec_of_revision, Kind, Matcher, Reference, LABEL_OBJECT_NAME, VERSION};
use crate::vm::VirtualMachine;

/// What a VM's reference resolves to.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub kind: Kind,
    /// The spec to apply.
    pub spec: Value,
    /// The object as read from the API (to be stored), when it was not read from a revision.
    pub object: Option<Value>,
    /// The ControllerRevision it was read from.
    pub revision: Option<String>,
}

/// The matcher of `reference` on `vm`, if it names anything.
pub fn matcher(vm: &VirtualMachine, reference: Reference) -> Option<&Matcher> {
    match reference {
        Reference::Instancetype => vm.spec.instancetype.as_ref(),
        Reference::Preference => vm.spec.preference.as_ref(),
    }
}

/// The API resource of a kind.
pub fn resource(kind: Kind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(super::GROUP, VERSION, kind.name()),
        kind.plural(),
    )
}

/// The text of an API error as the API server words it (`... "x" not found`).
fn text(error: kube::Error) -> String {
    match error {
        kube::Error::Api(e) => e.message,
        other => other.to_string(),
    }
}

/// Reads a ControllerRevision of the VM's namespace and the spec it stores.
pub async fn revision(
    client: &Client,
    namespace: &str,
    name: &str,
    reference: Reference,
) -> Result<(ControllerRevision, Value), String> {
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let revision = revisions.get(name).await.map_err(text)?;
    let data = revision
        .data
        .as_ref()
        .map(|d| d.0.clone())
        .unwrap_or(Value::Null);
    let spec = spec_of_revision(reference, &data)
        .map_err(|e| format!("failed to decode object in ControllerRevision: {e}"))?;
    Ok((revision, spec))
}

/// Reads the object a kind and name name, in `namespace` for the namespaced kinds.
pub async fn object(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Value, String> {
    let resource = resource(kind);
    let api: Api<DynamicObject> = if kind.namespaced() {
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let object = api.get(name).await.map_err(text)?;
    serde_json::to_value(object).map_err(|e| e.to_string())
}

/// What `reference` of `vm` resolves to; `None` when the VM names nothing.
pub async fn find(
    client: &Client,
    vm: &VirtualMachine,
    reference: Reference,
) -> Result<Option<Found>, String> {
    let Some(matcher) = matcher(vm, reference) else {
        return Ok(None);
    };
    if matcher.name().is_none() && matcher.revision_name().is_none() {
        return Ok(None);
    }
    let kind = Kind::of(reference, matcher.kind.as_deref())?;
    let namespace = vm.metadata.namespace.clone().unwrap_or_default();
    if let Some(name) = matcher.revision_name() {
        let (_, spec) = revision(client, &namespace, name, reference).await?;
        return Ok(Some(Found {
            kind,
            spec,
            object: None,
            revision: Some(name.to_string()),
        }));
    }
    let recorded = vm.status.as_ref().and_then(|s| match reference {
        Reference::Instancetype => s.instancetype_ref.as_ref(),
        Reference::Preference => s.preference_ref.as_ref(),
    });
    if let Some(name) = recorded.and_then(|r| r.revision()) {
        let (stored, spec) = revision(client, &namespace, name, reference).await?;
        let stored_for = stored
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_OBJECT_NAME))
            .map(String::as_str);
        if stored_for == matcher.name() {
            return Ok(Some(Found {
                kind,
                spec,
                object: None,
                revision: Some(name.to_string()),
            }));
        }
    }
    let name = matcher.name().unwrap_or_default();
    let object = object(client, kind, &namespace, name).await?;
    Ok(Some(Found {
        kind,
        spec: object.get("spec").cloned().unwrap_or(Value::Null),
        object: Some(object),
        revision: None,
    }))
}
