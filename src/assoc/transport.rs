//! The async shell: N-PAMP associations over QUIC (quinn) and over TCP +
//! TLS 1.3 (tokio-rustls), both with ALPN `n-pamp/2` (see `docs/quic-binding.md`).
//!
//! - QUIC: the client opens one bidirectional stream for the Control channel
//!   and runs the handshake on it; the Bridge channel gets a bidirectional
//!   stream of its own.
//! - TLS: every channel on the one TLS stream, as the spec's fallback binding.
//! - `npamp://HOST:PORT` (the protocol's URI scheme, draft §9.2): the
//!   transport is negotiated. A listener accepts both, QUIC on the UDP port
//!   and TLS on the TCP port of the same number; a client tries QUIC first
//!   and TCP + TLS as well once QUIC has failed or has not connected within
//!   [`FALLBACK_DELAY`] (as Happy Eyeballs, RFC 8305, does for address
//!   families); the first transport up carries the association.
//!
//! Frames are self-delimiting on a stream (header + Payload Length). TLS
//! certificates are self-signed on the fly: TLS gives the transport its
//! encryption, the N-PAMP handshake authenticates the peers (pinned Ed25519
//! keys). This module only moves octets; the protocol is in `handshake` and
//! `assoc`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use super::driver::{self, AssocHandle, BridgeSink, End, Streams};
use super::stats::AssocStats;
use super::{AssocConfig, AssocError, Association, Event, Role};
use crate::handshake::{
    Client, ClientRandom, Config as HandshakeConfig, Established, HandshakeError, Identity, Server,
    ServerKem, Trust,
};
use crate::wire::{ChannelId, Deframer, FrameSpan, Header, WireError};

/// The ALPN identifier of N-PAMP wire version 2.
pub const ALPN: &[u8] = b"n-pamp/2";
/// Default limit on a handshake, so a stalled peer cannot pin resources.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// QUIC keep-alive of client connections, well inside the idle timeout.
pub const QUIC_KEEP_ALIVE: Duration = Duration::from_secs(2);
/// A QUIC connection silent this long (no keep-alive answered) is lost: a
/// peer that died is noticed within this time.
pub const QUIC_IDLE_TIMEOUT: Duration = Duration::from_secs(8);
/// How long an `npamp://` client waits for QUIC before it also tries
/// TCP + TLS (RFC 8305's recommended connection attempt delay).
pub const FALLBACK_DELAY: Duration = Duration::from_millis(250);
/// How long a server waits to send TLS close_notify to a client it refuses.
const CLOSE_NOTIFY_WAIT: Duration = Duration::from_millis(200);
/// UDP socket buffers asked for on QUIC endpoints.
pub const UDP_BUFFER_BYTES: usize = 8 << 20;

/// Errors of the transport layer.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("handshake: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("association: {0}")]
    Assoc(#[from] AssocError),
    #[error("frame: {0}")]
    Wire(#[from] WireError),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("QUIC connect: {0}")]
    QuicConnect(#[from] quinn::ConnectError),
    #[error("QUIC connection: {0}")]
    QuicConnection(#[from] quinn::ConnectionError),
    #[error("handshake did not finish within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("the peer closed the stream inside a frame")]
    TruncatedFrame,
    #[error("the peer closed the stream before the handshake finished")]
    EarlyEof,
    #[error(
        "the peer closed the connection right after the handshake, without an N-PAMP CLOSE: \
         a peer that does not trust this identity does that (check the peer's pinned keys)"
    )]
    ClosedAfterHandshake,
    #[error("the peer closed the connection without an N-PAMP CLOSE")]
    ClosedWithoutClose,
    #[error(
        "bad address {url:?}: {why} (expected quic://HOST:PORT, tls://HOST:PORT or npamp://HOST:PORT)"
    )]
    BadUrl { url: String, why: &'static str },
    #[error("neither transport reached {addr}: QUIC: {quic}; TCP + TLS: {tls}")]
    NoTransport {
        addr: SocketAddr,
        quic: Box<TransportError>,
        tls: Box<TransportError>,
    },
    #[error("certificate generation: {0}")]
    Certificate(String),
    #[error("OS random number generator failed")]
    Random,
    #[error("association ended: {0}")]
    Ended(String),
}

/// Which transport an address is reached over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// QUIC (the primary transport), `quic://`.
    Quic,
    /// TCP + TLS 1.3 (the fallback transport), `tls://`.
    Tls,
    /// Negotiated, `npamp://`: a listener accepts both on one port number, a
    /// client prefers QUIC and falls back to TCP + TLS.
    Npamp,
}

impl Scheme {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Quic => "quic",
            Self::Tls => "tls",
            Self::Npamp => "npamp",
        }
    }
}

/// A parsed `quic://HOST:PORT`, `tls://HOST:PORT` or `npamp://HOST:PORT`
/// (a host name is resolved here, once; the first address is used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    pub scheme: Scheme,
    pub addr: SocketAddr,
}

impl std::str::FromStr for PeerAddr {
    type Err = TransportError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| TransportError::BadUrl {
            url: s.to_owned(),
            why,
        };
        let (scheme, rest) = s.split_once("://").ok_or(bad("no scheme"))?;
        // Schemes are case-insensitive (RFC 3986 §3.1).
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "quic" => Scheme::Quic,
            "tls" => Scheme::Tls,
            "npamp" => Scheme::Npamp,
            _ => return Err(bad("unknown scheme")),
        };
        // An `npamp` URI may name a resource path within the endpoint
        // (draft §9.2); an association has no use for one, so only an empty
        // path is accepted rather than one silently ignored.
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(bad("the gateway uses no resource path, query or fragment"));
        }
        if authority.contains('@') {
            return Err(bad("user information is not allowed"));
        }
        if !authority.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !port.is_empty() && !host.ends_with(':')
        }) {
            // N-PAMP reserves no default port (draft §9.2).
            return Err(bad("HOST:PORT needed (N-PAMP has no default port)"));
        }
        let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
            .map_err(|_| bad("not an address or a host name that resolves"))?
            .next()
            .ok_or(bad("the host name resolves to no address"))?;
        Ok(Self { scheme, addr })
    }
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme.name(), self.addr)
    }
}

/// Who we are and whom we accept.
#[derive(Clone)]
pub struct Endpoint {
    /// Ed25519 seed of this gateway's identity; zeroized when dropped.
    pub identity_seed: zeroize::Zeroizing<[u8; 32]>,
    pub trust: Trust,
    pub handshake: HandshakeConfig,
    pub assoc: AssocConfig,
    pub handshake_timeout: Duration,
    /// A server's TLS certificate; `None`: self-signed, generated at bind.
    pub tls_files: Option<TlsFiles>,
    /// A listener runs at most this many handshakes at once; a connection
    /// beyond that is refused at once (a handshake flood cannot exhaust
    /// CPU or memory, and established associations keep being served).
    pub max_handshakes: usize,
    /// What peers did wrong, for all associations of this endpoint.
    pub stats: Arc<AssocStats>,
    /// QUIC congestion control of this endpoint's connections.
    pub congestion: Congestion,
}

