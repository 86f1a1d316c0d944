//! The client side: reaching a peer over TLS, QUIC or, for `npamp://`,
//! whichever comes up first (Happy Eyeballs, RFC 8305: QUIC first, TCP +
//! TLS as well once QUIC has failed or has not connected within
//! [`FALLBACK_DELAY`]); the handshake; and [`Link`], the established
//! association before (or instead of) the driver runs it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tracing::{debug, info};

use super::addr::{PeerAddr, Scheme};
use super::association::{AssocError, Association, Event, Role};
use super::binding::{Binding, Stream};
use super::driver::{self, AssocHandle, BridgeSink};
use super::endpoint::{Endpoint, FALLBACK_DELAY, random};
use super::error::LinkError;
use super::frames::FrameReader;
use super::quic::{SharedClientEndpoint, check_connection_alpn, client_config, client_endpoint};
use super::stats::AssocStats;
use super::tls::{ALPN, check_alpn, tls_client_config};
use crate::handshake::{Client, ClientRandom, Established};
use crate::wire::ChannelId;

/// The client side of the handshake over a stream already connected:
/// what [`Link::connect`] does after TLS or QUIC is up. Public for tools
/// and tests that drive an association's frames themselves.
pub async fn client_handshake(
    ep: &Endpoint,
    reader: &mut FrameReader,
    writer: &mut (impl AsyncWrite + Unpin),
) -> Result<Established, LinkError> {
    let random = ClientRandom {
        mlkem_seed: random()?,
        x25519: random()?,
    };
    let (mut client, hello) = Client::start(
        ep.handshake.clone(),
        ep.identity()?,
        ep.trust.current(),
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

/// Runs `f` within `limit`: the handshake's deadline.
pub(super) async fn with_timeout<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, LinkError>>,
) -> Result<T, LinkError> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| LinkError::HandshakeTimeout(limit))?
}

/// A client's Control stream before the handshake and, for QUIC, the
/// endpoint and connection that carry it.
struct Opened {
    control: Stream,
    quic: Option<(quinn::Endpoint, quinn::Connection)>,
}

/// TCP + TLS 1.3 to `addr`, offering `alpn`; refused unless the server
/// selected `n-pamp/2`.
async fn open_tls(addr: SocketAddr, alpn: &[u8]) -> Result<Opened, LinkError> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_client_config(alpn)?));
    let name = rustls::pki_types::ServerName::try_from("localhost")
        .map_err(|e| LinkError::certificate("server name", e))?;
    let stream = connector.connect(name, tcp).await?;
    check_alpn(stream.get_ref().1.alpn_protocol())?;
    let (r, w) = tokio::io::split(stream);
    Ok(Opened {
        control: Stream::new(FrameReader::new(Box::new(r)), Box::new(w)),
        quic: None,
    })
}

/// A QUIC connection to `addr`, offering `alpn` (refused unless the server
/// selected `n-pamp/2`), and the Control channel's stream on it; on
/// `shared`'s endpoint, or on an endpoint of its own.
async fn open_quic(
    addr: SocketAddr,
    alpn: &[u8],
    ep: &Endpoint,
    shared: Option<&SharedClientEndpoint>,
) -> Result<Opened, LinkError> {
    let endpoint = match shared {
        Some(shared) => shared.get(addr.is_ipv6())?,
        None => client_endpoint(addr.is_ipv6())?,
    };
    let conn = endpoint
        .connect_with(client_config(alpn, ep)?, addr, "localhost")?
        .await?;
    if let Err(e) = check_connection_alpn(&conn) {
        conn.close(quinn::VarInt::from_u32(0x0178), b"no n-pamp/2 ALPN");
        return Err(e);
    }
    let (w, r) = conn.open_bi().await?;
    Ok(Opened {
        control: Stream::new(FrameReader::new(Box::new(r)), Box::new(w)),
        quic: Some((endpoint, conn)),
    })
}

