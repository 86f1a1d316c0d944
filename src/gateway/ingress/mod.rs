//! Where JSON-RPC clients come in: HTTP (POST, one request or batch per
//! body), WebSocket (one message per frame), TCP and stdio (one message per
//! line). HTTP shares the pool of associations; every WebSocket, TCP or
//! stdio client gets a session (an association) of its own.
//!
//! Each kind of listening ingress is one module behind [`Kind`]: the scheme
//! of its `--ingress` URL, whether its clients can present a bearer token,
//! and how it serves the [`Clients`] of one listener. `KINDS` registers
//! them; a URL ([`IngressUrl`]), the gateway's start-up, the config checks
//! and the metrics all go through it. Session clients share one loop
//! ([`client`]): a [`client::MessageSource`] in, an outbox of replies out.

pub mod body;
pub mod browser;
pub mod client;
pub mod conn;
pub mod http;
pub mod limit;
pub mod mcp;
pub mod replay;
pub mod response;
pub mod stdio;
pub mod streamed;
pub mod tcp;
pub mod tls;
pub mod ws;

pub use conn::{Client, Clients, Conn, Peer, Stream};

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use futures_util::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::edge::Edge;
use super::metrics::{Families, Metrics, Section};
use super::oauth::Held;

/// One kind of listening ingress.
pub trait Kind: Sync {
    /// The scheme of its plaintext `--ingress` URL, and its `ingress`
    /// label in the metrics.
    fn scheme(&self) -> &'static str;
    /// The scheme of its `--ingress` URL over TLS.
    fn tls_scheme(&self) -> &'static str;
    /// The scheme of its `--ingress` URL on a Unix domain socket, if it
    /// has one.
    fn unix_scheme(&self) -> Option<&'static str> {
        None
    }
    /// The ALPN protocols it offers over TLS, preferred first.
    fn alpn(&self) -> &'static [&'static [u8]];
    /// Whether its clients can present a bearer token
    /// (`--auth-token-file`); a client certificate they always can.
    fn carries_tokens(&self) -> bool;
    /// Serves the clients of one listener until shutdown.
    fn serve(&self, clients: Clients, edge: Arc<Edge>) -> BoxFuture<'static, ()>;
}

/// Every kind of listening ingress, in the order of their metric slots
/// ([`Ingress`]). A new kind is its module and one line here.
static KINDS: [&dyn Kind; 3] = [&http::Http, &ws::WebSocket, &tcp::Lines];

pub use super::metrics::Ingress;

/// Where a JSON-RPC message entered the gateway: a slot of the metrics, one
/// per kind of `KINDS` and one for stdio (`npamp-gateway connect`).
const _: () = assert!(Ingress::COUNT <= Ingress::SLOTS);

impl Ingress {
    /// HTTP clients, and the pool of associations that carries them.
    pub const HTTP: Ingress = Ingress(0);
    /// The stdio client of `npamp-gateway connect`.
    pub const STDIO: Ingress = Ingress(KINDS.len() as u8);
    /// How many there are.
    pub const COUNT: usize = KINDS.len() + 1;

    /// Every slot, in order.
    pub fn all() -> impl Iterator<Item = Ingress> {
        (0..Self::COUNT as u8).map(Ingress)
    }

    /// Its `ingress` label in the metrics.
    pub fn name(self) -> &'static str {
        match KINDS.get(self.index()) {
            Some(kind) => kind.scheme(),
            None => "stdio",
        }
    }
}

/// The per-ingress counters in `/metrics`, by the registry's names.
pub struct Counts;

impl Section for Counts {
    fn name(&self) -> &'static str {
        "ingresses"
    }

    fn render(&self, metrics: &Metrics, o: &mut Families) {
        type Count = fn(&Metrics, Ingress) -> u64;
        let families: [(&str, &str, Count); 2] = [
            (
                "npamp_requests_total",
                "JSON-RPC requests accepted from clients, by ingress.",
                Metrics::requests,
            ),
            (
                "npamp_notifications_total",
                "JSON-RPC notifications accepted from clients, by ingress.",
                Metrics::notifications,
            ),
        ];
        for (name, help, count) in families {
            let mut samples = o.counter(name, help);
            for i in Ingress::all() {
                samples.with(&[("ingress", i.name())], count(metrics, i) as f64);
            }
        }
    }
}

