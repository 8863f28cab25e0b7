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
