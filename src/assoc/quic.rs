//! QUIC endpoints (quinn): client endpoints shared or per association, the
//! server endpoint with keys stable across restarts, and the transport
//! settings of both sides.

use std::net::SocketAddr;
use std::sync::Arc;

use tracing::{debug, warn};

use super::endpoint::{Endpoint, QUIC_IDLE_TIMEOUT, QUIC_KEEP_ALIVE, UDP_BUFFER_BYTES};
use super::error::LinkError;
use super::tls::{check_alpn, tls_client_config, tls_server_config};

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
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// A server endpoint on `addr` for `ep`: its certificate (or a
/// self-signed one), ALPN `n-pamp/2`, keys derived from its identity.
pub(super) fn server_endpoint(
    addr: SocketAddr,
    ep: &Endpoint,
) -> Result<quinn::Endpoint, LinkError> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls_server_config(
        ep.tls_files.as_ref(),
    )?)
    .map_err(|e| LinkError::certificate("QUIC server TLS configuration", e))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport_config(ep)));
    quic_endpoint(
        addr,
        Some(server),
        stable_endpoint_config(&ep.identity_seed),
    )
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
    let domain = if bind.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    let _ = socket.set_recv_buffer_size(UDP_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(UDP_BUFFER_BYTES);
    for (what, got) in [
        ("receive", socket.recv_buffer_size()),
        ("send", socket.send_buffer_size()),
    ] {
        match got {
            Ok(got) if got >= UDP_BUFFER_BYTES => debug!(what, got, "UDP buffer enlarged"),
            Ok(got) => warn!(
                what,
                asked = UDP_BUFFER_BYTES,
                got,
                "the OS granted a smaller UDP buffer (raise net.core.rmem_max / wmem_max for full QUIC throughput)"
            ),
            Err(e) => warn!(what, error = %e, "could not read the UDP buffer size"),
        }
    }
    socket.bind(&bind.into())?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime for QUIC"))?;
    Ok(quinn::Endpoint::new(
        config,
        server,
        socket.into(),
        runtime,
    )?)
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
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    config
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
