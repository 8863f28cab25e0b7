//! The two ends of the migration stream between handlers. The launchers only ever see unix
//! sockets in their socket directories; the network between nodes sees only TLS.
//!
//! - Target: [`listen_target`] binds a TCP port on the handler's Pod IP, accepts one TLS client
//!   (its certificate must chain to the handlers' CA), connects to the target launcher's
//!   `migration-target-sock` and copies both ways until either side closes.
//! - Source: [`relay_source`] accepts the source QEMU's connection on a unix socket in the
//!   source launcher's socket directory, dials the target over TLS and copies both ways.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::tls::MigrationTls;

/// How long an end waits for the other to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// Why the stream broke.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("nobody connected within {0:?}")]
    Timeout(Duration),
    #[error("accepting the connection")]
    Accept(#[source] std::io::Error),
    #[error("TLS handshake")]
    Tls(#[source] std::io::Error),
    #[error("connecting to {0}")]
    Connect(String, #[source] std::io::Error),
    #[error("copying the stream")]
    Copy(#[source] std::io::Error),
}

/// Bytes copied: (towards the target, back towards the source).
pub type Copied = (u64, u64);

async fn within<T>(
    future: impl std::future::Future<Output = Result<T, ProxyError>>,
) -> Result<T, ProxyError> {
    tokio::time::timeout(CONNECT_TIMEOUT, future)
        .await
        .map_err(|_| ProxyError::Timeout(CONNECT_TIMEOUT))?
}

/// Target side: serves one migration stream from `listener` into `launcher_socket`.
pub async fn listen_target(
    listener: TcpListener,
    tls: Arc<MigrationTls>,
    launcher_socket: PathBuf,
) -> Result<Copied, ProxyError> {
    let (mut tls_stream, peer) = within(async {
        let (tcp, peer) = listener.accept().await.map_err(ProxyError::Accept)?;
        tcp.set_nodelay(true).ok();
        let stream = TlsAcceptor::from(tls.server.clone())
            .accept(tcp)
            .await
            .map_err(ProxyError::Tls)?;
        Ok((stream, peer))
    })
    .await?;
    log::info!("migration stream from {peer}");
    let mut launcher = UnixStream::connect(&launcher_socket)
        .await
        .map_err(|e| ProxyError::Connect(launcher_socket.display().to_string(), e))?;
    let (back, forth) = tokio::io::copy_bidirectional(&mut launcher, &mut tls_stream)
        .await
        .map_err(ProxyError::Copy)?;
    Ok((forth, back))
}

/// Source side: relays the launcher's connection on `listener` to the target at `target`.
pub async fn relay_source(
    listener: UnixListener,
    tls: Arc<MigrationTls>,
    target: SocketAddr,
) -> Result<Copied, ProxyError> {
    let (mut launcher, mut remote) = within(async {
        let (launcher, _) = listener.accept().await.map_err(ProxyError::Accept)?;
        let tcp = TcpStream::connect(target)
            .await
            .map_err(|e| ProxyError::Connect(target.to_string(), e))?;
        tcp.set_nodelay(true).ok();
        let remote = TlsConnector::from(tls.client.clone())
            .connect(MigrationTls::server_name(), tcp)
            .await
            .map_err(ProxyError::Tls)?;
        Ok((launcher, remote))
    })
    .await?;
    tokio::io::copy_bidirectional(&mut launcher, &mut remote)
        .await
        .map_err(ProxyError::Copy)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn openssl(dir: &Path, args: &[&str]) {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command is needed to make test certificates");
        assert!(status.status.success(), "openssl {args:?}: {:?}", status);
    }

    /// A CA and a handler certificate (SAN virt-handler.kubevirt.svc, EKU server+client) in
    /// `dir`, as the certificate contract describes them.
    fn certificates(dir: &Path, ca_name: &str) {
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let mut ca = vec!["req", "-x509", "-new", "-nodes"];
        ca.extend(ec);
        ca.extend(["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj"]);
        let subject = format!("/CN={ca_name}");
        ca.push(&subject);
        openssl(dir, &ca);
        let mut csr = vec!["req", "-new", "-nodes"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            "/CN=virt-handler",
        ]);
        openssl(dir, &csr);
        std::fs::write(
            dir.join("ext"),
            "subjectAltName=DNS:virt-handler.kubevirt.svc\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "tls.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "tls.crt",
                "-days",
                "2",
                "-extfile",
                "ext",
            ],
        );
    }

    #[tokio::test]
    async fn stream_goes_through_mutual_tls_and_strangers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (good, other) = (dir.path().join("good"), dir.path().join("other"));
        std::fs::create_dir_all(&good).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        certificates(&good, "handlers-ca");
        certificates(&other, "someone-else-ca");
        let tls = Arc::new(MigrationTls::load(&good).unwrap());

        // The target launcher: echoes what it receives, uppercased.
        let target_socket = dir.path().join("target.sock");
        let launcher = tokio::net::UnixListener::bind(&target_socket).unwrap();
        let echo = tokio::spawn(async move {
            let (mut stream, _) = launcher.accept().await.unwrap();
            let mut buf = vec![0u8; 5];
            stream.read_exact(&mut buf).await.unwrap();
            stream.write_all(&buf.to_ascii_uppercase()).await.unwrap();
        });
        let tcp = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let address = tcp.local_addr().unwrap();
        let target = tokio::spawn(listen_target(tcp, tls.clone(), target_socket));
        let source_socket = dir.path().join("source.sock");
        let source_listener = UnixListener::bind(&source_socket).unwrap();
        let source = tokio::spawn(relay_source(source_listener, tls.clone(), address));
        // The source launcher.
        let mut qemu = UnixStream::connect(&source_socket).await.unwrap();
        qemu.write_all(b"hello").await.unwrap();
        let mut answer = vec![0u8; 5];
        qemu.read_exact(&mut answer).await.unwrap();
        assert_eq!(answer, b"HELLO");
        drop(qemu);
        echo.await.unwrap();
        let (sent, back) = source.await.unwrap().unwrap();
        assert_eq!((sent, back), (5, 5));
        target.await.unwrap().unwrap();

        // A client whose certificate another CA signed gets no stream.
        let stranger = Arc::new(MigrationTls::load(&other).unwrap());
        let tcp = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let address = tcp.local_addr().unwrap();
        let target = tokio::spawn(listen_target(tcp, tls, dir.path().join("nobody.sock")));
        let source_socket = dir.path().join("source2.sock");
        let source = tokio::spawn(relay_source(
            UnixListener::bind(&source_socket).unwrap(),
            stranger,
            address,
        ));
        let _qemu = UnixStream::connect(&source_socket).await.unwrap();
        let refused = target.await.unwrap();
        assert!(matches!(refused, Err(ProxyError::Tls(_))), "{refused:?}");
        assert!(source.await.unwrap().is_err());
    }
}