/// QUIC congestion control.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Congestion {
    /// quinn's default, loss-based: it reads every loss as congestion.
    #[default]
    Cubic,
    /// Model-based (quinn marks it experimental): random loss does not
    /// shrink its window. On a path with 5 % random loss and 20 ± 10 ms
    /// each way it kept p99 at 153–156 ms where Cubic reached 2.4–2.7 s
    /// (`results/faults/2026-11-30-congestion/`).
    Bbr,
}

impl Congestion {
    fn apply(self, transport: &mut quinn::TransportConfig) {
        if self == Congestion::Bbr {
            transport
                .congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
        }
    }
}

impl std::str::FromStr for Congestion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cubic" => Ok(Self::Cubic),
            "bbr" => Ok(Self::Bbr),
            other => Err(format!(
                "unknown congestion control {other:?}: expected cubic or bbr"
            )),
        }
    }
}

/// Default of [`Endpoint::max_handshakes`].
pub const DEFAULT_MAX_HANDSHAKES: usize = 256;

impl Endpoint {
    pub fn new(identity_seed: [u8; 32], trust: Trust) -> Self {
        Self {
            identity_seed: zeroize::Zeroizing::new(identity_seed),
            trust,
            handshake: HandshakeConfig::default(),
            assoc: AssocConfig::default(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            tls_files: None,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            stats: Arc::new(AssocStats::default()),
            congestion: Congestion::default(),
        }
    }

    fn identity(&self) -> Result<Identity, TransportError> {
        Ok(Identity::from_seed(&self.identity_seed)?)
    }
}

fn random<const N: usize>() -> Result<[u8; N], TransportError> {
    let mut out = [0u8; N];
    SystemRandom::new()
        .fill(&mut out)
        .map_err(|_| TransportError::Random)?;
    Ok(out)
}

/// A boxed read half of a stream (QUIC receive stream or TLS read half).
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// A boxed write half of a stream.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// The read buffer a stream starts with: enough for the handshake and for a
/// quiet association (a gateway may hold one per client session).
const READ_BUFFER_START: usize = 4 << 10;
/// What a busy stream's buffer grows to (doubling each time a read fills
/// it), so that one read takes many frames.
const READ_BUFFER_BUSY: usize = 64 << 10;

/// Largest frame payload a peer may send before it is authenticated: the
/// handshake's frames are a few KiB (an ML-KEM-768 encapsulation key is
/// 1184 octets), so an unauthenticated peer cannot make a reader buffer a
/// megabyte.
pub const HANDSHAKE_MAX_PAYLOAD: u32 = 64 << 10;

/// Reads whole frames from a stream into one reused buffer.
///
/// Frames are handed out as ranges of that buffer ([`FrameReader::take`]),
/// opened in place there, and stay valid until the next read
/// ([`FrameReader::fill`] or [`FrameReader::next`]), which may move the
/// octets not yet taken to the front. The buffer starts small and grows
/// while reads keep filling it (up to 64 KiB) or when one
/// frame needs more (up to the frame limit); once such a large frame has
/// been taken, it shrinks back.
///
/// A new reader accepts frames up to [`HANDSHAKE_MAX_PAYLOAD`]; the
/// association raises that with [`FrameReader::set_max_payload`] once the
/// peer is authenticated.
pub struct FrameReader {
    inner: BoxRead,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    deframer: Deframer,
    /// When the last read returned: the arrival time of what it read (one
    /// clock read per read, not per frame).
    read_at: Instant,
}

impl FrameReader {
    pub fn new(inner: BoxRead) -> Self {
        Self {
            inner,
            buf: vec![0; READ_BUFFER_START],
            start: 0,
            end: 0,
            deframer: Deframer::new(HANDSHAKE_MAX_PAYLOAD),
            read_at: Instant::now(),
        }
    }

    /// A reader for a stream opened after the handshake: frames up to
    /// `max_payload_len`.
    pub fn authenticated(inner: BoxRead, max_payload_len: u32) -> Self {
        let mut reader = Self::new(inner);
        reader.set_max_payload(max_payload_len);
        reader
    }

    /// The largest frame payload accepted from now on.
    pub fn set_max_payload(&mut self, max_payload_len: u32) {
        self.deframer = Deframer::new(max_payload_len);
    }

    /// When the octets read last arrived.
    pub fn read_at(&self) -> Instant {
        self.read_at
    }

    /// The header of the next whole frame already buffered, without taking
    /// it (the header is checked: a bad one is an error).
    pub fn peek(&self) -> Result<Option<FrameSpan>, TransportError> {
        Ok(self.deframer.span(&self.buf[self.start..self.end])?)
    }

    /// Takes the frame `peek` returned; its octets are `frame_mut(range)`.
    pub fn take(&mut self, span: &FrameSpan) -> std::ops::Range<usize> {
        let range = self.start..self.start + span.len;
        self.start = range.end;
        range
    }

    /// The octets of a frame taken since the last read.
    pub fn frame_mut(&mut self, range: std::ops::Range<usize>) -> &mut [u8] {
        &mut self.buf[range]
    }

