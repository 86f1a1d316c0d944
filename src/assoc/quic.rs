//! QUIC endpoints (quinn): client endpoints shared or per association, the
//! server endpoint with keys stable across restarts, and the transport
//! settings of both sides.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::{debug, warn};

use super::endpoint::{Endpoint, QUIC_IDLE_TIMEOUT, QUIC_KEEP_ALIVE, UDP_BUFFER_BYTES};
use super::error::LinkError;
use super::tls::{check_alpn, tls_client_config, tls_server_config};
use crate::shard::Shards;

/// Client QUIC endpoints (UDP sockets), one per address family, created on
/// first use and shared by every association connected through them.
///
/// An endpoint of its own per association gives each one its own socket and
/// receive path, which is what a few pooled associations that should spread
/// over cores want. A gateway with an association per client session wants
/// the opposite: quinn gives every endpoint a receive buffer of about 3 MB
/// on Linux with GRO (1472 B × 64 segments × 32 datagrams), so a thousand
/// WebSocket clients would cost 3 GB in buffers alone.
#[derive(Clone, Default)]
pub struct SharedClientEndpoint(Arc<std::sync::Mutex<[Option<quinn::Endpoint>; 2]>>);

impl SharedClientEndpoint {
    pub(super) fn get(&self, ipv6: bool) -> Result<quinn::Endpoint, LinkError> {
        let mut endpoints = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = &mut endpoints[usize::from(ipv6)];
        if let Some(endpoint) = slot {
            return Ok(endpoint.clone());
        }
        let endpoint = client_endpoint(ipv6)?;
        *slot = Some(endpoint.clone());
        Ok(endpoint)
    }
}

/// A client QUIC endpoint on an ephemeral port of the address family.
pub(super) fn client_endpoint(ipv6: bool) -> Result<quinn::Endpoint, LinkError> {
    let bind = if ipv6 {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0))
    };
    quic_endpoint(bind, None, quinn::EndpointConfig::default())
}

/// The transport settings both ends of a connection of `ep` use: its
/// congestion control and batched ACKs.
fn transport_config(ep: &Endpoint) -> quinn::TransportConfig {
    let mut transport = quinn::TransportConfig::default();
    ep.congestion.apply(&mut transport);
    request_batched_acks(&mut transport);
    transport
}

/// A client connection's configuration: TLS offering `alpn`, keep-alive
/// well inside the idle timeout, the endpoint's transport settings.
pub(super) fn client_config(alpn: &[u8], ep: &Endpoint) -> Result<quinn::ClientConfig, LinkError> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls_client_config(alpn)?)
        .map_err(|e| LinkError::certificate("QUIC client TLS configuration", e))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = transport_config(ep);
    // An idle association stays up (the default idle timeout is 30 s).
    transport.keep_alive_interval(Some(QUIC_KEEP_ALIVE));
    transport.max_idle_timeout(QUIC_IDLE_TIMEOUT.try_into().ok());
    if let Some(window) = ep.receive_window {
        // Two streams (Control, Bridge) share the connection's window.
        transport.stream_receive_window(window.into());
        transport.receive_window(
            (2 * u64::from(window))
                .try_into()
                .unwrap_or(quinn::VarInt::MAX),
        );
    }
    if let Some(rtt) = ep.initial_rtt {
        transport.initial_rtt(rtt);
    }
    config.transport_config(Arc::new(transport));
    config.initial_dst_cid_provider(Arc::new(initial_dcid));
    Ok(config)
}

/// A server endpoint on `addr` for `ep`: its certificate (or a
/// self-signed one), ALPN `n-pamp/2`, keys derived from its identity.
pub(super) fn server_endpoint(
    addr: SocketAddr,
    ep: &Endpoint,
) -> Result<quinn::Endpoint, LinkError> {
    quic_endpoint(
        addr,
        Some(server_config(ep)?),
        stable_endpoint_config(&ep.identity_seed),
    )
}

fn server_config(ep: &Endpoint) -> Result<quinn::ServerConfig, LinkError> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls_server_config(
        ep.tls_files.as_ref(),
    )?)
    .map_err(|e| LinkError::certificate("QUIC server TLS configuration", e))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport_config(ep)));
    Ok(server)
}

