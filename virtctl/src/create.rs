//! `virtctl create instancetype` and `virtctl create preference`: manifests written on the
//! client (no cluster needed), as KubeVirt's virtctl writes them.
//!
//! - The kind is cluster-wide unless `--namespaced` is given or `-n/--namespace` names a
//!   namespace (which also goes into `metadata.namespace`).
//! - Without `--name` the name is `clusterinstancetype-`, `instancetype-`, `clusterpreference-`
//!   or `preference-` and five random characters from KubeVirt's alphabet (no vowels).
//! - Memory is written as Kubernetes writes the quantity ([`crate::quantity`]).
//! - GPUs, host devices and an IOThreads policy are written as asked; Ferrovirt's webhook
//!   refuses such an instance type on create.

use std::fmt::Display;

use serde_json::{json, Map, Value};

use crate::cli::{InstancetypeArgs, PreferenceArgs};
use crate::quantity::Quantity;
use crate::yaml::to_yaml;

pub use api::instancetype::validation::TOPOLOGIES as CPU_TOPOLOGIES;
pub use api::instancetype::API_VERSION;

/// Five characters from `k8s.io/apimachinery/pkg/util/rand`'s alphabet, for a default name.
pub fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    let mut seed = hasher.finish();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(seed % ALPHABET.len() as u64) as usize];
            seed /= ALPHABET.len() as u64;
            char::from(c)
        })
        .collect()
}

/// KubeVirt's wrapping of a flag's bad value.
pub fn flag_error(flag: &str, message: impl Display) -> String {
    format!("failed to parse \"--{flag}\" flag: {message}")
}

/// Go's `strconv.ParseUint(text, 0, 32)`, as pflag reads a `uint32` flag.
pub fn parse_uint32(flag: &str, text: &str) -> Result<u32, String> {
    let error = |why: &str| {
        format!(
            "invalid argument \"{text}\" for \"--{flag}\" flag: strconv.ParseUint: parsing \"{text}\": {why}"
        )
    };
    let lower = text.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    // Underscores only between digits, or between a base prefix and a digit.
    let bytes = digits.as_bytes();
    let underscores_ok = bytes.iter().enumerate().all(|(i, &c)| {
        c != b'_'
            || ((i > 0 && bytes[i - 1] != b'_') || (i == 0 && prefixed))
                && bytes.get(i + 1).is_some_and(|n| *n != b'_')
    });
    let digits: String = digits.chars().filter(|c| *c != '_').collect();
    if digits.is_empty() || !underscores_ok || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(error("invalid syntax"));
    }
    u64::from_str_radix(&digits, radix)
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| error("value out of range"))
}

/// The type of a `key:value` parameter, as KubeVirt's `param` struct tags declare it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    Text,
    /// `strconv.ParseUint(value, 10, 32)`.
    Uint,
    /// `resource.ParseQuantity`.
    Quantity,
    /// Split at `;`.
    List,
}

/// A flag's `key1:value1,key2:value2` split as KubeVirt's `params` package splits it: every
/// parameter needs a colon, a repeated key keeps its last value (at its first place).
pub fn split_params(text: &str) -> Result<Vec<(String, String)>, String> {
    if text.is_empty() {
        return Err("params may not be empty".into());
    }
    let mut params: Vec<(String, String)> = Vec::new();
    for param in text.split(',') {
        let Some((key, value)) = param.split_once(':') else {
            return Err(format!("params need to have at least one colon: {param}"));
        };
        match params.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value.into(),
            None => params.push((key.into(), value.into())),
        }
    }
    Ok(params)
}

/// KubeVirt's `params.GetParamByName`: the value of one parameter, if given.
pub fn param_by_name(name: &str, text: &str) -> Result<Option<String>, String> {
    Ok(split_params(text)?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v))
}

/// A flag's parameters read as KubeVirt's `params.Map` reads them into a struct with
/// `fields` (in the struct's order): values checked in that order, then unknown keys refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn read(flag: &str, text: &str, fields: &[(&str, Param)]) -> Result<Params, String> {
        let mut given = split_params(text).map_err(|e| flag_error(flag, e))?;
        let mut known = Vec::new();
        for (field, kind) in fields {
            let Some(at) = given.iter().position(|(k, _)| k == field) else {
                continue;
            };
            let (key, value) = given.remove(at);
            let why = match kind {
                Param::Uint => crate::goflags::parse_uint(&value, 10, 32)
                    .err()
                    .map(|e| e.message("ParseUint", &value)),
                Param::Quantity => Quantity::parse(&value).err().map(|e| e.to_string()),
                Param::Text | Param::List => None,
            };
            if let Some(why) = why {
                return Err(flag_error(
                    flag,
                    format!("failed to parse param \"{key}\": {why}"),
                ));
            }
            known.push((key, value));
        }
        if !given.is_empty() {
            let unknown: Vec<String> = given.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            return Err(flag_error(
                flag,
                format!("unknown param(s): {}", unknown.join(",")),
            ));
        }
        Ok(Params(known))
    }

    /// A parameter's value, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A text parameter (empty when not given).
    pub fn text(&self, key: &str) -> String {
        self.get(key).unwrap_or_default().to_string()
    }

    /// A [`Param::Uint`] parameter, if given.
    pub fn uint(&self, key: &str) -> Option<u32> {
        let value = self.get(key)?;
        let value = crate::goflags::parse_uint(value, 10, 32).ok()?;
        u32::try_from(value).ok()
    }

    /// A [`Param::List`] parameter, if given.
    pub fn list(&self, key: &str) -> Option<Vec<String>> {
        Some(self.get(key)?.split(';').map(str::to_string).collect())
    }
}