    /// The octets of a frame taken since the last read.
    pub fn octets(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    /// The next frame already in the buffer, without reading.
    pub fn buffered(&mut self) -> Result<Option<(Header, &mut [u8])>, TransportError> {
        match self.peek()? {
            Some(span) => {
                let range = self.take(&span);
                Ok(Some((span.header, &mut self.buf[range])))
            }
            None => Ok(None),
        }
    }

    /// Reads until a whole frame is buffered: `true`, or `false` at a clean
    /// end of stream between frames. Cancel-safe: a read that does not
    /// complete consumes nothing.
    pub async fn fill(&mut self) -> Result<bool, TransportError> {
        loop {
            if self.peek()?.is_some() {
                return Ok(true);
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() > READ_BUFFER_BUSY && self.end <= READ_BUFFER_BUSY / 2 {
                // The large frame that grew the buffer is gone: give the
                // memory back rather than keep it for the association's life.
                self.buf.truncate(READ_BUFFER_BUSY);
                self.buf.shrink_to_fit();
            }
            if self.end == self.buf.len() {
                // Room for the whole frame whose header is in view (at once,
                // not by doubling: a large frame is not copied over and over),
                // else twice the room. Never past the deframer's limit: it
                // refused larger headers.
                let frame = Header::decode_prefix(&self.buf[..self.end])
                    .ok()
                    .flatten()
                    .map_or(0, |h| crate::wire::HEADER_LEN + h.payload_len as usize);
                let double = (self.buf.len() * 2).min(self.deframer.max_frame_len());
                self.buf.resize(frame.max(double).max(self.end + 1), 0);
            }
            let n = self.inner.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                return if self.end == 0 {
                    Ok(false)
                } else {
                    Err(TransportError::TruncatedFrame)
                };
            }
            self.read_at = Instant::now();
            self.end += n;
            if self.end == self.buf.len() && self.buf.len() < READ_BUFFER_BUSY {
                // The stream had more than fitted: a busy one.
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
    }

    /// The next frame, opened in place by the caller; `None` at a clean end
    /// of stream between frames.
    pub async fn next(&mut self) -> Result<Option<(Header, &mut [u8])>, TransportError> {
        if !self.fill().await? {
            return Ok(None);
        }
        self.buffered()
    }

    async fn next_owned(&mut self) -> Result<Vec<u8>, TransportError> {
        match self.next().await? {
            Some((_, frame)) => Ok(frame.to_vec()),
            None => Err(TransportError::EarlyEof),
        }
    }
}

/// The client side of the handshake over a stream already connected:
/// what [`Link::connect`] does after TLS or QUIC is up. Public for tools
/// and tests that drive an association's frames themselves.
pub async fn client_handshake(
    ep: &Endpoint,
    reader: &mut FrameReader,
    writer: &mut BoxWrite,
) -> Result<Established, TransportError> {
    let random = ClientRandom {
        mlkem_seed: random()?,
        x25519: random()?,
    };
    let (mut client, hello) = Client::start(
        ep.handshake.clone(),
        ep.identity()?,
        ep.trust.clone(),
        &random,
    )?;
    writer.write_all(&hello).await?;
    writer.flush().await?;
    client.handle_server_hello(&reader.next_owned().await?)?;
    let (auth, established) = client.handle_server_auth(&reader.next_owned().await?)?;
    writer.write_all(&auth).await?;
    writer.flush().await?;
    Ok(established)
}

async fn server_handshake(
    ep: &Endpoint,
    reader: &mut FrameReader,
    writer: &mut BoxWrite,
) -> Result<Established, TransportError> {
    let mut server = Server::new(ep.handshake.clone(), ep.identity()?, ep.trust.clone());
    let share = server
        .handle_client_hello(&reader.next_owned().await?)?
        .to_vec();
    let kem = ServerKem::encapsulate(&share, &random()?, &random()?)?;
    writer.write_all(&server.respond(&kem)?).await?;
    writer.flush().await?;
    Ok(server.handle_client_auth(&reader.next_owned().await?)?)
}

async fn with_timeout<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| TransportError::HandshakeTimeout(limit))?
}

/// An operator-provided certificate chain and private key, PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_chain: std::path::PathBuf,
    pub private_key: std::path::PathBuf,
}

/// TLS 1.3 server config with ALPN `n-pamp/2`: the operator's certificate
/// when given, else a self-signed one generated now.
pub fn tls_server_config(files: Option<&TlsFiles>) -> Result<rustls::ServerConfig, TransportError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let (chain, key) = match files {
        Some(f) => {
            let pem = |path: &std::path::Path, e: rustls::pki_types::pem::Error| {
                TransportError::Certificate(format!("{}: {e}", path.display()))
            };
            let chain = CertificateDer::pem_file_iter(&f.cert_chain)
                .map_err(|e| pem(&f.cert_chain, e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| pem(&f.cert_chain, e))?;
            if chain.is_empty() {
                return Err(TransportError::Certificate(format!(
                    "{}: no certificate in the file",
                    f.cert_chain.display()
                )));
            }
            let key =
                PrivateKeyDer::from_pem_file(&f.private_key).map_err(|e| pem(&f.private_key, e))?;
            (chain, key)
        }
        None => {
            let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
                .map_err(|e| TransportError::Certificate(e.to_string()))?;
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
pub fn tls_client_config(alpn: &[u8]) -> Result<rustls::ClientConfig, TransportError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NpampAuthenticates(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// A client's streams before the handshake: the Control channel's reader and
/// writer, and for QUIC the endpoint and connection that carry them.
type Opened = (
    FrameReader,
    BoxWrite,
    Option<(quinn::Endpoint, quinn::Connection)>,
);

/// TCP + TLS 1.3 to `addr`, offering `alpn`.
async fn open_tls(addr: SocketAddr, alpn: &[u8]) -> Result<Opened, TransportError> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_client_config(alpn)?));
    let name = rustls::pki_types::ServerName::try_from("localhost")
        .map_err(|e| TransportError::Certificate(e.to_string()))?;
    let stream = connector.connect(name, tcp).await?;
    let (r, w) = tokio::io::split(stream);
    Ok((FrameReader::new(Box::new(r)), Box::new(w), None))
}

/// Client QUIC endpoints (UDP sockets), one per address family, created on
/// first use and shared by every association connected through them.
///
/// An endpoint of its own per association gives each one its own socket and
/// receive path, which is what a few pooled associations that should spread
/// over cores want. A gateway with an association per client session wants
/// the opposite: quinn gives every endpoint a receive buffer of about 3 MB
/// on Linux with GRO (1472 B × 64 segments × 32 datagrams), so a thousand
/// WebSocket clients would cost 3 GB in buffers alone.
#[derive(Clone, Default)]
pub struct SharedClientEndpoint(Arc<std::sync::Mutex<[Option<quinn::Endpoint>; 2]>>);

impl SharedClientEndpoint {
    fn get(&self, ipv6: bool) -> Result<quinn::Endpoint, TransportError> {
        let mut endpoints = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = &mut endpoints[usize::from(ipv6)];
        if let Some(endpoint) = slot {
            return Ok(endpoint.clone());
        }
        let endpoint = client_endpoint(ipv6)?;
        *slot = Some(endpoint.clone());
        Ok(endpoint)
    }
}

/// A client QUIC endpoint on an ephemeral port of the address family.
fn client_endpoint(ipv6: bool) -> Result<quinn::Endpoint, TransportError> {
    let bind = if ipv6 {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0))
    };
    quic_endpoint(bind, None, quinn::EndpointConfig::default())
}

