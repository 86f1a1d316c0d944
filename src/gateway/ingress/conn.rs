//! The connections of one ingress listener: accepted within
//! `--max-connections`, opened (TLS when the URL asks for it, within the
//! stall timeout), and tracked for the stall clock.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use super::limit::{ClientKey, Place, Places};
use super::{Ingress, Shutdown, stopped};
use crate::gateway::context::Ctx;
use crate::gateway::stall::{Moved, Tracked};

/// The client connections of one listener, at most `--max-connections` at
/// once (a further one waits in the listen backlog), and at most
/// `--max-connections-per-source` from one address (a further one is
/// closed at once), until shutdown.
pub struct Clients {
    pub(super) listener: Listener,
    pub(super) permits: Arc<Semaphore>,
    /// Each source address's connections (`--max-connections-per-source`;
    /// no total: that is `permits`).
    pub(super) sources: Arc<Places>,
    pub(super) shutdown: Shutdown,
    /// A TLS ingress's acceptor, made again when a reload brings a new
    /// certificate.
    pub(super) tls: Option<TlsCache>,
    pub(super) ctx: Arc<Ctx>,
    /// Which ingress they came in by.
    pub ingress: Ingress,
}

/// A listening socket: TCP, or a Unix domain socket (removed when the
/// listener goes).
pub(super) enum Listener {
    Tcp(TcpListener),
    Unix {
        listener: tokio::net::UnixListener,
        path: std::path::PathBuf,
    },
}

impl Listener {
    /// Binds a Unix socket at `path`. A socket file left by a gateway that
    /// is gone (nothing accepts on it) is replaced; a live one, or any
    /// other file, is not.
    pub(super) fn unix(path: &std::path::Path) -> std::io::Result<Self> {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && meta.file_type().is_socket()
            && std::os::unix::net::UnixStream::connect(path).is_err()
        {
            std::fs::remove_file(path)?;
        }
        let listener = tokio::net::UnixListener::bind(path)?;
        Ok(Self::Unix {
            listener,
            path: path.to_owned(),
        })
    }

