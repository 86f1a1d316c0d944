//! What the parts of a running gateway share: its context ([`Ctx`]: the
//! limits, the labeler, the metrics, what a reload replaces) and the client
//! sides of TLS and WebSocket that the edge and the origin both use.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::*;
use crate::gateway::metrics::Side;

/// The part of a running gateway's configuration that a reload (SIGHUP)
/// replaces while it serves; everything else needs a restart.
#[derive(Clone)]
pub struct Live {
    /// 1 at start, one more at each reload that changed something.
    pub generation: u64,
    /// Edge: bearer tokens HTTP and WebSocket clients must present.
    pub tokens: Option<auth::Tokens>,
    /// Edge: the web origins whose pages may use the ingress.
    pub browsers: ingress::browser::BrowserOrigins,
    /// Edge: rate limits per client (kept across a reload that leaves the
    /// limits as they are, so no client's buckets refill).
    pub limiter: Option<Arc<ingress::limit::Limiter>>,
    /// Edge: the server config of the TLS ingresses (before ALPN).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Edge: the OAuth resource server its ingresses are (`--oauth-*`,
    /// `--require-scope`).
    pub oauth: Option<Arc<super::oauth::Verifier>>,
}

/// What every part of a running gateway shares.
pub struct Ctx {
    pub protocol: ProtocolId,
    /// How messages are framed on stream transports (`--framing`).
    pub framing: crate::framing::Framing,
    pub labeler: Arc<Labeler>,
    pub policy: SafetyPolicy,
    pub allow_methods: Option<HashSet<String>>,
    pub deny_methods: HashSet<String>,
    /// What a configuration reload may change: tokens, OAuth, web
    /// origins, rate limits, the ingress certificate ([`Ctx::live`]).
    live: std::sync::RwLock<Arc<Live>>,
    pub limits: Limits,
    /// Limits on JSON-RPC text from the local party (clients, upstream).
    pub scan: crate::jsonrpc::Limits,
    /// Limits on JSON-RPC text from the peer: its messages may be as large
    /// as [`MAX_BODY_LIMIT`]; an origin refuses a request over its own
    /// `--max-body` itself ([`Ctx::refusal`]), saying so.
    pub peer_scan: crate::jsonrpc::Limits,
    pub metrics: Arc<Metrics>,
    /// What the gateway's exchanges share: `--max-in-flight` and
    /// `--memory-budget`.
    pub shared: Arc<crate::relay::Shared>,
    assocs: Mutex<Vec<AssocHandle>>,
    /// Where connections and associations are served (`None`: wherever
    /// they are accepted or opened).
    pub shards: Option<Arc<crate::shard::Shards>>,
    /// Edge: where what clients send is recorded (`--capture`).
    pub capture: Option<Arc<super::capture::Capture>>,
    /// Edge: its clients' credentials carried to the upstream
    /// (`--forward-authorization`).
    pub forwarding: Option<Arc<super::forward::Forwarding>>,
    /// Origin: its upstreams' protected-resource metadata, as fetched when
    /// one refused a forwarded credential.
    pub upstream_metadata: super::forward::MetadataCache,
    /// Origin: the `x-mcp-header` annotations of its MCP upstreams' tools,
    /// as their `tools/list` answers crossed it.
    pub mcp_params: super::mcp_params::Cache,
}

impl Ctx {
    /// The framing written on a stream before anything was read from it
    /// (a request to an upstream) under `--framing auto`: LSP's with
    /// `--protocol lsp`, else lines.
    pub fn first_framing(&self) -> crate::framing::Framing {
        match self.protocol {
            ProtocolId::LSP_EXPERIMENTAL => crate::framing::Framing::Lsp,
            _ => crate::framing::Framing::Lines,
        }
    }

    /// A reader of a stream transport's messages, in `--framing`, each at
    /// most `--max-body` (one over it skipped and reported).
    pub fn message_reader<R: tokio::io::AsyncRead + Unpin>(
        &self,
        stream: R,
    ) -> crate::framing::MessageReader<R> {
        crate::framing::MessageReader::new(
            stream,
            self.framing,
            self.first_framing(),
            self.limits.max_body,
        )
    }

    pub fn new(config: &GatewayConfig, metrics: Arc<Metrics>) -> Self {
        Self {
            protocol: config.protocol,
            framing: config.framing,
            labeler: Arc::new(Labeler::new(config.protocol, config.effects.clone())),
            policy: config.policy,
            allow_methods: config.allow_methods.clone(),
            deny_methods: config.deny_methods.clone(),
            live: std::sync::RwLock::new(Arc::new(Live {
                generation: 1,
                tokens: config.tokens.clone(),
                browsers: config.browsers.clone(),
                limiter: config
                    .rate_limit
                    .map(|l| Arc::new(ingress::limit::Limiter::new(l))),
                tls: None,
                oauth: None,
            })),
            scan: crate::jsonrpc::Limits {
                max_len: config.limits.max_body,
                max_batch: config.limits.max_batch,
                ..crate::jsonrpc::Limits::default()
            },
            peer_scan: crate::jsonrpc::Limits {
                max_len: MAX_BODY_LIMIT,
                max_batch: config.limits.max_batch,
                ..crate::jsonrpc::Limits::default()
            },
            shared: Arc::new(crate::relay::Shared::new(
                config.limits.max_in_flight,
                config.limits.memory_budget,
            )),
            limits: config.limits.clone(),
            metrics,
            assocs: Mutex::new(Vec::new()),
            shards: None,
            capture: None,
            forwarding: None,
            upstream_metadata: Default::default(),
            mcp_params: Default::default(),
        }
    }