/// A QUIC connection to `addr`, offering `alpn`, and the Control channel's
/// stream on it; on `shared`'s endpoint, or on an endpoint of its own.
async fn open_quic(
    addr: SocketAddr,
    alpn: &[u8],
    ep: &Endpoint,
    shared: Option<&SharedClientEndpoint>,
) -> Result<Opened, TransportError> {
    let endpoint = match shared {
        Some(shared) => shared.get(addr.is_ipv6())?,
        None => client_endpoint(addr.is_ipv6())?,
    };
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls_client_config(alpn)?)
        .map_err(|e| TransportError::Certificate(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    // An idle association stays up (the default idle timeout is 30 s).
    transport.keep_alive_interval(Some(QUIC_KEEP_ALIVE));
    transport.max_idle_timeout(QUIC_IDLE_TIMEOUT.try_into().ok());
    ep.congestion.apply(&mut transport);
    config.transport_config(Arc::new(transport));
    let conn = endpoint.connect_with(config, addr, "localhost")?.await?;
    let (w, r) = conn.open_bi().await?;
    Ok((
        FrameReader::new(Box::new(r)),
        Box::new(w),
        Some((endpoint, conn)),
    ))
}

/// The negotiated transport of an `npamp://` peer (see [`first_up`]).
async fn open_negotiated(
    addr: SocketAddr,
    alpn: &[u8],
    ep: &Endpoint,
    shared: Option<&SharedClientEndpoint>,
) -> Result<(Scheme, Opened), TransportError> {
    first_up(
        addr,
        open_quic(addr, alpn, ep, shared),
        open_tls(addr, alpn),
        FALLBACK_DELAY,
    )
    .await
}

/// QUIC first; TCP + TLS as well once QUIC has failed or is not up after
/// `delay`; the first one up wins and the other attempt is dropped (`tls` is
/// not polled, so not started, before then). Only transports race: the
/// N-PAMP handshake runs once, on the winner. Fails only when both fail,
/// naming both errors.
async fn first_up<T>(
    addr: SocketAddr,
    quic: impl std::future::Future<Output = Result<T, TransportError>>,
    tls: impl std::future::Future<Output = Result<T, TransportError>>,
    delay: Duration,
) -> Result<(Scheme, T), TransportError> {
    let both = |quic, tls| TransportError::NoTransport {
        addr,
        quic: Box::new(quic),
        tls: Box::new(tls),
    };
    tokio::pin!(quic);
    let quic_failed = tokio::select! {
        r = &mut quic => match r {
            Ok(opened) => return Ok((Scheme::Quic, opened)),
            Err(e) => Some(e),
        },
        () = tokio::time::sleep(delay) => None,
    };
    if let Some(quic_error) = quic_failed {
        debug!(%addr, error = %quic_error, "QUIC failed; trying TCP + TLS");
        return match tls.await {
            Ok(opened) => Ok((Scheme::Tls, opened)),
            Err(tls_error) => Err(both(quic_error, tls_error)),
        };
    }
    debug!(%addr, "QUIC not up yet; trying TCP + TLS as well");
    tokio::pin!(tls);
    tokio::select! {
        r = &mut quic => match r {
            Ok(opened) => Ok((Scheme::Quic, opened)),
            Err(quic_error) => match tls.await {
                Ok(opened) => Ok((Scheme::Tls, opened)),
                Err(tls_error) => Err(both(quic_error, tls_error)),
            },
        },
        r = &mut tls => match r {
            Ok(opened) => Ok((Scheme::Tls, opened)),
            Err(tls_error) => match quic.await {
                Ok(opened) => Ok((Scheme::Quic, opened)),
                Err(quic_error) => Err(both(quic_error, tls_error)),
            },
        },
    }
}

/// A client's established association and the streams it runs on.
pub struct Link {
    assoc: Association,
    control: (FrameReader, BoxWrite),
    /// QUIC: the Bridge channel's own stream. TLS: `None` (shares `control`).
    bridge: Option<(FrameReader, BoxWrite)>,
    /// Keeps the QUIC endpoint and connection alive.
    _quic: Option<(quinn::Endpoint, quinn::Connection)>,
    transport: Scheme,
    pub handshake_time: Duration,
    stats: Arc<AssocStats>,
}

impl Link {
    /// Connects, runs the handshake, and opens the Bridge stream (QUIC).
    pub async fn connect(peer: PeerAddr, ep: &Endpoint) -> Result<Self, TransportError> {
        Self::connect_with_alpn(peer, ep, ALPN).await
    }

    /// [`Link::connect`] over QUIC on `shared`'s client endpoint rather than
    /// one of the association's own (see [`SharedClientEndpoint`]).
    pub async fn connect_sharing(
        peer: PeerAddr,
        ep: &Endpoint,
        shared: &SharedClientEndpoint,
    ) -> Result<Self, TransportError> {
        Self::connect_via(peer, ep, ALPN, Some(shared)).await
    }

    /// [`Link::connect`] offering another ALPN (to test refusal).
    pub async fn connect_with_alpn(
        peer: PeerAddr,
        ep: &Endpoint,
        alpn: &[u8],
    ) -> Result<Self, TransportError> {
        Self::connect_via(peer, ep, alpn, None).await
    }

    async fn connect_via(
        peer: PeerAddr,
        ep: &Endpoint,
        alpn: &[u8],
        shared: Option<&SharedClientEndpoint>,
    ) -> Result<Self, TransportError> {
        let started = Instant::now();
        // One limit covers reaching the peer and the handshake: a peer that
        // never answers cannot hold the caller longer than that.
        let (transport, (reader, writer, quic), established) =
            with_timeout(ep.handshake_timeout, async {
                let (transport, mut opened) = match peer.scheme {
                    Scheme::Tls => (Scheme::Tls, open_tls(peer.addr, alpn).await?),
                    Scheme::Quic => (Scheme::Quic, open_quic(peer.addr, alpn, ep, shared).await?),
                    Scheme::Npamp => open_negotiated(peer.addr, alpn, ep, shared).await?,
                };
                let established = client_handshake(ep, &mut opened.0, &mut opened.1).await?;
                opened.0.set_max_payload(ep.assoc.max_payload_len);
                Ok((transport, opened, established))
            })
            .await?;
        let handshake_time = started.elapsed();
        let bridge = match &quic {
            Some((_, conn)) => {
                let (w, r) = conn.open_bi().await?;
                let reader = FrameReader::authenticated(Box::new(r), ep.assoc.max_payload_len);
                Some((reader, Box::new(w) as BoxWrite))
            }
            None => None,
        };
        info!(peer = %peer, transport = transport.name(), identity = %hex::encode(established.peer_identity), ?handshake_time, "association established");
        Ok(Self {
            assoc: Association::new(Role::Client, established, ep.assoc, Instant::now())?,
            control: (reader, writer),
            bridge,
            _quic: quic,
            transport,
            handshake_time,
            stats: ep.stats.clone(),
        })
    }

    /// The local address of the QUIC endpoint the association runs on
    /// (`None` over TCP + TLS).
    pub fn quic_local_addr(&self) -> Option<SocketAddr> {
        self._quic.as_ref().and_then(|(e, _)| e.local_addr().ok())
    }

    /// The transport the association runs on: [`Scheme::Quic`] or
    /// [`Scheme::Tls`] (for an `npamp://` peer, the one that won).
    pub fn transport(&self) -> Scheme {
        self.transport
    }

    pub fn peer_identity(&self) -> [u8; 32] {
        *self.assoc.peer_identity()
    }

    pub fn association(&self) -> &Association {
        &self.assoc
    }

    /// One PING on the Control channel; waits for its PONG.
    pub async fn ping(&mut self) -> Result<Duration, TransportError> {
        let mut out = Vec::with_capacity(128);
        self.assoc.ping(&mut out, Instant::now())?;
        self.control.1.write_all(&out).await?;
        self.control.1.flush().await?;
        loop {
            // A peer that refuses this identity can only close a TLS stream
            // (QUIC carries its reason); say what that most likely means.
            let closed = if self.assoc.counters().frames_in == 0 {
                TransportError::ClosedAfterHandshake
            } else {
                TransportError::ClosedWithoutClose
            };
            let (header, frame) = match self.control.0.next().await {
                Ok(Some(frame)) => frame,
                Ok(None) => return Err(closed),
                Err(TransportError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(closed);
                }
                Err(e) => return Err(e),
            };
            out.clear();
            let event = self
                .assoc
                .handle(&header, frame, Instant::now(), &mut out)?;
            let done = match event {
                Event::Pong { rtt } => Some(rtt),
                Event::Closed { .. } => return Err(AssocError::Closed.into()),
                _ => None,
            };
            if !out.is_empty() {
                self.control.1.write_all(&out).await?;
            }
            if let Some(rtt) = done {
                return Ok(rtt);
            }
        }
    }

    /// Seals and writes a batch of Bridge frames in one write.
    pub async fn send_bridge_batch(
        &mut self,
        frames: impl IntoIterator<Item = (crate::wire::FrameType, &[u8])>,
        buf: &mut Vec<u8>,
    ) -> Result<usize, TransportError> {
        buf.clear();
        let mut n = 0;
        for (frame_type, payload) in frames {
            self.assoc.seal(buf, ChannelId::BRIDGE, frame_type, |o| {
                o.extend_from_slice(payload)
            })?;
            n += 1;
        }
        let writer = match &mut self.bridge {
            Some((_, w)) => w,
            None => &mut self.control.1,
        };
        writer.write_all(buf).await?;
        Ok(n)
    }

    /// Hands the association to a reader and a writer task: Bridge frames
    /// that arrive go to the sink `make_sink` builds; the returned handle
    /// sends. On QUIC a PING opens the Bridge stream at once, so the server
    /// can send on it before the client has a request to make.
    pub fn spawn<S, F>(self, make_sink: F) -> AssocHandle
    where
        S: BridgeSink,
        F: FnOnce(AssocHandle) -> S,
    {
        let (endpoint, conn) = match self._quic {
            Some((endpoint, conn)) => (Some(endpoint), Some(conn)),
            None => (None, None),
        };
        let open_bridge = conn.is_some();
        let handle = driver::spawn(
            self.assoc,
            Streams {
                control: self.control,
                bridge: self.bridge,
                quic: conn,
                accept_bridge: false,
            },
            open_bridge,
            self.stats,
            make_sink,
        );
        if let Some(endpoint) = endpoint {
            // The endpoint (its UDP socket) lives as long as the association.
            let h = handle.clone();
            tokio::spawn(async move {
                h.ended().await;
                tokio::time::sleep(driver::CLOSE_WAIT).await;
                drop(endpoint);
            });
        }
        handle
    }

    /// Authenticated CLOSE, then waits (briefly) for CLOSE_ACK.
    pub async fn close(mut self) -> Result<(), TransportError> {
        let mut out = Vec::new();
        self.assoc.close(&mut out, 0)?;
        self.control.1.write_all(&out).await?;
        self.control.1.flush().await?;
        let wait = async {
            while let Some((header, frame)) = self.control.0.next().await? {
                let mut ignore = Vec::new();
                if let Event::CloseAcked =
                    self.assoc
                        .handle(&header, frame, Instant::now(), &mut ignore)?
                {
                    break;
                }
            }
            Ok::<_, TransportError>(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), wait).await;
        let _ = self.control.1.shutdown().await;
        Ok(())
    }
}

/// A QUIC endpoint on a socket with enlarged buffers (logged when the OS
/// grants less than asked).
pub fn quic_endpoint(
    bind: SocketAddr,
    server: Option<quinn::ServerConfig>,
    config: quinn::EndpointConfig,
) -> Result<quinn::Endpoint, TransportError> {
    let domain = if bind.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    let _ = socket.set_recv_buffer_size(UDP_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(UDP_BUFFER_BYTES);
    for (what, got) in [
        ("receive", socket.recv_buffer_size()),
        ("send", socket.send_buffer_size()),
    ] {
        match got {
            Ok(got) if got >= UDP_BUFFER_BYTES => debug!(what, got, "UDP buffer enlarged"),
            Ok(got) => warn!(
                what,
                asked = UDP_BUFFER_BYTES,
                got,
                "the OS granted a smaller UDP buffer (raise net.core.rmem_max / wmem_max for full QUIC throughput)"
            ),
            Err(e) => warn!(what, error = %e, "could not read the UDP buffer size"),
        }
    }
    socket.bind(&bind.into())?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime for QUIC"))?;
    Ok(quinn::Endpoint::new(
        config,
        server,
        socket.into(),
        runtime,
    )?)
}

/// A server endpoint's QUIC configuration with keys derived from its
/// identity seed (HMAC-SHA-256 under fixed labels, so the seed itself is
/// not exposed): the stateless-reset key and the key that validates
/// connection ids. Both stay the same across a restart, so a restarted
/// gateway recognises its predecessor's connection ids and answers their
/// packets with a reset the peer can verify (RFC 9000 §10.3): the peer
/// learns at once that the connection is gone instead of waiting for its
/// idle timeout.
pub fn stable_endpoint_config(identity_seed: &[u8; 32]) -> quinn::EndpointConfig {
    use aws_lc_rs::hmac;
    let derive = hmac::Key::new(hmac::HMAC_SHA256, identity_seed);
    let reset = hmac::sign(&derive, b"npamp-gateway QUIC stateless reset key v1");
    let cid = hmac::sign(&derive, b"npamp-gateway QUIC connection id key v1");
    let mut cid_key = [0u8; 8];
    cid_key.copy_from_slice(&cid.as_ref()[..8]);
    let cid_key = u64::from_be_bytes(cid_key);
    let mut config =
        quinn::EndpointConfig::new(Arc::new(hmac::Key::new(hmac::HMAC_SHA256, reset.as_ref())));
    config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    config
}

/// Counters a server keeps over all its listeners.
#[derive(Clone, Default)]
pub struct ServeStats {
    pub associations: Arc<std::sync::atomic::AtomicU64>,
    pub handshake_failures: Arc<std::sync::atomic::AtomicU64>,
    pub bridge_frames: Arc<std::sync::atomic::AtomicU64>,
}

/// A listening server: accepts associations on the address and answers
/// PING, CLOSE and KEY_UPDATE; Bridge frames are counted (delivering them to
/// an upstream is the gateway's job).
pub struct Listener {
    /// What the listener is bound to: for `npamp://`, the port number both
    /// the UDP (QUIC) and the TCP (TLS) socket have.
    pub local_addr: PeerAddr,
    /// The accept loops: one, or two for `npamp://`.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How often an `npamp://` listener on port 0 picks another TCP port when
/// the UDP port of that number is taken.
const SHARED_PORT_TRIES: usize = 16;

impl Listener {
    /// A server that counts Bridge frames and delivers them nowhere
    /// (benchmarks, `serve` without an upstream).
    pub async fn bind(
        addr: PeerAddr,
        ep: Endpoint,
        stats: ServeStats,
    ) -> Result<Self, TransportError> {
        let frames = stats.bridge_frames.clone();
        Self::bind_with(addr, ep, stats, move |_| CountingSink(frames.clone())).await
    }

    /// A server whose associations deliver Bridge frames to the sink
    /// `make_sink` builds for each (given the handle to answer on).
    pub async fn bind_with<S, F>(
        addr: PeerAddr,
        ep: Endpoint,
        stats: ServeStats,
        make_sink: F,
    ) -> Result<Self, TransportError>
    where
        S: BridgeSink,
        F: Fn(AssocHandle) -> S + Send + Sync + 'static,
    {
        let accept = Arc::new(Accept {
            handshakes: Arc::new(tokio::sync::Semaphore::new(ep.max_handshakes.max(1))),
            ep,
            stats,
            make_sink,
        });
        let (local, tasks) = match addr.scheme {
            Scheme::Tls => {
                let listener = tokio::net::TcpListener::bind(addr.addr).await?;
                let local = listener.local_addr()?;
                (local, vec![accept.tls(listener)?])
            }
            Scheme::Quic => {
                let endpoint = accept.quic_endpoint(addr.addr)?;
                (endpoint.local_addr()?, vec![accept.quic(endpoint)])
            }
            Scheme::Npamp => {
                let (listener, endpoint) = bind_shared_port(addr.addr, &accept).await?;
                let local = listener.local_addr()?;
                (local, vec![accept.tls(listener)?, accept.quic(endpoint)])
            }
        };
        Ok(Self {
            local_addr: PeerAddr {
                scheme: addr.scheme,
                addr: local,
            },
            tasks,
        })
    }

    pub fn abort(&self) {
        self.stop_accepting();
    }

    /// Stops accepting new associations; established ones carry on.
    pub fn stop_accepting(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop_accepting();
    }
}

/// A TCP listener and a QUIC endpoint on the same port number. For port 0
/// the TCP port is chosen first; if its UDP twin is taken, another is tried.
async fn bind_shared_port<S, F>(
    addr: SocketAddr,
    accept: &Accept<F>,
) -> Result<(tokio::net::TcpListener, quinn::Endpoint), TransportError>
where
    F: Fn(AssocHandle) -> S,
{
    let mut tries = 0;
    loop {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let shared = listener.local_addr()?;
        match accept.quic_endpoint(shared) {
            Ok(endpoint) => return Ok((listener, endpoint)),
            Err(TransportError::Io(e))
                if addr.port() == 0
                    && e.kind() == std::io::ErrorKind::AddrInUse
                    && tries < SHARED_PORT_TRIES =>
            {
                tries += 1;
                debug!(
                    port = shared.port(),
                    "UDP port taken; choosing another TCP port"
                );
            }
            Err(e) => return Err(e),
        }
    }
}

/// What a listener's accept loops share: the endpoint, counters, the sink
/// factory and the bound on handshakes in progress.
struct Accept<F> {
    ep: Endpoint,
    stats: ServeStats,
    make_sink: F,
    handshakes: Arc<tokio::sync::Semaphore>,
}

impl<F> Accept<F> {
    /// A permit for one more handshake, or `None` (counted, logged now and
    /// then) when the limit is reached: the connection is refused at once.
    fn permit(&self, from: SocketAddr) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let permit = self.handshakes.clone().try_acquire_owned().ok();
        if permit.is_none() {
            let n = self
                .ep
                .stats
                .handshakes_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_power_of_two() {
                warn!(%from, refused = n + 1, "too many handshakes in progress: connection refused");
            }
        }
        permit
    }

    fn quic_endpoint(&self, addr: SocketAddr) -> Result<quinn::Endpoint, TransportError> {
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls_server_config(
            self.ep.tls_files.as_ref(),
        )?)
        .map_err(|e| TransportError::Certificate(e.to_string()))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        let mut transport = quinn::TransportConfig::default();
        self.ep.congestion.apply(&mut transport);
        server.transport_config(Arc::new(transport));
        quic_endpoint(
            addr,
            Some(server),
            stable_endpoint_config(&self.ep.identity_seed),
        )
    }
}

impl<S, F> Accept<F>
where
    S: BridgeSink,
    F: Fn(AssocHandle) -> S + Send + Sync + 'static,
{
    /// The accept loop of a TCP + TLS listener.
    fn tls(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
    ) -> Result<tokio::task::JoinHandle<()>, TransportError> {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls_server_config(
            self.ep.tls_files.as_ref(),
        )?));
        let accept = self.clone();
        Ok(tokio::spawn(async move {
            loop {
                let (tcp, from) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: pause, do not spin.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(permit) = accept.permit(from) else {
                    continue;
                };
                let (acceptor, accept) = (acceptor.clone(), accept.clone());
                tokio::spawn(async move {
                    let _ = tcp.set_nodelay(true);
                    let ep = &accept.ep;
                    let result = async {
                        let stream = with_timeout(ep.handshake_timeout, async {
                            Ok(acceptor.accept(tcp).await?)
                        })
                        .await
                        .map_err(Ended::Handshake)?;
                        let (r, w) = tokio::io::split(stream);
                        serve_streams(
                            ep,
                            &accept.stats,
                            (FrameReader::new(Box::new(r)), Box::new(w)),
                            None,
                            permit,
                            &accept.make_sink,
                        )
                        .await
                    }
                    .await;
                    log_end(from, result, &accept.stats);
                });
            }
        }))
    }

    /// The accept loop of a QUIC endpoint.
    fn quic(self: &Arc<Self>, endpoint: quinn::Endpoint) -> tokio::task::JoinHandle<()> {
        let accept = self.clone();
        tokio::spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                let from = incoming.remote_address();
                let Some(permit) = accept.permit(from) else {
                    incoming.refuse();
                    continue;
                };
                let accept = accept.clone();
                tokio::spawn(async move {
                    let ep = &accept.ep;
                    let result = async {
                        let conn =
                            with_timeout(ep.handshake_timeout, async { Ok(incoming.await?) })
                                .await
                                .map_err(Ended::Handshake)?;
                        let (w, r) = with_timeout(ep.handshake_timeout, async {
                            Ok(conn.accept_bi().await?)
                        })
                        .await
                        .map_err(Ended::Handshake)?;
                        serve_streams(
                            ep,
                            &accept.stats,
                            (FrameReader::new(Box::new(r)), Box::new(w)),
                            Some(conn),
                            permit,
                            &accept.make_sink,
                        )
                        .await
                    }
                    .await;
                    log_end(from, result, &accept.stats);
                });
            }
        })
    }
}

