//! The server on a loopback port with fake console and VNC sockets and a fake launcher, over
//! mutual TLS with certificates made by openssl as the certificate contract describes them.

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
use contract::proto::v1;

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

fn vnc_request(uid: &str) -> Request<Empty<Bytes>> {
    Request::get(format!("/v1/vmis/{uid}/vnc"))
        .header(header::HOST, "virt-handler.kubevirt.svc")
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, VNC_UPGRADE)
        .body(Empty::new())
        .unwrap()
}

/// The fake QEMU's VNC socket of VMI `uid` under `root`.
fn vnc_socket(root: &Path, uid: &str) -> tokio::net::UnixListener {
    std::fs::create_dir_all(root.join(uid)).unwrap();
    tokio::net::UnixListener::bind(root.join(uid).join(contract::sockets::VNC_SOCKET)).unwrap()
}

async fn body_text(response: http::Response<hyper::body::Incoming>) -> String {
    use http_body_util::BodyExt;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test]
async fn vnc_is_relayed_to_the_vnc_socket_and_shared() {
    let root = tempfile::tempdir().unwrap();
    let uid = "0b7e2d2c-1111-4000-8000-000000000003";
    let listener = vnc_socket(root.path(), uid);
    let pki = pki();
    let address = start(root.path(), &pki).await;

    let response = send(address, &pki, vnc_request(uid)).await;
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(response.headers()[header::UPGRADE], VNC_UPGRADE);
    let (mut qemu, _) = listener.accept().await.unwrap();
    let mut viewer = TokioIo::new(hyper::upgrade::on(response).await.unwrap());

    // The RFB handshake starts with the server's version, which the viewer echoes.
    qemu.write_all(b"RFB 003.008\n").await.unwrap();
    let mut greeting = [0u8; 12];
    viewer.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"RFB 003.008\n");
    viewer.write_all(b"RFB 003.008\n").await.unwrap();
    let mut answer = [0u8; 12];
    qemu.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"RFB 003.008\n");

    // A second viewer gets a connection of its own; the first keeps its own.
    let second = send(address, &pki, vnc_request(uid)).await;
    assert_eq!(second.status(), StatusCode::SWITCHING_PROTOCOLS);
    let (mut qemu_of_second, _) = listener.accept().await.unwrap();
    let mut second = TokioIo::new(hyper::upgrade::on(second).await.unwrap());
    qemu_of_second.write_all(b"RFB 003.008\n").await.unwrap();
    second.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"RFB 003.008\n");
    qemu.write_all(&[1]).await.unwrap();
    let mut security = [0u8; 1];
    viewer.read_exact(&mut security).await.unwrap();
    assert_eq!(security, [1]);

    // QEMU closing the connection ends the first viewer's stream.
    drop(qemu);
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        viewer.read_to_end(&mut rest),
    )
    .await
    .expect("the first viewer's stream ends");
    assert_eq!(read.unwrap(), 0, "the first viewer got {rest:?}");
}

#[tokio::test]
async fn vnc_without_its_socket_is_not_found() {
    let root = tempfile::tempdir().unwrap();
    let pki = pki();
    let address = start(root.path(), &pki).await;

    // A launcher runs the VMI here, but its VM has no graphics device: QEMU serves no VNC.
    let uid = "0b7e2d2c-1111-4000-8000-000000000004";
    std::fs::create_dir_all(root.path().join(uid)).unwrap();
    let _launcher = std::os::unix::net::UnixListener::bind(
        root.path()
            .join(uid)
            .join(contract::sockets::LAUNCHER_SOCKET),
    )
    .unwrap();
    let response = send(address, &pki, vnc_request(uid)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        body_text(response).await,
        format!("VMI {uid} has no VNC display on this node: its VM has no graphics device")
    );

    // No launcher at all: the VMI does not run on this node.
    let elsewhere = "0b7e2d2c-1111-4000-8000-000000000005";
    let response = send(address, &pki, vnc_request(elsewhere)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        body_text(response).await,
        format!("no launcher for VMI {elsewhere} on this node")
    );
    let screenshot = Request::get(format!("/v1/vmis/{elsewhere}/vnc/screenshot"))
        .header(header::HOST, "virt-handler.kubevirt.svc")
        .body(Empty::new())
        .unwrap();
    let response = send(address, &pki, screenshot).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        body_text(response).await,
        format!("no launcher for VMI {elsewhere} on this node")
    );
}

