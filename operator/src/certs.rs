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
                    .map(|(k, v)| (k.clone(), crate::install::base64(v.as_bytes())))
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
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn fresh_plan() -> CertPlan {
        plan(
            "kubevirt",
            &BTreeMap::new(),
            None,
            NOW,
            Lifetimes::default(),
        )
        .unwrap()
    }

    #[test]
    fn an_empty_cluster_gets_every_certificate_of_the_contract() {
        let p = fresh_plan();
        assert!(p.changed);
        let names: Vec<_> = p.secrets.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                CA_NAME,
                VIRT_API_SECRET,
                HANDLER_CLIENT_SECRET,
                HANDLER_SERVER_SECRET
            ]
        );
        let ca = &p.secrets[CA_NAME].data["tls.crt"];
        assert_eq!(&p.ca_bundle, ca);
        for leaf in [
            VIRT_API_SECRET,
            HANDLER_SERVER_SECRET,
            HANDLER_CLIENT_SECRET,
        ] {
            let s = &p.secrets[leaf];
            assert_eq!(&s.data["ca.crt"], ca, "{leaf}");
            assert!(s.data["tls.crt"].starts_with("-----BEGIN CERTIFICATE-----"));
            assert!(s.data["tls.key"].contains("PRIVATE KEY"));
            assert_eq!(
                s.annotations[NOT_AFTER_ANNOTATION],
                (NOW + 24 * 3600).to_string()
            );
        }
        // Renewal is due at 80% of the leaves' 24h.
        let (from, until) = (NOW - 60, NOW + 24 * 3600);
        assert_eq!(p.renew_at, until - (until - from) / 5);
    }

    #[test]
    fn a_fresh_install_is_kept_as_it_is() {
        let first = fresh_plan();
        let again = plan(
            "kubevirt",
            &first.secrets,
            Some(&first.ca_bundle),
            NOW + 3600,
            Lifetimes::default(),
        )
        .unwrap();
        assert!(!again.changed);
        assert_eq!(again.secrets, first.secrets);
        assert_eq!(again.digest(), first.digest());
    }

    #[test]
    fn leaves_are_renewed_before_they_expire_and_the_ca_is_kept() {
        let first = fresh_plan();
        // 20 hours in: less than a fifth of the leaves' 24 hours is left.
        let later = plan(
            "kubevirt",
            &first.secrets,
            Some(&first.ca_bundle),
            NOW + 20 * 3600,
            Lifetimes::default(),
        )
        .unwrap();
        assert!(later.changed);
        assert_eq!(later.secrets[CA_NAME], first.secrets[CA_NAME]);
        assert_ne!(
            later.secrets[VIRT_API_SECRET].data["tls.crt"],
            first.secrets[VIRT_API_SECRET].data["tls.crt"]
        );
        assert_ne!(later.digest(), first.digest());
    }

    #[test]
    fn a_rotated_ca_reissues_every_leaf_and_the_bundle_keeps_the_old_ca() {
        let first = fresh_plan();
        let old_ca = first.secrets[CA_NAME].data["tls.crt"].clone();
        // Six days in: the 7-day CA has less than a fifth left.
        let later = plan(
            "kubevirt",
            &first.secrets,
            Some(&first.ca_bundle),
            NOW + 6 * 24 * 3600,
            Lifetimes::default(),
        )
        .unwrap();
        let new_ca = later.secrets[CA_NAME].data["tls.crt"].clone();
        assert_ne!(new_ca, old_ca);
        assert_eq!(later.ca_bundle, format!("{new_ca}{old_ca}"));
        for leaf in [
            VIRT_API_SECRET,
            HANDLER_SERVER_SECRET,
            HANDLER_CLIENT_SECRET,
        ] {
            assert_eq!(later.secrets[leaf].data["ca.crt"], new_ca);
        }
        // The next reconcile keeps the two-CA bundle.
        let again = plan(
            "kubevirt",
            &later.secrets,
            Some(&later.ca_bundle),
            NOW + 6 * 24 * 3600 + 60,
            Lifetimes::default(),
        )
        .unwrap();
        assert!(!again.changed);
        assert_eq!(again.ca_bundle, later.ca_bundle);
    }

    #[test]
    fn a_secret_without_dates_or_with_garbage_is_replaced() {
        let mut secrets = fresh_plan().secrets;
        secrets
            .get_mut(VIRT_API_SECRET)
            .unwrap()
            .annotations
            .clear();
        secrets
            .get_mut(HANDLER_CLIENT_SECRET)
            .unwrap()
            .annotations
            .insert(NOT_AFTER_ANNOTATION.into(), "soon".into());
        let p = plan("kubevirt", &secrets, None, NOW, Lifetimes::default()).unwrap();
        assert!(p.changed);
        assert_ne!(p.secrets[VIRT_API_SECRET], secrets[VIRT_API_SECRET]);
        assert_ne!(
            p.secrets[HANDLER_CLIENT_SECRET],
            secrets[HANDLER_CLIENT_SECRET]
        );
        assert_eq!(
            p.secrets[HANDLER_SERVER_SECRET],
            secrets[HANDLER_SERVER_SECRET]
        );
    }

    /// The certificates verify with rustls as virt-api's and virt-handler's peers use them.
    #[test]
    fn the_chain_verifies_for_the_contract_names_and_usages() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::client::WebPkiServerVerifier;
        use rustls::server::WebPkiClientVerifier;
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

        let p = fresh_plan();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(p.ca_bundle.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let roots = std::sync::Arc::new(roots);
        let server = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .unwrap();
        let client = WebPkiClientVerifier::builder_with_provider(roots, provider)
            .build()
            .unwrap();
        let der = |secret: &str| {
            CertificateDer::from_pem_slice(p.secrets[secret].data["tls.crt"].as_bytes()).unwrap()
        };
        let at = UnixTime::since_unix_epoch(Duration::from_secs(NOW as u64 + 60));
        let check = |secret: &str, name: &str| {
            let name = ServerName::try_from(name.to_string()).unwrap();
            server.verify_server_cert(&der(secret), &[], &name, &[], at)
        };
        assert!(check(VIRT_API_SECRET, "virt-api.kubevirt.svc").is_ok());
        assert!(check(VIRT_API_SECRET, "virt-api").is_ok());
        assert!(check(HANDLER_SERVER_SECRET, "virt-handler.kubevirt.svc").is_ok());
        assert!(check(HANDLER_SERVER_SECRET, "virt-api.kubevirt.svc").is_err());
        // The client certificate is no server certificate (EKU clientAuth only).
        assert!(check(HANDLER_CLIENT_SECRET, "virt-handler.kubevirt.svc").is_err());
        assert!(client
            .verify_client_cert(&der(HANDLER_CLIENT_SECRET), &[], at)
            .is_ok());
        // virt-handler's serving certificate also dials other handlers (migration).
        assert!(client
            .verify_client_cert(&der(HANDLER_SERVER_SECRET), &[], at)
            .is_ok());
        assert!(client
            .verify_client_cert(&der(VIRT_API_SECRET), &[], at)
            .is_err());
    }

    fn kubevirt_with(strategy: serde_json::Value) -> KubeVirt {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"certificateRotateStrategy": strategy}
        }))
        .unwrap()
    }

    #[test]
    fn lifetimes_come_from_the_crs_certificate_rotate_strategy() {
        assert_eq!(
            Lifetimes::of(&kubevirt_with(json!({}))),
            Lifetimes::default()
        );
        let set = Lifetimes::of(&kubevirt_with(json!({"selfSigned": {
            "ca": {"duration": "10m", "renewBefore": "2m"},
            "server": {"duration": "1m30s"}
        }})));
        assert_eq!(set.ca, Duration::from_secs(600));
        assert_eq!(set.ca_renew_before, Some(Duration::from_secs(120)));
        assert_eq!(set.leaf, Duration::from_secs(90));
        assert_eq!(set.leaf_renew_before, None);
        // Written before virt-api could refuse it: the defaults stand in for nonsense.
        let bad = Lifetimes::of(&kubevirt_with(json!({"selfSigned": {
            "ca": {"duration": "soon"},
            "server": {"duration": "10s", "renewBefore": "48h"}
        }})));
        assert_eq!(bad, Lifetimes::default());
    }

    #[test]
    fn renew_before_sets_when_a_certificate_is_due() {
        let lifetimes = Lifetimes {
            leaf_renew_before: Some(Duration::from_secs(3600)),
            ..Lifetimes::default()
        };
        let first = plan("kubevirt", &BTreeMap::new(), None, NOW, lifetimes).unwrap();
        let until: i64 = first.secrets[VIRT_API_SECRET].annotations[NOT_AFTER_ANNOTATION]
            .parse()
            .unwrap();
        assert_eq!(first.renew_at, until - 3600);
        let keep = |at| {
            plan(
                "kubevirt",
                &first.secrets,
                Some(&first.ca_bundle),
                at,
                lifetimes,
            )
            .unwrap()
        };
        assert!(!keep(until - 3601).changed);
        let renewed = keep(until - 3600);
        assert!(renewed.changed);
        assert_ne!(
            renewed.secrets[VIRT_API_SECRET],
            first.secrets[VIRT_API_SECRET]
        );
        // The CA (168h, a fifth left) is not due yet.
        assert_eq!(renewed.secrets[CA_NAME], first.secrets[CA_NAME]);
    }

    #[test]
    fn a_shorter_configured_lifetime_reissues_at_once() {
        let first = fresh_plan();
        let short = Lifetimes {
            ca: Duration::from_secs(600),
            leaf: Duration::from_secs(60),
            ..Lifetimes::default()
        };
        let p = plan(
            "kubevirt",
            &first.secrets,
            Some(&first.ca_bundle),
            NOW + 10,
            short,
        )
        .unwrap();
        assert!(p.changed);
        assert_ne!(p.secrets[CA_NAME], first.secrets[CA_NAME]);
        assert_eq!(
            p.secrets[VIRT_API_SECRET].annotations[NOT_AFTER_ANNOTATION],
            (NOW + 10 + 60).to_string()
        );
        // Renewal is due at 80% of the minute, and the old CA stays trusted meanwhile.
        assert_eq!(p.renew_at, NOW + 70 - 120 / 5);
        assert!(p
            .ca_bundle
            .ends_with(&first.secrets[CA_NAME].data["tls.crt"]));
        // A longer configured lifetime keeps them until they are due.
        let again = plan(
            "kubevirt",
            &p.secrets,
            Some(&p.ca_bundle),
            NOW + 20,
            Lifetimes::default(),
        )
        .unwrap();
        assert!(!again.changed);
    }

    #[test]
    fn a_ca_key_that_does_not_parse_means_a_new_ca() {
        let mut secrets = fresh_plan().secrets;
        let ca = secrets.get_mut(CA_NAME).unwrap();
        ca.data.insert(
            "tls.key".into(),
            "-----BEGIN PRIVATE KEY-----\ngarbage\n".into(),
        );
        let p = plan("kubevirt", &secrets, None, NOW, Lifetimes::default()).unwrap();
        assert!(p.changed);
        assert!(KeyPair::from_pem(&p.secrets[CA_NAME].data["tls.key"]).is_ok());
        assert_ne!(p.secrets[CA_NAME], secrets[CA_NAME]);
    }
}
