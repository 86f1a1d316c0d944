//! Where an origin delivers: the upstream JSON-RPC server, one of several
//! kinds.
//!
//! Each kind of upstream is one module behind [`Kind`]: the addresses it
//! takes (a URL's scheme, or a command), the protocol it is for when it is
//! for one only (MCP's kinds), and how its messages are delivered:
//! [`Delivery::Requests`], each request a POST of its own (HTTP JSON-RPC,
//! [`http`]), or [`Delivery::Session`], one session per association, run
//! until it fails (WebSocket, IPC, a child process, MCP over HTTP or
//! stdio). `KINDS` registers them; parsing `--upstream`, the config checks
//! and the origin all go through it. A new kind is its module and one line
//! there.
//!
//! What the kinds share (TLS, `--upstream-header`, the room under
//! `--max-in-flight`, HTTP clients) is [`Env`]; what runs a session and
//! moves it between members of a group is the origin's
//! ([`super::origin`]).

pub mod child;
pub mod group;
pub mod http;
pub mod http_client;
pub mod mcp_http;
pub mod mcp_revision;
pub mod mcp_stdio;
pub mod pool;
pub mod process;
pub mod socket;
pub mod ws;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

use futures_util::future::BoxFuture;
use hyper::header::{HeaderName, HeaderValue};
use tokio::sync::Semaphore;

use super::context::Ctx;
use super::outbox::Inbox;
use super::session::Session;
use crate::bridge::ProtocolId;
use crate::shard::PerShard;
use http_client::{Connector, HttpsClient};

/// One kind of upstream.
pub trait Kind: Sync {
    /// Its name in logs and errors.
    fn name(&self) -> &'static str;
    /// Reads `url` (`--upstream`) when its scheme is one of this kind's:
    /// `None` when it is not, else the address or why it is a bad one.
    /// A kind of commands (`--upstream-cmd`) reads no URL.
    fn parse(&self, url: &str) -> Option<Result<Address, String>>;
    /// Whether it delivers to `address` for a gateway of `protocol`.
    fn takes(&self, address: &Address, protocol: ProtocolId) -> bool;
    /// Whether `--upstream-header` goes to it.
    fn takes_headers(&self) -> bool {
        false
    }
    /// How its messages are delivered.
    fn delivery(&self) -> Delivery;

    /// Whether it presents a credential an edge forwarded
    /// (`--forward-authorization`): an HTTP upstream does.
    fn takes_credentials(&self) -> bool {
        false
    }

    /// Whether it gives each request a stream of its own, on which what
    /// belongs to the request comes (MCP over Streamable HTTP); a session
    /// kind without one (stdio, a WebSocket) names the request in the
    /// message, where its protocol can ([`crate::gateway::session::Upstreamed`]).
    fn streams_per_request(&self) -> bool {
        false
    }
}

/// How a kind's messages are delivered.
#[derive(Clone, Copy)]
pub enum Delivery {
    /// Each request or notification on its own, by a task of its own
    /// ([`http::Requests`]); several such upstreams make a group, with
    /// routes.
    Requests,
    /// One session per association ([`super::session::Session::origin`]),
    /// run by this function until it fails: it returns why.
    Session(RunSession),
}

/// Runs one upstream session until it fails or the association ends;
/// returns why.
pub type RunSession =
    for<'a> fn(&'a Address, &'a Env, &'a Session, &'a mut Inbox) -> BoxFuture<'a, String>;

/// Every kind of upstream. The first that takes an address delivers to it,
/// so a kind for one protocol comes before the general kind of its
/// addresses. A new kind is its module and one line here.
static KINDS: [&dyn Kind; 7] = [
    &mcp_http::McpHttp,
    &mcp_stdio::McpStdio,
    &http::Http,
    &ws::WebSocket,
    &socket::Ipc,
    &socket::Tcp,
    &child::Command,
];