#[tokio::test]
async fn vnc_needs_its_upgrade() {
    let root = tempfile::tempdir().unwrap();
    let uid = "0b7e2d2c-1111-4000-8000-000000000006";
    let _listener = vnc_socket(root.path(), uid);
    let pki = pki();
    let address = start(root.path(), &pki).await;
    // The console's upgrade does not open the VNC display.
    let request = Request::get(format!("/v1/vmis/{uid}/vnc"))
        .header(header::HOST, "virt-handler.kubevirt.svc")
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, CONSOLE_UPGRADE)
        .body(Empty::new())
        .unwrap();
    let response = send(address, &pki, request).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(body_text(response).await.contains(VNC_UPGRADE));
}

/// A launcher that only takes screenshots: of a VM with graphics, or refused without.
struct ScreenshotLauncher {
    graphics: bool,
}

/// The first bytes of every PNG, all the fake launcher's screen holds.
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Implements the launcher for `$fake` with the methods given, and every other one refused as
/// unimplemented. The attribute is part of what the macro writes, so that `async_trait` sees
/// the methods after they are expanded.
macro_rules! fake_launcher {
    (
        $fake:ty;
        unimplemented { $($name:ident($request:ty) -> $response:ty;)* }
        $($method:item)*
    ) => {
        #[tonic::async_trait]
        impl contract::proto::v1::launcher_server::Launcher for $fake {
            $(
                async fn $name(
                    &self,
                    _: tonic::Request<$request>,
                ) -> Result<tonic::Response<$response>, tonic::Status> {
                    Err(tonic::Status::unimplemented(stringify!($name)))
                }
            )*
            $($method)*
        }
    };
}

fake_launcher! {
    ScreenshotLauncher;
    unimplemented {
        info(v1::InfoRequest) -> v1::InfoResponse;
        sync_vmi(v1::SyncVmiRequest) -> v1::DomainResponse;
        pause(v1::VmiRequest) -> v1::DomainResponse;
        unpause(v1::VmiRequest) -> v1::DomainResponse;
        shutdown(v1::ShutdownRequest) -> v1::DomainResponse;
        kill(v1::VmiRequest) -> v1::DomainResponse;
        reset(v1::VmiRequest) -> v1::DomainResponse;
        get_domain(v1::GetDomainRequest) -> v1::DomainResponse;
        ping(v1::PingRequest) -> v1::PingResponse;
        prepare_migration_target(v1::SyncVmiRequest) -> v1::DomainResponse;
        migrate(v1::MigrateRequest) -> v1::DomainResponse;
        cancel_migration(v1::VmiRequest) -> v1::DomainResponse;
        soft_reboot(v1::VmiRequest) -> v1::DomainResponse;
        freeze(v1::FreezeRequest) -> v1::DomainResponse;
        unfreeze(v1::VmiRequest) -> v1::DomainResponse;
    }

    async fn screenshot(
        &self,
        _: tonic::Request<v1::VmiRequest>,
    ) -> Result<tonic::Response<v1::ScreenshotResponse>, tonic::Status> {
        if !self.graphics {
            return Err(tonic::Status::failed_precondition(
                "the VM has no graphics device",
            ));
        }
        Ok(tonic::Response::new(v1::ScreenshotResponse {
            png: PNG_SIGNATURE.to_vec(),
        }))
    }
}

/// Serves `launcher` on the launcher socket of VMI `uid` under `root`.
fn serve_launcher(root: &Path, uid: &str, launcher: ScreenshotLauncher) {
    std::fs::create_dir_all(root.join(uid)).unwrap();
    let listener =
        tokio::net::UnixListener::bind(root.join(uid).join(contract::sockets::LAUNCHER_SOCKET))
            .unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(v1::launcher_server::LauncherServer::new(launcher))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
}

#[tokio::test]
async fn the_screenshot_is_the_launchers_png() {
    let root = tempfile::tempdir().unwrap();
    let (with, without) = (
        "0b7e2d2c-1111-4000-8000-000000000007",
        "0b7e2d2c-1111-4000-8000-000000000008",
    );
    serve_launcher(root.path(), with, ScreenshotLauncher { graphics: true });
    serve_launcher(root.path(), without, ScreenshotLauncher { graphics: false });
    let pki = pki();
    let address = start(root.path(), &pki).await;
    let screenshot = |uid: &str| {
        Request::get(format!("/v1/vmis/{uid}/vnc/screenshot"))
            .header(header::HOST, "virt-handler.kubevirt.svc")
            .body(Empty::new())
            .unwrap()
    };

    let response = send(address, &pki, screenshot(with)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "image/png");
    use http_body_util::BodyExt;
    let png = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&png[..], PNG_SIGNATURE);

    let response = send(address, &pki, screenshot(without)).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(body_text(response).await, "the VM has no graphics device");
}
