//! The server on a loopback port with a fake console socket, over mutual TLS with
//! certificates made by openssl as the certificate contract describes them.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::migration::tls::MigrationTls;

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

/// Signs a certificate for `subject` with the CA in `dir` (`ca.crt`, `ca.key`) into
/// `dir/<name>/` as a Secret holds it (`tls.crt`, `tls.key`, `ca.crt`).
fn leaf(dir: &Path, name: &str, subject: &str, extensions: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    let key = format!("{name}/tls.key");
    let csr = format!("{name}/tls.csr");
    let crt = format!("{name}/tls.crt");
    let ext = format!("{name}/ext");
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

/// A CA in `dir` with virt-handler's serving certificate (`server/`) and virt-api's client
/// certificate (`client/`).
fn certificates(dir: &Path, ca_name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    new_key_and_request(
        dir,
        &["-x509", "-days", "2"],
        "ca.key",
        "ca.crt",
        &format!("/CN={ca_name}"),
    );
    leaf(
        dir,
        "server",
        "/CN=kubevirt.io:system:node:virt-handler",
        "subjectAltName=DNS:virt-handler.kubevirt.svc\nextendedKeyUsage=serverAuth,clientAuth\n",
    );
    leaf(
        dir,
        "client",
        "/CN=kubevirt.io:system:client:virt-handler",
        "extendedKeyUsage=clientAuth\n",
    );
}

/// The certificates of one test: `good` (the cluster's CA) and `stranger` (a client
/// certificate of another CA, with the cluster's CA as the roots it trusts).
struct Pki {
    _dir: tempfile::TempDir,
    good: std::path::PathBuf,
    stranger: std::path::PathBuf,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let (good, other) = (dir.path().join("good"), dir.path().join("other"));
    certificates(&good, "kubevirt-ca-test");
    certificates(&other, "someone-else-ca");
    let stranger = dir.path().join("stranger");
    std::fs::create_dir_all(&stranger).unwrap();
    for file in ["tls.crt", "tls.key"] {
        std::fs::copy(other.join("client").join(file), stranger.join(file)).unwrap();
    }
    std::fs::copy(good.join("ca.crt"), stranger.join("ca.crt")).unwrap();
    Pki {
        _dir: dir,
        good,
        stranger,
    }
}

async fn start(root: &Path, pki: &Pki) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = Arc::new(ServerConfig {
        listen: address,
        socket_root: root.to_path_buf(),
        tls: tls::server_config(&pki.good.join("server")).unwrap(),
        consoles: Default::default(),
    });
    tokio::spawn(serve_listener(listener, config));
    address
}

/// virt-api's side: trusts the cluster's CA and presents the certificate in `cert_dir`
/// (`tls.crt`, `tls.key`), or none.
fn client_tls(pki: &Pki, cert_dir: Option<&Path>) -> Arc<rustls::ClientConfig> {
    match cert_dir {
        Some(dir) => MigrationTls::load(dir).unwrap().client,
        None => {
            let mut roots = rustls::RootCertStore::empty();
            let pem = std::fs::read(pki.good.join("ca.crt")).unwrap();
            use rustls_pki_types::pem::PemObject;
            for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
                roots.add(cert.unwrap()).unwrap();
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            Arc::new(
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            )
        }
    }
}

async fn try_send(
    address: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    request: Request<Empty<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let name = ServerName::try_from("virt-handler.kubevirt.svc").unwrap();
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("http: {e}"))?;
    tokio::spawn(connection.with_upgrades());
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))
}

async fn send(
    address: SocketAddr,
    pki: &Pki,
    request: Request<Empty<Bytes>>,
) -> http::Response<hyper::body::Incoming> {
    try_send(
        address,
        client_tls(pki, Some(&pki.good.join("client"))),
        request,
    )
    .await
    .unwrap()
}

fn console_request(uid: &str) -> Request<Empty<Bytes>> {
    Request::get(format!("/v1/vmis/{uid}/console"))
        .header(header::HOST, "virt-handler.kubevirt.svc")
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, CONSOLE_UPGRADE)
        .body(Empty::new())
        .unwrap()
}

