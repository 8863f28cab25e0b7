//! The admission webhooks: `AdmissionReview` (admission.k8s.io/v1) in, `AdmissionReview` out.
//!
//! Protocol: kube-apiserver POSTs an `AdmissionReview` whose `request` carries the operation
//! (CREATE, UPDATE), the object and, for UPDATE, the old object. The answer echoes the request's
//! `uid` and says `allowed`:
//!
//! - mutating (`/mutate-<resource>`): the object is parsed as its kubevirt.io kind, `api`'s
//!   defaults are applied, and the difference is answered as a JSON patch (RFC 6902,
//!   `patchType: JSONPatch`) that kube-apiserver applies before validation;
//! - validating (`/validate-<resource>`): `api`'s validation of the kind, plus for a VMI update
//!   the rule that its spec is immutable. A denial carries `status.code` 422, reason `Invalid`,
//!   a message listing each `field: message`, and `status.details.causes` with `field` and
//!   `reason`, so `kubectl apply` shows the field paths.
//!
//! A VM is validated with what its `spec.instancetype` and `spec.preference` were found to be
//! ([`References`], looked up by the server before the review): KubeVirt's conflict and
//! preference requirement checks, and the VM judged as it will run. The instance type and
//! preference kinds (`instancetype.kubevirt.io`) have validating webhooks of their own, and so
//! do snapshots, restores and clones (`snapshot.kubevirt.io`, `clone.kubevirt.io`), judged with
//! what the server looked up ([`SnapshotFacts`]). A VM being snapshotted keeps its volumes, one
//! being restored its run strategy.

use api::clone;
use api::instancetype::{self as instancetype, Kind, Reference};
use api::object::KubeVirtObject;
use api::snapshot::{self, VirtualMachineRestore, VirtualMachineSnapshot};
use api::validation::{validate_pool_update, validate_vmi_update, FieldError};
use api::vm::VirtualMachine;
use api::{VirtualMachineInstance, VirtualMachinePool};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Status};
use serde_json::Value;

/// The resources that have webhooks, by their plural name (the URL suffix).
pub const RESOURCES: &[(&str, &str)] = &[
    ("virtualmachines", "VirtualMachine"),
    ("virtualmachineinstances", "VirtualMachineInstance"),
    (
        "virtualmachineinstancemigrations",
        "VirtualMachineInstanceMigration",
    ),
    (
        "virtualmachineinstancereplicasets",
        "VirtualMachineInstanceReplicaSet",
    ),
    ("kubevirts", "KubeVirt"),
    ("virtualmachinepools", "VirtualMachinePool"),
    ("migrationpolicies", "MigrationPolicy"),
    ("virtualmachineinstancetypes", "VirtualMachineInstancetype"),
    (
        "virtualmachineclusterinstancetypes",
        "VirtualMachineClusterInstancetype",
    ),
    ("virtualmachinepreferences", "VirtualMachinePreference"),
    (
        "virtualmachineclusterpreferences",
        "VirtualMachineClusterPreference",
    ),
    ("virtualmachinesnapshots", "VirtualMachineSnapshot"),
    ("virtualmachinerestores", "VirtualMachineRestore"),
    ("virtualmachineclones", "VirtualMachineClone"),
];