/// The negotiated transport of an `npamp://` peer (see [`first_up`]).
async fn open_negotiated(
    addr: SocketAddr,
    alpn: &[u8],
    ep: &Endpoint,
    shared: Option<&SharedClientEndpoint>,
) -> Result<(Scheme, Opened), LinkError> {
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
    quic: impl std::future::Future<Output = Result<T, LinkError>>,
    tls: impl std::future::Future<Output = Result<T, LinkError>>,
    delay: Duration,
) -> Result<(Scheme, T), LinkError> {
    let both = |quic, tls| LinkError::NoTransport {
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
    binding: Binding,
    /// Keeps a QUIC association's UDP socket open.
    quic_endpoint: Option<quinn::Endpoint>,
    pub handshake_time: Duration,
    stats: Arc<AssocStats>,
    /// The buffer [`Association::poll_transmit`] swaps with.
    spare: Vec<u8>,
}

impl Link {
    /// Connects, runs the handshake, and opens the Bridge stream (QUIC).
    pub async fn connect(peer: PeerAddr, ep: &Endpoint) -> Result<Self, LinkError> {
        Self::connect_with_alpn(peer, ep, ALPN).await
    }

    /// [`Link::connect`] over QUIC on `shared`'s client endpoint rather than
    /// one of the association's own (see [`SharedClientEndpoint`]).
    pub async fn connect_sharing(
        peer: PeerAddr,
        ep: &Endpoint,
        shared: &SharedClientEndpoint,
    ) -> Result<Self, LinkError> {
        Self::connect_via(peer, ep, ALPN, Some(shared)).await
    }

    /// [`Link::connect`] offering another ALPN (to test refusal).
    pub async fn connect_with_alpn(
        peer: PeerAddr,
        ep: &Endpoint,
        alpn: &[u8],
    ) -> Result<Self, LinkError> {
        Self::connect_via(peer, ep, alpn, None).await
    }

    async fn connect_via(
        peer: PeerAddr,
        ep: &Endpoint,
        alpn: &[u8],
        shared: Option<&SharedClientEndpoint>,
    ) -> Result<Self, LinkError> {
        let started = Instant::now();
        // One limit covers reaching the peer and the handshake: a peer that
        // never answers cannot hold the caller longer than that.
        let (mut opened, established) = with_timeout(ep.handshake_timeout, async {
            let mut opened = match peer.scheme {
                Scheme::Tls => open_tls(peer.addr, alpn).await?,
                Scheme::Quic => open_quic(peer.addr, alpn, ep, shared).await?,
                Scheme::Npamp => open_negotiated(peer.addr, alpn, ep, shared).await?.1,
            };
            let c = &mut opened.control;
            let established = client_handshake(ep, &mut c.reader, &mut c.writer).await?;
            c.reader.set_max_payload(ep.assoc.max_payload_len);
            Ok((opened, established))
        })
        .await?;
        let handshake_time = started.elapsed();
        let (mut binding, quic_endpoint) = match opened.quic.take() {
            Some((endpoint, conn)) => (
                Binding::Quic {
                    conn,
                    control: opened.control,
                    bridge: None,
                },
                Some(endpoint),
            ),
            None => (Binding::Tls(opened.control), None),
        };
        binding.open_bridge(ep.assoc.max_payload_len).await?;
        info!(peer = %peer, transport = binding.scheme().name(), identity = %hex::encode(established.peer_identity), ?handshake_time, "association established");
        Ok(Self {
            assoc: Association::new(Role::Client, established, ep.assoc, Instant::now())?,
            binding,
            quic_endpoint,
            handshake_time,
            stats: ep.stats.clone(),
            spare: Vec::new(),
        })
    }

    /// The local address of the QUIC endpoint the association runs on
    /// (`None` over TCP + TLS).
    pub fn quic_local_addr(&self) -> Option<SocketAddr> {
        self.quic_endpoint
            .as_ref()
            .and_then(|e| e.local_addr().ok())
    }

    /// The QUIC connection's round-trip time as measured so far (`None`
    /// over TCP + TLS).
    pub fn rtt(&self) -> Option<Duration> {
        match &self.binding {
            Binding::Quic { conn, .. } => Some(conn.rtt()),
            Binding::Tls(_) => None,
        }
    }

    /// The transport the association runs on: [`Scheme::Quic`] or
    /// [`Scheme::Tls`] (for an `npamp://` peer, the one that won).
    pub fn transport(&self) -> Scheme {
        self.binding.scheme()
    }

    pub fn peer_identity(&self) -> [u8; 32] {
        *self.assoc.peer_identity()
    }

    pub fn association(&self) -> &Association {
        &self.assoc
    }

    /// Writes what the association has queued, each channel to its stream.
    async fn flush(&mut self) -> Result<(), LinkError> {
        while let Some(channel) = self.assoc.poll_transmit(&mut self.spare) {
            let stream = self
                .binding
                .stream_for(channel)
                .ok_or(LinkError::NoBridgeStream)?;
            stream.writer.send(&self.spare).await?;
        }
        Ok(())
    }

    /// One PING on the Control channel; waits for its PONG.
    pub async fn ping(&mut self) -> Result<Duration, LinkError> {
        self.assoc.ping(Instant::now())?;
        self.flush().await?;
        loop {
            // A peer that refuses this identity can only close a TLS stream
            // (QUIC carries its reason); say what that most likely means.
            let closed = if self.assoc.counters().frames_in == 0 {
                LinkError::ClosedAfterHandshake
            } else {
                LinkError::ClosedWithoutClose
            };
            let (header, frame) = match self.binding.control().reader.next().await {
                Ok(Some(frame)) => frame,
                Ok(None) => return Err(closed),
                Err(LinkError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(closed);
                }
                Err(e) => return Err(e),
            };
            let done = match self.assoc.handle_sealed(&header, frame, Instant::now())? {
                Event::Pong { rtt } => Some(rtt),
                Event::Closed { .. } => return Err(AssocError::Closed.into()),
                _ => None,
            };
            self.flush().await?;
            if let Some(rtt) = done {
                return Ok(rtt);
            }
        }
    }

    /// Seals a batch of Bridge frames and writes them in one write.
    pub async fn send_bridge_batch(
        &mut self,
        frames: impl IntoIterator<Item = (crate::wire::FrameType, &[u8])>,
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        for (frame_type, payload) in frames {
            self.assoc.seal(ChannelId::BRIDGE, frame_type, |o| {
                o.extend_from_slice(payload)
            })?;
            n += 1;
        }
        self.flush().await?;
        Ok(n)
    }

    /// Hands the association to a reader and a writer task: Bridge frames
    /// that arrive go to the sink `make_sink` builds; the returned handle
    /// sends.
    pub fn spawn<S, F>(self, make_sink: F) -> AssocHandle
    where
        S: BridgeSink,
        F: FnOnce(AssocHandle) -> S,
    {
        let handle = driver::spawn(self.assoc, self.binding, self.stats, make_sink);
        if let Some(endpoint) = self.quic_endpoint {
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
    pub async fn close(mut self) -> Result<(), LinkError> {
        self.assoc.close(0)?;
        self.flush().await?;
        let Self { assoc, binding, .. } = &mut self;
        let control = binding.control();
        let wait = async {
            while let Some((header, frame)) = control.reader.next().await? {
                if let Event::CloseAcked = assoc.handle_sealed(&header, frame, Instant::now())? {
                    break;
                }
            }
            Ok::<_, LinkError>(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), wait).await;
        let _ = binding.control().writer.shutdown().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The datagrams a client sends in `within` to a peer that does not
    /// answer (a bound UDP socket), assuming `initial_rtt`.
    async fn initial_datagrams(initial_rtt: Option<Duration>, within: Duration) -> usize {
        let silent = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let peer = format!("quic://{}", silent.local_addr().expect("addr"));
        let mut ep = Endpoint::new([3; 32], crate::handshake::Trust::InsecureAcceptAny);
        ep.handshake_timeout = within;
        ep.initial_rtt = initial_rtt;
        let connect = Link::connect(peer.parse().expect("peer"), &ep);
        assert!(connect.await.is_err(), "a handshake with no one");
        let (mut n, mut buf) = (0, [0u8; 2048]);
        while silent.try_recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    }

    /// A lost Initial is sent again after about three times the initial
    /// RTT, doubling each time: with a measured 5 ms, several times in
    /// half a second; with quinn's 333 ms, not once.
    #[tokio::test]
    async fn a_measured_initial_rtt_sends_a_lost_initial_again_soon() {
        let within = Duration::from_millis(500);
        let assumed = initial_datagrams(None, within).await;
        let measured = initial_datagrams(Some(Duration::from_millis(5)), within).await;
        assert!(assumed >= 1, "no Initial at all");
        assert!(measured >= 4 * assumed, "{measured} against {assumed}");
    }

    /// A transport attempt for [`first_up`]: records when it was first
    /// polled (started), then succeeds or fails after `after`, or never
    /// finishes (`None`).
    async fn attempt(
        started: &std::cell::Cell<Option<tokio::time::Instant>>,
        after: Option<Duration>,
        ok: bool,
        what: &'static str,
    ) -> Result<&'static str, LinkError> {
        started.set(Some(tokio::time::Instant::now()));
        let Some(after) = after else {
            return std::future::pending().await;
        };
        tokio::time::sleep(after).await;
        if ok {
            Ok(what)
        } else {
            Err(LinkError::Io(std::io::Error::other(format!(
                "{what} refused"
            ))))
        }
    }

    struct Race {
        result: Result<(Scheme, &'static str), LinkError>,
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
                Err(e @ LinkError::NoTransport { .. }) => e.to_string(),
                other => panic!("{quic:?} {tls:?}: expected NoTransport, got {other:?}"),
            };
            assert!(
                message.contains("QUIC: I/O: quic refused")
                    && message.contains("TCP + TLS: I/O: tls refused")
                    && message.contains("127.0.0.1:7443"),
                "{message}"
            );
        }
    }
}
