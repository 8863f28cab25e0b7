//! The certificates of an install, generated and rotated by the operator (the certificate
//! contract of HELPERS-COMMON, with KubeVirt's names):
//!
//! - `kubevirt-ca` (Secret, `tls.crt`/`tls.key`) signs everything; ConfigMap `kubevirt-ca`
//!   (`ca-bundle`) holds the current CA and, after a rotation, the previous one until it expires,
//!   so that clients keep trusting certificates the old CA signed while they are replaced.
//! - `kubevirt-virt-api-certs`: virt-api's serving certificate.
//! - `kubevirt-virt-handler-server-certs`: virt-handler's serving certificate (EKU serverAuth and
//!   clientAuth, SAN `virt-handler.kubevirt.svc`).
//! - `kubevirt-virt-handler-certs`: the client certificate virt-api presents to virt-handler.
//!
//! Every leaf Secret has `tls.crt`, `tls.key` and `ca.crt` (the CA that signed it). As in
//! KubeVirt, the CA lives 7 days and leaves 24 hours; each is renewed when less than a fifth of
//! its life is left, and the leaves are re-issued whenever the CA changes. When a certificate
//! expires is kept in an annotation of its Secret; a Secret without it, or with anything that
//! does not parse, is replaced.
//!
//! Planning is pure: [`plan`] takes the existing Secrets and the time and returns the Secrets to
//! apply, so rotation is unit-tested without a cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use api::kubevirt::CertConfig;
use api::KubeVirt;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{json, Value};
use time::OffsetDateTime;

/// The CA's Secret and ConfigMap.
pub const CA_NAME: &str = "kubevirt-ca";
/// Key of the ConfigMap's PEM bundle.
pub const CA_BUNDLE_KEY: &str = "ca-bundle";
pub const VIRT_API_SECRET: &str = "kubevirt-virt-api-certs";
pub const HANDLER_SERVER_SECRET: &str = "kubevirt-virt-handler-server-certs";
pub const HANDLER_CLIENT_SECRET: &str = "kubevirt-virt-handler-certs";
/// The CN of virt-api's client certificate, which virt-handler checks.
pub const HANDLER_CLIENT_CN: &str = "kubevirt.io:system:client:virt-handler";
/// Unix time after which the certificate in a Secret is no longer valid.
pub const NOT_AFTER_ANNOTATION: &str = "kubevirt.io/cert-not-after";
/// Unix time from which it is valid.
pub const NOT_BEFORE_ANNOTATION: &str = "kubevirt.io/cert-not-before";
/// The CA's subject CN (each CA has its own, so old and new can be told apart).
pub const CA_CN_ANNOTATION: &str = "kubevirt.io/ca-common-name";

/// How long certificates live and when they are renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    pub ca: Duration,
    pub leaf: Duration,
    /// Renew the CA this long before it expires; with a fifth of its life left when unset.
    pub ca_renew_before: Option<Duration>,
    /// The same for the certificates the CA signs.
    pub leaf_renew_before: Option<Duration>,
}

impl Lifetimes {
    /// KubeVirt's defaults with what the CR's `certificateRotateStrategy.selfSigned` sets.
    /// virt-api's webhook validates it, but a CR created before virt-api ran was not: a value
    /// that does not parse, is under [`CertConfig::MIN_DURATION`] or renews before it is issued keeps
    /// the default.
    pub fn of(kv: &KubeVirt) -> Lifetimes {
        let mut lifetimes = Lifetimes::default();
        let signed = kv
            .spec
            .certificate_rotate_strategy
            .as_ref()
            .and_then(|s| s.self_signed.as_ref());
        let Some(signed) = signed else {
            return lifetimes;
        };
        let parse = |text: &Option<String>| {
            let text = text.as_deref()?;
            api::duration::parse(text)
                .map_err(|e| log::warn!("certificateRotateStrategy: {e}; using the default"))
                .ok()
        };
        for (config, life, renew) in [
            (
                &signed.ca,
                &mut lifetimes.ca,
                &mut lifetimes.ca_renew_before,
            ),
            (
                &signed.server,
                &mut lifetimes.leaf,
                &mut lifetimes.leaf_renew_before,
            ),
        ] {
            let Some(config) = config else { continue };
            if let Some(d) = parse(&config.duration).filter(|d| *d >= CertConfig::MIN_DURATION) {
                *life = d;
            }
            *renew = parse(&config.renew_before).filter(|r| r < life);
        }
        lifetimes
    }
}

