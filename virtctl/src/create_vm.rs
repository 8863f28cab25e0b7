//! `virtctl create vm`: a VirtualMachine manifest written on the client (no cluster needed),
//! as KubeVirt's virtctl writes it, with its defaults, checks and messages.
//!
//! - Without `--name` the name is `vm-` and five random characters; an imported volume
//!   without a `name` parameter is `imported-volume-` and five more.
//! - The flags are applied in KubeVirt's order (run strategy, instance type, preference,
//!   containerdisks, PVCs, the deprecated `--volume-datasource`/`--volume-clone-pvc`/
//!   `--volume-blank` (turned into `--volume-import` values), imported volumes, sysprep,
//!   access credentials), then the cloud-init volume, then inference, so a volume's place,
//!   name clashes and the volume inferred from come out as in KubeVirt.
//! - Without `--instancetype`, `--preference` or `--memory`, KubeVirt infers both from the
//!   first boot volume when it can (`inferFromVolume` with `inferFromVolumeFailurePolicy:
//!   Ignore`); Ferrovirt's webhook refuses `inferFromVolume` on create, but the manifest is
//!   still written as KubeVirt writes it.
//! - Warnings (deprecated flags, a cleartext password, cloud-init `none`) go to stderr, in
//!   KubeVirt's words (the last one without a newline, as KubeVirt prints it).
//!
//! Left out: when several flags have bad values (`--termination-grace-period`, a boolean,
//! `--ssh-key`), KubeVirt names the first on the command line; here they are checked in the
//! order of `--help`. With several unknown parameters in one value, KubeVirt lists them in
//! random order; here in the order given.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::cli::VmArgs;
use crate::create::{flag_error, Param, Params};
use crate::goflags::{self, quote};
use crate::quantity::Quantity;
use crate::yaml::to_yaml;

#[path = "create_vm_volumes.rs"]
mod volumes;

#[path = "create_vm_cloud_init.rs"]
mod cloud_init;

const RUN_STRATEGIES: [&str; 5] = ["Always", "Manual", "Halted", "Once", "RerunOnFailure"];
const CLOUD_INIT_DISK: &str = "cloudinitdisk";
const CLOUD_CONFIG: &str = "#cloud-config";
const NO_CLOUD: &str = "nocloud";
const CONFIG_DRIVE: &str = "configdrive";

/// Cobra's mutually exclusive flag groups, in the order it checks them (sorted).
const EXCLUSIVE: [&[&str]; 6] = [
    &["cloud-init-user-data", "ga-manage-ssh"],
    &["cloud-init-user-data", "password-file"],
    &["cloud-init-user-data", "ssh-key"],
    &["cloud-init-user-data", "user"],
    &[
        "memory",
        "instancetype",
        "infer-instancetype",
        "infer-instancetype-from",
    ],
    &["preference", "infer-preference", "infer-preference-from"],
];

/// `prefix/name` or `name`, as KubeVirt's `params.SplitPrefixedName` splits it.
pub fn split_prefixed_name(text: &str) -> Result<(String, String), String> {
    let parts: Vec<&str> = text.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => ("", *name),
        [prefix, name] => (*prefix, *name),
        _ => {
            return Err(format!(
                "invalid count {} of slashes in prefix/name",
                parts.len() - 1
            ))
        }
    };
    if name.is_empty() {
        return Err("name cannot be empty".into());
    }
    Ok((prefix.into(), name.into()))
}