/// How an accepted connection ended: failing before the association was
/// established counts as a handshake failure (metrics), after it as an
/// association error.
enum Ended {
    Handshake(TransportError),
    Association(TransportError),
}

fn log_end(from: SocketAddr, result: Result<(), Ended>, stats: &ServeStats) {
    match result {
        Ok(()) => debug!(%from, "association ended"),
        Err(Ended::Handshake(e)) => {
            stats
                .handshake_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            warn!(%from, error = %e, "handshake failed");
        }
        Err(Ended::Association(e)) => warn!(%from, error = %e, "association closed with an error"),
    }
}

async fn serve_streams<S, F>(
    ep: &Endpoint,
    stats: &ServeStats,
    (mut reader, mut writer): (FrameReader, BoxWrite),
    quic: Option<quinn::Connection>,
    permit: tokio::sync::OwnedSemaphorePermit,
    make_sink: &F,
) -> Result<(), Ended>
where
    S: BridgeSink,
    F: Fn(AssocHandle) -> S,
{
    let established = match with_timeout(
        ep.handshake_timeout,
        server_handshake(ep, &mut reader, &mut writer),
    )
    .await
    {
        Ok(established) => {
            drop(permit);
            reader.set_max_payload(ep.assoc.max_payload_len);
            established
        }
        Err(e) => {
            // QUIC can tell the peer why; a TLS stream is only closed
            // (close_notify, so the peer sees a clean end).
            match &quic {
                Some(conn) => conn.close(
                    quinn::VarInt::from_u32(1),
                    format!("N-PAMP handshake failed: {e}").as_bytes(),
                ),
                None => {
                    let _ = tokio::time::timeout(CLOSE_NOTIFY_WAIT, writer.shutdown()).await;
                }
            }
            return Err(Ended::Handshake(e));
        }
    };
    serve_association(ep, stats, established, (reader, writer), quic, make_sink)
        .await
        .map_err(Ended::Association)
}