impl Default for Lifetimes {
    /// KubeVirt's defaults (`certificateRotateStrategy.selfSigned`): CA 168h, certificates 24h,
    /// renewed with a fifth of their life left.
    fn default() -> Self {
        Lifetimes {
            ca: Duration::from_secs(168 * 3600),
            leaf: Duration::from_secs(24 * 3600),
            ca_renew_before: None,
            leaf_renew_before: None,
        }
    }
}

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating a key")]
    Key(#[source] rcgen::Error),
    #[error("signing the certificate of {secret}")]
    Sign {
        secret: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("the CA key in Secret {CA_NAME} does not parse")]
    CaKey(#[source] rcgen::Error),
    #[error("certificate time {0} is out of range")]
    Time(i64),
}

/// One leaf certificate of the contract.
struct Leaf {
    secret: &'static str,
    common_name: &'static str,
    dns_names: Vec<String>,
    usages: &'static [ExtendedKeyUsagePurpose],
}

fn leaves(namespace: &str) -> Vec<Leaf> {
    vec![
        Leaf {
            secret: VIRT_API_SECRET,
            common_name: "virt-api",
            dns_names: vec![
                format!("virt-api.{namespace}.svc"),
                format!("virt-api.{namespace}.svc.cluster.local"),
                "virt-api".into(),
            ],
            usages: &[ExtendedKeyUsagePurpose::ServerAuth],
        },
        Leaf {
            secret: HANDLER_SERVER_SECRET,
            common_name: "virt-handler",
            dns_names: vec![format!("virt-handler.{namespace}.svc")],
            usages: &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        },
        Leaf {
            secret: HANDLER_CLIENT_SECRET,
            common_name: HANDLER_CLIENT_CN,
            dns_names: Vec::new(),
            usages: &[ExtendedKeyUsagePurpose::ClientAuth],
        },
    ]
}

/// A Secret as it exists in the cluster (or will): its string data and annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredSecret {
    pub data: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl StoredSecret {
    /// From a Secret object (base64 `data`), whatever else it has.
    pub fn from_secret(secret: &k8s_openapi::api::core::v1::Secret) -> StoredSecret {
        let data = secret
            .data
            .iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?)))
            .collect();
        let annotations = secret.metadata.annotations.clone().unwrap_or_default();
        StoredSecret { data, annotations }
    }

    fn time(&self, key: &str) -> Option<i64> {
        self.annotations.get(key)?.parse().ok()
    }

    fn key_parses(&self) -> bool {
        self.data
            .get("tls.key")
            .is_some_and(|k| KeyPair::from_pem(k).is_ok())
    }

    /// Issued for no longer than `life` (and a couple of minutes of slack): a shorter
    /// configured lifetime replaces longer-lived certificates at once.
    fn fits(&self, life: Duration) -> bool {
        let life = i64::try_from(life.as_secs()).unwrap_or(i64::MAX / 4);
        match (
            self.time(NOT_BEFORE_ANNOTATION),
            self.time(NOT_AFTER_ANNOTATION),
        ) {
            (Some(from), Some(until)) => until - from <= life + 120,
            _ => false,
        }
    }

    /// When to renew it: `renew_before` its end, or with a fifth of its life left.
    fn renew_at(&self, renew_before: Option<Duration>) -> Option<i64> {
        let from = self.time(NOT_BEFORE_ANNOTATION)?;
        let until = self.time(NOT_AFTER_ANNOTATION)?;
        Some(match renew_before {
            Some(before) => until - i64::try_from(before.as_secs()).unwrap_or(i64::MAX / 4),
            None => until - (until - from) / 5,
        })
    }

    /// Valid now, not yet due for renewal, and not empty.
    fn fresh(&self, now: i64, renew_before: Option<Duration>) -> bool {
        let (Some(from), Some(renew_at)) = (
            self.time(NOT_BEFORE_ANNOTATION),
            self.renew_at(renew_before),
        ) else {
            return false;
        };
        from <= now + 300
            && now < renew_at
            && ["tls.crt", "tls.key"]
                .iter()
                .all(|k| self.data.get(*k).is_some_and(|v| !v.is_empty()))
    }
}