    /// The same, serving on `shards`.
    pub fn with_shards(self, shards: Option<Arc<crate::shard::Shards>>) -> Self {
        Self { shards, ..self }
    }

    /// The same, recording what clients send into `capture`.
    pub fn with_capture(self, capture: Option<Arc<super::capture::Capture>>) -> Self {
        Self { capture, ..self }
    }

    /// The same, carrying its clients' credentials to the upstream as
    /// `spec` says.
    pub fn with_forwarding(self, spec: Option<super::forward::ForwardSpec>) -> Self {
        Self {
            forwarding: spec.map(|s| Arc::new(super::forward::Forwarding::new(s))),
            ..self
        }
    }

    /// Records a client's message (or batch), where a capture is on.
    pub fn captured(&self, text: &bytes::Bytes) {
        if let Some(c) = &self.capture {
            c.record(text);
        }
    }

    /// The live part of the configuration, as of now.
    pub fn live(&self) -> Arc<Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn set_live(&self, live: Live) {
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(live);
    }

    /// Origin: why a request from the peer (`len` octets of JSON-RPC text)
    /// is refused, if it is.
    pub fn refusal(
        &self,
        method: &str,
        label: Option<Effect>,
        len: usize,
    ) -> Option<(TransportError, String)> {
        if len > self.limits.max_body {
            return Some((
                TransportError::NOT_DELIVERED,
                format!(
                    "a message of {len} octets is over this gateway's --max-body ({})",
                    self.limits.max_body
                ),
            ));
        }
        let allowed = self
            .allow_methods
            .as_ref()
            .is_none_or(|a| a.contains(method));
        if !allowed || self.deny_methods.contains(method) {
            return Some((
                TransportError::METHOD_UNSUPPORTED,
                format!("method {method:?} is not delivered by this gateway"),
            ));
        }
        if let Err(code) = self.policy.check(label, method, self.labeler.table()) {
            let effect = SafetyPolicy::effective_effect(label, method, self.labeler.table());
            return Some((
                code,
                format!("local policy refuses {effect:?} requests ({method:?})"),
            ));
        }
        None
    }

    /// Remembers an association, which this gateway is the `side` of, for
    /// metrics and shutdown.
    pub fn track(&self, handle: &AssocHandle, side: Side) {
        self.metrics.association_opened(side);
        {
            let mut all = self.assocs.lock().unwrap_or_else(|p| p.into_inner());
            all.retain(AssocHandle::is_open);
            all.push(handle.clone());
        }
        let (h, m) = (handle.clone(), self.metrics.clone());
        tokio::spawn(async move {
            h.ended().await;
            m.association_closed(side);
        });
    }

    pub(super) fn open_assocs(&self) -> Vec<AssocHandle> {
        let all = self.assocs.lock().unwrap_or_else(|p| p.into_inner());
        all.iter().filter(|h| h.is_open()).cloned().collect()
    }
}

/// A TLS client config for HTTPS and WSS upstreams: the Mozilla root set,
/// plus the operator's CA certificates (`--upstream-ca`, PEM) when given.
pub fn tls_roots_client_config(
    extra_ca: Option<&std::path::Path>,
) -> Result<rustls::ClientConfig, GatewayError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots =
        rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra_ca {
        let bad = |e: String| GatewayError::Tls(format!("--upstream-ca {}: {e}", path.display()));
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no certificate in the file".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| GatewayError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The most a WebSocket connection reads at once. tungstenite's default is
/// 128 KiB, and it zero-fills that much of its buffer before each read: per
/// connection, 128 KiB of memory touched, and a 128 KiB memset per read
/// however small the message. A larger message still gets a buffer of its
/// size; it is read in more, smaller reads.
pub const WS_READ_BUFFER: usize = 16 << 10;

/// WebSocket limits: one message at most `max` octets; reads of at most
/// [`WS_READ_BUFFER`].
pub fn ws_config(max: usize) -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
        .read_buffer_size(WS_READ_BUFFER)
}

/// A byte stream: TCP, or TLS over TCP.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// A WebSocket client connection (`ws://` or `wss://`).
pub type WsClient = tokio_tungstenite::WebSocketStream<Box<dyn Io>>;

/// Connects to a `ws://` or `wss://` URL (`wss://` checked against `tls`).
pub async fn ws_connect(
    url: &str,
    max: usize,
    tls: Arc<rustls::ClientConfig>,
    headers: &[(hyper::header::HeaderName, hyper::header::HeaderValue)],
) -> Result<WsClient, String> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url
        .into_client_request()
        .map_err(|e| format!("bad URL {url:?}: {e}"))?;
    for (name, value) in headers {
        request.headers_mut().append(name.clone(), value.clone());
    }
    let uri: hyper::Uri = url.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
    let secure = match uri.scheme_str() {
        Some("ws") => false,
        Some("wss") => true,
        _ => return Err(format!("bad URL {url:?}: expected ws:// or wss://")),
    };
    let host = uri
        .host()
        .ok_or_else(|| format!("bad URL {url:?}: no host"))?;
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let host_name = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::net::TcpStream::connect((host_name, port))
        .await
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if secure {
        let name = rustls::pki_types::ServerName::try_from(host_name.to_owned())
            .map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let (ws, _) =
        tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config(max)))
            .await
            .map_err(|e| e.to_string())?;
    Ok(ws)
}
