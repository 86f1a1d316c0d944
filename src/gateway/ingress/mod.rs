//! Where JSON-RPC clients come in: HTTP (POST, one request or batch per
//! body), WebSocket (one message per frame), TCP and stdio (one message per
//! line). HTTP shares the pool of associations; every WebSocket, TCP or
//! stdio client gets a session (an association) of its own.
//!
//! Each kind of listening ingress is one module behind [`Kind`]: the scheme
//! of its `--ingress` URL, whether its clients can present a bearer token,
//! and how it serves the [`Clients`] of one listener. [`KINDS`] registers
//! them; a URL ([`IngressUrl`]), the gateway's start-up, the config checks
//! and the metrics all go through it. Session clients share one loop
//! ([`client`]): a [`client::MessageSource`] in, an outbox of replies out.

pub mod browser;
pub mod client;
pub mod http;
pub mod mcp;
pub mod response;
pub mod stdio;
pub mod tcp;
pub mod ws;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tracing::{debug, warn};

use super::edge::Edge;

/// One kind of listening ingress.
pub trait Kind: Sync {
    /// The scheme of its `--ingress` URL, and its `ingress` label in the
    /// metrics.
    fn scheme(&self) -> &'static str;
    /// Whether its clients can present a bearer token
    /// (`--auth-token-file`).
    fn carries_tokens(&self) -> bool;
    /// Serves the clients of one listener until shutdown.
    fn serve(&self, clients: Clients, edge: Arc<Edge>) -> BoxFuture<'static, ()>;
}

/// Every kind of listening ingress, in the order of their metric slots
/// ([`Ingress`]). A new kind is its module and one line here.
static KINDS: [&dyn Kind; 3] = [&http::Http, &ws::WebSocket, &tcp::Lines];

/// Where a JSON-RPC message entered the gateway: a slot of the metrics, one
/// per kind of [`KINDS`] and one for stdio (`npamp-gateway connect`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ingress(u8);

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

    /// Its index in the metrics' arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Its `ingress` label in the metrics.
    pub fn name(self) -> &'static str {
        match KINDS.get(self.index()) {
            Some(kind) => kind.scheme(),
            None => "stdio",
        }
    }
}

/// An `--ingress` URL: `SCHEME://HOST:PORT` with the scheme of one of
/// [`KINDS`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IngressUrl {
    slot: Ingress,
    pub addr: std::net::SocketAddr,
}

impl IngressUrl {
    /// The ingress of this kind on `addr`; `None` for an unknown scheme.
    pub fn new(scheme: &str, addr: std::net::SocketAddr) -> Option<Self> {
        let i = KINDS.iter().position(|k| k.scheme() == scheme)?;
        Some(Self {
            slot: Ingress(i as u8),
            addr,
        })
    }

    /// An HTTP ingress on `addr`.
    pub fn http(addr: std::net::SocketAddr) -> Self {
        Self {
            slot: Ingress::HTTP,
            addr,
        }
    }

    pub fn kind(&self) -> &'static dyn Kind {
        KINDS[self.slot.index()]
    }

    pub fn scheme(&self) -> &'static str {
        self.kind().scheme()
    }

    /// The same kind of ingress on `addr` (the bound port).
    pub fn at(self, addr: std::net::SocketAddr) -> Self {
        Self { addr, ..self }
    }

    /// Binds it and serves its clients until `shutdown`.
    pub(crate) async fn start(
        self,
        edge: Arc<Edge>,
        shutdown: Shutdown,
    ) -> std::io::Result<(Self, tokio::task::JoinHandle<()>)> {
        let listener = TcpListener::bind(self.addr).await?;
        let bound = self.at(listener.local_addr()?);
        let clients = Clients {
            permits: Arc::new(Semaphore::new(edge.ctx.limits.max_connections)),
            listener,
            shutdown,
            ingress: self.slot,
        };
        Ok((bound, tokio::spawn(self.kind().serve(clients, edge))))
    }
}

impl std::str::FromStr for IngressUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let expected = KINDS
            .iter()
            .map(|k| format!("{}://ADDR", k.scheme()))
            .collect::<Vec<_>>()
            .join(", ");
        let bad = |why: &str| format!("bad ingress {s:?}: {why}: expected {expected}");
        let url: crate::assoc::SchemeAddr = s.parse().map_err(bad)?;
        Self::new(&url.scheme, url.addr).ok_or_else(|| bad("unknown scheme"))
    }
}

impl std::fmt::Display for IngressUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme(), self.addr)
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

/// The client connections of one listener, at most `--max-connections` at
/// once (a further one waits in the listen backlog), until shutdown.
pub struct Clients {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    shutdown: Shutdown,
    /// Which ingress they came in by.
    pub ingress: Ingress,
}

/// One client connection; its slot is given back when this is dropped.
pub struct Client {
    pub tcp: tokio::net::TcpStream,
    pub from: std::net::SocketAddr,
    pub permit: OwnedSemaphorePermit,
}

impl Clients {
    /// The next client connection; `None` once shutdown begins.
    pub async fn next(&mut self) -> Option<Client> {
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        loop {
            tokio::select! {
                a = self.listener.accept() => match a {
                    Ok((tcp, from)) => {
                        let _ = tcp.set_nodelay(true);
                        return Some(Client { tcp, from, permit });
                    }
                    Err(e) => {
                        // Out of descriptors and the like: pause, do not spin.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = stopped(self.shutdown.clone()) => return None,
            }
        }
    }

    /// Turns `true` when shutdown begins.
    pub fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }
}

/// A session client's socket: the kernel's send buffer is fixed at
/// `--session-buffer` (at least 64 KiB) instead of growing to megabytes, so
/// a client that does not read holds that much of the kernel's memory at
/// most, and is noticed (its writes block) as soon as that is full.
fn bound_send_buffer(tcp: &tokio::net::TcpStream, ctx: &super::Ctx) {
    let n = ctx.limits.session_buffer.max(64 << 10);
    if let Err(e) = socket2::SockRef::from(tcp).set_send_buffer_size(n) {
        debug!(error = %e, "cannot set the client socket's send buffer");
    }
}

/// Whether a client's request headers carry an accepted token (always,
/// when the gateway has none configured); counts refusals.
fn authorized(ctx: &super::Ctx, headers: &hyper::HeaderMap) -> bool {
    let Some(tokens) = &ctx.tokens else {
        return true;
    };
    let ok = tokens.allows(
        headers
            .get(hyper::header::AUTHORIZATION)
            .map(hyper::header::HeaderValue::as_bytes),
    );
    if !ok {
        ctx.metrics.unauthorized.fetch_add(1, Relaxed);
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingress_urls_parse_print_and_name_their_metric_slot() {
        for (text, scheme, printed) in [
            ("http://127.0.0.1:8545", "http", "http://127.0.0.1:8545"),
            ("WS://127.0.0.1:8546/", "ws", "ws://127.0.0.1:8546"),
            ("tcp://[::1]:9000", "tcp", "tcp://[::1]:9000"),
        ] {
            let url: IngressUrl = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(url.scheme(), scheme);
            assert_eq!(url.to_string(), printed);
            assert_eq!(url.slot.name(), scheme);
            assert_eq!(printed.parse::<IngressUrl>(), Ok(url));
        }
        for bad in ["udp://127.0.0.1:1", "http://127.0.0.1", "127.0.0.1:80"] {
            let e = bad.parse::<IngressUrl>().unwrap_err();
            assert!(
                e.contains(bad) && e.contains("http://ADDR, ws://ADDR, tcp://ADDR"),
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
