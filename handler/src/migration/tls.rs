//! Mutual TLS between the handlers for the migration stream.
//!
//! Both ends use the certificate of the `kubevirt-virt-handler-server-certs` Secret (EKU
//! serverAuth and clientAuth), mounted at [`DEFAULT_CERT_DIR`] (`tls.crt`, `tls.key`,
//! `ca.crt`). The target accepts only clients whose certificate chains to that CA; the source
//! dials the target by IP and checks the fixed name [`SERVER_NAME`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Where the Secret is mounted (KubeVirt's path), unless `VIRT_HANDLER_SERVER_CERT_DIR` says.
pub const DEFAULT_CERT_DIR: &str = "/etc/virt-handler/servercertificates";
/// The name every handler's certificate carries.
pub const SERVER_NAME: &str = "virt-handler.kubevirt.svc";

/// Why the TLS configuration cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {0} (the kubevirt-virt-handler-server-certs Secret is not mounted?)")]
    Read(PathBuf, #[source] rustls_pki_types::pem::Error),
    #[error("the CA in {0} is not usable")]
    Ca(PathBuf, #[source] rustls::Error),
    #[error("building the client certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    #[error("the certificate and key do not fit")]
    Config(#[source] rustls::Error),
}

/// Client and server configurations for the migration stream.
#[derive(Clone)]
pub struct MigrationTls {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

/// The certificate directory from the environment or the default.
pub fn cert_dir() -> PathBuf {
    std::env::var_os("VIRT_HANDLER_SERVER_CERT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CERT_DIR))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Read(path.to_path_buf(), e))
}

impl MigrationTls {
    /// Reads `tls.crt`, `tls.key` and `ca.crt` from `dir`.
    pub fn load(dir: &Path) -> Result<MigrationTls, TlsError> {
        let chain = certificates(&dir.join("tls.crt"))?;
        let key_path = dir.join("tls.key");
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|e| TlsError::Read(key_path.clone(), e))?;
        let ca_path = dir.join("ca.crt");
        let mut roots = RootCertStore::empty();
        for cert in certificates(&ca_path)? {
            roots
                .add(cert)
                .map_err(|e| TlsError::Ca(ca_path.clone(), e))?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(TlsError::Verifier)?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(TlsError::Config)?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(TlsError::Config)?;
        Ok(MigrationTls {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    pub fn server_name() -> ServerName<'static> {
        ServerName::try_from(SERVER_NAME).expect("SERVER_NAME is a valid DNS name")
    }
}