/// The fake launcher's console socket of VMI `uid` under `root`.
fn console_socket(root: &Path, uid: &str) -> tokio::net::UnixListener {
    std::fs::create_dir_all(root.join(uid)).unwrap();
    tokio::net::UnixListener::bind(root.join(uid).join(contract::sockets::CONSOLE_SOCKET)).unwrap()
}

#[tokio::test]
async fn console_is_relayed_to_the_console_socket() {
    let root = tempfile::tempdir().unwrap();
    let uid = "0b7e2d2c-1111-4000-8000-000000000001";
    let listener = console_socket(root.path(), uid);
    let pki = pki();
    let address = start(root.path(), &pki).await;

    let response = send(address, &pki, console_request(uid)).await;
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    let (mut guest, _) = listener.accept().await.unwrap();
    let mut stream = TokioIo::new(hyper::upgrade::on(response).await.unwrap());

    guest.write_all(b"\r\ncirros login: ").await.unwrap();
    let mut prompt = [0u8; 16];
    stream.read_exact(&mut prompt).await.unwrap();
    assert_eq!(&prompt, b"\r\ncirros login: ");

    stream.write_all(b"cirros\n").await.unwrap();
    let mut typed = [0u8; 7];
    guest.read_exact(&mut typed).await.unwrap();
    assert_eq!(&typed, b"cirros\n");
}

#[tokio::test]
async fn a_second_console_closes_the_first() {
    let root = tempfile::tempdir().unwrap();
    let uid = "0b7e2d2c-1111-4000-8000-000000000002";
    let listener = console_socket(root.path(), uid);
    let pki = pki();
    let address = start(root.path(), &pki).await;

    let first = send(address, &pki, console_request(uid)).await;
    assert_eq!(first.status(), StatusCode::SWITCHING_PROTOCOLS);
    let (_guest_of_first, _) = listener.accept().await.unwrap();
    let mut first = TokioIo::new(hyper::upgrade::on(first).await.unwrap());

    let second = send(address, &pki, console_request(uid)).await;
    assert_eq!(second.status(), StatusCode::SWITCHING_PROTOCOLS);
    let (mut guest, _) = listener.accept().await.unwrap();
    let mut second = TokioIo::new(hyper::upgrade::on(second).await.unwrap());

    // The first reads EOF; the second still talks to the guest.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        first.read_to_end(&mut rest),
    )
    .await
    .expect("the first console is closed");
    assert_eq!(read.unwrap(), 0, "the first console got {rest:?}");
    guest.write_all(b"login: ").await.unwrap();
    let mut prompt = [0u8; 7];
    second.read_exact(&mut prompt).await.unwrap();
    assert_eq!(&prompt, b"login: ");
}

#[tokio::test]
async fn clients_without_the_cas_certificate_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let pki = pki();
    let address = start(root.path(), &pki).await;
    let uid = "0b7e2d2c-1111-4000-8000-000000000002";
    // A VMI without a launcher here: a client that gets through is answered 404.
    for (who, tls) in [
        ("no client certificate", client_tls(&pki, None)),
        (
            "a certificate of another CA",
            client_tls(&pki, Some(&pki.stranger)),
        ),
    ] {
        let answer = try_send(address, tls, console_request(uid)).await;
        assert!(
            answer.is_err(),
            "{who}: expected the TLS handshake to be refused, got {:?}",
            answer.map(|r| r.status())
        );
    }
    let response = send(address, &pki, console_request(uid)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let pause = Request::put(format!("/v1/vmis/{uid}/pause"))
        .header(header::HOST, "virt-handler.kubevirt.svc")
        .body(Empty::new())
        .unwrap();
    let response = send(address, &pki, pause).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[test]
fn the_common_name_is_read_from_the_certificate() {
    let pki = pki();
    let read = |dir: &Path| {
        let pem = std::fs::read(dir.join("tls.crt")).unwrap();
        use rustls_pki_types::pem::PemObject;
        let cert = rustls_pki_types::CertificateDer::pem_slice_iter(&pem)
            .next()
            .unwrap()
            .unwrap();
        tls::subject_common_name(&cert)
    };
    assert_eq!(
        read(&pki.good.join("client")).as_deref(),
        Some(tls::CLIENT_COMMON_NAME)
    );
    assert_eq!(
        read(&pki.good.join("server")).as_deref(),
        Some("kubevirt.io:system:node:virt-handler")
    );
}
