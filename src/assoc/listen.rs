//! The server side: [`Listener`] accepts associations over TLS, QUIC or
//! both (`npamp://`), behind the flood defences of the `guard` module, runs
//! the handshake, and hands each association to the driver.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::addr::{PeerAddr, Scheme};
use super::association::{Association, Role};
use super::binding::{Binding, Stream};
use super::connect::with_timeout;
use super::driver::{self, AssocHandle, BridgeSink};
use super::endpoint::{Endpoint, random};
use super::error::{End, LinkError};
use super::frames::FrameReader;
use super::guard::{Dropped, Guard, Slot, Waiting, has_octets};
use super::payload::Payload;
use super::quic::{ServerEndpoints, check_connection_alpn, server_endpoints};
use super::tls::{check_alpn, tls_server_config};
use crate::handshake::{Established, Server, ServerKem};
use crate::shard::Shards;

/// How long a server waits to send TLS close_notify to a client it refuses.
const CLOSE_NOTIFY_WAIT: Duration = Duration::from_millis(200);

/// Counters a server keeps over all its listeners.
#[derive(Clone, Default)]
pub struct ServeStats {
    pub associations: Arc<AtomicU64>,
    pub handshake_failures: Arc<AtomicU64>,
    pub bridge_frames: Arc<AtomicU64>,
}