/// A `--gpu` or `--hostdevice` value (`name:gpu1,devicename:nvidia`) as a device entry.
fn device(flag: &str, text: &str) -> Result<Value, String> {
    let fields = [("name", Param::Text), ("devicename", Param::Text)];
    let params = Params::read(flag, text, &fields)?;
    let name = params.text("name");
    let device_name = params.text("devicename");
    if name.is_empty() {
        return Err(flag_error(flag, "name must be specified"));
    }
    if device_name.is_empty() {
        return Err(flag_error(flag, "deviceName must be specified"));
    }
    Ok(json!({"name": name, "deviceName": device_name}))
}

/// The kind, name and metadata of a generated object. `namespace` is `-n/--namespace`.
fn metadata(
    prefix: &str,
    name: Option<&str>,
    namespaced: bool,
    namespace: Option<&str>,
    suffix: &str,
) -> (bool, Value) {
    let namespace = namespace.filter(|ns| !ns.is_empty());
    let namespaced = namespaced || namespace.is_some();
    let name = match name {
        Some(name) => name.to_string(),
        None if namespaced => format!("{prefix}-{suffix}"),
        None => format!("cluster{prefix}-{suffix}"),
    };
    let mut meta = Map::new();
    if !name.is_empty() {
        meta.insert("name".into(), name.into());
    }
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), ns.into());
    }
    (namespaced, Value::Object(meta))
}

fn manifest(kind: &str, metadata: Value, spec: Map<String, Value>) -> String {
    let object = json!({
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    });
    to_yaml(&object)
}

/// The manifest `virtctl create instancetype` prints; `namespace` is `-n/--namespace`,
/// `suffix` the random part of a default name.
pub fn instancetype(
    args: &InstancetypeArgs,
    namespace: Option<&str>,
    suffix: &str,
) -> Result<String, String> {
    let cpu = args
        .cpu
        .as_deref()
        .map(|text| parse_uint32("cpu", text))
        .transpose()?;
    let missing: Vec<&str> = [("cpu", cpu.is_none()), ("memory", args.memory.is_none())]
        .iter()
        .filter(|(_, missing)| *missing)
        .map(|(flag, _)| *flag)
        .collect();
    let (Some(cpu), Some(memory), true) = (cpu, args.memory.as_deref(), missing.is_empty()) else {
        let names: Vec<String> = missing.iter().map(|f| format!("\"{f}\"")).collect();
        return Err(format!("required flag(s) {} not set", names.join(", ")));
    };
    let (namespaced, meta) = metadata(
        "instancetype",
        args.name.as_deref(),
        args.namespaced,
        namespace,
        suffix,
    );
    let memory = Quantity::parse(memory).map_err(|e| e.to_string())?;
    if cpu == 0 {
        return Err("cpu value must be greater than zero".into());
    }
    let mut spec = Map::new();
    spec.insert("cpu".into(), json!({"guest": cpu}));
    spec.insert("memory".into(), json!({"guest": memory.canonical()}));
    if !args.gpu.is_empty() {
        let gpus = args.gpu.iter().map(|g| device("gpu", g));
        spec.insert("gpus".into(), gpus.collect::<Result<_, _>>()?);
    }
    if !args.hostdevice.is_empty() {
        let devices = args.hostdevice.iter().map(|h| device("hostdevice", h));
        spec.insert("hostDevices".into(), devices.collect::<Result<_, _>>()?);
    }
    if let Some(policy) = &args.iothreadspolicy {
        if policy != "auto" && policy != "shared" {
            return Err(flag_error(
                "iothreadspolicy",
                "IOThread must be of value auto or shared",
            ));
        }
        spec.insert("ioThreadsPolicy".into(), policy.as_str().into());
    }
    let kind = if namespaced {
        "VirtualMachineInstancetype"
    } else {
        "VirtualMachineClusterInstancetype"
    };
    Ok(manifest(kind, meta, spec))
}

/// The manifest `virtctl create preference` prints; `namespace` is `-n/--namespace`,
/// `suffix` the random part of a default name.
pub fn preference(
    args: &PreferenceArgs,
    namespace: Option<&str>,
    suffix: &str,
) -> Result<String, String> {
    let (namespaced, meta) = metadata(
        "preference",
        args.name.as_deref(),
        args.namespaced,
        namespace,
        suffix,
    );
    // An empty value is given but omitted, leaving an empty object, as in KubeVirt.
    let optional = |key: &str, value: &str| {
        let mut object = Map::new();
        if !value.is_empty() {
            object.insert(key.into(), value.into());
        }
        Value::Object(object)
    };
    let mut spec = Map::new();
    if let Some(topology) = &args.cpu_topology {
        if !CPU_TOPOLOGIES.contains(&topology.as_str()) {
            return Err(flag_error(
                "cpu-topology",
                "CPU topology must have a value of sockets, cores, threads or spread",
            ));
        }
        spec.insert("cpu".into(), json!({"preferredCPUTopology": topology}));
    }
    if let Some(machine_type) = &args.machine_type {
        spec.insert(
            "machine".into(),
            optional("preferredMachineType", machine_type),
        );
    }
    if let Some(class) = &args.volume_storage_class {
        spec.insert(
            "volumes".into(),
            optional("preferredStorageClassName", class),
        );
    }
    let kind = if namespaced {
        "VirtualMachinePreference"
    } else {
        "VirtualMachineClusterPreference"
    };
    Ok(manifest(kind, meta, spec))
}

#[cfg(test)]
#[path = "create_tests.rs"]
mod tests;