/// Where an ingress listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// A TCP address, plaintext.
    Tcp(std::net::SocketAddr),
    /// A TCP address, TLS (`https://`, `wss://`, `tls+tcp://`).
    Tls(std::net::SocketAddr),
    /// A Unix domain socket (`unix:///path`, `unix+lines:///path`), for
    /// local clients.
    Unix(std::path::PathBuf),
}

/// An `--ingress` URL: `SCHEME://HOST:PORT` with the plaintext or the TLS
/// scheme of one of `KINDS`, or `SCHEME:///PATH` with its Unix socket
/// scheme.
#[derive(Clone, PartialEq, Eq)]
pub struct IngressUrl {
    slot: Ingress,
    pub place: Place,
}

impl IngressUrl {
    /// The ingress with this scheme on `addr`; `None` for an unknown one.
    pub fn new(scheme: &str, addr: std::net::SocketAddr) -> Option<Self> {
        KINDS.iter().enumerate().find_map(|(i, k)| {
            let place = match scheme {
                s if s == k.scheme() => Place::Tcp(addr),
                s if s == k.tls_scheme() => Place::Tls(addr),
                _ => return None,
            };
            Some(Self {
                slot: Ingress(i as u8),
                place,
            })
        })
    }

    /// The ingress with this Unix socket scheme at `path`.
    fn unix(scheme: &str, path: std::path::PathBuf) -> Option<Self> {
        let i = KINDS.iter().position(|k| k.unix_scheme() == Some(scheme))?;
        Some(Self {
            slot: Ingress(i as u8),
            place: Place::Unix(path),
        })
    }

    /// A plaintext HTTP ingress on `addr`.
    pub fn http(addr: std::net::SocketAddr) -> Self {
        Self {
            slot: Ingress::HTTP,
            place: Place::Tcp(addr),
        }
    }

    pub fn kind(&self) -> &'static dyn Kind {
        KINDS[self.slot.index()]
    }

    /// Whether its requests go over the edge's pooled associations (HTTP:
    /// one request per exchange), not over a session's own association.
    pub fn uses_pool(&self) -> bool {
        self.slot == Ingress::HTTP
    }

    /// Whether it speaks TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.place, Place::Tls(_))
    }

    pub fn scheme(&self) -> &'static str {
        match self.place {
            Place::Tcp(_) => self.kind().scheme(),
            Place::Tls(_) => self.kind().tls_scheme(),
            Place::Unix(_) => self.kind().unix_scheme().unwrap_or("unix"),
        }
    }

    /// Binds it and serves its clients until `shutdown`; a TLS ingress
    /// with the gateway's ingress certificate ([`crate::gateway::context::Live`]).
    pub(crate) async fn start(
        self,
        edge: Arc<Edge>,
        shutdown: Shutdown,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), crate::gateway::settings::GatewayError> {
        let bind = |source| crate::gateway::settings::GatewayError::Bind {
            addr: self.to_string(),
            source,
        };
        if self.is_tls() && edge.ctx.live().tls.is_none() {
            return Err(crate::gateway::settings::GatewayError::Config(format!(
                "{self}: a TLS ingress needs --ingress-cert and --ingress-key"
            )));
        }
        let (listener, place) = match &self.place {
            Place::Tcp(a) | Place::Tls(a) => {
                let l = TcpListener::bind(a).await.map_err(bind)?;
                let bound = l.local_addr().map_err(bind)?;
                let place = match self.place {
                    Place::Tls(_) => Place::Tls(bound),
                    _ => Place::Tcp(bound),
                };
                (conn::Listener::Tcp(l), place)
            }
            Place::Unix(path) => (
                conn::Listener::unix(path).map_err(bind)?,
                self.place.clone(),
            ),
        };
        let clients = Clients {
            permits: Arc::new(Semaphore::new(edge.ctx.limits.max_connections)),
            sources: Arc::new(limit::Places::new(
                usize::MAX,
                edge.ctx.limits.max_connections_per_source,
            )),
            listener,
            shutdown,
            tls: self
                .is_tls()
                .then(|| conn::TlsCache::new(self.kind().alpn())),
            ctx: edge.ctx.clone(),
            ingress: self.slot,
        };
        let bound = Self { place, ..self };
        let task = tokio::spawn(bound.kind().serve(clients, edge));
        Ok((bound, task))
    }
}

