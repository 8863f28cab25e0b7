//! TLS for virt-api's HTTPS server: the serving certificate and key come from files (mounted
//! from a Secret); client certificates are optional and, when presented, must chain to the
//! requestheader CA (kube-apiserver's front-proxy CA). Whether a connection presented a
//! verified certificate decides whether its `X-Remote-*` headers are believed.
//!
//! And TLS for virt-api as virt-handler's client ([`handler_client_config`]): it presents the
//! client certificate of the `kubevirt-virt-handler-certs` Secret and accepts only a handler
//! whose certificate chains to that Secret's `ca.crt` and names [`HANDLER_SERVER_NAME`].

use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why the TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("reading certificate {path}")]
    Certificate {
        path: String,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("reading private key {path}")]
    Key {
        path: String,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("the client CA has no usable certificate")]
    ClientCa(#[source] rustls::Error),
    #[error("building the client certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    #[error("the serving certificate and key do not fit")]
    ServerCert(#[source] rustls::Error),
    #[error("the CA {path} has no usable certificate")]
    HandlerCa {
        path: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the client certificate and key for virt-handler do not fit")]
    ClientCert(#[source] rustls::Error),
}

/// The name every virt-handler's serving certificate carries; virt-api dials handlers by Pod
/// IP and checks this name instead.
pub const HANDLER_SERVER_NAME: &str = "virt-handler.kubevirt.svc";
/// Where the `kubevirt-virt-handler-certs` Secret is mounted in virt-api's Pod.
pub const DEFAULT_HANDLER_CERT_DIR: &str = "/etc/virt-api/handler-certs";

/// Reads every certificate of a PEM file.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsConfigError::Certificate {
            path: path.display().to_string(),
            source,
        })
}

/// Builds the server configuration. `client_ca_pem`: the requestheader CA bundle, `None` to
/// ask for no client certificates (e.g. a server that only answers webhooks).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca_pem: Option<&str>,
) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let chain = read_certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsConfigError::Key {
        path: key.display().to_string(),
        source,
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::ServerCert)?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()).flatten() {
                roots.add(cert).map_err(TlsConfigError::ClientCa)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(TlsConfigError::Verifier)?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(TlsConfigError::ServerCert)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// virt-api's TLS client configuration for virt-handler, from `dir` (`tls.crt`, `tls.key`:
/// the client certificate to present; `ca.crt`: the CA the handler's certificate must chain
/// to).
pub fn handler_client_config(dir: &Path) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let chain = read_certificates(&dir.join("tls.crt"))?;
    let key_path = dir.join("tls.key");
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|source| TlsConfigError::Key {
        path: key_path.display().to_string(),
        source,
    })?;
    let ca_path = dir.join("ca.crt");
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(&ca_path)? {
        roots
            .add(cert)
            .map_err(|source| TlsConfigError::HandlerCa {
                path: ca_path.display().to_string(),
                source,
            })?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::ClientCert)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(TlsConfigError::ClientCert)?;
    Ok(Arc::new(config))
}