/// The API group, versions and validating webhook name of a resource of [`RESOURCES`], and
/// whether it has a mutating webhook: the pool (`pool.kubevirt.io`), the migration policy
/// (`migrations.kubevirt.io`), the instance type and preference kinds
/// (`instancetype.kubevirt.io`), snapshots and restores (`snapshot.kubevirt.io`) and clones
/// (`clone.kubevirt.io`) have only a validating one, with KubeVirt's name, which
/// KubeVirt's clients see in a denial.
pub fn webhook_target(plural: &str) -> (&'static str, &'static [&'static str], String, bool) {
    if let Some(kind) = Kind::of_plural(plural) {
        return (
            instancetype::GROUP,
            &[instancetype::VERSION],
            format!(
                "{}-validator.{}",
                kind.sibling().singular,
                instancetype::GROUP
            ),
            false,
        );
    }
    if let Some(kind) = snapshot::Kind::of_plural(plural) {
        return (
            snapshot::GROUP,
            &["v1alpha1", "v1beta1"],
            format!("{}-validator.{}", kind.sibling().singular, snapshot::GROUP),
            false,
        );
    }
    match plural {
        "virtualmachineclones" => (
            clone::GROUP,
            &["v1beta1"],
            "vm-clone-validator.kubevirt.io".to_string(),
            false,
        ),
        "virtualmachinepools" => (
            "pool.kubevirt.io",
            &["v1alpha1", "v1beta1"],
            "virtualmachinepool-validator.kubevirt.io".to_string(),
            false,
        ),
        "migrationpolicies" => (
            "migrations.kubevirt.io",
            &["v1alpha1"],
            "migration-policy-validator.kubevirt.io".to_string(),
            false,
        ),
        _ => (
            "kubevirt.io",
            &["v1"],
            format!("{plural}-validator.kubevirt.io"),
            true,
        ),
    }
}

/// Who may change more of a VMI spec than nobody may: virt-api itself, which sets
/// `spec.terminationGracePeriodSeconds` when `stop` overrides the grace period (as KubeVirt does).
#[derive(Clone, Debug, Default)]
pub struct AdmissionConfig {
    pub privileged_users: Vec<String>,
}

/// Why an AdmissionReview could not be answered at all.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the body is not an AdmissionReview")]
    Parse(#[source] serde_json::Error),
    #[error("the AdmissionReview has no request")]
    NoRequest,
    #[error("encoding the AdmissionReview answer")]
    Encode(#[source] serde_json::Error),
}

/// Which webhook is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Webhook {
    Mutate,
    Validate,
}

/// What the server looked up for a review. For a VM, what its `spec.instancetype` and
/// `spec.preference` were found to be: the specs to apply, `None` for one the VM does not name
/// or that was not found (KubeVirt admits such a VM; virt-controller waits for what it names).
/// For a snapshot or restore, what the cluster says about it ([`SnapshotFacts`]). For a new
/// VMI's defaults, the KubeVirt CR's `memoryOvercommit` (`None`: KubeVirt's 100).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct References {
    pub instancetype: Option<Value>,
    pub preference: Option<Value>,
    pub snapshots: SnapshotFacts,
    pub memory_overcommit: Option<u32>,
}

/// What a new snapshot or restore is judged with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotFacts {
    /// The KubeVirt CR disables the `Snapshot` gate.
    pub gate_off: bool,
    /// The restores of the namespace with the same target that are not complete.
    pub restores_in_progress: Vec<String>,
}

impl References {
    /// Sets what `reference` was found to be.
    pub fn set(&mut self, reference: Reference, spec: Option<Value>) {
        match reference {
            Reference::Instancetype => self.instancetype = spec,
            Reference::Preference => self.preference = spec,
        }
    }
}

/// Whether a webhook call judges a VM with its [`References`] (which the caller looks up).
pub fn needs_references(webhook: Webhook, resource: &str) -> bool {
    webhook == Webhook::Validate && resource == "virtualmachines"
}

/// Whether a review of `resource` needs the cluster's configuration (`memoryOvercommit`): the
/// defaults of a VMI.
pub fn needs_cluster_configuration(webhook: Webhook, resource: &str) -> bool {
    webhook == Webhook::Mutate && resource == "virtualmachineinstances"
}

/// Whether a review of `resource` needs [`SnapshotFacts`] looked up: a snapshot, restore or
/// clone.
pub fn needs_snapshot_facts(webhook: Webhook, resource: &str) -> bool {
    webhook == Webhook::Validate
        && (snapshot::Kind::of_plural(resource).is_some() || resource == "virtualmachineclones")
}