/// Kubernetes' `IsDNS1123Label`, as KubeVirt checks a volume name.
fn check_label(flag: &str, name: &str) -> Result<(), String> {
    let label = |l: &str| {
        let b = l.as_bytes();
        let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        !b.is_empty() && ok(&b[0]) && ok(&b[b.len() - 1]) && b.iter().all(|c| ok(c) || *c == b'-')
    };
    let mut errors = Vec::new();
    if name.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !label(name) {
        errors.push(if name.split('.').all(label) {
            "must not contain dots".into()
        } else {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
             and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
             regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .into()
        });
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(flag_error(
        flag,
        format!("invalid name \"{name}\": {}", errors.join(",")),
    ))
}

/// The flags pflag reads into a type, read as it reads them.
struct Typed {
    grace_period: i64,
    infer_instancetype: bool,
    infer_preference: bool,
    ssh_keys: Vec<String>,
    ga_manage_ssh: Option<bool>,
}

impl Typed {
    fn read(args: &VmArgs) -> Result<Typed, String> {
        let boolean = |flag: &str, value: &Option<String>| {
            value
                .as_deref()
                .map(|v| goflags::parse_bool(flag, v))
                .transpose()
        };
        let grace_period = match &args.termination_grace_period {
            Some(text) => goflags::parse_int64("termination-grace-period", text)?,
            None => 180,
        };
        let infer_instancetype = boolean("infer-instancetype", &args.infer_instancetype)?;
        let infer_preference = boolean("infer-preference", &args.infer_preference)?;
        let mut ssh_keys = Vec::new();
        for text in &args.ssh_key {
            ssh_keys.extend(goflags::parse_string_slice("ssh-key", text)?);
        }
        Ok(Typed {
            grace_period,
            infer_instancetype: infer_instancetype.unwrap_or(true),
            infer_preference: infer_preference.unwrap_or(true),
            ssh_keys,
            ga_manage_ssh: boolean("ga-manage-ssh", &args.ga_manage_ssh)?,
        })
    }
}

/// The names of the flags given (pflag's `Changed`), for the exclusive groups.
fn given(args: &VmArgs) -> Vec<&'static str> {
    [
        ("memory", args.memory.is_some()),
        ("instancetype", args.instancetype.is_some()),
        ("infer-instancetype", args.infer_instancetype.is_some()),
        (
            "infer-instancetype-from",
            args.infer_instancetype_from.is_some(),
        ),
        ("preference", args.preference.is_some()),
        ("infer-preference", args.infer_preference.is_some()),
        (
            "infer-preference-from",
            args.infer_preference_from.is_some(),
        ),
        ("user", args.user.is_some()),
        ("password-file", args.password_file.is_some()),
        ("ssh-key", !args.ssh_key.is_empty()),
        ("ga-manage-ssh", args.ga_manage_ssh.is_some()),
        ("cloud-init-user-data", args.cloud_init_user_data.is_some()),
    ]
    .into_iter()
    .filter(|(_, given)| *given)
    .map(|(flag, _)| flag)
    .collect()
}

fn check_exclusive(args: &VmArgs) -> Result<(), String> {
    let given = given(args);
    for group in EXCLUSIVE {
        let mut set: Vec<&str> = group
            .iter()
            .copied()
            .filter(|f| given.contains(f))
            .collect();
        if set.len() > 1 {
            set.sort_unstable();
            return Err(format!(
                "if any flags in the group [{}] are set none of the others can be; [{}] were all set",
                group.join(" "),
                set.join(" ")
            ));
        }
    }
    Ok(())
}

/// The VM being written, and what later flags read of earlier ones.
struct Vm<'a> {
    args: &'a VmArgs,
    typed: Typed,
    random: &'a mut dyn FnMut() -> String,
    warnings: &'a mut String,
    name: String,
    memory: Option<String>,
    run_strategy: &'static str,
    instancetype: Option<Value>,
    preference: Option<Value>,
    volumes: Vec<Value>,
    templates: Vec<Value>,
    disks: Vec<Value>,
    boot_orders: BTreeMap<u32, String>,
    access: Vec<Value>,
    /// `--cloud-init`, also as access credentials set it (`None`: not given).
    cloud_init: Option<String>,
}

/// The manifest `virtctl create vm` prints; `namespace` is `-n/--namespace`, `random` gives
/// the random part of generated names, and warnings are appended to `warnings` (stderr).
pub fn vm(
    args: &VmArgs,
    namespace: Option<&str>,
    random: &mut dyn FnMut() -> String,
    warnings: &mut String,
) -> Result<String, String> {
    let typed = Typed::read(args)?;
    if let Some(arg) = args.args.first() {
        return Err(format!(
            "unknown command {} for \"virtctl create vm\"",
            quote(arg)
        ));
    }
    check_exclusive(args)?;
    let name = match args.name.as_deref() {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => format!("vm-{}", random()),
    };
    let memory = Quantity::parse(args.memory.as_deref().unwrap_or("512Mi"))
        .map_err(|e| flag_error("memory", e))?;
    let mut vm = Vm {
        args,
        typed,
        random,
        warnings,
        name,
        memory: Some(memory.canonical()),
        run_strategy: "Always",
        instancetype: None,
        preference: None,
        volumes: Vec::new(),
        templates: Vec::new(),
        disks: Vec::new(),
        boot_orders: BTreeMap::new(),
        access: Vec::new(),
        cloud_init: args.cloud_init.clone(),
    };
    if let Some(strategy) = &args.run_strategy {
        vm.run_strategy = RUN_STRATEGIES
            .into_iter()
            .find(|s| s.eq_ignore_ascii_case(strategy))
            .ok_or_else(|| {
                flag_error(
                    "run-strategy",
                    format!(
                        "invalid run strategy \"{strategy}\", supported values are: {}",
                        RUN_STRATEGIES.join(", ")
                    ),
                )
            })?;
    }
    if let Some(text) = &args.instancetype {
        vm.instancetype = Some(matcher("instancetype", text)?);
        vm.memory = None;
    }
    if let Some(text) = &args.preference {
        vm.preference = Some(matcher("preference", text)?);
    }
    vm.containerdisks()?;
    vm.pvcs()?;
    let imports = vm.deprecated_imports()?;
    vm.imports(&imports)?;
    if let Some(text) = &args.volume_sysprep {
        vm.sysprep(text)?;
    }
    for text in &args.access_cred {
        let credential = vm.access_credential(text)?;
        vm.access.push(credential);
    }
    vm.cloud_init_volume()?;
    vm.infer()?;
    Ok(to_yaml(&vm.object(namespace)))
}

