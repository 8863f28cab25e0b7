//! Fields that Ferrovirt does not model.
//!
//! Every API struct that users write ends with `#[serde(flatten)] other: Other`. Whatever the
//! user sent that Ferrovirt has no typed field for lands there instead of being dropped, so a
//! round trip keeps it and validation can refuse it by path: "not supported by ferrovirt" when
//! KubeVirt has the field (per `kubevirt_fields`, taken from KubeVirt's OpenAPI), "unknown field"
//! otherwise. In the CRD schema the flattened map becomes `x-kubernetes-preserve-unknown-fields`,
//! so the API server keeps such fields for the validating webhook to see.

use std::collections::BTreeMap;

use crate::field_error::{FieldError, Path};
use crate::kubevirt_fields;

/// Fields of a JSON object that have no typed field in Ferrovirt's API.
pub type Other = BTreeMap<String, serde_json::Value>;

/// Reports every entry of `other` as an error at `path.<key>`. `definition` names the KubeVirt
/// OpenAPI definition of the object (`v1.Devices`), to tell unsupported from unknown fields.
///
/// A KubeVirt field whose value asks for nothing (`null`, `false`, `""`, `[]`) is let through:
/// `dedicatedCpuPlacement: false` is what Ferrovirt does anyway. An empty object is not inert in
/// KubeVirt (`tpm: {}` adds a TPM, `bridge: {}` picks a binding), so it is refused.
pub(crate) fn reject_other(
    other: &Other,
    definition: &str,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    reject(other, definition, path, errors, false)
}

/// Like [`reject_other`], but also lets empty objects through: for settings objects
/// (`KubeVirt.spec.customizeComponents: {}`) whose empty form means "the defaults".
pub(crate) fn reject_other_settings(
    other: &Other,
    definition: &str,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    reject(other, definition, path, errors, true)
}

fn reject(
    other: &Other,
    definition: &str,
    path: &Path,
    errors: &mut Vec<FieldError>,
    empty_object_is_inert: bool,
) {
    use serde_json::Value;
    for (key, value) in other {
        let known = kubevirt_fields::has_field(definition, key);
        let inert = match value {
            Value::Null | Value::Bool(false) => true,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => empty_object_is_inert && o.is_empty(),
            Value::Bool(true) | Value::Number(_) => false,
        };
        if known && inert {
            continue;
        }
        let error = if known {
            FieldError::not_supported(path.child(key))
        } else {
            FieldError::unknown(path.child(key))
        };
        errors.push(error);
    }
}
