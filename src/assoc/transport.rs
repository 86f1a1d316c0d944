//! The async shell: N-PAMP associations over QUIC (quinn) and over TCP +
//! TLS 1.3 (tokio-rustls), both with ALPN `n-pamp/2` (see `docs/quic-binding.md`).
//!
//! - QUIC: the client opens one bidirectional stream for the Control channel
//!   and runs the handshake on it; the Bridge channel gets a bidirectional
//!   stream of its own.
//! - TLS: every channel on the one TLS stream, as the spec's fallback binding.
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
    #[error("bad URL {0:?}: expected quic://HOST:PORT or tls://HOST:PORT")]
    BadUrl(String),
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
    Quic,
    Tls,
}

/// A parsed `quic://ADDR` or `tls://ADDR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    pub scheme: Scheme,
    pub addr: SocketAddr,
}

impl std::str::FromStr for PeerAddr {
    type Err = TransportError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || TransportError::BadUrl(s.to_owned());
        let (scheme, rest) = s.split_once("://").ok_or_else(bad)?;
        let scheme = match scheme {
            "quic" => Scheme::Quic,
            "tls" => Scheme::Tls,
            _ => return Err(bad()),
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(rest)
            .map_err(|_| bad())?
            .next()
            .ok_or_else(bad)?;
        Ok(Self { scheme, addr })
    }
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.scheme {
            Scheme::Quic => "quic",
            Scheme::Tls => "tls",
        };
        write!(f, "{s}://{}", self.addr)
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

/// Reads whole frames from a stream into one reused buffer.
///
/// Frames are handed out as ranges of that buffer ([`FrameReader::take`]),
/// opened in place there, and stay valid until the next read
/// ([`FrameReader::fill`] or [`FrameReader::next`]), which may move the
/// octets not yet taken to the front.
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
            buf: vec![0; 64 << 10],
            start: 0,
            end: 0,
            deframer: Deframer::default(),
            read_at: Instant::now(),
        }
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
            if self.end == self.buf.len() {
                // Cannot exceed the deframer's limit: it refused larger headers.
                let want = (self.buf.len() * 2).min(self.deframer.max_frame_len());
                self.buf.resize(want.max(self.end + 1), 0);
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

/// A client's established association and the streams it runs on.
pub struct Link {
    assoc: Association,
    control: (FrameReader, BoxWrite),
    /// QUIC: the Bridge channel's own stream. TLS: `None` (shares `control`).
    bridge: Option<(FrameReader, BoxWrite)>,
    /// Keeps the QUIC endpoint and connection alive.
    _quic: Option<(quinn::Endpoint, quinn::Connection)>,
    pub handshake_time: Duration,
    stats: Arc<AssocStats>,
}

impl Link {
    /// Connects, runs the handshake, and opens the Bridge stream (QUIC).
    pub async fn connect(peer: PeerAddr, ep: &Endpoint) -> Result<Self, TransportError> {
        Self::connect_with_alpn(peer, ep, ALPN).await
    }

    /// [`Link::connect`] offering another ALPN (to test refusal).
    pub async fn connect_with_alpn(
        peer: PeerAddr,
        ep: &Endpoint,
        alpn: &[u8],
    ) -> Result<Self, TransportError> {
        let started = Instant::now();
        let tls = tls_client_config(alpn)?;
        let (mut reader, mut writer, quic) = match peer.scheme {
            Scheme::Tls => {
                let tcp = tokio::net::TcpStream::connect(peer.addr).await?;
                tcp.set_nodelay(true)?;
                let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
                let name = rustls::pki_types::ServerName::try_from("localhost")
                    .map_err(|e| TransportError::Certificate(e.to_string()))?;
                let stream = connector.connect(name, tcp).await?;
                let (r, w) = tokio::io::split(stream);
                (FrameReader::new(Box::new(r)), Box::new(w) as BoxWrite, None)
            }
            Scheme::Quic => {
                let bind: SocketAddr = if peer.addr.is_ipv6() {
                    "[::]:0"
                } else {
                    "0.0.0.0:0"
                }
                .parse()
                .map_err(|_| TransportError::BadUrl(peer.to_string()))?;
                let endpoint = quic_endpoint(bind, None, quinn::EndpointConfig::default())?;
                let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
                    .map_err(|e| TransportError::Certificate(e.to_string()))?;
                let mut config = quinn::ClientConfig::new(Arc::new(crypto));
                let mut transport = quinn::TransportConfig::default();
                // An idle association stays up (the default idle timeout is 30 s).
                transport.keep_alive_interval(Some(QUIC_KEEP_ALIVE));
                transport.max_idle_timeout(QUIC_IDLE_TIMEOUT.try_into().ok());
                ep.congestion.apply(&mut transport);
                config.transport_config(Arc::new(transport));
                let conn = endpoint
                    .connect_with(config, peer.addr, "localhost")?
                    .await?;
                let (w, r) = conn.open_bi().await?;
                (
                    FrameReader::new(Box::new(r)),
                    Box::new(w) as BoxWrite,
                    Some((endpoint, conn)),
                )
            }
        };
        let established = with_timeout(
            ep.handshake_timeout,
            client_handshake(ep, &mut reader, &mut writer),
        )
        .await?;
        let handshake_time = started.elapsed();
        let bridge = match &quic {
            Some((_, conn)) => {
                let (w, r) = conn.open_bi().await?;
                Some((FrameReader::new(Box::new(r)), Box::new(w) as BoxWrite))
            }
            None => None,
        };
        info!(peer = %peer, identity = %hex::encode(established.peer_identity), ?handshake_time, "association established");
        Ok(Self {
            assoc: Association::new(Role::Client, established, ep.assoc, Instant::now())?,
            control: (reader, writer),
            bridge,
            _quic: quic,
            handshake_time,
            stats: ep.stats.clone(),
        })
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
            let (header, frame) = self
                .control
                .0
                .next()
                .await?
                .ok_or(TransportError::EarlyEof)?;
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
    pub local_addr: PeerAddr,
    task: tokio::task::JoinHandle<()>,
}

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
        let handshakes = Arc::new(tokio::sync::Semaphore::new(ep.max_handshakes.max(1)));
        let refuse = {
            let refused = ep.stats.clone();
            move |from: SocketAddr| {
                let n = refused
                    .handshakes_refused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n.is_power_of_two() {
                    warn!(%from, refused = n + 1, "too many handshakes in progress: connection refused");
                }
            }
        };
        let ep = Arc::new(ep);
        let make_sink = Arc::new(make_sink);
        match addr.scheme {
            Scheme::Tls => {
                let listener = tokio::net::TcpListener::bind(addr.addr).await?;
                let local = PeerAddr {
                    scheme: Scheme::Tls,
                    addr: listener.local_addr()?,
                };
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls_server_config(
                    ep.tls_files.as_ref(),
                )?));
                let task = tokio::spawn(async move {
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
                        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                            refuse(from);
                            continue;
                        };
                        let (acceptor, ep, stats, make_sink) = (
                            acceptor.clone(),
                            ep.clone(),
                            stats.clone(),
                            make_sink.clone(),
                        );
                        tokio::spawn(async move {
                            let _ = tcp.set_nodelay(true);
                            let result = async {
                                let stream = with_timeout(ep.handshake_timeout, async {
                                    Ok(acceptor.accept(tcp).await?)
                                })
                                .await
                                .map_err(Ended::Handshake)?;
                                let (r, w) = tokio::io::split(stream);
                                serve_streams(
                                    &ep,
                                    &stats,
                                    (FrameReader::new(Box::new(r)), Box::new(w)),
                                    None,
                                    permit,
                                    &*make_sink,
                                )
                                .await
                            }
                            .await;
                            log_end(from, result, &stats);
                        });
                    }
                });
                Ok(Self {
                    local_addr: local,
                    task,
                })
            }
            Scheme::Quic => {
                let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls_server_config(
                    ep.tls_files.as_ref(),
                )?)
                .map_err(|e| TransportError::Certificate(e.to_string()))?;
                let endpoint = quic_endpoint(
                    addr.addr,
                    Some({
                        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
                        let mut transport = quinn::TransportConfig::default();
                        ep.congestion.apply(&mut transport);
                        server.transport_config(Arc::new(transport));
                        server
                    }),
                    stable_endpoint_config(&ep.identity_seed),
                )?;
                let local = PeerAddr {
                    scheme: Scheme::Quic,
                    addr: endpoint.local_addr()?,
                };
                let task = tokio::spawn(async move {
                    while let Some(incoming) = endpoint.accept().await {
                        let from = incoming.remote_address();
                        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                            refuse(from);
                            incoming.refuse();
                            continue;
                        };
                        let (ep, stats, make_sink) = (ep.clone(), stats.clone(), make_sink.clone());
                        tokio::spawn(async move {
                            let result = async {
                                let conn = with_timeout(ep.handshake_timeout, async {
                                    Ok(incoming.await?)
                                })
                                .await
                                .map_err(Ended::Handshake)?;
                                let (w, r) = with_timeout(ep.handshake_timeout, async {
                                    Ok(conn.accept_bi().await?)
                                })
                                .await
                                .map_err(Ended::Handshake)?;
                                serve_streams(
                                    &ep,
                                    &stats,
                                    (FrameReader::new(Box::new(r)), Box::new(w)),
                                    Some(conn),
                                    permit,
                                    &*make_sink,
                                )
                                .await
                            }
                            .await;
                            log_end(from, result, &stats);
                        });
                    }
                });
                Ok(Self {
                    local_addr: local,
                    task,
                })
            }
        }
    }

    pub fn abort(&self) {
        self.task.abort();
    }

    /// Stops accepting new associations; established ones carry on.
    pub fn stop_accepting(&self) {
        self.task.abort();
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
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
            established
        }
        Err(e) => {
            // QUIC can tell the peer why; a TLS stream is just closed.
            if let Some(conn) = &quic {
                conn.close(
                    quinn::VarInt::from_u32(1),
                    format!("N-PAMP handshake failed: {e}").as_bytes(),
                );
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
