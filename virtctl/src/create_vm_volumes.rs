//! `virtctl create vm`'s volume flags: `--volume-containerdisk`, `--volume-pvc`,
//! `--volume-import` (every CDI source type KubeVirt offers) and the deprecated
//! `--volume-datasource`, `--volume-clone-pvc` and `--volume-blank`.

use serde_json::{json, Map, Value};

use super::{check_label, split_prefixed_name, Vm};
use crate::create::{flag_error, param_by_name, Param, Params};
use crate::quantity::Quantity;

const IMPORT: &str = "volume-import";

/// The parameters of `--volume-containerdisk` and `--volume-pvc`.
const VOLUME: [(&str, Param); 3] = [
    ("name", Param::Text),
    ("src", Param::Text),
    ("bootorder", Param::Uint),
];

/// The parameters every import type ends with.
const TAIL: [(&str, Param); 4] = [
    ("size", Param::Quantity),
    ("type", Param::Text),
    ("name", Param::Text),
    ("bootorder", Param::Uint),
];

/// The parameters of the `pvc`, `snapshot` and `ds` import types.
const CLONE: [(&str, Param); 5] = [
    ("name", Param::Text),
    ("src", Param::Text),
    ("size", Param::Quantity),
    ("type", Param::Text),
    ("bootorder", Param::Uint),
];

