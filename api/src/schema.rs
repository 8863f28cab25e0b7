//! Hand-written schema pieces for the CRDs.

use schemars::{json_schema, Schema, SchemaGenerator};

/// An object whose fields the API server keeps as they are (template metadata, as KubeVirt's
/// own CRDs have it).
pub(crate) fn preserved_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}
