//! The gateway: JSON-RPC in (HTTP, WebSocket, TCP, stdio), N-PAMP across,
//! JSON-RPC out (HTTP, WebSocket, child process).
//!
//! ```text
//!  client ─▶ ingress ─scan─▶ edge (pool | session) ═N-PAMP/QUIC═▶ origin ─▶ upstream
//!  client ◀─ ingress ◀────── edge ◀═══════ reply by correlation_id ══ origin ◀─ upstream
//! ```
//!
//! One process can be an edge (`ingress` + `peer`), an origin (`listen` +
//! `upstream`), or both. See `docs/gateway.md` for the edge semantics.

mod builder;
mod client;
pub mod config;
pub mod metrics;
mod settings;

pub use builder::GatewayBuilder;
pub use client::Client;
pub(crate) mod quiet;

internal! {
    mod auth;
    mod capture;
    mod oauth;
    mod forward;
    mod carry;
    mod context;
    mod json_stream;
    mod mcp_headers;
    mod mcp_names;
    mod mcp_params;
    mod edge;
    mod exec;
    mod gated;
    mod ingress;
    mod origin;
    mod outbox;
    mod policy;
    mod redact;
    mod scopes;
    mod session;
    mod stall;
    mod upstream;
}

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::assoc::AssocHandle;
use crate::assoc::{Endpoint, Listener, PeerAddr};
use crate::bridge::{Effect, ProtocolId, TransportError};
use crate::jsonrpc::{EffectTable, Labeler, SafetyPolicy};
use metrics::Metrics;

use settings::UPSTREAM_STOP_LIMIT;
pub use settings::{
    DEFAULT_MAX_BODY, GatewayError, HedgeAfter, INSECURE_PEERS_WARNING, Limits, MAX_BODY_LIMIT,
    MAX_FRAME_PAYLOAD,
};

pub use upstream::{Address, Upstream};

pub use ingress::IngressUrl;

/// Everything one gateway process does.
#[derive(Clone)]
pub struct GatewayConfig {
    pub endpoint: Endpoint,
    /// Accept associations here (origin role).
    pub listen: Vec<PeerAddr>,
    pub upstream: Option<Upstream>,
    /// Origin: HTTP upstreams served as a group (`--upstream` repeated, or
    /// with routes; the first is `upstream`). Empty: `upstream` alone.
    pub upstream_group: Vec<hyper::Uri>,
    /// Origin: methods matching a glob go to these HTTP upstreams
    /// (`--route GLOB=URL`), in order.
    pub routes: Vec<(String, hyper::Uri)>,
    /// Origin: session upstreams served as a group (WebSocket, IPC, child
    /// processes, MCP servers: `--upstream` or `--upstream-cmd` repeated;
    /// the first is `upstream`): each association's upstream session runs
    /// on one, and moves to another when it fails. Empty: `upstream` alone.
    pub session_group: Vec<Upstream>,
    /// Extra CA certificates (PEM) for an HTTPS / WSS upstream.
    pub upstream_ca: Option<std::path::PathBuf>,
    /// Sent with every request to an HTTP(S) / WS(S) upstream (values
    /// marked sensitive).
    pub upstream_headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    /// Accept clients here (edge role) ...
    pub ingress: Vec<IngressUrl>,
    /// ... and carry them to these origins (the healthiest, least loaded
    /// for each HTTP request; each session stays with the one it began on).
    pub peers: Vec<PeerAddr>,
    pub metrics: Option<SocketAddr>,
    /// Edge: record what clients send (`--capture`).
    pub capture: Option<capture::CaptureSpec>,
    /// Edge: the OAuth resource server its ingresses are (`--oauth-*`).
    pub(crate) oauth: Option<oauth::OAuthSpec>,
    /// Edge: its clients' credentials carried to the upstream
    /// (`--forward-authorization`).
    pub(crate) forwarding: Option<forward::ForwardSpec>,
    pub protocol: ProtocolId,
    /// How messages are framed on stream transports (`--framing`).
    pub framing: crate::framing::Framing,
    pub effects: EffectTable,
    pub policy: SafetyPolicy,
    /// Origin: only these methods are delivered (MethodUnsupported else).
    pub allow_methods: Option<HashSet<String>>,
    /// Origin: these methods are refused with MethodUnsupported.
    pub deny_methods: HashSet<String>,
    /// Edge: bearer tokens HTTP and WebSocket clients must present.
    pub(crate) tokens: Option<auth::Tokens>,
    /// Edge: the web origins whose pages may use the ingress.
    pub(crate) browsers: ingress::browser::BrowserOrigins,
    /// Edge: the certificate of the TLS ingresses, and the CAs of client
    /// certificates.
    pub(crate) ingress_tls: Option<ingress::tls::IngressTls>,
    /// Edge: rate limits per client.
    pub(crate) rate_limit: Option<ingress::limit::RateLimit>,
    /// The identity was generated now (no `--identity`), not read.
    pub ephemeral_identity: bool,
    pub limits: Limits,
    /// Serve connections and associations on this many single-threaded
    /// runtimes (see [`crate::shard`]); 0: on the runtime that starts the
    /// gateway, as one pool of workers.
    pub shards: usize,
}