/// A server's QUIC endpoints on one port: one, or one per shard.
pub(super) enum ServerEndpoints {
    One(quinn::Endpoint),
    /// Endpoint `i` lives on shard `i` (its driver and socket there), and
    /// gets the datagrams of the connections whose ids it issued
    /// ([`steer_by_connection_id`]).
    Sharded(Vec<quinn::Endpoint>),
}

impl ServerEndpoints {
    pub(super) fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            ServerEndpoints::One(e) => e.local_addr(),
            ServerEndpoints::Sharded(all) => all
                .first()
                .ok_or_else(|| std::io::Error::other("no endpoint"))?
                .local_addr(),
        }
    }
}

/// The server endpoints on `addr` for `ep`: with two shards or more (on
/// Linux), one per shard on `SO_REUSEPORT` sockets of the same port, each
/// made on its shard, so that a connection's datagrams are read, and its
/// driver and association run, on one thread; else one endpoint here.
pub(super) async fn server_endpoints(
    addr: SocketAddr,
    ep: &Endpoint,
    shards: Option<&Shards>,
) -> Result<ServerEndpoints, LinkError> {
    server_endpoints_steered_by(addr, ep, shards, steer_by_connection_id).await
}

/// [`server_endpoints`], with `steer` attaching the datagram steering to a
/// socket group. Where it is refused (a kernel before 4.5, gVisor, a
/// seccomp policy that forbids socket filters), one endpoint serves every
/// shard's connections, as without shards: slower on many cores, but
/// listening. Without steering, the kernel would still spread datagrams by
/// their addresses, and a connection whose client address changes (NAT
/// rebinding) would reach a shard that does not know it.
async fn server_endpoints_steered_by(
    addr: SocketAddr,
    ep: &Endpoint,
    shards: Option<&Shards>,
    steer: fn(&socket2::Socket, usize) -> Result<(), LinkError>,
) -> Result<ServerEndpoints, LinkError> {
    let Some(shards) = shards.filter(|s| s.len() > 1 && STEERING && s.len() <= 256) else {
        return Ok(ServerEndpoints::One(server_endpoint(addr, ep)?));
    };
    let k = shards.len();
    let mut sockets: Vec<socket2::Socket> = Vec::with_capacity(k);
    // SO_REUSEPORT would let the group join sockets another process of the
    // same user holds on the port, each taking a share of the other's
    // datagrams: a plain bind first refuses a port in use (and picks one
    // for port 0).
    let mut bind = std::net::UdpSocket::bind(addr)
        .and_then(|probe| probe.local_addr())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => std::io::Error::new(
                e.kind(),
                format!("UDP port {addr} is in use by another socket"),
            ),
            _ => e,
        })?;
    for _ in 0..k {
        let socket = udp_socket(bind, true)?;
        if let Some(bound) = socket.local_addr()?.as_socket() {
            bind = bound;
        }
        sockets.push(socket);
    }
    if let Err(e) = steer(&sockets[0], k) {
        warn!(
            error = %e,
            shards = k,
            "cannot steer QUIC datagrams to shards (SO_ATTACH_REUSEPORT_CBPF); \
             one endpoint serves every shard's connections"
        );
        // The group's sockets go first, so the one endpoint can take the port.
        drop(sockets);
        return Ok(ServerEndpoints::One(server_endpoint(addr, ep)?));
    }
    let server = server_config(ep)?;
    let mut endpoints = Vec::with_capacity(k);
    for (i, socket) in sockets.into_iter().enumerate() {
        let (server, config) = (
            server.clone(),
            sharded_endpoint_config(&ep.identity_seed, i, k),
        );
        let made = shards.spawn_on(i, async move {
            let runtime = quinn::default_runtime()
                .ok_or_else(|| std::io::Error::other("no async runtime for QUIC"))?;
            quinn::Endpoint::new(config, Some(server), socket.into(), runtime)
        });
        let endpoint = made
            .await
            .map_err(|e| std::io::Error::other(format!("shard {i}: {e}")))??;
        endpoints.push(endpoint);
    }
    Ok(ServerEndpoints::Sharded(endpoints))
}

/// The ALPN check ([`check_alpn`]) on an established QUIC connection.
pub(super) fn check_connection_alpn(conn: &quinn::Connection) -> Result<(), LinkError> {
    let negotiated = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.protocol);
    check_alpn(negotiated.as_deref())
}