/// The restore a CREATE review body carries: what to look the restores in progress up for.
pub fn restore_of_review(body: &[u8]) -> Option<VirtualMachineRestore> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).ok()?;
    let request: AdmissionRequest<DynamicObject> = review.try_into().ok()?;
    if request.operation != Operation::Create {
        return None;
    }
    let mut restore: VirtualMachineRestore =
        serde_json::from_value(serde_json::to_value(request.object.as_ref()?).ok()?).ok()?;
    if restore
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        restore.metadata.namespace = request.namespace.clone();
    }
    Some(restore)
}

/// The VM of a CREATE or UPDATE AdmissionReview body, with the request's namespace when the
/// object has none: what to look the references up for. `None` when there is nothing to look
/// up (another operation, a VM being deleted, a VM that names neither, a body that does not
/// parse: the review answers that).
pub fn vm_of_review(body: &[u8]) -> Option<VirtualMachine> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).ok()?;
    let request: AdmissionRequest<DynamicObject> = review.try_into().ok()?;
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return None;
    }
    let value = serde_json::to_value(request.object.as_ref()?).ok()?;
    if value.pointer("/metadata/deletionTimestamp").is_some() {
        return None;
    }
    let mut vm: VirtualMachine = serde_json::from_value(value).ok()?;
    if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() {
        return None;
    }
    if vm
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        vm.metadata.namespace = request.namespace.clone();
    }
    Some(vm)
}

/// Answers one AdmissionReview body for `resource` (the URL suffix).
pub fn review(
    webhook: Webhook,
    resource: &str,
    body: &[u8],
    config: &AdmissionConfig,
) -> Result<Vec<u8>, ReviewError> {
    review_with(webhook, resource, body, config, &References::default())
}

/// [`review`], a VM being judged with what its references were found to be.
pub fn review_with(
    webhook: Webhook,
    resource: &str,
    body: &[u8],
    config: &AdmissionConfig,
    references: &References,
) -> Result<Vec<u8>, ReviewError> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(ReviewError::Parse)?;
    let request: AdmissionRequest<DynamicObject> =
        review.try_into().map_err(|_| ReviewError::NoRequest)?;
    let response = match webhook {
        Webhook::Mutate => mutate(resource, &request, references),
        Webhook::Validate => validate(resource, &request, config, references),
    };
    encode_review(response)
}

/// Serialises the answer. kube-core writes `patch` as an array of byte values; Kubernetes
/// documents (and KubeVirt sends) the base64 string form, so it is rewritten to that.
fn encode_review(response: AdmissionResponse) -> Result<Vec<u8>, ReviewError> {
    use base64::Engine;
    let mut value = serde_json::to_value(response.into_review()).map_err(ReviewError::Encode)?;
    if let Some(patch) = value.pointer_mut("/response/patch") {
        if let Ok(bytes) = serde_json::from_value::<Vec<u8>>(patch.clone()) {
            *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
    }
    serde_json::to_vec(&value).map_err(ReviewError::Encode)
}

fn expected_kind(resource: &str) -> Option<&'static str> {
    RESOURCES
        .iter()
        .find(|(r, _)| *r == resource)
        .map(|(_, k)| *k)
}

/// The request's object as JSON.
fn object_value(object: Option<&DynamicObject>) -> Result<Value, String> {
    let object = object.ok_or_else(|| "the request has no object".to_string())?;
    serde_json::to_value(object).map_err(|e| e.to_string())
}

/// Parses the request's object as the kind its URL names.
fn parse_object(
    resource: &str,
    object: Option<&DynamicObject>,
) -> Result<(Value, KubeVirtObject), String> {
    let Some(kind) = expected_kind(resource) else {
        return Err(format!("no webhook for resource {resource:?}"));
    };
    let value = object_value(object)?;
    let parsed = KubeVirtObject::from_value(value.clone()).map_err(|e| e.to_string())?;
    let value_kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if value_kind != kind {
        return Err(format!("expected a {kind}, got a {value_kind}"));
    }
    Ok((value, parsed))
}