impl GatewayConfig {
    /// A gateway with this identity and trust that does nothing yet: no
    /// listener, no ingress, plain JSON-RPC (experimental protocol_id), no
    /// policy, default limits. Fill in the roles. The endpoint's
    /// associations take frames up to [`MAX_FRAME_PAYLOAD`] from the peer,
    /// so that `limits.max_body` alone decides what this gateway carries.
    pub fn new(mut endpoint: Endpoint) -> Self {
        endpoint.assoc.max_payload_len = MAX_FRAME_PAYLOAD;
        Self {
            endpoint,
            listen: Vec::new(),
            upstream: None,
            upstream_group: Vec::new(),
            session_group: Vec::new(),
            routes: Vec::new(),
            upstream_ca: None,
            upstream_headers: Vec::new(),
            ingress: Vec::new(),
            peers: Vec::new(),
            metrics: None,
            capture: None,
            oauth: None,
            forwarding: None,
            protocol: ProtocolId::JSONRPC_EXPERIMENTAL,
            framing: crate::framing::Framing::Auto,
            effects: EffectTable::for_protocol(ProtocolId::JSONRPC_EXPERIMENTAL),
            policy: SafetyPolicy::allow_all(),
            allow_methods: None,
            deny_methods: HashSet::new(),
            tokens: None,
            browsers: Default::default(),
            ingress_tls: None,
            rate_limit: None,
            ephemeral_identity: false,
            limits: Limits::default(),
            shards: 0,
        }
    }
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The endpoint holds the identity seed: never printed.
        f.debug_struct("GatewayConfig")
            .field("listen", &self.listen)
            .field("upstream", &self.upstream)
            .field("ingress", &self.ingress)
            .field("peers", &self.peers)
            .field("metrics", &self.metrics)
            .field("protocol", &self.protocol)
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "internals")]
pub use context::{Ctx, Io, Live, WsClient, tls_roots_client_config, ws_config, ws_connect};
#[cfg(not(feature = "internals"))]
pub(crate) use context::{Ctx, Live};

/// Origins as a log shows them: `quic://a, quic://b`.
struct Peers<'a>(&'a [PeerAddr]);

impl std::fmt::Display for Peers<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            p.fmt(f)?;
        }
        Ok(())
    }
}

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// The configuration generation now (one more when anything changed).
    pub generation: u64,
    /// What changed (flag names).
    pub changed: Vec<&'static str>,
    /// What differs but cannot change while running: left as it was.
    pub refused: Vec<&'static str>,
}

/// What an origin of this configuration delivers to.
fn upstream_plan(config: &GatewayConfig) -> upstream::Plan {
    upstream::Plan {
        upstream: config.upstream.clone(),
        group: config.upstream_group.clone(),
        routes: config.routes.clone(),
        sessions: config.session_group.clone(),
        headers: config.upstream_headers.clone(),
        ca: config.upstream_ca.clone(),
    }
}

/// The metrics of a gateway with this configuration: each role shows its
/// own (an edge carries to peers, its clients coming in at its ingresses;
/// an origin listens), and the process its own.
fn metrics_of(config: &GatewayConfig) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::with_assoc_stats(config.endpoint.stats.clone()));
    let (edge, origin) = (!config.peers.is_empty(), !config.listen.is_empty());
    metrics.for_roles(edge, origin);
    if edge {
        metrics.show(Arc::new(ingress::Counts));
    }
    metrics.show(Arc::new(metrics::Process));
    metrics
}

