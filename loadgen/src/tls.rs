//! The byte streams the load generator's clients run on: TCP, or TLS over
//! TCP (`https://`, `wss://`, `mcp+https://`) with the system's roots, an
//! operator's CA file, or (`--insecure`) no check of the server at all.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How a TLS target's server is checked.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// Trust the certificates of this PEM file as well as the system's.
    pub ca: Option<PathBuf>,
    /// Check nothing: any certificate, any name (handshake signatures are
    /// still verified).
    pub insecure: bool,
}

/// A TLS client for one target: its config (roots, ALPN) and the name it
/// asks for and checks.
#[derive(Clone)]
pub struct Tls {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("name", &self.name)
            .field("alpn", &self.config.alpn_protocols)
            .finish()
    }
}

impl Tls {
    /// A client for `host` offering `alpn` (e.g. `h2`), checked as
    /// `options` says.
    pub fn new(options: &TlsOptions, host: &str, alpn: &[&[u8]]) -> Result<Self, String> {
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
            .map_err(|e| format!("{host:?} is not a name TLS can check: {e}"))?
            .to_owned();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let mut config = if options.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(roots(options.ca.as_deref())?)
                .with_no_client_auth()
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Self {
            config: Arc::new(config),
            name,
        })
    }

    /// The protocol the server must have agreed to, if any.
    fn required_alpn(&self) -> Option<&[u8]> {
        match self.config.alpn_protocols.as_slice() {
            [only] if only.as_slice() == b"h2" => Some(b"h2"),
            _ => None,
        }
    }
}

/// The system's trusted roots, or Mozilla's where the system has none (a
/// minimal container), and the certificates of `ca`.
fn roots(ca: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(system.certs);
    if added == 0 {
        tracing::info!(
            "no trusted roots found on this system ({} errors): using Mozilla's",
            system.errors.len()
        );
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = ca {
        use rustls::pki_types::pem::PemObject;
        let bad = |e: String| format!("--ca {}: {e}", path.display());
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no PEM certificate in the file".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
    }
    Ok(roots)
}

/// `--insecure`: any certificate for any name is taken; what the server
/// signs in the handshake is still checked against the certificate it
/// sent (so the session's keys are its own), with the provider's code.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
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
        cert: &CertificateDer<'_>,
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

/// A connection to a target: TCP, or TLS over it.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Connects to `authority` (`host:port`), with TLS when `tls` is given;
/// the reason it failed, said as a transport error is.
pub async fn connect(authority: &str, tls: Option<&Tls>) -> Result<Stream, String> {
    let tcp = TcpStream::connect(authority)
        .await
        .map_err(|e| format!("connect: {}", e.kind()))?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Stream::Plain(tcp));
    };
    let stream = tokio_rustls::TlsConnector::from(tls.config.clone())
        .connect(tls.name.clone(), tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    if let Some(wanted) = tls.required_alpn() {
        let agreed = stream.get_ref().1.alpn_protocol();
        if agreed != Some(wanted) {
            return Err(format!(
                "TLS: the server did not agree to {} by ALPN (it chose {})",
                String::from_utf8_lossy(wanted),
                agreed.map_or("nothing".into(), String::from_utf8_lossy)
            ));
        }
    }
    Ok(Stream::Tls(Box::new(stream)))
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}
