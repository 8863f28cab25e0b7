//! The HTTPS listener virt-controller and virt-handler answer `GET /healthz` on, as KubeVirt's
//! do on port 8443. Its certificate is self-signed and made at start: the only clients are
//! probes and KubeVirt's functional tests, which do not verify it. Each connection gets one
//! answer and is closed, as the components' plain-HTTP metrics servers do.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{answer, ConfigVersion, PORT};

/// Largest request head read; the rest is ignored.
const MAX_HEAD: usize = 8 << 10;
/// How long a client may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum HealthzError {
    #[error("making the self-signed certificate")]
    Certificate(#[source] rcgen::Error),
    #[error("building the TLS configuration")]
    Tls(#[source] rustls::Error),
    #[error("binding {0}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// A TLS configuration with a fresh self-signed certificate for `names`.
pub fn self_signed_config(names: Vec<String>) -> Result<Arc<ServerConfig>, HealthzError> {
    let certified = rcgen::generate_simple_self_signed(names).map_err(HealthzError::Certificate)?;
    let chain = vec![CertificateDer::from(certified.cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(HealthzError::Tls)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(HealthzError::Tls)?;
    Ok(Arc::new(config))
}

/// Starts the listener on `0.0.0.0:`[`PORT`] in the background; a failure to start is logged,
/// not fatal (the component works without it). `name` names the component in the certificate
/// and the log.
pub fn spawn(name: &str, client: kube::Client, config: ConfigVersion) {
    let address = SocketAddr::from(([0, 0, 0, 0], PORT));
    let name = name.to_string();
    tokio::spawn(async move {
        if let Err(e) = serve(address, &name, client, config).await {
            log::warn!("healthz on {address}: {e}: {}", source_text(&e));
        }
    });
}

fn source_text(error: &dyn std::error::Error) -> String {
    error.source().map(|s| s.to_string()).unwrap_or_default()
}

/// Serves until the process ends.
pub async fn serve(
    address: SocketAddr,
    name: &str,
    client: kube::Client,
    config: ConfigVersion,
) -> Result<(), HealthzError> {
    let tls = self_signed_config(vec![name.to_string(), "localhost".into()])?;
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| HealthzError::Bind(address, e))?;
    log::info!("healthz on https://{address}/healthz");
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let Ok((stream, remote)) = listener.accept().await else {
            continue;
        };
        let (acceptor, client, config) = (acceptor.clone(), client.clone(), config.clone());
        tokio::spawn(async move {
            match acceptor.accept(stream).await {
                Ok(stream) => respond(stream, &client, &config).await,
                Err(e) => log::debug!("healthz: TLS handshake with {remote}: {e}"),
            }
        });
    }
}

/// Reads one request head and writes its answer.
async fn respond<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    client: &kube::Client,
    config: &ConfigVersion,
) {
    let head = tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream))
        .await
        .unwrap_or_default();
    let response = if is_get_healthz(&head) {
        let (status, body) = answer(client, config).await;
        http_response(status, "application/json", &body)
    } else {
        http_response(404, "text/plain", b"not found\n")
    };
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
}

/// The request head: up to the blank line, at most [`MAX_HEAD`] bytes.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Vec<u8> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while head.len() < MAX_HEAD && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    head
}

/// Whether the request is `GET /healthz` (with a query, a trailing slash, or the doubled
/// leading slash KubeVirt's tests send: they join `https://localhost:<port>/` and `/healthz`).
pub fn is_get_healthz(head: &[u8]) -> bool {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (Some("GET"), Some(target)) = (parts.next(), parts.next()) else {
        return false;
    };
    let path = target.split('?').next().unwrap_or_default();
    path.trim_matches('/') == "healthz"
}

/// An HTTP/1.1 response that closes the connection.
pub fn http_response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let mut response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(body);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_healthz_is_answered() {
        assert!(is_get_healthz(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(is_get_healthz(b"GET //healthz HTTP/1.1\r\n\r\n"));
        assert!(is_get_healthz(b"GET /healthz/?verbose HTTP/1.1\r\n\r\n"));
        assert!(!is_get_healthz(b"POST /healthz HTTP/1.1\r\n\r\n"));
        assert!(!is_get_healthz(b"GET /metrics HTTP/1.1\r\n\r\n"));
        assert!(!is_get_healthz(b"GET /healthzx HTTP/1.1\r\n\r\n"));
        assert!(!is_get_healthz(b""));
    }

    #[test]
    fn responses_carry_length_type_and_close() {
        let response = http_response(200, "application/json", b"{}");
        let text = String::from_utf8_lossy(&response);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("Content-Type: application/json\r\n"));
        assert!(text.contains("Content-Length: 2\r\n"));
        assert!(text.contains("Connection: close\r\n"));
        assert!(text.ends_with("\r\n\r\n{}"));
        let failed = http_response(500, "application/json", b"{}");
        assert!(String::from_utf8_lossy(&failed).starts_with("HTTP/1.1 500 Internal Server Error"));
    }

    #[test]
    fn the_self_signed_configuration_builds() {
        let config = self_signed_config(vec!["virt-handler".into()]).expect("TLS configuration");
        assert!(config.alpn_protocols.is_empty(), "HTTP/1.1 only");
    }

    #[tokio::test]
    async fn the_head_is_read_up_to_the_blank_line() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            let _ = client.write_all(b"GET /healthz HTTP/1.1\r\n").await;
            let _ = client.write_all(b"Host: localhost\r\n\r\n").await;
            client
        });
        let head = read_head(&mut server).await;
        assert!(is_get_healthz(&head));
        assert!(head.ends_with(b"\r\n\r\n"));
        drop(writer.await);
    }
}