/// The origin's side, where the configuration has one: a listener for each
/// `--listen` address, its associations delivered to the upstream.
async fn start_origin(
    ctx: &Arc<Ctx>,
    config: &GatewayConfig,
    shards: Option<Arc<crate::shard::Shards>>,
) -> Result<Vec<Listener>, GatewayError> {
    let mut listeners = Vec::new();
    if config.listen.is_empty() {
        return Ok(listeners);
    }
    if config.upstream.is_none() {
        warn!(
            "no upstream (--upstream or --upstream-cmd): associations are accepted, \
             and every request that arrives over them is answered NotDelivered"
        );
    }
    let origin = Arc::new(origin::Origin::new(ctx.clone(), &upstream_plan(config))?);
    for addr in &config.listen {
        let origin = origin.clone();
        let l = Listener::bind_with(
            *addr,
            config.endpoint.clone(),
            ctx.metrics.serve.clone(),
            shards.clone(),
            move |assoc| origin.sink(assoc),
        )
        .await
        .map_err(|source| GatewayError::Listen {
            addr: *addr,
            source,
        })?;
        info!(listen = %l.local_addr, "accepting associations");
        listeners.push(l);
    }
    Ok(listeners)
}

/// The edge's side, where the configuration has one: its ingresses, bound
/// and serving, carrying to `--peer`; the ingresses and their tasks.
async fn start_edge(
    ctx: &Arc<Ctx>,
    config: &GatewayConfig,
    shutdown: &watch::Receiver<bool>,
) -> Result<(Vec<IngressUrl>, Vec<tokio::task::JoinHandle<()>>), GatewayError> {
    let (mut ingress, mut tasks) = (Vec::new(), Vec::new());
    if config.ingress.is_empty() {
        return Ok((ingress, tasks));
    }
    if config.peers.is_empty() {
        return Err(GatewayError::Config(
            "--ingress needs --peer quic://ADDR, tls://ADDR or npamp://ADDR".into(),
        ));
    }
    let edge = Arc::new(edge::Edge::with_peers(
        &config.peers,
        config.endpoint.clone(),
        ctx.clone(),
    ));
    // MCP clients hold sessions, each over its own association; the pool
    // serves only what comes without one, and is made when that first
    // comes.
    if config.ingress.iter().any(IngressUrl::uses_pool)
        && ctx.protocol != crate::bridge::ProtocolId::MCP
    {
        edge.open_pools();
    }
    let peer = Peers(&config.peers);
    let tls = config
        .ingress_tls
        .as_ref()
        .map(ingress::tls::IngressTls::server_config)
        .transpose()?;
    let live = ctx.live();
    ctx.set_live(Live {
        tls,
        ..Live::clone(&live)
    });
    for url in &config.ingress {
        let (bound, task) = url.clone().start(edge.clone(), shutdown.clone()).await?;
        info!(ingress = %bound, peer = %peer, "accepting JSON-RPC clients");
        ingress.push(bound);
        tasks.push(task);
    }
    Ok((ingress, tasks))
}

/// What differs between the configuration a gateway runs and a new one,
/// but cannot change while it runs (flag names).
fn needs_restart(old: &GatewayConfig, new: &GatewayConfig) -> Vec<&'static str> {
    let mut refused = Vec::new();
    let mut differs = |name: &'static str, same: bool| {
        if !same {
            refused.push(name);
        }
    };
    differs("listen", old.listen == new.listen);
    differs("ingress", old.ingress == new.ingress);
    differs("peer", old.peers == new.peers);
    differs("metrics", old.metrics == new.metrics);
    differs("capture", old.capture == new.capture);
    differs("forward-authorization", old.forwarding == new.forwarding);
    differs(
        "upstream",
        old.upstream == new.upstream
            && old.upstream_group == new.upstream_group
            && old.routes == new.routes
            && old.session_group == new.session_group,
    );
    differs("upstream-ca", old.upstream_ca == new.upstream_ca);
    differs(
        "upstream-header",
        old.upstream_headers == new.upstream_headers,
    );
    differs("protocol", old.protocol == new.protocol);
    differs("effect", old.effects == new.effects);
    differs("refuse-effect", old.policy == new.policy);
    differs("allow-method", old.allow_methods == new.allow_methods);
    differs("deny-method", old.deny_methods == new.deny_methods);
    differs("limits", old.limits == new.limits);
    differs("shards", old.shards == new.shards);
    differs(
        "identity",
        *old.endpoint.identity_seed == *new.endpoint.identity_seed,
    );
    differs(
        "ingress-client-ca",
        old.ingress_tls.as_ref().map(|t| (&t.client_ca, t.certless))
            == new.ingress_tls.as_ref().map(|t| (&t.client_ca, t.certless)),
    );
    refused
}

