//! Who an endpoint is, whom it accepts, and the limits it keeps: what both
//! the client ([`super::connect`]) and the server ([`super::listen`]) side
//! are built from.

use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::rand::{SecureRandom, SystemRandom};

use super::association::AssocConfig;
use super::error::LinkError;
use super::stats::AssocStats;
use super::tls::TlsFiles;
use crate::handshake::{Config as HandshakeConfig, Identity, Trust};

/// Default limit on a handshake, so a stalled peer cannot pin resources.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default limit on a new connection's silence: a peer that connects sends
/// its first octets (a TLS ClientHello, the N-PAMP ClientHello on a QUIC
/// stream) within one round trip, so a socket silent this long is dropped
/// long before [`DEFAULT_HANDSHAKE_TIMEOUT`].
pub const DEFAULT_FIRST_OCTETS_TIMEOUT: Duration = Duration::from_secs(3);
/// QUIC keep-alive of client connections, well inside the idle timeout.
pub const QUIC_KEEP_ALIVE: Duration = Duration::from_secs(2);
/// A QUIC connection silent this long (no keep-alive answered) is lost: a
/// peer that died is noticed within this time.
pub const QUIC_IDLE_TIMEOUT: Duration = Duration::from_secs(8);
/// How long an `npamp://` client waits for QUIC before it also tries
/// TCP + TLS (RFC 8305's recommended connection attempt delay).
pub const FALLBACK_DELAY: Duration = Duration::from_millis(250);
/// UDP socket buffers asked for on QUIC endpoints.
pub const UDP_BUFFER_BYTES: usize = 8 << 20;

/// Whom an endpoint accepts, shared by every clone of it: replacing it
/// (a configuration reload) applies to the handshakes that start from then
/// on; established associations are not touched.
#[derive(Clone, Debug)]
pub struct SharedTrust(Arc<std::sync::RwLock<Trust>>);

impl SharedTrust {
    pub fn new(trust: Trust) -> Self {
        Self(Arc::new(std::sync::RwLock::new(trust)))
    }

    /// The trust a handshake starting now uses.
    pub fn current(&self) -> Trust {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whom handshakes accept from now on.
    pub fn replace(&self, trust: Trust) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = trust;
    }
}

/// Who we are and whom we accept.
#[derive(Clone)]
pub struct Endpoint {
    /// Ed25519 seed of this gateway's identity; zeroized when dropped.
    pub identity_seed: zeroize::Zeroizing<[u8; 32]>,
    pub trust: SharedTrust,
    pub handshake: HandshakeConfig,
    pub assoc: AssocConfig,
    pub handshake_timeout: Duration,
    /// A server's TLS certificate; `None`: self-signed, generated at bind.
    pub tls_files: Option<TlsFiles>,
    /// A listener runs at most this many handshakes at once; a connection
    /// beyond that is refused at once (a handshake flood cannot exhaust
    /// CPU or memory, and established associations keep being served).
    /// Connections that have sent nothing yet do not count: they wait in a
    /// room of their own (see [`super::listen`]).
    pub max_handshakes: usize,
    /// At most this many of those handshakes from one source address, so
    /// one host cannot take every slot.
    pub max_handshakes_per_source: usize,
    /// How long a new connection may stay silent before it is dropped
    /// ([`DEFAULT_FIRST_OCTETS_TIMEOUT`]).
    pub first_octets_timeout: Duration,
    /// What peers did wrong, for all associations of this endpoint.
    pub stats: Arc<AssocStats>,
    /// QUIC congestion control of this endpoint's connections.
    pub congestion: Congestion,
    /// The QUIC receive window of each stream of this endpoint's client
    /// connections (octets the peer may send ahead of what is read);
    /// `None`: quinn's (1.25 MB). What a local party does not take waits
    /// in it, so many sessions want it small.
    pub receive_window: Option<u32>,
    /// The round-trip time this endpoint's client connections assume
    /// before they have measured one; `None`: quinn's 333 ms (RFC 9002
    /// §6.2.2). It sets when a lost Initial is sent again, about three
    /// times this: a handshake sent into the gap while its peer restarts
    /// waits that long. The edge sets it from its last association with
    /// the same peer.
    pub initial_rtt: Option<Duration>,
}

/// QUIC congestion control.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Congestion {
    /// quinn's default, loss-based: it reads every loss as congestion.
    #[default]
    Cubic,
    /// Model-based (quinn marks it experimental): random loss does not
    /// shrink its window. On a path with 5 % random loss and 20 ± 10 ms
    /// each way it kept p99 at 153–156 ms where Cubic reached 2.4–2.7 s
    /// (`results/faults/2026-11-30-congestion/`).
    Bbr,
}

impl Congestion {
    pub(super) fn apply(self, transport: &mut quinn::TransportConfig) {
        if self == Congestion::Bbr {
            transport
                .congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
        }
    }
}

impl std::fmt::Display for Congestion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr",
        })
    }
}

/// A congestion controller name that is not one of ours.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown congestion control {0:?}: expected cubic or bbr")]
pub struct UnknownCongestion(pub String);

impl std::str::FromStr for Congestion {
    type Err = UnknownCongestion;

    fn from_str(s: &str) -> Result<Self, UnknownCongestion> {
        match s {
            "cubic" => Ok(Self::Cubic),
            "bbr" => Ok(Self::Bbr),
            other => Err(UnknownCongestion(other.to_owned())),
        }
    }
}

/// Default of [`Endpoint::max_handshakes`].
pub const DEFAULT_MAX_HANDSHAKES: usize = 256;
/// Default of [`Endpoint::max_handshakes_per_source`].
pub const DEFAULT_MAX_HANDSHAKES_PER_SOURCE: usize = 32;

impl Endpoint {
    pub fn new(identity_seed: [u8; 32], trust: Trust) -> Self {
        Self::with_seed(zeroize::Zeroizing::new(identity_seed), trust)
    }

    /// An endpoint with a seed read from a key file (kept zeroized).
    pub fn with_seed(identity_seed: zeroize::Zeroizing<[u8; 32]>, trust: Trust) -> Self {
        Self {
            identity_seed,
            trust: SharedTrust::new(trust),
            handshake: HandshakeConfig::default(),
            assoc: AssocConfig::default(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            tls_files: None,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            max_handshakes_per_source: DEFAULT_MAX_HANDSHAKES_PER_SOURCE,
            first_octets_timeout: DEFAULT_FIRST_OCTETS_TIMEOUT,
            stats: Arc::new(AssocStats::default()),
            congestion: Congestion::default(),
            receive_window: None,
            initial_rtt: None,
        }
    }

    pub(super) fn identity(&self) -> Result<Identity, LinkError> {
        Ok(Identity::from_seed(&self.identity_seed)?)
    }
}

/// `N` octets from the OS random number generator.
pub(super) fn random<const N: usize>() -> Result<[u8; N], LinkError> {
    let mut out = [0u8; N];
    SystemRandom::new()
        .fill(&mut out)
        .map_err(|_| LinkError::Random)?;
    Ok(out)
}