    async fn accept(&self) -> std::io::Result<(Socket, Peer)> {
        match self {
            Listener::Tcp(l) => {
                let (tcp, from) = l.accept().await?;
                let _ = tcp.set_nodelay(true);
                Ok((Socket::Tcp(tcp), Peer::Net(from)))
            }
            Listener::Unix { listener, .. } => {
                let (unix, _) = listener.accept().await?;
                let uid = unix.peer_cred().ok().map(|c| c.uid());
                Ok((Socket::Unix(unix), Peer::Local { uid }))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A connection's slots: one of the listener's `--max-connections`, one of
/// its source's.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    /// None for a Unix socket's client: the machine's own, not counted.
    _source: Option<Place>,
}

/// An accepted socket.
enum Socket {
    Tcp(TcpStream),
    Unix(tokio::net::UnixStream),
}

/// An accepted client whose socket has left the accepting runtime's
/// reactor, on its way to a shard.
pub struct Detached {
    socket: DetachedSocket,
    from: Peer,
    permit: Slot,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

enum DetachedSocket {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl crate::shard::Movable for Client {
    type Detached = Detached;

    fn detach(self) -> std::io::Result<Detached> {
        let socket = match self.socket {
            Socket::Tcp(tcp) => DetachedSocket::Tcp(tcp.into_std()?),
            Socket::Unix(unix) => DetachedSocket::Unix(unix.into_std()?),
        };
        Ok(Detached {
            socket,
            from: self.from,
            permit: self.permit,
            tls: self.tls,
        })
    }

    fn attach(d: Detached) -> std::io::Result<Self> {
        let socket = match d.socket {
            DetachedSocket::Tcp(tcp) => Socket::Tcp(TcpStream::from_std(tcp)?),
            DetachedSocket::Unix(unix) => Socket::Unix(tokio::net::UnixStream::from_std(unix)?),
        };
        Ok(Client {
            socket,
            from: d.from,
            permit: d.permit,
            tls: d.tls,
        })
    }
}

/// Who a connection comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A TCP client's address.
    Net(std::net::SocketAddr),
    /// A client on the same machine, over a Unix socket (its user, when
    /// the system says).
    Local { uid: Option<u32> },
}

impl Peer {
    /// The client's rate-limit key when it has no token or certificate:
    /// its address, or its local user.
    pub fn key(self) -> ClientKey {
        match self {
            Peer::Net(a) => ClientKey::address(a.ip()),
            Peer::Local { uid } => ClientKey::LocalUser(uid.unwrap_or(u32::MAX)),
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Net(a) => a.fmt(f),
            Peer::Local { uid: Some(uid) } => write!(f, "local user {uid}"),
            Peer::Local { uid: None } => f.write_str("local"),
        }
    }
}

/// One accepted client connection, not opened yet; its slot is given back
/// when it (or the [`Conn`] it opens into) is dropped.
pub struct Client {
    socket: Socket,
    pub from: Peer,
    permit: Slot,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// An open client connection.
pub struct Conn {
    pub stream: Stream,
    /// When octets last moved to the client, for the stall clock.
    pub moved: Arc<Moved>,
    pub from: Peer,
    /// The fingerprint of the certificate the client presented, which
    /// chains to `--ingress-client-ca`: it is authenticated.
    pub certificate: Option<u64>,
    pub permit: Slot,
}

/// A client's byte stream: TCP, TLS over TCP, or a Unix socket.
pub enum Stream {
    Plain(Tracked<TcpStream>),
    Tls(Box<tokio_rustls::server::TlsStream<Tracked<TcpStream>>>),
    Unix(Tracked<tokio::net::UnixStream>),
}

impl Stream {
    /// How the client reached the ingress, for the `Host` check.
    pub fn reach(&self) -> super::browser::Reach {
        use super::browser::Reach;
        match self {
            Stream::Plain(_) => Reach::Plain,
            Stream::Tls(_) => Reach::Tls,
            Stream::Unix(_) => Reach::Local,
        }
    }
}

impl Clients {
    /// The next client connection; `None` once shutdown begins.
    async fn next(&mut self) -> Option<Client> {
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        loop {
            tokio::select! {
                a = self.listener.accept() => match a {
                    Ok((socket, from)) => {
                        let source = match from {
                            Peer::Net(addr) => self.sources.take(ClientKey::address(addr.ip())).map(Some),
                            Peer::Local { .. } => Ok(None),
                        };
                        let Ok(source) = source else {
                            // Its source holds its share: closed at once.
                            self.ctx.metrics.source_connections_refused.fetch_add(1, Relaxed);
                            static FULL: crate::gateway::quiet::Every = crate::gateway::quiet::Every::new();
                            crate::gateway::quiet::warn_every!(
                                FULL,
                                %from,
                                "client connection refused: its source holds --max-connections-per-source {} already (one line per 5 s at most; all are counted in npamp_source_connections_refused_total)",
                                self.sources.max_each()
                            );
                            continue;
                        };
                        let permit = Slot { _permit: permit, _source: source };
                        let tls = self.tls.as_mut().and_then(|c| c.acceptor(&self.ctx));
                        return Some(Client { socket, from, permit, tls });
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

    /// Serves every client until shutdown, each on a task of its own:
    /// opened as `opening` says (TLS, the first-octet wait), then given to `serve`.
    pub async fn each<F, Fut>(mut self, opening: Opening, serve: F)
    where
        F: Fn(Conn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let serve = Arc::new(serve);
        while let Some(client) = self.next().await {
            if opening.session {
                client.bound_send_buffer(&self.ctx);
            }
            let (ctx, serve) = (self.ctx.clone(), serve.clone());
            let shards = self.ctx.shards.as_deref();
            crate::shard::serve_socket(shards, client, move |client| async move {
                if let Some(conn) = client.open(&ctx, opening.first_octet).await {
                    serve(conn).await;
                }
            });
        }
    }
}

/// How a kind of ingress opens its connections.
#[derive(Clone, Copy, Debug)]
pub struct Opening {
    /// A request is due at once (HTTP, a WebSocket handshake): the first
    /// octet must come within the stall timeout.
    pub first_octet: bool,
    /// A session client: its socket's send buffer is bounded.
    pub session: bool,
}

/// The acceptor of a TLS ingress, for the configuration generation it was
/// made from.
pub(super) struct TlsCache {
    alpn: &'static [&'static [u8]],
    made: Option<(u64, tokio_rustls::TlsAcceptor)>,
}

impl TlsCache {
    pub(super) fn new(alpn: &'static [&'static [u8]]) -> Self {
        Self { alpn, made: None }
    }

    /// The acceptor with the certificate of the live configuration.
    fn acceptor(&mut self, ctx: &Ctx) -> Option<tokio_rustls::TlsAcceptor> {
        let live = ctx.live();
        match &self.made {
            Some((generation, a)) if *generation == live.generation => Some(a.clone()),
            _ => {
                let a = super::tls::acceptor(live.tls.as_deref()?, self.alpn);
                self.made = Some((live.generation, a.clone()));
                Some(a)
            }
        }
    }
}

impl Client {
    /// A session client's socket: the kernel's send buffer is fixed at
    /// `--session-buffer` (at least 64 KiB) instead of growing to
    /// megabytes, so a client that does not read holds that much of the
    /// kernel's memory at most, and is noticed (its writes block) as soon
    /// as that is full.
    fn bound_send_buffer(&self, ctx: &Ctx) {
        let n = ctx.limits.session_buffer.max(64 << 10);
        let sock = match &self.socket {
            Socket::Tcp(tcp) => socket2::SockRef::from(tcp),
            Socket::Unix(unix) => socket2::SockRef::from(unix),
        };
        if let Err(e) = sock.set_send_buffer_size(n) {
            debug!(error = %e, "cannot set the client socket's send buffer");
        }
    }

    /// Opens the connection. A TLS handshake must be done within the stall
    /// timeout; so must the first octet of a plaintext connection when
    /// `first_octet` (a request is due at once, as on HTTP; a session
    /// client may connect and wait, up to `--idle-timeout`). One that does
    /// not is dropped and counted; `None` then.
    async fn open(self, ctx: &Ctx, first_octet: bool) -> Option<Conn> {
        let stall = ctx.limits.stall_timeout;
        let moved = Moved::new();
        let Client {
            socket,
            from,
            permit,
            tls,
        } = self;
        let stalled = || {
            ctx.metrics.stalled_clients.fetch_add(1, Relaxed);
            debug!(%from, "client sent nothing within the stall timeout");
        };
        // A silent socket would otherwise hold its slot: hyper's header
        // timeout starts only once it knows the HTTP version.
        let (stream, certificate) = match (socket, tls) {
            (Socket::Unix(unix), _) => {
                if first_octet && !arrives(stall, unix.readable(), stalled).await {
                    return None;
                }
                (Stream::Unix(Tracked::new(unix, moved.clone())), None)
            }
            (Socket::Tcp(tcp), None) => {
                if first_octet && !arrives(stall, tcp.readable(), stalled).await {
                    return None;
                }
                (Stream::Plain(Tracked::new(tcp, moved.clone())), None)
            }
            (Socket::Tcp(tcp), Some(acceptor)) => {
                let tracked = Tracked::new(tcp, moved.clone());
                match tokio::time::timeout(stall, acceptor.accept(tracked)).await {
                    Ok(Ok(tls)) => {
                        let certificate = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|chain| chain.first())
                            .map(|leaf| fingerprint(leaf));
                        (Stream::Tls(Box::new(tls)), certificate)
                    }
                    Ok(Err(e)) => {
                        ctx.metrics.client_tls_failures.fetch_add(1, Relaxed);
                        debug!(%from, error = %e, "client TLS handshake failed");
                        return None;
                    }
                    Err(_) => {
                        stalled();
                        return None;
                    }
                }
            }
        };
        Some(Conn {
            stream,
            moved,
            from,
            certificate,
            permit,
        })
    }
}

/// Whether a socket becomes readable within `stall`; `stalled` is told
/// when it does not.
async fn arrives(
    stall: Duration,
    readable: impl Future<Output = std::io::Result<()>>,
    stalled: impl FnOnce(),
) -> bool {
    match tokio::time::timeout(stall, readable).await {
        Ok(r) => r.is_ok(),
        Err(_) => {
            stalled();
            false
        }
    }
}

/// The first 8 octets of a certificate's SHA-256: which client it is.
fn fingerprint(cert: &[u8]) -> u64 {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, cert);
    let mut first = [0u8; 8];
    first.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(first)
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
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
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