/// What differs between the configuration a gateway runs and a new one,
/// and changes while it runs (flag names; the ingress certificate, read
/// again, aside).
fn changes_live(old: &GatewayConfig, new: &GatewayConfig) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if old.endpoint.trust.current() != new.endpoint.trust.current() {
        changed.push("trust");
    }
    if old.tokens != new.tokens {
        changed.push("auth-token-file");
    }
    if old.browsers.hosts_differ(&new.browsers) {
        changed.push("allowed-host");
    }
    if old.browsers.origins_differ(&new.browsers) {
        changed.push("cors-origin");
    }
    if old.rate_limit != new.rate_limit {
        changed.push("rate-limit");
    }
    if old.oauth != new.oauth {
        changed.push("oauth");
    }
    changed
}

/// The resource server `config`'s `--oauth-*` make, if any.
fn verifier(config: &GatewayConfig) -> Result<Option<Arc<oauth::Verifier>>, GatewayError> {
    let Some(spec) = &config.oauth else {
        return Ok(None);
    };
    let tls = context::tls_roots_client_config(config.upstream_ca.as_deref())?;
    oauth::Verifier::new(spec.clone(), tls)
        .map(|v| Some(Arc::new(v)))
        .map_err(|e| GatewayError::Config(format!("--require-scope: {e}")))
}

/// A running gateway.
pub struct Gateway {
    pub(crate) ctx: Arc<Ctx>,
    /// Where each listener is (ports resolved).
    pub listening: Vec<PeerAddr>,
    pub ingress: Vec<IngressUrl>,
    pub metrics_addr: Option<SocketAddr>,
    /// The configuration it runs, as of its last reload.
    running: GatewayConfig,
    /// A digest of the ingress certificate files as last read.
    tls_files: Option<[u8; 32]>,
    shutdown: watch::Sender<bool>,
    listeners: Vec<Listener>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Gateway {
    /// The gateway's counters (what `/metrics` shows).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.ctx.metrics
    }