impl std::str::FromStr for IngressUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let expected = KINDS
            .iter()
            .flat_map(|k| [k.scheme(), k.tls_scheme()])
            .map(|scheme| format!("{scheme}://ADDR"))
            .chain(
                KINDS
                    .iter()
                    .filter_map(|k| k.unix_scheme())
                    .map(|scheme| format!("{scheme}:///PATH")),
            )
            .collect::<Vec<_>>()
            .join(", ");
        let bad = |why: &str| format!("bad ingress {s:?}: {why}: expected {expected}");
        if let Some((scheme, path)) = s.split_once("://")
            && let scheme = scheme.to_ascii_lowercase()
            && KINDS
                .iter()
                .any(|k| k.unix_scheme() == Some(scheme.as_str()))
        {
            if !path.starts_with('/') || path.len() < 2 {
                return Err(bad(
                    "a Unix socket needs an absolute path, as in unix:///run/npamp.sock",
                ));
            }
            return Self::unix(&scheme, path.into()).ok_or_else(|| bad("unknown scheme"));
        }
        let url: crate::assoc::SchemeAddr = s.parse().map_err(bad)?;
        Self::new(&url.scheme, url.addr).ok_or_else(|| bad("unknown scheme"))
    }
}

impl std::fmt::Display for IngressUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.place {
            Place::Tcp(a) | Place::Tls(a) => write!(f, "{}://{a}", self.scheme()),
            Place::Unix(path) => write!(f, "{}://{}", self.scheme(), path.display()),
        }
    }
}

impl std::fmt::Debug for IngressUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Stops accepting when the value turns `true`.
pub type Shutdown = watch::Receiver<bool>;

async fn stopped(mut s: Shutdown) {
    let _ = s.wait_for(|v| *v).await;
}

/// Why a client is not let in: the HTTP status, the `WWW-Authenticate`
/// value, and what the body says.
pub(super) struct Refusal {
    pub status: u16,
    pub challenge: Option<String>,
    pub why: String,
}

/// A client let in: who it is, and which scopes of `--require-scope` its
/// access token holds (all, for a client let in otherwise), by the rules
/// of the verifier that checked it. A client is held to the rules it was
/// let in under: a WebSocket opened before a reload keeps them (its bits
/// mean nothing under other rules), a new connection gets the new ones.
#[derive(Clone, Debug)]
pub struct Admitted {
    pub key: limit::ClientKey,
    pub held: Held,
    /// The verifier whose rules `held` answers.
    pub rules: Option<Arc<super::oauth::Verifier>>,
    /// Unix seconds: until when its access token may be used (none for a
    /// client let in otherwise).
    pub until: Option<u64>,
}

impl Admitted {
    /// A client let in without an access token.
    pub fn by(key: limit::ClientKey) -> Self {
        Self {
            key,
            held: Held::ALL,
            rules: None,
            until: None,
        }
    }

    /// Whether its access token has run out (a WebSocket outlives it).
    pub fn expired(&self) -> bool {
        self.until.is_some_and(super::oauth::Grant::expired)
    }

    /// The scopes of `--require-scope` it lacks for `text` (one message or
    /// a batch, `scanned`), with the challenge and the refusal to answer
    /// it with; `None` where it lacks none. Counted.
    fn lacks(
        &self,
        ctx: &super::context::Ctx,
        text: &[u8],
        scanned: &crate::jsonrpc::Scanned,
    ) -> Option<(String, crate::relay::Failure)> {
        let oauth = self.rules.as_ref().filter(|o| o.has_rules())?;
        lacks_scopes(ctx, oauth, self.held, text, scanned)
    }
}