/// An `--instancetype` or `--preference` value (`[kind/]name`) as a matcher.
fn matcher(flag: &str, text: &str) -> Result<Value, String> {
    let (kind, name) = split_prefixed_name(text).map_err(|e| flag_error(flag, e))?;
    let kind = kind.to_lowercase();
    let kinds = [
        format!("virtualmachine{flag}"),
        format!("virtualmachinecluster{flag}"),
    ];
    if !kind.is_empty() && !kinds.contains(&kind) {
        return Err(flag_error(
            flag,
            format!(
                "invalid {flag} kind \"{kind}\", supported values are: {}, {}",
                kinds[0], kinds[1]
            ),
        ));
    }
    // Without a kind, KubeVirt's mutating webhook fills in the cluster-wide one.
    let mut matcher = json!({ "name": name });
    if !kind.is_empty() {
        matcher["kind"] = kind.into();
    }
    Ok(matcher)
}

impl Vm<'_> {
    fn volume_exists(&self, name: &str) -> Option<&Value> {
        self.volumes.iter().find(|v| v["name"] == name)
    }

    fn should_not_exist(&self, flag: &str, name: &str) -> Result<(), String> {
        match self.volume_exists(name) {
            Some(_) => Err(flag_error(flag, already(name))),
            None => Ok(()),
        }
    }

    /// A disk with the given boot order, if any.
    fn boot_order(&mut self, flag: &str, name: &str, order: Option<u32>) -> Result<(), String> {
        let Some(order) = order else {
            return Ok(());
        };
        if order == 0 {
            return Err(flag_error(flag, "bootorder must be greater than 0"));
        }
        if self.boot_orders.contains_key(&order) {
            return Err(flag_error(
                flag,
                format!("bootorder {order} was specified multiple times"),
            ));
        }
        self.disks.push(json!({"name": name, "bootOrder": order}));
        self.boot_orders.insert(order, name.to_string());
        Ok(())
    }

    fn sysprep(&mut self, text: &str) -> Result<(), String> {
        const FLAG: &str = "volume-sysprep";
        let params = Params::read(FLAG, text, &[("src", Param::Text), ("type", Param::Text)])?;
        let source = params.text("src");
        if source.is_empty() {
            return Err(flag_error(FLAG, "src must be specified"));
        }
        let (namespace, name) = split_prefixed_name(&source)
            .map_err(|e| flag_error(FLAG, format!("src invalid: {e}")))?;
        if !namespace.is_empty() {
            return Err(flag_error(
                FLAG,
                format!("not allowed to specify namespace of configmap or secret \"{name}\""),
            ));
        }
        self.should_not_exist(FLAG, "sysprepdisk")?;
        let kind = match params.text("type") {
            t if t.is_empty() => "configMap",
            t if t.to_lowercase() == "configmap" => "configMap",
            t if t.to_lowercase() == "secret" => "secret",
            t => {
                return Err(flag_error(
                    FLAG,
                    format!(
                    "invalid sysprep source type \"{t}\", supported values are: configmap, secret"
                ),
                ))
            }
        };
        self.volumes.push(json!({
            "name": "sysprepdisk",
            "sysprep": { kind: { "name": source } },
        }));
        Ok(())
    }

    /// The volume to infer from: the one named, else the first to boot, else the first.
    fn infer_from(&self, named: Option<&String>) -> Result<String, String> {
        let name = match named.filter(|n| !n.is_empty()) {
            Some(name) => name.clone(),
            None => match (self.boot_orders.values().next(), self.volumes.first()) {
                (_, None) => {
                    return Err(
                        "at least one volume is needed to infer an instance type or preference"
                            .into(),
                    )
                }
                (Some(name), _) => name.clone(),
                (None, Some(volume)) => volume["name"].as_str().unwrap_or_default().into(),
            },
        };
        let volume = self
            .volume_exists(&name)
            .ok_or_else(|| format!("there is no volume with name \"{name}\""))?;
        if let Some(data_volume) = volume.get("dataVolume") {
            let template = self
                .templates
                .iter()
                .find(|t| t["metadata"]["name"] == data_volume["name"]);
            let Some(spec) = template.map(|t| &t["spec"]) else {
                return Ok(name);
            };
            let source = &spec["source"];
            if ["pvc", "registry", "snapshot"]
                .iter()
                .any(|k| source.get(k).is_some())
                || spec["sourceRef"]["kind"] == "DataSource"
            {
                return Ok(name);
            }
            return Err(
                "this datavolume is not valid to infer an instancetype or preference from \
                 (source needs to be PVC, Registry or Snapshot, sourceRef needs to be DataSource)"
                    .into(),
            );
        }
        if volume.get("persistentVolumeClaim").is_some() {
            return Ok(name);
        }
        Err("inference of instancetype or preference works only with datasources, datavolumes or pvcs".into())
    }

    fn infer(&mut self) -> Result<(), String> {
        let args = self.args;
        let explicit = args.infer_instancetype.is_some() || args.infer_instancetype_from.is_some();
        if self.typed.infer_instancetype && args.instancetype.is_none() && args.memory.is_none() {
            match self.infer_from(args.infer_instancetype_from.as_ref()) {
                Ok(volume) if explicit => {
                    // Inferring explicitly drops the default guest memory.
                    self.instancetype = Some(json!({ "inferFromVolume": volume }));
                    self.memory = None;
                }
                Ok(volume) => {
                    self.instancetype = Some(json!({
                        "inferFromVolume": volume,
                        "inferFromVolumeFailurePolicy": "Ignore",
                    }));
                }
                Err(e) if explicit => return Err(e),
                Err(_) => {}
            }
        }
        let explicit = args.infer_preference.is_some() || args.infer_preference_from.is_some();
        if self.typed.infer_preference && args.preference.is_none() {
            match self.infer_from(args.infer_preference_from.as_ref()) {
                Ok(volume) if explicit => {
                    self.preference = Some(json!({ "inferFromVolume": volume }));
                }
                Ok(volume) => {
                    self.preference = Some(json!({
                        "inferFromVolume": volume,
                        "inferFromVolumeFailurePolicy": "Ignore",
                    }));
                }
                Err(e) if explicit => return Err(e),
                Err(_) => {}
            }
        }
        Ok(())
    }

    fn object(&self, namespace: Option<&str>) -> Value {
        let mut metadata = json!({ "name": self.name });
        if let Some(namespace) = namespace.filter(|n| !n.is_empty()) {
            metadata["namespace"] = namespace.into();
        }
        let mut devices = Map::new();
        if !self.disks.is_empty() {
            devices.insert("disks".into(), self.disks.clone().into());
        }
        let mut domain = json!({ "devices": devices, "resources": {} });
        if let Some(memory) = &self.memory {
            domain["memory"] = json!({ "guest": memory });
        }
        let mut template = json!({
            "domain": domain,
            "terminationGracePeriodSeconds": self.typed.grace_period,
        });
        if !self.access.is_empty() {
            template["accessCredentials"] = self.access.clone().into();
        }
        if !self.volumes.is_empty() {
            template["volumes"] = self.volumes.clone().into();
        }
        let mut spec = json!({
            "runStrategy": self.run_strategy,
            "template": { "metadata": {}, "spec": template },
        });
        if !self.templates.is_empty() {
            spec["dataVolumeTemplates"] = self.templates.clone().into();
        }
        if let Some(matcher) = &self.instancetype {
            spec["instancetype"] = matcher.clone();
        }
        if let Some(matcher) = &self.preference {
            spec["preference"] = matcher.clone();
        }
        json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": metadata,
            "spec": spec,
            "status": {},
        })
    }
}

fn already(name: &str) -> String {
    format!("there is already a volume with name \"{name}\"")
}

#[cfg(test)]
#[path = "create_vm_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "create_vm_errors_tests.rs"]
mod error_tests;
