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

use super::{Ingress, Shutdown, stopped};
use crate::gateway::Ctx;
use crate::gateway::stall::{Moved, Tracked};

/// The client connections of one listener, at most `--max-connections` at
/// once (a further one waits in the listen backlog), until shutdown.
pub struct Clients {
    pub(super) listener: TcpListener,
    pub(super) permits: Arc<Semaphore>,
    pub(super) shutdown: Shutdown,
    /// A TLS ingress's acceptor, made again when a reload brings a new
    /// certificate.
    pub(super) tls: Option<TlsCache>,
    pub(super) ctx: Arc<Ctx>,
    /// Which ingress they came in by.
    pub ingress: Ingress,
}

/// One accepted client connection, not opened yet; its slot is given back
/// when it (or the [`Conn`] it opens into) is dropped.
pub struct Client {
    tcp: TcpStream,
    pub from: std::net::SocketAddr,
    permit: OwnedSemaphorePermit,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// An open client connection.
pub struct Conn {
    pub stream: Stream,
    /// When octets last moved to the client, for the stall clock.
    pub moved: Arc<Moved>,
    pub from: std::net::SocketAddr,
    /// The fingerprint of the certificate the client presented, which
    /// chains to `--ingress-client-ca`: it is authenticated.
    pub certificate: Option<u64>,
    pub permit: OwnedSemaphorePermit,
}

/// A client's byte stream: TCP, or TLS over TCP.
pub enum Stream {
    Plain(Tracked<TcpStream>),
    Tls(Box<tokio_rustls::server::TlsStream<Tracked<TcpStream>>>),
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
                        let tls = self.tls.as_mut().and_then(|c| c.acceptor(&self.ctx));
                        return Some(Client { tcp, from, permit, tls });
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
    pub fn bound_send_buffer(&self, ctx: &Ctx) {
        let n = ctx.limits.session_buffer.max(64 << 10);
        if let Err(e) = socket2::SockRef::from(&self.tcp).set_send_buffer_size(n) {
            debug!(error = %e, "cannot set the client socket's send buffer");
        }
    }

    /// Opens the connection. A TLS handshake must be done within the stall
    /// timeout; so must the first octet of a plaintext connection when
    /// `first_octet` (a request is due at once, as on HTTP; a session
    /// client may connect and wait, up to `--idle-timeout`). One that does
    /// not is dropped and counted; `None` then.
    pub async fn open(self, ctx: &Ctx, first_octet: bool) -> Option<Conn> {
        let stall = ctx.limits.stall_timeout;
        let moved = Moved::new();
        let Client {
            tcp,
            from,
            permit,
            tls,
        } = self;
        let stalled = || {
            ctx.metrics.stalled_clients.fetch_add(1, Relaxed);
            debug!(%from, "client sent nothing within the stall timeout");
        };
        let (stream, certificate) = match tls {
            None if !first_octet => (Stream::Plain(Tracked::new(tcp, moved.clone())), None),
            None => {
                // A silent socket would otherwise hold its slot: hyper's
                // header timeout starts only once it knows the version.
                match tokio::time::timeout(stall, tcp.peek(&mut [0u8; 1])).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return None,
                    Err(_) => {
                        stalled();
                        return None;
                    }
                }
                (Stream::Plain(Tracked::new(tcp, moved.clone())), None)
            }
            Some(acceptor) => {
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
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
