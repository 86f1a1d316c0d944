//! TLS at the ingress (`https://`, `wss://`, `tls+tcp://`): the operator's
//! certificate (`--ingress-cert`, `--ingress-key`), TLS 1.2 and 1.3, ALPN
//! by kind (`h2` and `http/1.1` for HTTP), and client certificates
//! (`--ingress-client-ca`) as a way to authenticate a client.

use std::path::PathBuf;
use std::sync::Arc;

use crate::assoc::TlsFiles;
use crate::gateway::settings::GatewayError;

/// The TLS settings of an edge's ingresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressTls {
    /// The server's certificate chain and key (PEM).
    pub files: TlsFiles,
    /// Clients presenting a certificate that chains to these CAs (PEM) are
    /// authenticated.
    pub client_ca: Option<PathBuf>,
    /// Whether a client may come without a certificate (and present a
    /// bearer token instead, or none when tokens are not asked for).
    /// `false` makes the handshake refuse a client without one.
    pub certless: bool,
}

impl IngressTls {
    /// The server config every TLS ingress starts from (its ALPN is set
    /// per kind); errors name the file.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, GatewayError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;

        let tls = |e: String| GatewayError::Tls(format!("ingress: {e}"));
        let (chain, key) =
            crate::assoc::tls::read_cert_and_key(&self.files).map_err(|e| tls(e.to_string()))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls(e.to_string()))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let bad = |e: String| tls(format!("--ingress-client-ca {}: {e}", path.display()));
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
                    roots
                        .add(cert.map_err(|e| bad(e.to_string()))?)
                        .map_err(|e| bad(e.to_string()))?;
                }
                if roots.is_empty() {
                    return Err(bad("no certificate in the file".into()));
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                );
                let verifier = if self.certless {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| bad(e.to_string()))?)
            }
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| tls(format!("{}: {e}", self.files.private_key.display())))?;
        Ok(Arc::new(config))
    }
}

impl IngressTls {
    /// A digest of the files' contents (and names), to tell whether a
    /// reload brings a new certificate; a file that cannot be read counts
    /// as changed (reading it for the server config then says why).
    pub fn digest(&self) -> [u8; 32] {
        let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        let files = [
            Some(&self.files.cert_chain),
            Some(&self.files.private_key),
            self.client_ca.as_ref(),
        ];
        for path in files.into_iter().flatten() {
            ctx.update(path.as_os_str().as_encoded_bytes());
            match std::fs::read(path) {
                Ok(bytes) => ctx
                    .update(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &bytes).as_ref()),
                Err(_) => ctx.update(b"unreadable"),
            }
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        out
    }
}

/// `base` with the ALPN protocols of one kind of ingress.
pub fn acceptor(base: &rustls::ServerConfig, alpn: &[&[u8]]) -> tokio_rustls::TlsAcceptor {
    let mut config = base.clone();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}
