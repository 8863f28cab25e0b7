//! virt-api's client against a TLS server that, like virt-handler, requires a client
//! certificate of the cluster's CA: the right handler is reached with virt-api's certificate;
//! a handler with a certificate of another CA, or of the right CA for another name, is not.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::tls::handler_client_config;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command (Debian package openssl) makes the test certificates");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// `openssl req` with a new P-256 key into `key` and `subject`: a certificate request into
/// `out`, or with `extra` = `-x509 …` a self-signed certificate.
fn new_key_and_request(dir: &Path, extra: &[&str], key: &str, out: &str, subject: &str) {
    let mut args = vec!["req"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[
        "-new",
        "-nodes",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-keyout",
        key,
        "-out",
        out,
        "-subj",
        subject,
    ]);
    openssl(dir, &args);
}

fn ca(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    new_key_and_request(
        dir,
        &["-x509", "-days", "2"],
        "ca.key",
        "ca.crt",
        &format!("/CN={name}"),
    );
}

/// A certificate signed by the CA in `dir`, into `dir/<name>/{tls.crt,tls.key,ca.crt}`.
fn leaf(dir: &Path, name: &str, subject: &str, extensions: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    let (key, csr, crt, ext) = (
        format!("{name}/tls.key"),
        format!("{name}/tls.csr"),
        format!("{name}/tls.crt"),
        format!("{name}/ext"),
    );
    new_key_and_request(dir, &[], &key, &csr, subject);
    std::fs::write(dir.join(&ext), extensions).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
    std::fs::copy(dir.join("ca.crt"), dir.join(name).join("ca.crt")).unwrap();
}

const HANDLER_EXT: &str =
    "subjectAltName=DNS:virt-handler.kubevirt.svc\nextendedKeyUsage=serverAuth,clientAuth\n";

/// A handler that requires a client certificate of the CA in `client_ca`, serves one
/// connection with `cert_dir`'s certificate and answers 200; reports whether the client
/// presented a certificate and the request line.
async fn handler(
    cert_dir: &Path,
    client_ca: &Path,
) -> (SocketAddr, tokio::task::JoinHandle<Option<String>>) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(client_ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .unwrap();
    let chain = CertificateDer::pem_file_iter(cert_dir.join("tls.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(cert_dir.join("tls.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let served = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.ok()?;
        let mut stream = acceptor.accept(tcp).await.ok()?;
        let presented = stream
            .get_ref()
            .1
            .peer_certificates()
            .is_some_and(|c| !c.is_empty());
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.ok()? == 0 {
                break;
            }
            head.push(byte[0]);
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .await
            .ok()?;
        let line = String::from_utf8_lossy(&head).lines().next()?.to_string();
        Some(format!("{line} (client certificate: {presented})"))
    });
    (address, served)
}

#[tokio::test]
async fn virt_api_reaches_only_a_handler_of_its_ca_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let (good, other) = (dir.path().join("good"), dir.path().join("other"));
    ca(&good, "kubevirt-ca-test");
    ca(&other, "someone-else-ca");
    leaf(
        &good,
        "handler",
        "/CN=kubevirt.io:system:node:virt-handler",
        HANDLER_EXT,
    );
    leaf(
        &good,
        "client",
        "/CN=kubevirt.io:system:client:virt-handler",
        "extendedKeyUsage=clientAuth\n",
    );
    leaf(
        &good,
        "virt-api",
        "/CN=virt-api",
        "subjectAltName=DNS:virt-api.kubevirt.svc\nextendedKeyUsage=serverAuth\n",
    );
    leaf(
        &other,
        "handler",
        "/CN=kubevirt.io:system:node:virt-handler",
        HANDLER_EXT,
    );
    let tls = handler_client_config(&good.join("client")).expect("virt-api's client config");
    let uid = "0b7e2d2c-2222-4000-8000-000000000001";

    let (address, served) = handler(&good.join("handler"), &good.join("ca.crt")).await;
    HandlerConnection::new(&tls, address)
        .act(uid, HandlerAction::Pause)
        .await
        .expect("the cluster's handler is reached");
    assert_eq!(
        served.await.unwrap().as_deref(),
        Some(format!("PUT /v1/vmis/{uid}/pause HTTP/1.1 (client certificate: true)").as_str())
    );

    for (who, cert) in [
        ("a handler of another CA", other.join("handler")),
        (
            "a certificate of the CA for another name",
            good.join("virt-api"),
        ),
    ] {
        let (address, served) = handler(&cert, &good.join("ca.crt")).await;
        let error = HandlerConnection::new(&tls, address)
            .act(uid, HandlerAction::Pause)
            .await
            .expect_err(who);
        assert!(
            error.message.contains("certificate"),
            "{who}: expected a certificate error, got {}",
            error.message
        );
        assert_eq!(served.await.unwrap(), None, "{who}: no request got through");
    }
}

#[test]
fn a_missing_certificate_directory_is_named() {
    let error = handler_client_config(Path::new("/nonexistent/handler-certs"))
        .expect_err("no certificates there");
    assert!(
        error
            .to_string()
            .contains("/nonexistent/handler-certs/tls.crt"),
        "{error}"
    );
}

#[test]
fn refusals_keep_the_handlers_status_but_a_freezes_is_kubevirts_internal_error() {
    let paused = failure("pause", StatusCode::CONFLICT, "VMI is paused\n");
    assert_eq!(
        (paused.code, paused.message.as_str()),
        (StatusCode::CONFLICT, "pause failed: VMI is paused")
    );
    let freeze = failure(
        "freeze",
        StatusCode::CONFLICT,
        "QEMU guest agent is not connected",
    );
    assert_eq!(
        (freeze.code, freeze.message.as_str()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal error occurred: command Freeze failed: QEMU guest agent is not connected"
        )
    );
}