/// An upstream's address, in the form its kind reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// A URL read as a URI (`http://`, `https://`, `http+unix://`).
    Uri(hyper::Uri),
    /// A URL kept as it was given (`ws://`, `wss://`).
    Url(String),
    /// A path on this machine (`unix:///run/geth.ipc`).
    Path(PathBuf),
    /// A TCP server's `HOST:PORT` (`tcp://127.0.0.1:2087`).
    Tcp(String),
    /// A program and its arguments (`--upstream-cmd`).
    Command(Vec<String>),
}

/// Where an origin delivers (`--upstream`, `--upstream-cmd`): an address
/// that some kind of upstream takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream(Address);

impl Upstream {
    /// A program and its arguments, speaking JSON-RPC on its stdio; `None`
    /// when `argv` is empty.
    pub fn command(argv: Vec<String>) -> Option<Self> {
        (!argv.is_empty()).then_some(Self(Address::Command(argv)))
    }

    pub fn address(&self) -> &Address {
        &self.0
    }

    /// The kind that delivers to it for a gateway of `protocol`.
    pub fn kind(&self, protocol: ProtocolId) -> Option<&'static dyn Kind> {
        KINDS.iter().copied().find(|k| k.takes(&self.0, protocol))
    }

    /// Whether it is served request by request for `protocol` (else as
    /// sessions).
    pub fn per_request(&self, protocol: ProtocolId) -> bool {
        self.kind(protocol)
            .is_some_and(|k| matches!(k.delivery(), Delivery::Requests))
    }

    /// Whether `--upstream-header` goes to it for `protocol`.
    pub fn takes_headers(&self, protocol: ProtocolId) -> bool {
        self.kind(protocol).is_some_and(|k| k.takes_headers())
    }

    /// Its URI, when it is an HTTP one (`http://`, `https://`,
    /// `http+unix://`).
    pub fn http_uri(&self) -> Option<&hyper::Uri> {
        match &self.0 {
            Address::Uri(uri) => Some(uri),
            _ => None,
        }
    }
}

/// `--upstream`: a URL some kind reads.
impl FromStr for Upstream {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match KINDS.iter().find_map(|k| k.parse(s)) {
            Some(address) => address.map(Self),
            None => Err(format!(
                "bad URL {s:?}: expected http://, https://, http+unix:///PATH, ws://, wss://, unix:///PATH or tcp://HOST:PORT"
            )),
        }
    }
}

/// An upstream as it may be shown to clients, peers and logs: no user
/// information, path, query or command arguments (see `redact`).
impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use super::redact;
        match &self.0 {
            Address::Uri(u) => redact::PublicUrl::of_uri(u).fmt(f),
            Address::Url(u) => redact::PublicUrl::of(u).fmt(f),
            Address::Command(argv) => f.write_str(&redact::program(argv)),
            Address::Path(path) => write!(f, "unix://{}", path.display()),
            Address::Tcp(host_port) => write!(f, "tcp://{host_port}"),
        }
    }
}

/// What an origin delivers to, as its configuration says.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// `--upstream` or `--upstream-cmd` (the first, when repeated); `None`:
    /// every request is answered NotDelivered.
    pub upstream: Option<Upstream>,
    /// HTTP upstreams served as a group (empty: `upstream` alone).
    pub group: Vec<hyper::Uri>,
    /// Methods matching a glob go to these HTTP upstreams, in order.
    pub routes: Vec<(String, hyper::Uri)>,
    /// Session upstreams served as a group (empty: `upstream` alone).
    pub sessions: Vec<Upstream>,
    /// `--upstream-header`.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `--upstream-ca`.
    pub ca: Option<PathBuf>,
}

/// What the kinds of an origin share.
pub struct Env {
    pub ctx: Arc<Ctx>,
    /// TLS for an https:// or wss:// upstream.
    pub tls: Arc<rustls::ClientConfig>,
    /// Connections to HTTP upstreams, with TLS and a connect timeout.
    pub connector: Connector,
    /// `--upstream-header`: sent with every HTTP request and WebSocket
    /// handshake to the upstream.
    pub headers: Arc<[(HeaderName, HeaderValue)]>,
    /// Bounds the upstream calls in flight (`--max-in-flight`).
    pub permits: Arc<Semaphore>,
    /// Bounds the upstream child processes running
    /// (`--max-upstream-processes`).
    pub children: Arc<Semaphore>,
    /// HTTP clients whose connections sessions share, one per shard, so
    /// that a session and its connections share a thread; made when a
    /// session first asks.
    clients: OnceLock<PerShard<HttpsClient>>,
    /// What each MCP upstream speaks, as found ([`mcp_revision`]).
    pub revisions: Arc<mcp_revision::Revisions>,
}