/// A QUIC endpoint on a socket with enlarged buffers (logged when the OS
/// grants less than asked).
pub fn quic_endpoint(
    bind: SocketAddr,
    server: Option<quinn::ServerConfig>,
    config: quinn::EndpointConfig,
) -> Result<quinn::Endpoint, LinkError> {
    let socket = udp_socket(bind, false)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime for QUIC"))?;
    Ok(quinn::Endpoint::new(
        config,
        server,
        socket.into(),
        runtime,
    )?)
}

/// Whether a smaller receive (0) or send (1) UDP buffer than asked was
/// already reported: the limit is the system's, the same for every socket
/// (a sharded listener opens one per shard), so it is said once.
static SMALL_UDP_BUFFER_SAID: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// A UDP socket bound to `bind` with enlarged buffers (logged when the OS
/// grants less than asked); `reuse_port`: one of a group on one port.
fn udp_socket(bind: SocketAddr, reuse_port: bool) -> Result<socket2::Socket, LinkError> {
    let domain = if bind.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    let _ = socket.set_recv_buffer_size(UDP_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(UDP_BUFFER_BYTES);
    for (said, what, got) in [
        (
            &SMALL_UDP_BUFFER_SAID[0],
            "receive",
            socket.recv_buffer_size(),
        ),
        (&SMALL_UDP_BUFFER_SAID[1], "send", socket.send_buffer_size()),
    ] {
        match got {
            Ok(got) if got >= UDP_BUFFER_BYTES => debug!(what, got, "UDP buffer enlarged"),
            Ok(got) if said.swap(true, Ordering::Relaxed) => {
                debug!(
                    what,
                    asked = UDP_BUFFER_BYTES,
                    got,
                    "smaller UDP buffer again"
                );
            }
            Ok(got) => warn!(
                what,
                asked = UDP_BUFFER_BYTES,
                got,
                "the OS granted a smaller UDP buffer (raise net.core.rmem_max / wmem_max for full QUIC throughput); said once"
            ),
            Err(e) => warn!(what, error = %e, "could not read the UDP buffer size"),
        }
    }
    socket.bind(&bind.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket)
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
    endpoint_config(identity_seed, None)
}

/// [`stable_endpoint_config`] for the endpoint of shard `shard` of `of`:
/// the connection ids it issues say so ([`ShardCids`]).
fn sharded_endpoint_config(
    identity_seed: &[u8; 32],
    shard: usize,
    of: usize,
) -> quinn::EndpointConfig {
    endpoint_config(identity_seed, Some((shard, of)))
}

fn endpoint_config(
    identity_seed: &[u8; 32],
    shard: Option<(usize, usize)>,
) -> quinn::EndpointConfig {
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
        let hashed = quinn_proto::HashedConnectionIdGenerator::from_key(cid_key);
        match shard {
            None => Box::new(hashed),
            Some((shard, of)) => Box::new(ShardCids { hashed, shard, of }),
        }
    });
    config
}

/// The connection ids of shard `shard`'s endpoint (of `of`): quinn's
/// hashed ids (random nonce, keyed signature) whose first octet is
/// `shard` modulo `of`, drawn again until it is. That octet is what
/// [`steer_by_connection_id`] reads, as a QUIC load balancer reads a server
/// id in a connection id (which one of `of` threads took a connection is
/// all an observer can tell from it).
struct ShardCids {
    hashed: quinn_proto::HashedConnectionIdGenerator,
    shard: usize,
    of: usize,
}

impl quinn_proto::ConnectionIdGenerator for ShardCids {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        // One try in `of` succeeds: 64 * `of` tries fail with a chance
        // under e^-64. A last failure would still be a valid id, only
        // read by another shard's endpoint (which answers it with a
        // stateless reset, as for any id it does not know).
        let mut cid = self.hashed.generate_cid();
        for _ in 0..64 * self.of {
            if cid
                .first()
                .is_some_and(|&b| usize::from(b) % self.of == self.shard)
            {
                break;
            }
            cid = self.hashed.generate_cid();
        }
        cid
    }

    fn validate(&self, cid: &quinn::ConnectionId) -> Result<(), quinn_proto::InvalidCid> {
        self.hashed.validate(cid)
    }

    fn cid_len(&self) -> usize {
        self.hashed.cid_len()
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        self.hashed.cid_lifetime()
    }
}