/// A listening server: accepts associations on the address and answers
/// PING, CLOSE and KEY_UPDATE; Bridge frames go to a sink (delivering them
/// to an upstream is the gateway's job).
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
    pub async fn bind(addr: PeerAddr, ep: Endpoint, stats: ServeStats) -> Result<Self, LinkError> {
        let frames = stats.bridge_frames.clone();
        Self::bind_with(addr, ep, stats, None, move |_| CountingSink(frames.clone())).await
    }

    /// A server whose associations deliver Bridge frames to the sink
    /// `make_sink` builds for each (given the handle to answer on). With
    /// `shards`, each association is served on one of them, from its
    /// handshake on: a TCP + TLS one on the next in turn, a QUIC one on the
    /// shard whose endpoint (one per shard on the port) its datagrams are
    /// steered to.
    pub async fn bind_with<S, F>(
        addr: PeerAddr,
        ep: Endpoint,
        stats: ServeStats,
        shards: Option<Arc<Shards>>,
        make_sink: F,
    ) -> Result<Self, LinkError>
    where
        S: BridgeSink,
        F: Fn(AssocHandle) -> S + Send + Sync + 'static,
    {
        let accept = Arc::new(Accept {
            guard: Guard::new(&ep),
            ep,
            stats,
            make_sink,
            shards,
        });
        let (local, tasks) = match addr.scheme {
            Scheme::Tls => {
                let listener = tcp_listener(addr.addr)?;
                let local = listener.local_addr()?;
                (local, vec![accept.tls(listener)?])
            }
            Scheme::Quic => {
                let shards = accept.shards.as_deref();
                let endpoints = server_endpoints(addr.addr, &accept.ep, shards).await?;
                (endpoints.local_addr()?, accept.quic(endpoints))
            }
            Scheme::Npamp => {
                let (listener, endpoints) =
                    bind_shared_port(addr.addr, &accept.ep, accept.shards.as_deref()).await?;
                let local = listener.local_addr()?;
                let mut tasks = vec![accept.tls(listener)?];
                tasks.extend(accept.quic(endpoints));
                (local, tasks)
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

/// The listen backlog asked for: connections the kernel completes while
/// the accept loop is busy (a flood fills a short one, and a real peer's
/// SYN would then wait for a retransmission, a second or more).
const LISTEN_BACKLOG: u32 = 4096;

/// A TCP listener on `addr` with a deep backlog (the kernel caps it at
/// `net.core.somaxconn`).
fn tcp_listener(addr: SocketAddr) -> Result<tokio::net::TcpListener, LinkError> {
    let socket = if addr.is_ipv6() {
        tokio::net::TcpSocket::new_v6()?
    } else {
        tokio::net::TcpSocket::new_v4()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    defer_accept(&socket);
    Ok(socket.listen(LISTEN_BACKLOG)?)
}

/// Seconds the kernel holds a connection that has sent nothing before
/// handing it to accept() (TCP_DEFER_ACCEPT): silent sockets then cost the
/// listener nothing at all for that long, and a real peer, whose
/// ClientHello comes with its first segment, is accepted with it. (Under a
/// SYN flood the kernel's SYN cookies take over and connections arrive
/// undeferred: the waiting room is the defence then.)
#[cfg(target_os = "linux")]
const DEFER_ACCEPT_SECONDS: libc::c_int = 2;

#[cfg(target_os = "linux")]
fn defer_accept(socket: &tokio::net::TcpSocket) {
    use std::os::fd::AsRawFd;
    let seconds: libc::c_int = DEFER_ACCEPT_SECONDS;
    // SAFETY: a valid socket descriptor, an option of the type and size
    // the kernel expects; failure only leaves the option unset.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&seconds).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        debug!(error = %std::io::Error::last_os_error(), "TCP_DEFER_ACCEPT not set");
    }
}

#[cfg(not(target_os = "linux"))]
fn defer_accept(_: &tokio::net::TcpSocket) {}

/// A TCP listener and a QUIC endpoint on the same port number. For port 0
/// the TCP port is chosen first; if its UDP twin is taken, another is tried.
async fn bind_shared_port(
    addr: SocketAddr,
    ep: &Endpoint,
    shards: Option<&Shards>,
) -> Result<(tokio::net::TcpListener, ServerEndpoints), LinkError> {
    let mut tries = 0;
    loop {
        let listener = tcp_listener(addr)?;
        let shared = listener.local_addr()?;
        match server_endpoints(shared, ep, shards).await {
            Ok(endpoint) => return Ok((listener, endpoint)),
            Err(LinkError::Io(e))
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
/// factory and the flood defences.
struct Accept<F> {
    ep: Endpoint,
    stats: ServeStats,
    make_sink: F,
    guard: Arc<Guard>,
    /// Where associations are served.
    shards: Option<Arc<Shards>>,
}

/// How an accepted connection ended before it carried an association.
enum Refused {
    /// Nothing sent within the first-octets deadline.
    Silent,
    /// Closed before sending anything: not worth a word.
    Gone,
    /// No handshake slot for it.
    NoSlot,
    /// The handshake did not finish in time.
    Stalled(LinkError),
    /// The handshake failed.
    Failed(LinkError),
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
    ) -> Result<tokio::task::JoinHandle<()>, LinkError> {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls_server_config(
            self.ep.tls_files.as_ref(),
        )?));
        let accept = self.clone();
        Ok(tokio::spawn(async move {
            loop {
                let (tcp, from) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: pause, do not
                        // spin, and report it with the rest (not a line each).
                        let local = listener
                            .local_addr()
                            .unwrap_or(SocketAddr::from(([0; 4], 0)));
                        accept.guard.dropped(Dropped::AcceptFailed, local, Some(&e));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, a) = (acceptor.clone(), accept.clone());
                // A real client's ClientHello has usually arrived by the time
                // it is accepted: such a connection skips the waiting room.
                if has_octets(&tcp) {
                    a.clone().serve_tls_on_shard(tcp, from, acceptor);
                    continue;
                }
                let (place_tx, place_rx) = oneshot::channel();
                let tcp = Arc::new(tcp);
                let watched = tcp.clone();
                let task = tokio::spawn(async move {
                    match a.first_octets(tcp, place_rx).await {
                        Ok(tcp) => {
                            let _ = a.clone().serve_tls_on_shard(tcp, from, acceptor).await;
                        }
                        Err(refused) => a.ended(from, Err(refused)),
                    }
                });
                let place = accept.guard.wait(task.abort_handle(), Some(watched), from);
                let _ = place_tx.send(place);
            }
        }))
    }

    /// A connection in the waiting room: waits (up to the first-octets
    /// deadline) for it to send something, then leaves the room and has
    /// its socket to itself again.
    async fn first_octets(
        &self,
        tcp: Arc<tokio::net::TcpStream>,
        place: oneshot::Receiver<Waiting>,
    ) -> Result<tokio::net::TcpStream, Refused> {
        let place = place.await;
        match tokio::time::timeout(self.ep.first_octets_timeout, tcp.peek(&mut [0u8; 1])).await {
            Err(_) => return Err(Refused::Silent),
            Ok(Ok(0) | Err(_)) => return Err(Refused::Gone),
            Ok(Ok(_)) => drop(place),
        }
        // The room held the only other reference; it let go with the place.
        Arc::try_unwrap(tcp).map_err(|_| Refused::Gone)
    }

    /// Serves a TCP connection that has sent its first octets (see
    /// [`Self::serve_tls`]) on the next shard, or here when there are none.
    fn serve_tls_on_shard(
        self: Arc<Self>,
        tcp: tokio::net::TcpStream,
        from: SocketAddr,
        acceptor: tokio_rustls::TlsAcceptor,
    ) -> tokio::task::JoinHandle<()> {
        let shards = self.shards.clone();
        crate::shard::serve_socket(shards.as_deref(), tcp, move |tcp| async move {
            let result = self.serve_tls(tcp, from, acceptor).await;
            self.ended(from, result);
        })
    }

    /// One TCP connection that has sent its first octets: a slot, TLS with
    /// the ALPN check and the N-PAMP handshake, then the association.
    async fn serve_tls(
        &self,
        tcp: tokio::net::TcpStream,
        from: SocketAddr,
        acceptor: tokio_rustls::TlsAcceptor,
    ) -> Result<(), Refused> {
        let _ = tcp.set_nodelay(true);
        let slot = self.guard.slot(from).ok_or(Refused::NoSlot)?;
        let ep = &self.ep;
        let handshake = with_timeout(ep.handshake_timeout, async {
            let stream = acceptor.accept(tcp).await?;
            let alpn = check_alpn(stream.get_ref().1.alpn_protocol());
            let (r, w) = tokio::io::split(stream);
            let mut control = Stream::new(FrameReader::new(Box::new(r)), Box::new(w));
            let established = match alpn {
                Ok(()) => server_handshake(ep, &mut control.reader, &mut control.writer).await,
                Err(e) => Err(e),
            };
            Ok((control, established))
        })
        .await;
        let (control, established) = match handshake {
            Ok((control, Ok(established))) => (control, established),
            Ok((mut control, Err(e))) => {
                // A TLS stream can only be closed (close_notify, so the peer
                // sees a clean end); QUIC can say why.
                let _ = tokio::time::timeout(CLOSE_NOTIFY_WAIT, control.writer.shutdown()).await;
                return Err(refusal(e));
            }
            Err(e) => return Err(refusal(e)),
        };
        self.serve(established, Binding::Tls(control), slot).await;
        Ok(())
    }

    /// The accept loops of a port's QUIC endpoints: each where its
    /// endpoint lives (on its shard), serving its connections there.
    fn quic(self: &Arc<Self>, endpoints: ServerEndpoints) -> Vec<tokio::task::JoinHandle<()>> {
        match endpoints {
            ServerEndpoints::One(endpoint) => {
                vec![tokio::spawn(self.clone().accept_quic(endpoint))]
            }
            ServerEndpoints::Sharded(endpoints) => (endpoints.into_iter().enumerate())
                .map(|(i, endpoint)| {
                    let accept = self.clone().accept_quic(endpoint);
                    crate::shard::spawn_on(self.shards.as_deref(), i, accept)
                })
                .collect(),
        }
    }

    /// The accept loop of one QUIC endpoint.
    async fn accept_quic(self: Arc<Self>, endpoint: quinn::Endpoint) {
        let accept = self;
        while let Some(incoming) = endpoint.accept().await {
            let from = incoming.remote_address();
            if !incoming.remote_address_validated()
                && incoming.may_retry()
                && accept.guard.wants_retry(from)
            {
                // Busy: the client proves its address first (one round
                // trip, no state kept here until it has).
                if incoming.retry().is_ok() {
                    accept.guard.retried();
                }
                continue;
            }
            let Some(slot) = accept.guard.slot(from) else {
                incoming.refuse();
                continue;
            };
            // Here: quinn spawns the connection's driver where it is
            // accepted, so it and the association run on the thread
            // of the endpoint that reads their datagrams.
            let a = accept.clone();
            tokio::spawn(async move {
                let result = a.serve_quic(incoming, slot).await;
                a.ended(from, result);
            });
        }
    }

    /// One QUIC attempt: the QUIC handshake and the first stream within
    /// the first-octets deadline, the ALPN check, the N-PAMP handshake,
    /// then the association.
    async fn serve_quic(&self, incoming: quinn::Incoming, slot: Slot) -> Result<(), Refused> {
        let ep = &self.ep;
        let first = tokio::time::timeout(ep.first_octets_timeout, async {
            let conn = incoming.await?;
            if let Err(e) = check_connection_alpn(&conn) {
                conn.close(quinn::VarInt::from_u32(0x0178), e.to_string().as_bytes());
                return Err(e);
            }
            let (w, r) = conn.accept_bi().await?;
            Ok::<_, LinkError>((conn, w, r))
        })
        .await;
        let (conn, w, r) = match first {
            Err(_) => return Err(Refused::Silent),
            Ok(Err(e)) => return Err(Refused::Failed(e)),
            Ok(Ok(up)) => up,
        };
        let mut control = Stream::new(FrameReader::new(Box::new(r)), Box::new(w));
        let established = match with_timeout(
            ep.handshake_timeout,
            server_handshake(ep, &mut control.reader, &mut control.writer),
        )
        .await
        {
            Ok(established) => established,
            Err(e) => {
                conn.close(
                    quinn::VarInt::from_u32(super::error::HANDSHAKE_FAILED_CODE),
                    format!("N-PAMP handshake failed: {e}").as_bytes(),
                );
                return Err(refusal(e));
            }
        };
        let binding = Binding::Quic {
            conn,
            control,
            bridge: None,
        };
        self.serve(established, binding, slot).await;
        Ok(())
    }

    /// Runs an established association until it ends. The handshake slot
    /// is given back first.
    async fn serve(&self, established: Established, mut binding: Binding, slot: Slot) {
        drop(slot);
        let ep = &self.ep;
        binding
            .control()
            .reader
            .set_max_payload(ep.assoc.max_payload_len);
        info!(identity = %hex::encode(established.peer_identity), transport = binding.scheme().name(), "association accepted");
        self.stats.associations.fetch_add(1, Relaxed);
        let assoc = match Association::new(Role::Server, established, ep.assoc, Instant::now()) {
            Ok(assoc) => assoc,
            Err(e) => {
                warn!(error = %e, "association could not start");
                return;
            }
        };
        // The driver logs how the association ended.
        driver::spawn(assoc, binding, ep.stats.clone(), &self.make_sink)
            .ended()
            .await;
    }

    /// Counts and reports how a connection ended.
    fn ended(&self, from: SocketAddr, result: Result<(), Refused>) {
        let (what, error) = match result {
            Ok(()) => return debug!(%from, "association ended"),
            Err(Refused::Gone | Refused::NoSlot) => return,
            Err(Refused::Silent) => (Dropped::Silent, None),
            Err(Refused::Stalled(e)) => (Dropped::Stalled, Some(e)),
            Err(Refused::Failed(e)) => (Dropped::Failed, Some(e)),
        };
        self.stats.handshake_failures.fetch_add(1, Relaxed);
        debug!(%from, ?what, error = error.as_ref().map(tracing::field::display), "handshake did not complete");
        self.guard
            .dropped(what, from, error.as_ref().map(|e| e as _));
    }
}

/// A handshake error as a refusal: a timeout is a stall, anything else a failure.
fn refusal(e: LinkError) -> Refused {
    match e {
        LinkError::HandshakeTimeout(_) => Refused::Stalled(e),
        e => Refused::Failed(e),
    }
}

async fn server_handshake(
    ep: &Endpoint,
    reader: &mut FrameReader,
    writer: &mut (impl AsyncWrite + Unpin),
) -> Result<Established, LinkError> {
    let mut server = Server::new(ep.handshake.clone(), ep.identity()?, ep.trust.current());
    let share = server
        .handle_client_hello(&reader.next_owned().await?)?
        .to_vec();
    let kem = ServerKem::encapsulate(&share, &random()?, &random()?)?;
    writer.write_all(&server.respond(&kem)?).await?;
    writer.flush().await?;
    Ok(server.handle_client_auth(&reader.next_owned().await?)?)
}

/// The sink of [`Listener::bind`]: counts Bridge frames, delivers nothing.
struct CountingSink(Arc<AtomicU64>);

impl BridgeSink for CountingSink {
    async fn frame(&mut self, _: crate::wire::FrameType, _: Payload<'_>) {
        self.0.fetch_add(1, Relaxed);
    }

    fn ended(&mut self, _: &End) {}
}