impl Env {
    pub fn new(
        ctx: Arc<Ctx>,
        tls: Arc<rustls::ClientConfig>,
        headers: Arc<[(HeaderName, HeaderValue)]>,
    ) -> Self {
        let connector = Connector::new((*tls).clone(), ctx.limits.upstream_connect_timeout);
        Self {
            permits: Arc::new(Semaphore::new(ctx.limits.max_in_flight)),
            children: Arc::new(Semaphore::new(ctx.limits.max_upstream_processes)),
            clients: OnceLock::new(),
            revisions: Arc::default(),
            ctx,
            tls,
            connector,
            headers,
        }
    }

    /// This shard's pooled HTTP client.
    pub fn https_client(&self) -> &HttpsClient {
        let clients = self.clients.get_or_init(|| {
            let max_idle = self.ctx.limits.max_in_flight.min(1024);
            PerShard::new(self.ctx.shards.as_deref(), || {
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .pool_idle_timeout(http::IDLE_TIMEOUT)
                    .pool_max_idle_per_host(max_idle)
                    .build(self.connector.clone())
            })
        });
        clients.get()
    }
}

/// `url` as a URI with a host, when its scheme is one of `schemes`: `None`
/// when it is not, else the URI or why it is a bad one.
fn uri_of(url: &str, schemes: &[&str]) -> Option<Result<hyper::Uri, String>> {
    let (scheme, _) = url.split_once("://")?;
    if !schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
        return None;
    }
    let uri = match url.parse::<hyper::Uri>() {
        Ok(uri) => uri,
        Err(e) => return Some(Err(format!("bad URL {url:?}: {e}"))),
    };
    Some(match uri.host() {
        Some(_) => Ok(uri),
        None => Err(format!("bad URL {url:?}: no host")),
    })
}

/// How the writing of an upstream session's messages ended.
enum Written {
    /// A write failed: why.
    Failed(String),
    /// The queue closed.
    Closed,
    /// The last message was written (the one `last` picked).
    Last,
}

/// What answers a message in the upstream's place, if it does (its
/// answer): an MCP member of another era ([`mcp_revision`]).
pub type AnswerHere<'a> = &'a (dyn Fn(&[u8]) -> Option<bytes::Bytes> + Sync);

/// Writes each message of `rx` to `w` in the stream's framing (a line, or
/// LSP's headers), flushing when none is left queued, each write within the
/// stall timeout ([`write_within`]), until one fails, the queue closes, or
/// a message that `last` picks was written. A message `here` answers in the
/// upstream's place is not written: its answer goes to the session.
async fn write_messages<W>(
    ctx: &Ctx,
    into: &str,
    framing: &crate::framing::Decided,
    (rx, w): (&mut Inbox, &mut W),
    last: impl Fn(&[u8]) -> bool,
    here: Option<(&Session, AnswerHere<'_>)>,
) -> Written
where
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    while let Some(text) = rx.recv().await {
        if let Some((session, answer)) = here
            && let Some(answer) = answer(&text)
        {
            session.on_local_message(answer).await;
            continue;
        }
        let is_last = last(&text);
        let one = async {
            crate::framing::write_message(w, framing.get(), &text).await?;
            if rx.is_empty() || is_last {
                w.flush().await?;
            }
            Ok::<_, std::io::Error>(())
        };
        if let Err(why) = write_within(ctx, into, one).await {
            return Written::Failed(why);
        }
        if is_last {
            return Written::Last;
        }
    }
    Written::Closed
}