/// Whether this platform can steer a port's datagrams to its shards.
const STEERING: bool = cfg!(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64"
    )
));

/// Steers each datagram that reaches the `SO_REUSEPORT` group of `socket`
/// (`of` sockets, bound in shard order) to socket `dcid[0] % of`, where
/// `dcid` is the packet's destination connection id: a long header's
/// (octet 6: after the first octet, the version and the id's length), or a
/// short header's (octet 1). A client's first packets carry the id it chose
/// (our edges choose one whose first octet is their shard, so a pool's
/// associations spread over the shards); from the server's first reply on,
/// they carry ids the endpoint issued ([`ShardCids`]), which lead back to
/// it. A datagram too short to read goes to socket 0.
#[cfg(target_os = "linux")]
fn steer_by_connection_id(socket: &socket2::Socket, of: usize) -> Result<(), LinkError> {
    use std::os::fd::AsRawFd;
    // SO_ATTACH_REUSEPORT_CBPF in <asm-generic/socket.h> (the `STEERING`
    // architectures'); the libc crate names it for Android only.
    const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    const LD_B_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
    const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
    const JA: u16 = 0x05; // BPF_JMP | BPF_JA
    const MOD_K: u16 = 0x94; // BPF_ALU | BPF_MOD | BPF_K
    const RET_A: u16 = 0x16; // BPF_RET | BPF_A
    let of = u32::try_from(of).map_err(|_| std::io::Error::other("too many shards"))?;
    let mut program = [
        op(LD_B_ABS, 0, 0, 0), // A = first octet (the payload starts after UDP's header)
        op(JSET_K, 0, 2, 0x80), // long header?
        op(LD_B_ABS, 0, 0, 6), //   yes: A = its destination id's first octet
        op(JA, 0, 0, 1),       //
        op(LD_B_ABS, 0, 0, 1), //   no: A = the short header's
        op(MOD_K, 0, 0, of),   // A %= of
        op(RET_A, 0, 0, 0),    // the socket's index in the group
    ];
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: a valid socket descriptor and a sock_fprog that points at
    // `program`, alive for the call; the kernel copies and checks the
    // program (a bad one is refused with an error, never run).
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            std::ptr::from_ref(&prog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn steer_by_connection_id(_: &socket2::Socket, _: usize) -> Result<(), LinkError> {
    Err(std::io::Error::other("steering datagrams to shards needs Linux").into())
}

/// A client's first destination connection id: random, its first octet
/// the shard it is made on (see [`steer_by_connection_id`]).
fn initial_dcid() -> quinn::ConnectionId {
    let mut cid: [u8; 16] = super::endpoint::random().unwrap_or_else(|_| {
        // No system randomness: a fixed-looking id is still a valid one
        // (it only names the connection to the server).
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        t.to_le_bytes()
    });
    if let Some(shard) = Shards::current() {
        cid[0] = (shard % 256) as u8;
    }
    quinn::ConnectionId::new(&cid)
}

/// How many ack-eliciting packets the peer may take before it must send an
/// ACK (QUIC ACK frequency extension); QUIC's default is every second one.
const ACK_ELICITING_THRESHOLD: u32 = 4;

/// Asks the peer, where it supports the ACK frequency extension (quinn
/// does), to acknowledge after more than [`ACK_ELICITING_THRESHOLD`]
/// ack-eliciting packets instead of every second one. With a few requests
/// in flight the acknowledgements then ride on the replies instead of
/// going as datagrams of their own: at 4 in flight 2.52–2.56 datagrams per
/// request became 1.97–1.98, and each gateway's syscalls per request fell
/// by 13–15 % (`results/2026-12-03-quic-ack-frequency/`). A packet out of
/// order is still acknowledged at once (reordering threshold 1, QUIC's
/// behaviour without the extension), so a loss is reported as early as
/// before; the last packets of a burst wait at most the peer's
/// `max_ack_delay`, as a lone packet always did. 10 saved a few more
/// datagrams at 32 in flight; 4 is the smaller step, taken because Cubic on
/// a lossy path was never faster with 10 (the results' README).
fn request_batched_acks(transport: &mut quinn::TransportConfig) {
    let mut acks = quinn::AckFrequencyConfig::default();
    acks.ack_eliciting_threshold(ACK_ELICITING_THRESHOLD.into())
        .reordering_threshold(1u32.into());
    transport.ack_frequency_config(Some(acks));
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn_proto::ConnectionIdGenerator;

    #[test]
    fn a_shard_issues_ids_that_lead_back_to_it() {
        for (shard, of) in [(0, 2), (1, 2), (2, 3), (5, 16)] {
            let mut cids = ShardCids {
                hashed: quinn_proto::HashedConnectionIdGenerator::from_key(7),
                shard,
                of,
            };
            for _ in 0..200 {
                let cid = cids.generate_cid();
                assert_eq!(usize::from(cid[0]) % of, shard);
                assert!(cids.validate(&cid).is_ok(), "still a valid hashed id");
            }
        }
    }

    /// Where the kernel refuses the steering program (gVisor, a kernel
    /// before 4.5, a seccomp policy), the listener still listens: one
    /// endpoint, on the port asked for, instead of failing to start.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_refused_steering_leaves_one_endpoint_on_the_port() {
        let shards = Shards::start(2).expect("shards");
        let ep = Endpoint::new([7; 32], crate::handshake::Trust::InsecureAcceptAny);
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let accepted = |_: &socket2::Socket, _: usize| Ok(());
        let steered = server_endpoints_steered_by(any, &ep, Some(&shards), accepted)
            .await
            .expect("listening");
        assert!(matches!(&steered, ServerEndpoints::Sharded(all) if all.len() == 2));
        let refused = |_: &socket2::Socket, _: usize| -> Result<(), LinkError> {
            Err(std::io::Error::from_raw_os_error(libc::ENOPROTOOPT).into())
        };
        let one = server_endpoints_steered_by(any, &ep, Some(&shards), refused)
            .await
            .expect("listening without steering");
        assert!(matches!(one, ServerEndpoints::One(_)));
        // A port named: the group's sockets are closed first, so the one
        // endpoint gets that port.
        let port = std::net::UdpSocket::bind(any)
            .and_then(|s| s.local_addr())
            .expect("a free port");
        let again = server_endpoints_steered_by(port, &ep, Some(&shards), refused)
            .await
            .expect("listening on the named port");
        assert!(matches!(again, ServerEndpoints::One(_)));
        assert_eq!(again.local_addr().expect("bound"), port);
    }

    /// Datagrams to a port of two steered sockets reach the socket their
    /// destination connection id names.
    #[cfg(target_os = "linux")]
    #[test]
    fn datagrams_go_to_the_socket_their_connection_id_names() {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let first = udp_socket(any, true).expect("socket");
        let port = first.local_addr().expect("addr").as_socket().expect("inet");
        let second = udp_socket(port, true).expect("second socket");
        steer_by_connection_id(&first, 2).expect("steering");
        let group: [std::net::UdpSocket; 2] = [first.into(), second.into()];
        for s in &group {
            s.set_nonblocking(false).expect("blocking");
            s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .expect("timeout");
        }
        let client = std::net::UdpSocket::bind(any).expect("client");
        let short = |id: u8| vec![0x40, id, 1, 2, 3, 4, 5, 6, 7, 8];
        let long = |id: u8| vec![0xc0, 0, 0, 0, 1, 8, id, 1, 2, 3, 4, 5, 6, 7, 9, 9];
        for (datagram, to) in [
            (short(0), 0),
            (short(1), 1),
            (short(7), 1),
            (short(8), 0),
            (long(1), 1),
            (long(2), 0),
            (long(0xff), 1),
            (vec![0x40], 0),
        ] {
            client.send_to(&datagram, port).expect("send");
            let mut buf = [0u8; 64];
            let n = group[to]
                .recv(&mut buf)
                .expect("received by the named socket");
            assert_eq!(&buf[..n], &datagram[..], "socket {to}");
        }
        // Nothing went astray.
        for s in &group {
            s.set_nonblocking(true).expect("non-blocking");
            assert!(s.recv(&mut [0u8; 64]).is_err());
        }
    }
}
