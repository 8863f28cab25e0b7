//! A stand-in for virt-handler's subresource server, run on the host by the cluster test.
//! Like virt-handler, it serves over TLS with the handler's certificate and requires a client
//! certificate of the same CA.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::Run;

/// What the fake virt-handler saw on one connection.
pub struct HandlerSession {
    /// The request head virt-api sent.
    pub request: String,
    /// The console bytes that reached it (console connections only).
    pub typed: Vec<u8>,
    /// Whether the client presented a certificate the CA signed.
    pub client_certificate: bool,
}

/// A TLS server configuration as virt-handler's: its certificate, client certificates of
/// its CA required.
fn server_tls(dir: &Path) -> Arc<rustls::ServerConfig> {
    let pem = |name: &str| {
        CertificateDer::pem_file_iter(dir.join(name))
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in pem("ca.crt") {
        roots.add(cert).expect("a usable CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .expect("the client verifier");
    let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).expect("the handler's key");
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(pem("tls.crt"), key)
        .expect("the handler's certificate");
    Arc::new(config)
}

impl Run {
    /// A stand-in for virt-handler's subresource server on the host, serving `connections`
    /// connections one after the other. Beyond TLS it checks nothing itself and records each
    /// request head. A console upgrade is answered with 101, a login prompt, and `echo:<chunk>` for
    /// each chunk received until the connection closes; any other request with 200.
    pub fn fake_handler(&self, connections: usize) -> std::thread::JoinHandle<Vec<HandlerSession>> {
        let listener = std::net::TcpListener::bind(("0.0.0.0", self.handler_port))
            .expect("binding the fake handler's port");
        let tls = server_tls(&self.handler_cert_dir);
        std::thread::spawn(move || {
            (0..connections)
                .map(|_| {
                    let (tcp, _) = listener.accept().expect("virt-api connects");
                    let connection =
                        rustls::ServerConnection::new(tls.clone()).expect("a TLS connection");
                    serve_connection(rustls::StreamOwned::new(connection, tcp))
                })
                .collect()
        })
    }
}

fn serve_connection(
    mut stream: rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>,
) -> HandlerSession {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let request = String::from_utf8_lossy(&head).into_owned();
    let client_certificate = stream
        .conn
        .peer_certificates()
        .is_some_and(|c| !c.is_empty());
    let mut typed = Vec::new();
    if !request
        .to_ascii_lowercase()
        .contains("upgrade: ferrovirt-console")
    {
        let _ =
            stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        let _ = stream.flush();
        return HandlerSession {
            request,
            typed,
            client_certificate,
        };
    }
    stream
        .write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
              Upgrade: ferrovirt-console\r\n\r\n\r\nfake-guest login: ",
        )
        .expect("answering virt-api");
    stream.flush().expect("answering virt-api");
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        typed.extend_from_slice(&buf[..n]);
        let mut echo = b"echo:".to_vec();
        echo.extend_from_slice(&buf[..n]);
        if stream
            .write_all(&echo)
            .and_then(|()| stream.flush())
            .is_err()
        {
            break;
        }
    }
    HandlerSession {
        request,
        typed,
        client_certificate,
    }
}