/// The mutating webhook: defaults as a JSON patch; a new VMI's memory request follows the
/// cluster's `memoryOvercommit` ([`api::defaults::overcommit_memory`]).
pub fn mutate(
    resource: &str,
    request: &AdmissionRequest<DynamicObject>,
    references: &References,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let (original, mut object) = match parse_object(resource, request.object.as_ref()) {
        Ok(parsed) => parsed,
        Err(message) => return deny(response, &message, &[]),
    };
    object.apply_defaults();
    if request.operation == Operation::Create {
        if let KubeVirtObject::VirtualMachineInstance(vmi) = &mut object {
            add_vmi_finalizer(vmi);
            if let Some(percent) = references.memory_overcommit {
                api::defaults::overcommit_memory(&mut vmi.spec, percent);
            }
        }
    }
    let defaulted = match object.to_value() {
        Ok(v) => v,
        Err(e) => {
            return deny(
                response,
                &format!("encoding the defaulted object: {e}"),
                &[],
            )
        }
    };
    let patch = defaults_patch(&original, &defaulted);
    if patch.0.is_empty() {
        return response;
    }
    match response.clone().with_patch(patch) {
        Ok(r) => r,
        Err(e) => deny(response, &format!("encoding the patch: {e}"), &[]),
    }
}

/// A new VMI carries virt-controller's finalizer from its creation, as KubeVirt's mutating
/// webhook adds it: virt-controller then needs no PATCH and no pass of its own for it.
fn add_vmi_finalizer(vmi: &mut VirtualMachineInstance) {
    let finalizers = vmi.metadata.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == contract::finalizers::VMI) {
        finalizers.push(contract::finalizers::VMI.into());
    }
}

/// The JSON patch that turns `original` into `defaulted`. Defaulting only adds and replaces;
/// a `remove` could only come from a field the Rust types do not keep, so it is left out
/// rather than deleting what the user wrote.
pub fn defaults_patch(original: &Value, defaulted: &Value) -> json_patch::Patch {
    let json_patch::Patch(ops) = json_patch::diff(original, defaulted);
    json_patch::Patch(
        ops.into_iter()
            .filter(|op| !matches!(op, json_patch::PatchOperation::Remove(_)))
            .collect(),
    )
}

/// The validating webhook.
pub fn validate(
    resource: &str,
    request: &AdmissionRequest<DynamicObject>,
    config: &AdmissionConfig,
    references: &References,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return response;
    }
    if let Some(kind) = Kind::of_plural(resource) {
        return validate_instancetype_kind(response, kind, request.object.as_ref());
    }
    if let Some(kind) = snapshot::Kind::of_plural(resource) {
        return validate_snapshot_kind(response, kind, request, &references.snapshots);
    }
    if resource == "virtualmachineclones" {
        return validate_clone(response, request, &references.snapshots);
    }
    let (value, object) = match parse_object(resource, request.object.as_ref()) {
        Ok(parsed) => parsed,
        Err(message) => return deny(response, &message, &[]),
    };
    // An object on its way out (finalizers being removed) is not re-judged.
    if value.pointer("/metadata/deletionTimestamp").is_some() {
        return response;
    }
    if request.operation == Operation::Update {
        if let KubeVirtObject::VirtualMachineInstance(new) = &object {
            return validate_vmi_change(response, request, new, config);
        }
        if let KubeVirtObject::VirtualMachine(new) = &object {
            let old = match old_object::<VirtualMachine>(request) {
                Ok(old) => old,
                Err(message) => return deny(response, &message, &[]),
            };
            let errors = snapshot::validation::validate_vm_update(&old, new);
            if !errors.is_empty() {
                return deny(response, "", &errors);
            }
        }
        if let KubeVirtObject::VirtualMachinePool(new) = &object {
            let old = match old_object::<VirtualMachinePool>(request) {
                Ok(old) => old,
                Err(message) => return deny(response, &message, &[]),
            };
            return match validate_pool_update(&old, new) {
                Ok(()) => response,
                Err(errors) => deny(response, "", &errors),
            };
        }
    }
    let validated = match &object {
        KubeVirtObject::VirtualMachine(vm) => instancetype::validate_vm(
            vm,
            references.instancetype.as_ref(),
            references.preference.as_ref(),
        ),
        other => other.validate(),
    };
    match validated {
        Ok(()) => response,
        Err(errors) => deny(response, "", &errors),
    }
}

