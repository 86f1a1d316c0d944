//! Associations: the sans-IO core ([`association`]) and its async shell,
//! one module per concern:
//!
//! | module | owns |
//! |---|---|
//! | [`association`] | the state machine: keys, sequence numbers, PING, CLOSE, KEY_UPDATE, deadlines |
//! | [`addr`] | `quic://`, `tls://`, `npamp://` addresses |
//! | [`endpoint`] | who we are and whom we accept; the limits of an endpoint |
//! | [`frames`] | reading whole frames off a stream |
//! | [`payload`] | a received Bridge payload, and when keeping part of it copies |
//! | [`tls`] | TLS 1.3 configurations, the certificate verifier, the ALPN check |
//! | [`quic`] | QUIC endpoints and their configuration |
//! | [`binding`] | which stream carries which channel, per transport; writing sealed octets to them |
//! | [`connect`] | the client side: reaching a peer (Happy Eyeballs for `npamp://`), [`Link`] |
//! | [`listen`] | the server side: [`Listener`] |
//! | `guard` | a listener's defences against connections that never finish |
//! | [`driver`] | running an established association: reader and writer tasks |
//! | [`error`] | [`LinkError`], [`End`], [`ErrorClass`] |
//! | [`stats`] | what hostile peers did, for metrics |
//!
//! Dependencies point one way, and every module names the sibling it takes
//! an item from (never this facade): `association` uses no sibling;
//! `error`, `stats`, `addr`, `payload`, `frames`, `tls` sit below `endpoint` and
//! `quic`, then `binding`, `driver`, `guard`, and `connect`/`listen` on top.
//! `tests/layering.rs` holds it, and keeps every file under 600 lines.

pub mod addr;
pub mod association;
pub mod binding;
pub mod connect;
pub mod driver;
pub mod endpoint;
pub mod error;
pub mod frames;
mod guard;
pub mod listen;
mod patience;
pub mod payload;
pub mod quic;
pub mod stats;
pub mod tls;

pub use addr::{PeerAddr, Scheme, SchemeAddr};
pub use association::{
    AssocConfig, AssocError, Association, CHANNELS, Counters, Drop, Event, Liveness, Role,
};
pub use connect::{Link, client_handshake};
pub use driver::{AssocHandle, BridgeSink};
pub use endpoint::{
    Congestion, DEFAULT_FIRST_OCTETS_TIMEOUT, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_HANDSHAKES,
    DEFAULT_MAX_HANDSHAKES_PER_SOURCE, Endpoint, FALLBACK_DELAY, QUIC_IDLE_TIMEOUT,
    QUIC_KEEP_ALIVE,
};
pub use error::{End, ErrorClass, Failure, Gone, LinkError};
pub use frames::{BoxRead, BoxWrite, FrameReader, HANDSHAKE_MAX_PAYLOAD};
pub use listen::{Listener, ServeStats};
pub use payload::Payload;
pub use quic::{SharedClientEndpoint, quic_endpoint, stable_endpoint_config};
pub use tls::{ALPN, TlsFiles, tls_client_config, tls_server_config};