async fn serve_association<S, F>(
    ep: &Endpoint,
    stats: &ServeStats,
    established: Established,
    control: (FrameReader, BoxWrite),
    quic: Option<quinn::Connection>,
    make_sink: &F,
) -> Result<(), TransportError>
where
    S: BridgeSink,
    F: Fn(AssocHandle) -> S,
{
    info!(identity = %hex::encode(established.peer_identity), "association accepted");
    stats
        .associations
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let assoc = Association::new(Role::Server, established, ep.assoc, Instant::now())?;
    let accept_bridge = quic.is_some();
    let handle = driver::spawn(
        assoc,
        Streams {
            control,
            bridge: None,
            quic,
            accept_bridge,
        },
        false,
        ep.stats.clone(),
        make_sink,
    );
    handle.ended().await;
    match handle.end() {
        Some(End::Error(e)) => Err(TransportError::Ended(e)),
        _ => Ok(()),
    }
}

/// The sink of [`Listener::bind`]: counts Bridge frames, delivers nothing.
struct CountingSink(Arc<std::sync::atomic::AtomicU64>);

impl BridgeSink for CountingSink {
    async fn frame(&mut self, _: crate::wire::FrameType, _: &[u8]) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn ended(&mut self, _: &End) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<PeerAddr, TransportError> {
        s.parse()
    }