    /// Binds every listener and starts serving.
    pub async fn start(config: GatewayConfig) -> Result<Self, GatewayError> {
        let running = config.clone();
        let tls_files = config
            .ingress_tls
            .as_ref()
            .map(ingress::tls::IngressTls::digest);
        if matches!(
            config.endpoint.trust.current(),
            crate::handshake::Trust::InsecureAcceptAny
        ) {
            tracing::warn!("{INSECURE_PEERS_WARNING}");
        }
        let metrics = metrics_of(&config);
        let shards = match config.shards {
            0 => None,
            n => Some(Arc::new(crate::shard::Shards::start(n).map_err(|e| {
                GatewayError::Config(format!("cannot start {n} shards: {e}"))
            })?)),
        };
        let capture = match &config.capture {
            Some(spec) => Some(capture::Capture::start(spec).map_err(|e| {
                GatewayError::Config(format!("--capture {}: {e}", spec.path.display()))
            })?),
            None => None,
        };
        let oauth = verifier(&config)?;
        let ctx = Arc::new(
            Ctx::new(&config, metrics.clone())
                .with_shards(shards.clone())
                .with_capture(capture)
                .with_forwarding(config.forwarding.clone()),
        );
        if oauth.is_some() {
            let live = ctx.live();
            ctx.set_live(Live {
                oauth,
                ..Live::clone(&live)
            });
        }
        let (shutdown, watch_rx) = watch::channel(false);
        let listeners = start_origin(&ctx, &config, shards).await?;
        let listening = listeners.iter().map(|l| l.local_addr).collect();
        let (ingress, mut tasks) = start_edge(&ctx, &config, &watch_rx).await?;
        let mut metrics_addr = None;
        if let Some(addr) = config.metrics {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| GatewayError::Bind {
                    addr: addr.to_string(),
                    source,
                })?;
            metrics_addr = listener.local_addr().ok();
            info!(metrics = ?metrics_addr, "serving /metrics and /healthz");
            tasks.push(tokio::spawn(serve_metrics(
                listener,
                ctx.clone(),
                watch_rx.clone(),
            )));
        }
        Ok(Self {
            ctx,
            listening,
            ingress,
            metrics_addr,
            running,
            tls_files,
            shutdown,
            listeners,
            tasks,
        })
    }

    /// Applies a new configuration while serving (SIGHUP): the trusted peer
    /// keys (for handshakes from now on), bearer tokens, the OAuth settings
    /// (`--oauth-*`, `--require-scope`), web origins, rate limits and the
    /// ingress certificate (for connections from now on)
    /// change; no association or client connection is dropped. Whatever
    /// else differs is left as it runs and named in [`Reloaded::refused`]
    /// (it needs a restart). A new configuration that cannot be used (an
    /// unreadable certificate) changes nothing.
    pub fn reload(&mut self, new: GatewayConfig) -> Result<Reloaded, GatewayError> {
        let old = &self.running;
        let refused = needs_restart(old, &new);
        let mut changed = changes_live(old, &new);
        let trust = new.endpoint.trust.current();
        // The ingress certificate is read again: a renewed one usually
        // keeps its file names.
        let digest = new
            .ingress_tls
            .as_ref()
            .map(ingress::tls::IngressTls::digest);
        let tls = match (&new.ingress_tls, digest != self.tls_files) {
            (Some(files), true) if !refused.contains(&"ingress-client-ca") => {
                changed.push("ingress-cert");
                Some(files.server_config()?)
            }
            _ => self.ctx.live().tls.clone(),
        };
        let live = self.ctx.live();
        // A new resource server starts with no keys and no tokens known;
        // the same one keeps its own.
        let oauth = if changed.contains(&"oauth") {
            let oauth = verifier(&new)?;
            if let (Some(new), Some(old)) = (&oauth, &live.oauth) {
                new.adopt_keys(old);
            }
            oauth
        } else {
            live.oauth.clone()
        };
        let generation = live.generation + u64::from(!changed.is_empty());
        if !changed.is_empty() {
            old.endpoint.trust.replace(trust);
            let limiter = if old.rate_limit == new.rate_limit {
                live.limiter.clone()
            } else {
                new.rate_limit
                    .map(|l| Arc::new(ingress::limit::Limiter::new(l)))
            };
            self.ctx.set_live(Live {
                generation,
                tokens: new.tokens.clone(),
                browsers: new.browsers.clone(),
                limiter,
                tls,
                oauth,
            });
            let running = &mut self.running;
            running.tokens = new.tokens;
            running.oauth = new.oauth;
            running.browsers = new.browsers;
            running.rate_limit = new.rate_limit;
            if changed.contains(&"ingress-cert") {
                running.ingress_tls = new.ingress_tls;
                self.tls_files = digest;
            }
        }
        Ok(Reloaded {
            generation,
            changed,
            refused,
        })
    }

    /// Graceful shutdown: stop accepting, let in-flight requests finish
    /// (up to the drain timeout), close every association with CLOSE, and
    /// give the upstream sessions a moment to close.
    /// Returns the requests still in flight when the deadline hit.
    pub async fn shutdown(self) -> i64 {
        let _ = self.shutdown.send(true);
        for l in &self.listeners {
            l.stop_accepting();
        }
        let deadline = Instant::now() + self.ctx.limits.drain_timeout;
        let m = &self.ctx.metrics;
        while m.in_flight.load(Relaxed) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left = m.in_flight.load(Relaxed);
        if left > 0 {
            warn!(left, "drain deadline reached with requests in flight");
        }
        let closes = self
            .ctx
            .open_assocs()
            .into_iter()
            .map(|h| async move { h.close(0).await });
        futures_util::future::join_all(closes).await;
        // Upstream sessions end with their associations: WebSocket Close
        // frames, children given EOF and then SIGTERM (up to 4 s).
        let deadline = Instant::now() + UPSTREAM_STOP_LIMIT;
        while m.upstream_sessions.load(Relaxed) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for t in self.tasks {
            t.abort();
        }
        // What is left on the shards (a client connection with nothing in
        // flight) goes with them.
        if let Some(shards) = &self.ctx.shards {
            shards.stop();
        }
        left
    }
}

async fn serve_metrics(listener: TcpListener, ctx: Arc<Ctx>, shutdown: watch::Receiver<bool>) {
    loop {
        let mut s = shutdown.clone();
        let (tcp, _) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(_) => continue,
            },
            _ = s.wait_for(|v| *v) => return,
        };
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
                async move {
                    let (status, body) = match req.uri().path() {
                        "/metrics" => (200, ctx.metrics.render()),
                        "/healthz" | "/readyz" if *shutdown.borrow() => {
                            (503, "draining\n".to_owned())
                        }
                        "/healthz" => (
                            200,
                            format!("ok\nconfig generation {}\n", ctx.live().generation),
                        ),
                        // Liveness above; readiness: whether a request can
                        // go anywhere now.
                        "/readyz" => match ctx.metrics.readiness() {
                            Ok(()) => (200, "ready\n".to_owned()),
                            Err(why) => (503, format!("not ready: {why}\n")),
                        },
                        _ => (
                            404,
                            "not found: try /metrics, /healthz or /readyz\n".to_owned(),
                        ),
                    };
                    let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
                    *r.status_mut() = hyper::StatusCode::from_u16(status)
                        .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
                    r.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
                    );
                    Ok::<_, std::convert::Infallible>(r)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                .await;
        });
    }
}