/// `--volume-import` parameters: those before [`TAIL`], for each type's own.
fn import_params(leading: &[(&'static str, Param)]) -> Vec<(&'static str, Param)> {
    leading.iter().chain(TAIL.iter()).copied().collect()
}

/// Puts `value` into `map` unless it is empty (`omitempty`).
fn put(map: &mut Map<String, Value>, key: &str, value: String) {
    if !value.is_empty() {
        map.insert(key.into(), value.into());
    }
}

/// The `src` of a parameter set: required, `[namespace/]name`.
fn source(flag: &str, params: &Params) -> Result<(String, String), String> {
    let source = params.text("src");
    if source.is_empty() {
        return Err(flag_error(flag, "src must be specified"));
    }
    split_prefixed_name(&source).map_err(|e| flag_error(flag, format!("src invalid: {e}")))
}

/// A DataVolume spec (without storage) and the boot order of one `--volume-import` value of a
/// known type.
fn import_spec(kind: &str, text: &str) -> Result<(Value, Option<u32>), String> {
    let required =
        |what: &str| flag_error(IMPORT, format!("{what} required with {kind} volume source"));
    let params = match kind {
        "blank" => Params::read(IMPORT, text, &TAIL)?,
        "gcs" => Params::read(
            IMPORT,
            text,
            &import_params(&[("secretref", Param::Text), ("url", Param::Text)]),
        )?,
        "http" => Params::read(
            IMPORT,
            text,
            &import_params(&[
                ("certconfigmap", Param::Text),
                ("extraheaders", Param::List),
                ("secretextraheaders", Param::List),
                ("secretref", Param::Text),
                ("url", Param::Text),
            ]),
        )?,
        "imageio" => Params::read(
            IMPORT,
            text,
            &import_params(&[
                ("certconfigmap", Param::Text),
                ("diskid", Param::Text),
                ("secretref", Param::Text),
                ("url", Param::Text),
            ]),
        )?,
        "registry" => Params::read(
            IMPORT,
            text,
            &import_params(&[
                ("certconfigmap", Param::Text),
                ("imagestream", Param::Text),
                ("pullmethod", Param::Text),
                ("secretref", Param::Text),
                ("url", Param::Text),
            ]),
        )?,
        "s3" => Params::read(
            IMPORT,
            text,
            &import_params(&[
                ("certconfigmap", Param::Text),
                ("secretref", Param::Text),
                ("url", Param::Text),
            ]),
        )?,
        "vddk" => Params::read(
            IMPORT,
            text,
            &import_params(&[
                ("backingfile", Param::Text),
                ("initimageurl", Param::Text),
                ("secretref", Param::Text),
                ("thumbprint", Param::Text),
                ("url", Param::Text),
                ("uuid", Param::Text),
            ]),
        )?,
        _ => Params::read(IMPORT, text, &CLONE)?,
    };
    let mut fields = Map::new();
    let url = params.text("url");
    let secret = params.text("secretref");
    let config_map = params.text("certconfigmap");
    let source_of = |fields: Map<String, Value>| json!({ "source": { kind: fields } });
    let spec = match kind {
        "blank" => json!({ "source": { "blank": {} } }),
        "gcs" | "s3" | "http" => {
            if url.is_empty() {
                return Err(required("url is"));
            }
            fields.insert("url".into(), url.into());
            put(&mut fields, "secretRef", secret);
            put(&mut fields, "certConfigMap", config_map);
            for (param, key) in [
                ("extraheaders", "extraHeaders"),
                ("secretextraheaders", "secretExtraHeaders"),
            ] {
                if let Some(list) = params.list(param) {
                    fields.insert(key.into(), list.into());
                }
            }
            source_of(fields)
        }
        "imageio" => {
            let disk = params.text("diskid");
            if url.is_empty() || disk.is_empty() {
                return Err(required("url and diskid are both"));
            }
            fields.insert("url".into(), url.into());
            fields.insert("diskId".into(), disk.into());
            put(&mut fields, "secretRef", secret);
            put(&mut fields, "certConfigMap", config_map);
            source_of(fields)
        }
        "registry" => {
            let pull = params.text("pullmethod");
            if !pull.is_empty() && pull != "pod" && pull != "node" {
                return Err(flag_error(IMPORT, "pullmethod must be set to pod or node"));
            }
            let stream = params.text("imagestream");
            if url.is_empty() == stream.is_empty() {
                return Err(flag_error(
                    IMPORT,
                    "exactly one of url or imagestream must be defined",
                ));
            }
            put(&mut fields, "pullMethod", pull);
            put(&mut fields, "certConfigMap", config_map);
            put(&mut fields, "imageStream", stream);
            put(&mut fields, "url", url);
            put(&mut fields, "secretRef", secret);
            source_of(fields)
        }
        "vddk" => {
            let values = [
                ("url", url),
                ("uuid", params.text("uuid")),
                ("thumbprint", params.text("thumbprint")),
                ("secretRef", secret),
                ("backingFile", params.text("backingfile")),
                ("initImageURL", params.text("initimageurl")),
            ];
            for (key, value) in values {
                if value.is_empty() && key != "initImageURL" {
                    return Err(required(&format!("{} is", key.to_lowercase())));
                }
                put(&mut fields, key, value);
            }
            source_of(fields)
        }
        "pvc" | "snapshot" => {
            let (namespace, name) = source(IMPORT, &params)?;
            if namespace.is_empty() {
                return Err(flag_error(
                    IMPORT,
                    format!("namespace of {kind} \"{name}\" must be specified"),
                ));
            }
            fields.insert("name".into(), name.into());
            fields.insert("namespace".into(), namespace.into());
            source_of(fields)
        }
        _ => {
            let (namespace, name) = source(IMPORT, &params)?;
            let mut reference = json!({ "kind": "DataSource", "name": name });
            if !namespace.is_empty() {
                reference["namespace"] = namespace.into();
            }
            json!({ "sourceRef": reference })
        }
    };
    Ok((spec, params.uint("bootorder")))
}

impl Vm<'_> {
    pub(super) fn containerdisks(&mut self) -> Result<(), String> {
        const FLAG: &str = "volume-containerdisk";
        for (i, text) in self.args.volume_containerdisk.iter().enumerate() {
            let params = Params::read(FLAG, text, &VOLUME)?;
            let image = params.text("src");
            if image.is_empty() {
                return Err(flag_error(FLAG, "src must be specified"));
            }
            let mut name = params.text("name");
            if name.is_empty() {
                name = format!("{}-containerdisk-{i}", self.name);
            }
            check_label(FLAG, &name)?;
            self.should_not_exist(FLAG, &name)?;
            self.volumes
                .push(json!({ "name": name, "containerDisk": { "image": image } }));
            self.boot_order(FLAG, &name, params.uint("bootorder"))?;
        }
        Ok(())
    }

    pub(super) fn pvcs(&mut self) -> Result<(), String> {
        const FLAG: &str = "volume-pvc";
        for text in &self.args.volume_pvc {
            let params = Params::read(FLAG, text, &VOLUME)?;
            let (namespace, claim) = source(FLAG, &params)?;
            if !namespace.is_empty() {
                return Err(flag_error(
                    FLAG,
                    format!("not allowed to specify namespace of pvc \"{claim}\""),
                ));
            }
            let mut name = params.text("name");
            if name.is_empty() {
                name.clone_from(&claim);
            }
            check_label(FLAG, &name)?;
            self.should_not_exist(FLAG, &name)?;
            self.volumes.push(json!({
                "name": name,
                "persistentVolumeClaim": { "claimName": claim },
            }));
            self.boot_order(FLAG, &name, params.uint("bootorder"))?;
        }
        Ok(())
    }

    /// `--volume-import` with the deprecated flags' values put first, as KubeVirt does: each
    /// value put in front in turn, for `--volume-datasource`, `--volume-clone-pvc` and
    /// `--volume-blank` in that order.
    pub(super) fn deprecated_imports(&mut self) -> Result<Vec<String>, String> {
        let mut imports = self.args.volume_import.clone();
        for (flag, kind, values) in [
            ("volume-datasource", "ds", &self.args.volume_datasource),
            ("volume-clone-pvc", "pvc", &self.args.volume_clone_pvc),
            ("volume-blank", "blank", &self.args.volume_blank),
        ] {
            if values.is_empty() {
                continue;
            }
            self.warnings.push_str(&format!(
                "Flag --{flag} has been deprecated, use flag --volume-import instead\n"
            ));
            for value in values {
                if value.is_empty() {
                    return Err(flag_error(IMPORT, "params may not be empty"));
                }
                imports.insert(0, format!("type:{kind},{value}"));
            }
        }
        Ok(imports)
    }

    pub(super) fn imports(&mut self, imports: &[String]) -> Result<(), String> {
        for text in imports {
            let kind = param_by_name("type", text)
                .map_err(|e| flag_error(IMPORT, e))?
                .ok_or_else(|| flag_error(IMPORT, "type must be specified"))?;
            let known = [
                "blank", "gcs", "http", "imageio", "pvc", "registry", "s3", "vddk", "snapshot",
                "ds",
            ];
            if !known.contains(&kind.as_str()) {
                return Err(flag_error(
                    IMPORT,
                    format!("invalid volume import type \"{kind}\", see help for supported values"),
                ));
            }
            let (mut spec, boot_order) = import_spec(&kind, text)?;
            let size = param_by_name("size", text)?;
            if size.is_none() && !["pvc", "snapshot", "ds"].contains(&kind.as_str()) {
                return Err(flag_error(IMPORT, "size must be specified"));
            }
            let name = match param_by_name("name", text)? {
                Some(name) => name,
                None => format!("imported-volume-{}", (self.random)()),
            };
            check_label(IMPORT, &name)?;
            self.should_not_exist(IMPORT, &name)?;
            let resources = match size {
                Some(size) => {
                    let size = Quantity::parse(&size).map_err(|e| flag_error(IMPORT, e))?;
                    json!({ "requests": { "storage": size.canonical() } })
                }
                None => json!({}),
            };
            spec["storage"] = json!({ "resources": resources });
            self.templates
                .push(json!({ "metadata": { "name": name }, "spec": spec }));
            self.volumes
                .push(json!({ "name": name, "dataVolume": { "name": name } }));
            self.boot_order(IMPORT, &name, boot_order)?;
        }
        Ok(())
    }
}
