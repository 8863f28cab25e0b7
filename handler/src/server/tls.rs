//! The subresource server's TLS, as KubeVirt's virt-handler sets it up: the serving
//! certificate of `kubevirt-virt-handler-server-certs`; a client certificate is required, must
//! chain to that Secret's `ca.crt` with EKU clientAuth, and must carry the common name
//! [`CLIENT_COMMON_NAME`] (virt-api's `kubevirt-virt-handler-certs`). The handlers' own
//! certificate, which the CA also signed for clientAuth (migration), is not enough here.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use crate::migration::tls::TlsError;

/// The common name of the client certificate virt-api presents.
pub const CLIENT_COMMON_NAME: &str = "kubevirt.io:system:client:virt-handler";

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Read(path.to_path_buf(), e))
}

/// The server configuration from `dir` (`tls.crt`, `tls.key`, `ca.crt`).
pub fn server_config(dir: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates(&dir.join("tls.crt"))?;
    let key_path = dir.join("tls.key");
    let key =
        PrivateKeyDer::from_pem_file(&key_path).map_err(|e| TlsError::Read(key_path.clone(), e))?;
    let ca_path = dir.join("ca.crt");
    let mut roots = RootCertStore::empty();
    for cert in certificates(&ca_path)? {
        roots
            .add(cert)
            .map_err(|e| TlsError::Ca(ca_path.clone(), e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain_verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(TlsError::Verifier)?;
    let verifier = Arc::new(CommonNameVerifier {
        chain: chain_verifier,
        common_name: CLIENT_COMMON_NAME,
    });
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(TlsError::Config)?;
    Ok(Arc::new(config))
}

/// The CA's verification, then the client certificate's subject common name.
#[derive(Debug)]
struct CommonNameVerifier {
    chain: Arc<dyn ClientCertVerifier>,
    common_name: &'static str,
}

impl ClientCertVerifier for CommonNameVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .chain
            .verify_client_cert(end_entity, intermediates, now)?;
        let common_name = subject_common_name(end_entity);
        if common_name.as_deref() == Some(self.common_name) {
            return Ok(verified);
        }
        log::warn!(
            "subresource server: common name is invalid, expected {}, but got {}",
            self.common_name,
            common_name.as_deref().unwrap_or("none")
        );
        Err(rustls::Error::InvalidCertificate(
            CertificateError::ApplicationVerificationFailure,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// One DER element at the start of `input`: (tag, contents, what follows).
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (len, rest) = rest.split_at(octets);
        (
            len.iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)),
            rest,
        )
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// `[0] EXPLICIT Version`.
const VERSION: u8 = 0xa0;
/// id-at-commonName, 2.5.4.3.
const COMMON_NAME_OID: [u8; 3] = [0x55, 0x04, 0x03];

/// The subject's common name of a DER certificate (RFC 5280: Certificate -> tbsCertificate
/// -> [version] serialNumber signature issuer validity subject).
pub fn subject_common_name(cert: &[u8]) -> Option<String> {
    let (SEQUENCE, certificate, _) = element(cert)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(certificate)? else {
        return None;
    };
    let mut fields = tbs;
    if element(fields)?.0 == VERSION {
        fields = element(fields)?.2;
    }
    for _ in ["serialNumber", "signature", "issuer", "validity"] {
        fields = element(fields)?.2;
    }
    let (SEQUENCE, mut names, _) = element(fields)? else {
        return None;
    };
    while !names.is_empty() {
        let (SET, mut attributes, rest) = element(names)? else {
            return None;
        };
        names = rest;
        while !attributes.is_empty() {
            let (SEQUENCE, attribute, rest) = element(attributes)? else {
                return None;
            };
            attributes = rest;
            let (OID, oid, value) = element(attribute)? else {
                return None;
            };
            if oid == COMMON_NAME_OID {
                let (_, text, _) = element(value)?;
                return std::str::from_utf8(text).ok().map(str::to_string);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_or_wrong_der_has_no_common_name() {
        assert_eq!(subject_common_name(&[]), None);
        assert_eq!(subject_common_name(&[0x30, 0x05, 0x30]), None);
        assert_eq!(subject_common_name(&[0x02, 0x01, 0x00]), None);
        // A long-form length that claims more than there is.
        assert_eq!(
            subject_common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            None
        );
    }
}