/// Who a client is, if it is let in, as [`identify`] says, or, on an OAuth
/// edge, by its access token (a client certificate lets it in as one
/// does): the refusal otherwise.
async fn authenticate(
    ctx: &super::context::Ctx,
    headers: &hyper::HeaderMap,
    certificate: Option<u64>,
    from: Peer,
) -> Result<Admitted, Refusal> {
    use super::oauth::{Verdict, challenge};
    let live = ctx.live();
    let Some(oauth) = live.oauth.as_ref().filter(|_| certificate.is_none()) else {
        return identify(ctx, &live, headers, certificate, from)
            .map(Admitted::by)
            .ok_or_else(|| Refusal {
                status: 401,
                challenge: Some("Bearer".into()),
                why: "unauthorized: missing or unknown bearer token".into(),
            });
    };
    let authorization = headers
        .get(hyper::header::AUTHORIZATION)
        .map(hyper::header::HeaderValue::as_bytes);
    let verdict = oauth.verify(authorization).await;
    let why = match &verdict {
        Verdict::Allowed(grant) => {
            return Ok(Admitted {
                key: limit::ClientKey::Subject(grant.who),
                held: grant.held,
                rules: Some(oauth.clone()),
                until: Some(grant.until),
            });
        }
        Verdict::Unavailable(why) => {
            return Err(Refusal {
                status: 503,
                challenge: None,
                why: format!("cannot check access tokens now: {why}"),
            });
        }
        Verdict::Missing => "unauthorized: a bearer access token is required".to_owned(),
        Verdict::Invalid(why) => format!("unauthorized: {why}"),
        Verdict::InsufficientScope(missing) => {
            format!("forbidden: the token lacks the scope {}", missing.join(" "))
        }
    };
    ctx.metrics.unauthorized.fetch_add(1, Relaxed);
    let (status, value) = challenge(oauth.spec(), &verdict).unwrap_or((401, "Bearer".into()));
    Err(Refusal {
        status,
        challenge: Some(value),
        why,
    })
}

/// [`Admitted::lacks`], by `oauth`'s rules.
fn lacks_scopes(
    ctx: &super::context::Ctx,
    oauth: &super::oauth::Verifier,
    held: Held,
    text: &[u8],
    scanned: &crate::jsonrpc::Scanned,
) -> Option<(String, crate::relay::Failure)> {
    use crate::jsonrpc::{Kind as Message, Scanned, carriage::method_of};
    // A method that cannot be read for certain needs every scope a rule
    // names for any method: the scanner refuses such text before, so this
    // holds by construction.
    let unreadable = || oauth.lacks_all(held);
    // `kind`'s ranges index `text`; `message` is the one message.
    let lacks = |kind: &Message, message: &[u8]| match kind {
        Message::Request { method, .. } | Message::Notification { method } => {
            match method_of(text, method) {
                Some(name) => oauth.lacks(held, &name, message),
                None => unreadable(),
            }
        }
        _ => None,
    };
    let lacking = match scanned {
        Scanned::Single(kind) => lacks(kind, text)?,
        Scanned::Batch(elements) => elements
            .iter()
            .filter_map(|e| lacks(e.kind.as_ref().ok()?, text.get(e.range.clone())?))
            .reduce(|mut all, one| {
                all.join(one);
                all
            })?,
    };
    ctx.metrics.unauthorized.fetch_add(1, Relaxed);
    let why = format!(
        "forbidden: the token lacks the scope {}",
        lacking.missing.join(" ")
    );
    Some((
        super::oauth::scope_challenge(oauth.spec(), &lacking),
        crate::relay::Failure::Forbidden(why),
    ))
}