/// The webhook of an instance type or preference kind: KubeVirt's rules on its `spec`, and
/// KubeVirt's warning for each deprecated CPU topology of a preference.
fn validate_instancetype_kind(
    mut response: AdmissionResponse,
    kind: Kind,
    object: Option<&DynamicObject>,
) -> AdmissionResponse {
    let value = match object_value(object) {
        Ok(value) => value,
        Err(message) => return deny(response, &message, &[]),
    };
    let value_kind = value["kind"].as_str().unwrap_or_default();
    if value_kind != kind.name() {
        let message = format!("expected a {}, got a {value_kind}", kind.name());
        return deny(response, &message, &[]);
    }
    if value.pointer("/metadata/deletionTimestamp").is_some() {
        return response;
    }
    let spec = &value["spec"];
    let errors = match kind.reference() {
        Reference::Instancetype => instancetype::validation::validate_instancetype(spec),
        Reference::Preference => instancetype::validation::validate_preference(spec),
    };
    if !errors.is_empty() {
        return deny(response, "", &errors);
    }
    if kind.reference() == Reference::Preference {
        let topology = spec["cpu"]["preferredCPUTopology"].as_str();
        if let Some(replacement) = topology.and_then(|t| t.strip_prefix("prefer")) {
            let replacement = replacement.to_ascii_lowercase();
            let topology = topology.unwrap_or_default();
            response.warnings = Some(vec![format!(
                "PreferredCPUTopology {topology} is deprecated for removal in a future release, please use {replacement} instead"
            )]);
        }
    }
    response
}

/// The webhook of a snapshot or restore: KubeVirt's rules on a new one (with the `Snapshot`
/// gate), and its spec unchanged on an update.
fn validate_snapshot_kind(
    response: AdmissionResponse,
    kind: snapshot::Kind,
    request: &AdmissionRequest<DynamicObject>,
    facts: &SnapshotFacts,
) -> AdmissionResponse {
    use snapshot::validation as rules;
    let value = match object_value(request.object.as_ref()) {
        Ok(value) => value,
        Err(message) => return deny(response, &message, &[]),
    };
    let value_kind = value["kind"].as_str().unwrap_or_default();
    if value_kind != kind.sibling().kind {
        let message = format!("expected a {}, got a {value_kind}", kind.sibling().kind);
        return deny(response, &message, &[]);
    }
    if value.pointer("/metadata/deletionTimestamp").is_some() {
        return response;
    }
    let judged = match kind {
        snapshot::Kind::Snapshot => judge_new_or_changed(
            value,
            request,
            facts.gate_off.then_some(rules::SNAPSHOT_GATE_OFF),
            |s: &VirtualMachineSnapshot| &s.spec,
            rules::validate_snapshot,
        ),
        snapshot::Kind::Restore => judge_new_or_changed(
            value,
            request,
            facts.gate_off.then_some(rules::RESTORE_GATE_OFF),
            |r: &VirtualMachineRestore| &r.spec,
            |new| rules::validate_restore(new, &facts.restores_in_progress),
        ),
        snapshot::Kind::Content => Ok(Vec::new()),
    };
    let errors = match judged {
        Ok(errors) => errors,
        Err(message) => return deny(response, &message, &[]),
    };
    if errors.is_empty() {
        response
    } else {
        deny(response, "", &errors)
    }
}

