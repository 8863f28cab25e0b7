//! `virtctl expand`: a VirtualMachine with its instance type and preference applied, as
//! virt-api expands it, printed as YAML (default) or JSON (`-o json`).
//!
//! - `--vm NAME`: `GET .../namespaces/{ns}/virtualmachines/NAME/expand-spec`.
//! - `--file FILE` (`-` for stdin; YAML or JSON, the first document): `PUT
//!   .../namespaces/{ns}/expand-vm-spec` with the VM as the JSON body.
//!
//! The flags are checked before anything is read or sent, with KubeVirt's messages (one of
//! the two is needed, not both; `-o` is `yaml` or `json`; no arguments). JSON has `kind` and
//! `apiVersion` first and no newline at the end, as KubeVirt's; the other keys are sorted
//! ([`crate::yaml`]). Fields the server sends as `null` are printed (`creationTimestamp: null`);
//! KubeVirt's, decoded into its Go types, leave out the empty ones.

use std::io::Read;

use http::Method;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use virt_api::routes::{expand_vm_spec_path, subresource_path, Subresource};

use crate::cli::{ApiCall, ExpandArgs};
use crate::yaml::{to_json, to_yaml};

/// How the expanded VM is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Yaml,
    Json,
}

/// Which VM to expand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A VM in the cluster.
    Vm(String),
    /// A file (`-`: stdin).
    File(String),
}

/// What `expand` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub source: Source,
    pub output: Output,
}

/// Checks the flags as KubeVirt's virtctl does, in its order.
pub fn validate(args: &ExpandArgs) -> Result<Request, String> {
    if !args.args.is_empty() {
        return Err(format!("accepts 0 arg(s), received {}", args.args.len()));
    }
    let vm = args.vm.as_deref().unwrap_or_default();
    let file = args.file.as_deref().unwrap_or_default();
    if vm.is_empty() && file.is_empty() {
        return Err(
            "error invalid arguments - VirtualMachine name or file must be provided".into(),
        );
    }
    let output = match args.output.as_str() {
        "yaml" => Output::Yaml,
        "json" => Output::Json,
        other => {
            return Err(format!(
                "error not supported output format defined: {other}"
            ))
        }
    };
    if args.vm.is_some() && args.file.is_some() {
        return Err(
            "if any flags in the group [file vm] are set none of the others can be; \
                    [file vm] were all set"
                .into(),
        );
    }
    let source = if vm.is_empty() {
        Source::File(file.to_string())
    } else {
        Source::Vm(vm.to_string())
    };
    Ok(Request { source, output })
}

/// An I/O error in Go's words (`no such file or directory`).
fn go_error_text(error: &std::io::Error) -> String {
    let text = error.to_string();
    let text = match text.find(" (os error") {
        Some(at) => &text[..at],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Reads the file (`-`: stdin) and decodes the VM in it ([`decode_vm`]).
pub fn read_vm(path: &str) -> Result<Value, String> {
    let mut data = Vec::new();
    if path == "-" {
        std::io::stdin()
            .read_to_end(&mut data)
            .map_err(|e| format!("error reading from stdin: {}", go_error_text(&e)))?;
    } else {
        let mut file = std::fs::File::open(path)
            .map_err(|e| format!("error reading file open {path}: {}", go_error_text(&e)))?;
        file.read_to_end(&mut data)
            .map_err(|e| format!("error reading file read {path}: {}", go_error_text(&e)))?;
    }
    decode_vm(&data)
}

/// The first YAML or JSON document in `data` (JSON when it starts with `{`), which must be an
/// object.
pub fn decode_vm(data: &[u8]) -> Result<Value, String> {
    let decoding = |e: &dyn std::fmt::Display| format!("error decoding VirtualMachine {e}");
    let json = data
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    let value = if json {
        match serde_json::Deserializer::from_slice(data)
            .into_iter::<Value>()
            .next()
        {
            Some(value) => value.map_err(|e| decoding(&e))?,
            None => return Err(decoding(&"EOF")),
        }
    } else {
        match serde_yaml::Deserializer::from_slice(data).next() {
            Some(document) => Value::deserialize(document)
                .map_err(|e| decoding(&format_args!("error converting YAML to JSON: {e}")))?,
            None => return Err(decoding(&"EOF")),
        }
    };
    let kind = match &value {
        Value::Object(_) => return Ok(value),
        Value::Null => return Err(decoding(&"EOF")),
        Value::Array(_) => "array",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
    };
    Err(decoding(&format_args!(
        "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {kind} into Go \
         value of type v1.VirtualMachine"
    )))
}

/// The name KubeVirt's messages give the VM of a file.
pub fn vm_name(vm: &Value) -> &str {
    vm.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The call for `source` in `namespace`; `vm` is the file's VM.
pub fn call(source: &Source, namespace: &str, vm: Option<&Value>) -> ApiCall {
    let (method, path, body, name) = match source {
        Source::Vm(name) => (
            Method::GET,
            subresource_path(namespace, name, Subresource::ExpandSpec),
            Vec::new(),
            name.as_str(),
        ),
        Source::File(_) => (
            Method::PUT,
            expand_vm_spec_path(namespace),
            vm.map(|vm| serde_json::to_vec(vm).unwrap_or_default())
                .unwrap_or_default(),
            vm.map(vm_name).unwrap_or_default(),
        ),
    };
    ApiCall {
        method,
        path,
        body,
        success: None,
        failure: format!("error expanding VirtualMachine - {name} in namespace - {namespace}:"),
    }
}

/// The expanded VM the server sent, as printed: with `kind` and `apiVersion` set (as KubeVirt's
/// client sets them), YAML ending in a newline or JSON, `kind` and `apiVersion` first, without
/// one.
pub fn render(body: &str, output: Output) -> Result<String, String> {
    /// The order of Go's TypeMeta, then the other keys.
    #[derive(Serialize)]
    struct Typed<'a> {
        kind: &'a str,
        #[serde(rename = "apiVersion")]
        api_version: &'a str,
        #[serde(flatten)]
        rest: Map<String, Value>,
    }
    let mut rest: Map<String, Value> = serde_json::from_str(body).map_err(|e| e.to_string())?;
    rest.remove("kind");
    rest.remove("apiVersion");
    let vm = Typed {
        kind: "VirtualMachine",
        api_version: "kubevirt.io/v1",
        rest,
    };
    Ok(match output {
        Output::Yaml => to_yaml(&serde_json::to_value(&vm).map_err(|e| e.to_string())?),
        Output::Json => to_json(&vm),
    })
}

#[cfg(test)]
#[path = "expand_tests.rs"]
mod tests;