/// The certificates to apply, and the bundle every client must trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPlan {
    /// Every Secret of the contract, the unchanged ones as they are.
    pub secrets: BTreeMap<String, StoredSecret>,
    /// PEM of the current CA and, while it is valid, the one before it.
    pub ca_bundle: String,
    /// Whether anything was (re)generated.
    pub changed: bool,
    /// When the next certificate needs renewing (unix time).
    pub renew_at: i64,
}

impl CertPlan {
    /// A digest of every certificate, for pod template annotations: pods restart when one
    /// changes.
    pub fn digest(&self) -> String {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for (name, secret) in &self.secrets {
            ctx.update(name.as_bytes());
            for value in secret.data.values() {
                ctx.update(value.as_bytes());
            }
        }
        ctx.update(self.ca_bundle.as_bytes());
        ctx.finish().as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

fn unix(t: OffsetDateTime) -> i64 {
    t.unix_timestamp()
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn validity(params: &mut CertificateParams, now: i64, life: Duration) -> Result<(), CertError> {
    let life = i64::try_from(life.as_secs()).unwrap_or(i64::MAX / 4);
    // A minute of slack for clocks a little behind ours.
    let at = |t: i64| OffsetDateTime::from_unix_timestamp(t).map_err(|_| CertError::Time(t));
    params.not_before = at(now - 60)?;
    params.not_after = at(now.saturating_add(life))?;
    Ok(())
}

fn times(params: &CertificateParams) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            NOT_BEFORE_ANNOTATION.to_string(),
            unix(params.not_before).to_string(),
        ),
        (
            NOT_AFTER_ANNOTATION.to_string(),
            unix(params.not_after).to_string(),
        ),
    ])
}

fn new_ca(now: i64, life: Duration) -> Result<StoredSecret, CertError> {
    let key = KeyPair::generate().map_err(CertError::Key)?;
    let common_name = format!("kubevirt.io@{now}");
    let mut params = ca_params(&common_name);
    validity(&mut params, now, life)?;
    let cert = params.self_signed(&key).map_err(|source| CertError::Sign {
        secret: CA_NAME.into(),
        source,
    })?;
    let mut annotations = times(&params);
    annotations.insert(CA_CN_ANNOTATION.into(), common_name);
    Ok(StoredSecret {
        data: BTreeMap::from([
            ("tls.crt".to_string(), cert.pem()),
            ("tls.key".to_string(), key.serialize_pem()),
        ]),
        annotations,
    })
}

fn new_leaf(
    leaf: &Leaf,
    ca: &StoredSecret,
    now: i64,
    life: Duration,
) -> Result<StoredSecret, CertError> {
    let ca_key = KeyPair::from_pem(ca.data.get("tls.key").map_or("", String::as_str))
        .map_err(CertError::CaKey)?;
    let ca_cn = ca
        .annotations
        .get(CA_CN_ANNOTATION)
        .map_or("kubevirt.io", String::as_str);
    let issuer = Issuer::new(ca_params(ca_cn), ca_key);
    let sign_error = |source| CertError::Sign {
        secret: leaf.secret.into(),
        source,
    };
    let mut params = CertificateParams::new(leaf.dns_names.clone()).map_err(sign_error)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, leaf.common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = leaf.usages.to_vec();
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, now, life)?;
    let key = KeyPair::generate().map_err(CertError::Key)?;
    let cert = params.signed_by(&key, &issuer).map_err(sign_error)?;
    let ca_pem = ca.data.get("tls.crt").cloned().unwrap_or_default();
    Ok(StoredSecret {
        data: BTreeMap::from([
            ("tls.crt".to_string(), cert.pem()),
            ("tls.key".to_string(), key.serialize_pem()),
            ("ca.crt".to_string(), ca_pem),
        ]),
        annotations: times(&params),
    })
}