    fn why(s: &str) -> &'static str {
        match parse(s) {
            Err(TransportError::BadUrl { why, .. }) => why,
            other => panic!("{s}: expected BadUrl, got {other:?}"),
        }
    }

    #[test]
    fn addresses_of_all_three_schemes_parse_and_print() {
        for (text, scheme, printed) in [
            (
                "quic://127.0.0.1:4433",
                Scheme::Quic,
                "quic://127.0.0.1:4433",
            ),
            ("tls://127.0.0.1:4434", Scheme::Tls, "tls://127.0.0.1:4434"),
            (
                "npamp://127.0.0.1:7443",
                Scheme::Npamp,
                "npamp://127.0.0.1:7443",
            ),
            (
                "NPAMP://127.0.0.1:7443/",
                Scheme::Npamp,
                "npamp://127.0.0.1:7443",
            ),
            ("npamp://[::1]:7443", Scheme::Npamp, "npamp://[::1]:7443"),
        ] {
            let addr = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(addr.scheme, scheme, "{text}");
            assert_eq!(addr.to_string(), printed, "{text}");
            assert_eq!(parse(printed).ok(), Some(addr), "{text} round trip");
        }
    }

    #[test]
    fn bad_addresses_say_what_is_wrong() {
        assert_eq!(why("127.0.0.1:7443"), "no scheme");
        assert_eq!(why("udp://127.0.0.1:7443"), "unknown scheme");
        assert_eq!(
            why("npamp://127.0.0.1"),
            "HOST:PORT needed (N-PAMP has no default port)"
        );
        assert_eq!(
            why("npamp://[::1]"),
            "HOST:PORT needed (N-PAMP has no default port)"
        );
        assert_eq!(
            why("npamp://::1"),
            "HOST:PORT needed (N-PAMP has no default port)"
        );
        for resource in [
            "npamp://127.0.0.1:7443/tools",
            "npamp://127.0.0.1:7443?x=1",
            "npamp://127.0.0.1:7443#f",
        ] {
            assert_eq!(
                why(resource),
                "the gateway uses no resource path, query or fragment",
                "{resource}"
            );
        }
        assert_eq!(
            why("tls://me@127.0.0.1:1"),
            "user information is not allowed"
        );
        assert_eq!(
            why("quic://127.0.0.1:99999"),
            "not an address or a host name that resolves"
        );
        let message = parse("npamp://127.0.0.1").unwrap_err().to_string();
        assert!(
            message.contains("npamp://127.0.0.1") && message.contains("no default port"),
            "{message}"
        );
    }

    /// A transport attempt for [`first_up`]: records when it was first
    /// polled (started), then succeeds or fails after `after`, or never
    /// finishes (`None`).
    async fn attempt(
        started: &std::cell::Cell<Option<tokio::time::Instant>>,
        after: Option<Duration>,
        ok: bool,
        what: &'static str,
    ) -> Result<&'static str, TransportError> {
        started.set(Some(tokio::time::Instant::now()));
        let Some(after) = after else {
            return std::future::pending().await;
        };
        tokio::time::sleep(after).await;
        if ok {
            Ok(what)
        } else {
            Err(TransportError::Ended(format!("{what} refused")))
        }
    }

    struct Race {
        result: Result<(Scheme, &'static str), TransportError>,
        /// When TCP + TLS started, after the start of the race.
        tls_started: Option<Duration>,
        took: Duration,
    }

    async fn race(quic: (Option<u64>, bool), tls: (Option<u64>, bool)) -> Race {
        let addr = SocketAddr::from(([127, 0, 0, 1], 7443));
        let (quic_started, tls_started) = Default::default();
        let ms = |t: Option<u64>| t.map(Duration::from_millis);
        let t0 = tokio::time::Instant::now();
        let result = first_up(
            addr,
            attempt(&quic_started, ms(quic.0), quic.1, "quic"),
            attempt(&tls_started, ms(tls.0), tls.1, "tls"),
            FALLBACK_DELAY,
        )
        .await;
        let tls_started: std::cell::Cell<Option<tokio::time::Instant>> = tls_started;
        Race {
            result,
            tls_started: tls_started.get().map(|t| t - t0),
            took: t0.elapsed(),
        }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// `n` sealed frames of `len` plaintext octets, back to back.
    fn frames(n: u64, len: usize) -> Vec<u8> {
        let keys =
            crate::record::TrafficKeys::new(crate::record::Suite::AES_256_GCM, &[7; 32], &[9; 12])
                .expect("keys");
        let mut out = Vec::new();
        for seq in 0..n {
            keys.seal_frame_into(
                &mut out,
                crate::wire::Flags::NONE,
                crate::wire::FrameType(0x0100),
                ChannelId::BRIDGE,
                seq,
                |b| b.resize(b.len() + len, 0x5A),
            )
            .expect("seal");
        }
        out
    }

    async fn read_all(stream: Vec<u8>) -> (u64, usize) {
        let mut reader = FrameReader::new(Box::new(std::io::Cursor::new(stream)));
        let mut count = 0;
        while reader.next().await.expect("frame").is_some() {
            count += 1;
        }
        (count, reader.buf.len())
    }

    #[tokio::test]
    async fn the_read_buffer_stays_small_when_quiet_and_grows_when_busy() {
        // A handshake-sized exchange fits the starting buffer.
        assert_eq!(read_all(frames(3, 1000)).await, (3, READ_BUFFER_START));
        // A stream that keeps filling the buffer doubles it up to the busy size.
        assert_eq!(read_all(frames(400, 300)).await, (400, READ_BUFFER_BUSY));
        // One frame larger than that grows it as far as the frame needs,
        // and once it is taken the buffer shrinks back.
        let mut reader = FrameReader::new(Box::new(std::io::Cursor::new(frames(3, 3 << 20))));
        reader.set_max_payload(4 << 20);
        let mut sizes = Vec::new();
        while let Some((_, frame)) = reader.next().await.expect("frame") {
            sizes.push((frame.len(), reader.buf.len()));
        }
        assert_eq!(sizes.len(), 3);
        for (frame, buf) in sizes {
            assert!(
                frame > 3 << 20 && buf >= frame && buf < 7 << 20,
                "{frame} in {buf}"
            );
        }
        assert!(reader.fill().await.is_ok_and(|more| !more));
        assert_eq!(reader.buf.len(), READ_BUFFER_BUSY);
    }

    /// Hands out a byte stream in reads of the given sizes (cycled), as a
    /// socket would: frames split anywhere, several in one read.
    struct Chunked {
        data: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        next: usize,
    }

    impl tokio::io::AsyncRead for Chunked {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let size = self.sizes[self.next % self.sizes.len()];
            self.next += 1;
            let n = size.min(buf.remaining()).min(self.data.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Against the oracle of the frames as written: whatever their sizes
        /// (a few past the busy buffer) and however the reads cut the
        /// stream, every frame comes out whole and in order, the buffer
        /// never holds much more than the largest frame needs, and it is
        /// back to the busy size at the end.
        #[test]
        fn frames_come_out_whole_however_reads_cut_them(
            lens in proptest::collection::vec(
                proptest::prop_oneof![4 => 0usize..2000, 1 => 60_000usize..300_000],
                1..12,
            ),
            sizes in proptest::collection::vec(
                proptest::prop_oneof![1usize..64, 64usize..5000, 5000usize..200_000],
                1..8,
            ),
        ) {
            let written: Vec<Vec<u8>> = lens.iter().map(|&len| frames(1, len)).collect();
            let largest = written.iter().map(Vec::len).max().unwrap_or(0);
            let data = written.concat();
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            rt.block_on(async {
                let stream = Chunked { data, at: 0, sizes, next: 0 };
                let mut reader = FrameReader::authenticated(Box::new(stream), 1 << 20);
                for want in &written {
                    let (_, got) = reader.next().await.expect("frame").expect("not the end");
                    proptest::prop_assert_eq!(&got[..], &want[..]);
                    let bound = (2 * largest).max(READ_BUFFER_BUSY);
                    proptest::prop_assert!(reader.buf.len() <= bound, "{} > {}", reader.buf.len(), bound);
                }
                proptest::prop_assert!(reader.next().await.expect("clean end").is_none());
                proptest::prop_assert!(reader.buf.len() <= READ_BUFFER_BUSY);
                Ok(())
            })?;
        }
    }

    #[tokio::test]
    async fn frames_over_the_limit_are_refused_before_buffering() {
        // Before the handshake a peer may send no more than 64 KiB a frame.
        let mut reader = FrameReader::new(Box::new(std::io::Cursor::new(frames(1, 100 << 10))));
        assert!(matches!(
            reader.next().await,
            Err(TransportError::Wire(WireError::PayloadTooLarge { limit, .. })) if limit == HANDSHAKE_MAX_PAYLOAD
        ));
        assert!(
            reader.buf.len() <= 2 * READ_BUFFER_START,
            "{}",
            reader.buf.len()
        );
        // Once it is authenticated, up to the association's limit.
        let stream = frames(1, 100 << 10);
        let mut reader =
            FrameReader::authenticated(Box::new(std::io::Cursor::new(stream)), 1 << 20);
        assert!(reader.next().await.expect("frame").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn quic_up_in_time_wins_and_tls_is_never_started() {
        let r = race((Some(100), true), (Some(1), true)).await;
        assert_eq!(r.result.ok(), Some((Scheme::Quic, "quic")));
        assert_eq!((r.tls_started, r.took), (None, MS(100)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quic_failure_starts_tls_at_once() {
        let r = race((Some(10), false), (Some(5), true)).await;
        assert_eq!(r.result.ok(), Some((Scheme::Tls, "tls")));
        assert_eq!((r.tls_started, r.took), (Some(MS(10)), MS(15)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_quic_starts_tls_after_the_fallback_delay() {
        let r = race((None, true), (Some(5), true)).await;
        assert_eq!(r.result.ok(), Some((Scheme::Tls, "tls")));
        assert_eq!(r.tls_started, Some(FALLBACK_DELAY));
        assert_eq!(r.took, FALLBACK_DELAY + MS(5));
    }

    #[tokio::test(start_paused = true)]
    async fn quic_still_wins_after_the_delay_if_it_is_up_first() {
        let r = race((Some(300), true), (Some(100), true)).await;
        assert_eq!(r.result.ok(), Some((Scheme::Quic, "quic")));
        assert_eq!((r.tls_started, r.took), (Some(FALLBACK_DELAY), MS(300)));
        // TLS failing first does not end the race either.
        let r = race((Some(500), true), (Some(10), false)).await;
        assert_eq!(r.result.ok(), Some((Scheme::Quic, "quic")));
        // Nor does QUIC failing after the delay while TLS is still coming up.
        let r = race((Some(300), false), (Some(200), true)).await;
        assert_eq!(r.result.ok(), Some((Scheme::Tls, "tls")));
        assert_eq!(r.took, FALLBACK_DELAY + MS(200));
    }

    #[tokio::test(start_paused = true)]
    async fn when_both_fail_the_error_names_both() {
        for (quic, tls) in [
            ((Some(10), false), (Some(10), false)),
            ((Some(400), false), (Some(10), false)),
            ((Some(260), false), (Some(400), false)),
        ] {
            let r = race(quic, tls).await;
            let message = match r.result {
                Err(e @ TransportError::NoTransport { .. }) => e.to_string(),
                other => panic!("{quic:?} {tls:?}: expected NoTransport, got {other:?}"),
            };
            assert!(
                message.contains("QUIC: association ended: quic refused")
                    && message.contains("TCP + TLS: association ended: tls refused")
                    && message.contains("127.0.0.1:7443"),
                "{message}"
            );
        }
    }
}