/// Who a client is, if it is let in: by its client certificate (its
/// fingerprint, `certificate`), else by the accepted token in its request
/// headers, else (when the gateway asks for no token) by its source
/// address. `None` for a client without an accepted token where one is
/// asked for; counted.
fn identify(
    ctx: &super::context::Ctx,
    live: &super::context::Live,
    headers: &hyper::HeaderMap,
    certificate: Option<u64>,
    from: Peer,
) -> Option<limit::ClientKey> {
    if let Some(fingerprint) = certificate {
        return Some(limit::ClientKey::Certificate(fingerprint));
    }
    let Some(tokens) = &live.tokens else {
        return Some(from.key());
    };
    let token = tokens.matching(
        headers
            .get(hyper::header::AUTHORIZATION)
            .map(hyper::header::HeaderValue::as_bytes),
    );
    if token.is_none() {
        ctx.metrics.unauthorized.fetch_add(1, Relaxed);
    }
    token
        .and_then(|i| tokens.holder(i))
        .map(limit::ClientKey::Token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_of_every_ingress_are_shown_by_name() {
        let m = Metrics::default();
        m.show(Arc::new(Counts));
        m.request(Ingress::HTTP);
        m.notification(Ingress::STDIO);
        let text = m.render();
        assert!(
            text.contains("npamp_requests_total{ingress=\"http\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("npamp_requests_total{ingress=\"ws\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("npamp_notifications_total{ingress=\"stdio\"} 1"),
            "{text}"
        );
        assert_eq!(
            text.matches("# TYPE npamp_requests_total counter").count(),
            1
        );
        // A second registration is not shown twice.
        m.show(Arc::new(Counts));
        assert_eq!(m.render().matches("# TYPE npamp_requests_total").count(), 1);
    }

    #[test]
    fn ingress_urls_parse_print_and_name_their_metric_slot() {
        for (text, scheme, printed) in [
            ("http://127.0.0.1:8545", "http", "http://127.0.0.1:8545"),
            ("WS://127.0.0.1:8546/", "ws", "ws://127.0.0.1:8546"),
            ("tcp://[::1]:9000", "tcp", "tcp://[::1]:9000"),
            ("https://127.0.0.1:8443", "https", "https://127.0.0.1:8443"),
            ("wss://127.0.0.1:8444", "wss", "wss://127.0.0.1:8444"),
            (
                "TLS+TCP://127.0.0.1:9001",
                "tls+tcp",
                "tls+tcp://127.0.0.1:9001",
            ),
        ] {
            let url: IngressUrl = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(url.scheme(), scheme);
            assert_eq!(url.to_string(), printed);
            assert_eq!(url.is_tls(), !["http", "ws", "tcp"].contains(&scheme));
            assert_eq!(url.slot.name(), url.kind().scheme());
            assert_eq!(printed.parse::<IngressUrl>(), Ok(url));
        }
        let unix: IngressUrl = "unix:///run/npamp.sock".parse().expect("unix");
        assert_eq!(unix.place, Place::Unix("/run/npamp.sock".into()));
        assert_eq!(unix.scheme(), "unix");
        assert_eq!(unix.kind().scheme(), "http");
        let lines: IngressUrl = "unix+lines:///tmp/l.sock".parse().expect("unix+lines");
        assert_eq!(lines.kind().scheme(), "tcp");
        assert_eq!(lines.to_string(), "unix+lines:///tmp/l.sock");
        let e = "unix://relative.sock".parse::<IngressUrl>().unwrap_err();
        assert!(e.contains("absolute path"), "{e}");
        for bad in ["udp://127.0.0.1:1", "http://127.0.0.1", "127.0.0.1:80"] {
            let e = bad.parse::<IngressUrl>().unwrap_err();
            assert!(
                e.contains(bad)
                    && e.contains("http://ADDR, https://ADDR, ws://ADDR, wss://ADDR, tcp://ADDR, tls+tcp://ADDR, unix:///PATH, unix+lines:///PATH"),
                "{e}"
            );
        }
    }

    #[test]
    fn every_metric_slot_has_its_own_name() {
        let names: Vec<_> = Ingress::all().map(Ingress::name).collect();
        assert_eq!(names, ["http", "ws", "tcp", "stdio"]);
        assert_eq!(
            IngressUrl::http(([127, 0, 0, 1], 1).into()).scheme(),
            "http"
        );
    }
}