/// A snapshot kind's object judged: on an update, its spec unchanged; on a create, refused with
/// `gate_off` when the gate is off, else by `on_create`. `Err`: the message to deny with.
fn judge_new_or_changed<T: serde::de::DeserializeOwned, S: PartialEq>(
    value: Value,
    request: &AdmissionRequest<DynamicObject>,
    gate_off: Option<&str>,
    spec: impl Fn(&T) -> &S,
    on_create: impl FnOnce(&T) -> Vec<FieldError>,
) -> Result<Vec<FieldError>, String> {
    let new: T = serde_json::from_value(value).map_err(|e| e.to_string())?;
    if request.operation == Operation::Update {
        let old = old_object::<T>(request)?;
        return Ok(snapshot::validation::validate_spec_unchanged(
            spec(&old),
            spec(&new),
        ));
    }
    match gate_off {
        Some(message) => Err(message.to_string()),
        None => Ok(on_create(&new)),
    }
}

/// The webhook of a clone: the `Snapshot` gate on a new one, and KubeVirt's rules.
fn validate_clone(
    response: AdmissionResponse,
    request: &AdmissionRequest<DynamicObject>,
    facts: &SnapshotFacts,
) -> AdmissionResponse {
    let value = match object_value(request.object.as_ref()) {
        Ok(value) => value,
        Err(message) => return deny(response, &message, &[]),
    };
    if value.pointer("/metadata/deletionTimestamp").is_some() {
        return response;
    }
    if request.operation == Operation::Create && facts.gate_off {
        return deny(response, clone::GATE_OFF, &[]);
    }
    let clone: clone::VirtualMachineClone = match serde_json::from_value(value) {
        Ok(clone) => clone,
        Err(e) => return deny(response, &e.to_string(), &[]),
    };
    let errors = clone::validate(&clone);
    if errors.is_empty() {
        response
    } else {
        deny(response, "", &errors)
    }
}

fn validate_vmi_change(
    response: AdmissionResponse,
    request: &AdmissionRequest<DynamicObject>,
    new: &VirtualMachineInstance,
    config: &AdmissionConfig,
) -> AdmissionResponse {
    let old = match old_object::<VirtualMachineInstance>(request) {
        Ok(old) => old,
        Err(message) => return deny(response, &message, &[]),
    };
    let user = request.user_info.username.as_deref().unwrap_or_default();
    if config.privileged_users.iter().any(|u| u == user) {
        // virt-api's own stop with a grace period: only that one field may change.
        let mut allowed = old.clone();
        allowed.spec.termination_grace_period_seconds = new.spec.termination_grace_period_seconds;
        if allowed.spec == new.spec {
            return response;
        }
    }
    match validate_vmi_update(&old, new) {
        Ok(()) => response,
        Err(errors) => deny(response, "", &errors),
    }
}

/// The object an UPDATE replaces, as `T`.
fn old_object<T: serde::de::DeserializeOwned>(
    request: &AdmissionRequest<DynamicObject>,
) -> Result<T, String> {
    let old = request
        .old_object
        .as_ref()
        .ok_or_else(|| "an UPDATE without oldObject".to_string())?;
    serde_json::to_value(old)
        .and_then(serde_json::from_value)
        .map_err(|e| e.to_string())
}

/// A denial in KubeVirt's shape: 422 Invalid, the message listing each `field: message`, and
/// one cause per field error.
pub fn deny(
    response: AdmissionResponse,
    message: &str,
    errors: &[FieldError],
) -> AdmissionResponse {
    let text = if errors.is_empty() {
        message.to_string()
    } else {
        api::FieldErrors(errors.to_vec()).to_string()
    };
    let mut response = response.deny(text.clone());
    let mut status = Status::failure(&text, "Invalid").with_code(422);
    if !errors.is_empty() {
        status.details = Some(kube::core::response::StatusDetails {
            causes: errors
                .iter()
                .map(|e| kube::core::response::StatusCause {
                    reason: e.kind.cause_type().to_string(),
                    message: e.message.clone(),
                    field: e.field.clone(),
                })
                .collect(),
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
    }
    response.result = status;
    response
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "admission_reference_tests.rs"]
mod reference_tests;
