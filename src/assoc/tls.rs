//! TLS 1.3 for both transports: the server and client configurations (ALPN
//! `n-pamp/2` only), the certificate verifier, and the check that the
//! handshake really negotiated `n-pamp/2` (rustls lets a client that offers
//! no ALPN through, and a client accepts a server that selects none).

use std::sync::Arc;

use super::error::LinkError;

/// The ALPN identifier of N-PAMP wire version 2.
pub const ALPN: &[u8] = b"n-pamp/2";

/// An operator-provided certificate chain and private key, PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_chain: std::path::PathBuf,
    pub private_key: std::path::PathBuf,
}

/// A certificate chain and its private key, read from PEM files.
pub type CertAndKey = (
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
);

/// Reads a certificate chain and its private key from PEM files; the error
/// names the file.
pub fn read_cert_and_key(f: &TlsFiles) -> Result<CertAndKey, LinkError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let pem = |path: &std::path::Path, e: rustls::pki_types::pem::Error| {
        LinkError::certificate(path.display().to_string(), e)
    };
    let chain = CertificateDer::pem_file_iter(&f.cert_chain)
        .map_err(|e| pem(&f.cert_chain, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(&f.cert_chain, e))?;
    if chain.is_empty() {
        return Err(LinkError::certificate(
            f.cert_chain.display().to_string(),
            "no certificate in the file",
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&f.private_key).map_err(|e| pem(&f.private_key, e))?;
    Ok((chain, key))
}

/// TLS 1.3 server config with ALPN `n-pamp/2`: the operator's certificate
/// when given, else a self-signed one generated now.
pub fn tls_server_config(files: Option<&TlsFiles>) -> Result<rustls::ServerConfig, LinkError> {
    let (chain, key) = match files {
        Some(f) => read_cert_and_key(f)?,
        None => {
            let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
                .map_err(|e| LinkError::certificate("generating a self-signed certificate", e))?;
            let key = rustls::pki_types::PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der());
            (vec![cert.cert.der().clone()], key.into())
        }
    };
    let mut config =
        rustls::ServerConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// Accepts any server certificate: peers are authenticated by the N-PAMP
/// handshake's pinned Ed25519 keys, not by the transport's X.509 chain.
#[derive(Debug)]
struct NpampAuthenticates(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NpampAuthenticates {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// TLS 1.3 client config offering `alpn`, accepting the server's
/// self-signed certificate (the N-PAMP handshake authenticates the peer).
pub fn tls_client_config(alpn: &[u8]) -> Result<rustls::ClientConfig, LinkError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NpampAuthenticates(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// Refuses a connection whose TLS handshake did not negotiate `n-pamp/2`:
/// offering only `n-pamp/2` is not enough, as a peer may offer or select
/// none (spec `01_alpn.md`: any other negotiated protocol is rejected).
pub fn check_alpn(negotiated: Option<&[u8]>) -> Result<(), LinkError> {
    match negotiated {
        Some(ALPN) => Ok(()),
        other => Err(LinkError::Alpn(other.map(<[u8]>::to_vec))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_n_pamp_2_passes_the_alpn_check() {
        assert!(check_alpn(Some(b"n-pamp/2")).is_ok());
        for other in [None, Some(&b"h2"[..]), Some(b"n-pamp/1"), Some(b"")] {
            assert!(
                matches!(check_alpn(other), Err(LinkError::Alpn(got)) if got.as_deref() == other),
                "{other:?}"
            );
        }
    }
}