/// One write to an upstream session, given up when it does not finish within
/// the stall timeout. An upstream that takes nothing holds up, in turn, its
/// queue, the association's reader and the PONGs the peer waits for: it is
/// restarted instead (what waited for it is answered NotDelivered), before
/// the peer's keepalive gives the whole association up.
async fn write_within<E: std::fmt::Display>(
    ctx: &Ctx,
    into: &str,
    write: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), String> {
    let stall = ctx.limits.stall_timeout;
    match tokio::time::timeout(stall, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("writing to {into}: {e}")),
        Err(_) => {
            ctx.metrics.stalled_upstreams.fetch_add(1, Relaxed);
            Err(format!(
                "the upstream took nothing from {into} for {:.1} s (--stall-timeout)",
                stall.as_secs_f64()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Address, Delivery, Upstream};
    use crate::bridge::ProtocolId;

    fn kind_of(url: &str, protocol: ProtocolId) -> &'static str {
        let upstream: Upstream = url.parse().unwrap_or_else(|e| panic!("{url}: {e}"));
        upstream.kind(protocol).map_or("none", |k| k.name())
    }

    #[test]
    fn each_address_goes_to_its_kind_and_mcp_to_mcp_kinds() {
        let json = ProtocolId::JSONRPC_EXPERIMENTAL;
        let mcp = ProtocolId::MCP;
        assert_eq!(kind_of("http://127.0.0.1:8545", json), "http");
        assert_eq!(kind_of("https://node.example/rpc", json), "http");
        assert_eq!(kind_of("http+unix:///run/rpc.sock", json), "http");
        assert_eq!(kind_of("http://127.0.0.1:8545/mcp", mcp), "mcp-http");
        assert_eq!(kind_of("ws://127.0.0.1:8546", json), "websocket");
        assert_eq!(kind_of("wss://node.example", mcp), "websocket");
        assert_eq!(kind_of("unix:///run/geth.ipc", json), "ipc");
        assert_eq!(kind_of("tcp://127.0.0.1:2087", json), "tcp");
        let tcp: Upstream = "tcp://[::1]:2087".parse().expect("a URL");
        assert_eq!(tcp.address(), &Address::Tcp("[::1]:2087".into()));
        assert_eq!(tcp.to_string(), "tcp://[::1]:2087");
        let cmd = Upstream::command(vec!["node".into(), "server.js".into()]);
        let cmd = cmd.expect("a command");
        assert_eq!(cmd.kind(json).map(|k| k.name()), Some("command"));
        assert_eq!(cmd.kind(mcp).map(|k| k.name()), Some("mcp-stdio"));
        assert!(Upstream::command(Vec::new()).is_none());
    }

    #[test]
    fn only_plain_http_is_served_request_by_request() {
        let http: Upstream = "http://127.0.0.1:1".parse().expect("a URL");
        assert!(http.per_request(ProtocolId::JSONRPC_EXPERIMENTAL));
        assert!(!http.per_request(ProtocolId::MCP));
        let ws: Upstream = "ws://127.0.0.1:1".parse().expect("a URL");
        assert!(!ws.per_request(ProtocolId::JSONRPC_EXPERIMENTAL));
        assert!(
            ws.takes_headers(ProtocolId::JSONRPC_EXPERIMENTAL)
                && http.takes_headers(ProtocolId::MCP)
        );
        let ipc: Upstream = "unix:///run/geth.ipc".parse().expect("a URL");
        assert!(!ipc.takes_headers(ProtocolId::JSONRPC_EXPERIMENTAL));
        assert!(matches!(
            ipc.kind(ProtocolId::JSONRPC_EXPERIMENTAL)
                .map(|k| k.delivery()),
            Some(Delivery::Session(_))
        ));
        assert_eq!(ipc.address(), &Address::Path("/run/geth.ipc".into()));
    }

    #[test]
    fn a_url_no_kind_reads_is_refused_naming_the_forms() {
        for bad in [
            "ftp://x",
            "tcp://127.0.0.1",
            "tcp://127.0.0.1:0",
            "tcp://host:1/path",
            "unix://relative",
            "http://",
        ] {
            let e = bad.parse::<Upstream>().expect_err(bad);
            assert!(e.starts_with(&format!("bad URL {bad:?}")), "{bad}: {e}");
        }
    }
}