/// Decides which certificates to keep and which to (re)generate. `existing`: the Secrets of the
/// contract found in the cluster, by name; `previous_bundle`: the ConfigMap's bundle, if any.
pub fn plan(
    namespace: &str,
    existing: &BTreeMap<String, StoredSecret>,
    previous_bundle: Option<&str>,
    now: i64,
    lifetimes: Lifetimes,
) -> Result<CertPlan, CertError> {
    let mut secrets = BTreeMap::new();
    let mut changed = false;
    let old_ca = existing.get(CA_NAME);
    let ca = match old_ca {
        Some(ca)
            if ca.fresh(now, lifetimes.ca_renew_before)
                && ca.fits(lifetimes.ca)
                && ca.key_parses() =>
        {
            ca.clone()
        }
        _ => {
            changed = true;
            new_ca(now, lifetimes.ca)?
        }
    };
    let ca_pem = ca.data.get("tls.crt").cloned().unwrap_or_default();
    let mut renew_at = ca.renew_at(lifetimes.ca_renew_before).unwrap_or(now);
    for leaf in leaves(namespace) {
        let current = existing.get(leaf.secret).filter(|s| {
            s.fresh(now, lifetimes.leaf_renew_before)
                && s.fits(lifetimes.leaf)
                && s.data.get("ca.crt") == Some(&ca_pem)
        });
        let secret = match current {
            Some(s) => s.clone(),
            None => {
                changed = true;
                new_leaf(&leaf, &ca, now, lifetimes.leaf)?
            }
        };
        if let Some(due) = secret.renew_at(lifetimes.leaf_renew_before) {
            renew_at = renew_at.min(due);
        }
        secrets.insert(leaf.secret.to_string(), secret);
    }
    // The bundle: the current CA first, then the CA it replaced while that one is still valid.
    let mut ca_bundle = ca_pem.clone();
    if let Some(old) = old_ca.filter(|old| old.data.get("tls.crt") != Some(&ca_pem)) {
        let still_valid = old.time(NOT_AFTER_ANNOTATION).is_some_and(|t| t > now);
        if let (true, Some(pem)) = (still_valid, old.data.get("tls.crt")) {
            ca_bundle.push_str(pem);
        }
    } else if let Some(previous) = previous_bundle {
        // Unchanged CA: keep the bundle as it was (it may still carry the previous CA).
        if previous.starts_with(&ca_pem) {
            ca_bundle = previous.to_string();
        }
    }
    secrets.insert(CA_NAME.to_string(), ca);
    Ok(CertPlan {
        secrets,
        ca_bundle,
        changed,
        renew_at,
    })
}

/// Standard base64 with padding, as a Secret's `data` holds its values.
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The Secret objects and the CA ConfigMap of a plan, ready to apply.
pub fn objects(namespace: &str, plan: &CertPlan, labels: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = plan
        .secrets
        .iter()
        .map(|(name, secret)| {
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace, "labels": labels,
                             "annotations": secret.annotations},
                "type": "kubernetes.io/tls",
                "data": secret.data.iter()
                    .map(|(k, v)| (k.clone(), base64(v.as_bytes())))
                    .collect::<BTreeMap<_, _>>(),
            })
        })
        .collect();
    out.push(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": CA_NAME, "namespace": namespace, "labels": labels},
        "data": {CA_BUNDLE_KEY: plan.ca_bundle},
    }));
    out
}

#[cfg(test)]
#[path = "certs_tests.rs"]
mod tests;
