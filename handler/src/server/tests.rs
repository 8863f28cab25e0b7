//! The server on a loopback port with a fake console socket.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

async fn start(root: &std::path::Path) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = Arc::new(ServerConfig {
        listen: address,
        socket_root: root.to_path_buf(),
        token: "s3cret".into(),
    });
    tokio::spawn(serve_listener(listener, config));
    address
}

async fn send(
    address: SocketAddr,
    request: Request<Empty<Bytes>>,
) -> http::Response<hyper::body::Incoming> {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection.with_upgrades());
    sender.send_request(request).await.unwrap()
}

fn console_request(uid: &str, token: &str) -> Request<Empty<Bytes>> {
    Request::get(format!("/v1/vmis/{uid}/console"))
        .header(header::HOST, "handler")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, CONSOLE_UPGRADE)
        .body(Empty::new())
        .unwrap()
}

#[tokio::test]
async fn console_is_relayed_to_the_console_socket() {
    let root = tempfile::tempdir().unwrap();
    let uid = "0b7e2d2c-1111-4000-8000-000000000001";
    std::fs::create_dir_all(root.path().join(uid)).unwrap();
    let listener =
        tokio::net::UnixListener::bind(root.path().join(uid).join(console::CONSOLE_SOCKET))
            .unwrap();
    let address = start(root.path()).await;

    let response = send(address, console_request(uid, "s3cret")).await;
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
async fn wrong_token_and_missing_vmi_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let address = start(root.path()).await;
    let uid = "0b7e2d2c-1111-4000-8000-000000000002";
    let response = send(address, console_request(uid, "wrong")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = send(address, console_request(uid, "s3cret")).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let pause = Request::put(format!("/v1/vmis/{uid}/pause"))
        .header(header::HOST, "handler")
        .header(header::AUTHORIZATION, "Bearer s3cret")
        .body(Empty::new())
        .unwrap();
    let response = send(address, pause).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}
