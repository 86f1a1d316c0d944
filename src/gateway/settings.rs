//! What a gateway is set to: its limits (with safe defaults) and the
//! errors of starting or configuring it. Every room reads them; they read
//! no room.

use std::time::Duration;

use crate::assoc::{LinkError, PeerAddr};

/// Errors of starting or configuring a gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("config: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("association listener {addr}: {source}")]
    Listen { addr: PeerAddr, source: LinkError },
    #[error("TLS: {0}")]
    Tls(String),
}

/// Limits, with safe defaults (README "Limits and defaults").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest JSON-RPC text (HTTP body, WebSocket message, line). A text
    /// crosses in one frame, so this stays under the frame limit.
    pub max_body: usize,
    /// Most elements in a batch.
    pub max_batch: usize,
    /// Requests awaiting a reply, whole gateway.
    pub max_in_flight: usize,
    /// Requests awaiting a reply, one client session.
    pub max_in_flight_per_connection: usize,
    /// Client connections per ingress listener.
    pub max_connections: usize,
    /// Client connections per ingress listener from one source address (an
    /// IPv6 one by its /64).
    pub max_connections_per_source: usize,
    /// MCP sessions at one HTTP ingress from one client (its bearer token,
    /// else its certificate, else its address).
    pub max_sessions_per_client: usize,
    /// Origin: upstream child processes (`--upstream-cmd`, one per
    /// association) running at once.
    pub max_upstream_processes: usize,
    /// A request not answered in this time gets a timeout error.
    pub request_timeout: Duration,
    /// How long an MCP subscription (`subscriptions/listen`) lasts before
    /// the gateway ends it (its graceful end, and its cancellation at the
    /// server).
    pub listen_timeout: Duration,
    /// A session client silent this long (nothing outstanding) is closed.
    pub idle_timeout: Duration,
    /// A client must move data within this time, else it is dropped: an
    /// HTTP request's headers, then its body (slowloris), a WebSocket
    /// handshake, a reply written to a client that does not read.
    pub stall_timeout: Duration,
    /// Origin: how long connecting to an upstream may take (TCP, and TLS
    /// for `https`, of an HTTP upstream; the whole handshake of a WebSocket
    /// one). An HTTP request that gets no connection in this time was not
    /// sent: it goes to another upstream of the group, or is answered
    /// NotDelivered.
    pub upstream_connect_timeout: Duration,
    /// Associations per peer for stateless traffic.
    pub pool_size: usize,
    /// Messages queued for one session's local party.
    pub session_queue: usize,
    /// Octets queued for one session's local party (a client that does not
    /// read, a slow upstream): past this the association feeding it waits.
    pub session_buffer: usize,
    /// On SIGTERM: how long in-flight requests may take to finish.
    pub drain_timeout: Duration,
    /// Edge: retries and hedges, in percent of requests (plus a small
    /// reserve), at most.
    pub retry_budget: u32,
    /// Edge: a read-only request with no reply after this long is sent to a
    /// second origin too (the first reply wins); `None`: never.
    pub hedge_after: Option<HedgeAfter>,
    /// Octets of JSON-RPC text the whole gateway holds in flight between
    /// the two sides: past this a session's messages wait, and an HTTP
    /// request is answered Unavailable.
    pub memory_budget: usize,
}

/// Logged whenever peer authentication is switched off.
pub const INSECURE_PEERS_WARNING: &str = "--insecure-accept-any-peer: peer identities are NOT checked; any peer can impersonate the one you expect";

/// The largest `--max-body`: one JSON-RPC message is one frame, and 64 MiB
/// covers what Ethereum nodes send (full blocks, traces) and accept.
pub const MAX_BODY_LIMIT: usize = 64 << 20;

/// The default `--max-body`.
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// The largest frame payload a gateway accepts from its authenticated peer:
/// a message of [`MAX_BODY_LIMIT`] with room for the envelope and label,
/// whatever this gateway's own `--max-body`. A peer configured for larger
/// messages than this gateway then gets a clear refusal of the one message
/// (checked against `--max-body` after the frame is read), not an
/// association torn down for an oversized frame.
pub const MAX_FRAME_PAYLOAD: u32 = (MAX_BODY_LIMIT + (64 << 10)) as u32;

/// How long a shutdown waits for upstream sessions to close after the
/// associations did: a child's grace after EOF and after SIGTERM, plus a
/// margin.
pub(crate) const UPSTREAM_STOP_LIMIT: Duration = Duration::from_secs(5);

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body: DEFAULT_MAX_BODY,
            max_batch: 100,
            max_in_flight: 16_384,
            max_in_flight_per_connection: 128,
            max_connections: 4096,
            max_connections_per_source: 2048,
            max_sessions_per_client: 16,
            max_upstream_processes: 64,
            request_timeout: Duration::from_secs(30),
            listen_timeout: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(300),
            stall_timeout: Duration::from_secs(10),
            upstream_connect_timeout: Duration::from_secs(5),
            pool_size: std::thread::available_parallelism().map_or(2, |n| n.get()),
            session_queue: 256,
            session_buffer: 256 << 10,
            drain_timeout: Duration::from_secs(10),
            memory_budget: 64 << 20,
            retry_budget: 20,
            hedge_after: None,
        }
    }
}

/// The default `--max-body` with `--protocol lsp`: a full-document sync of a
/// large file, or its semantic tokens, runs to megabytes.
pub const LSP_MAX_BODY: usize = 16 << 20;

impl Limits {
    /// The defaults for a gateway of `protocol`. An LSP session is an
    /// editor's for as long as it is open, idle for hours between bursts,
    /// with messages of megabytes and requests (a workspace's first
    /// analysis, a question to the user) that take minutes: `docs/lsp.md`.
    pub fn for_protocol(protocol: crate::bridge::ProtocolId) -> Self {
        let limits = Self::default();
        match protocol {
            crate::bridge::ProtocolId::LSP_EXPERIMENTAL => Self {
                max_body: LSP_MAX_BODY,
                idle_timeout: Duration::from_secs(24 * 3600),
                request_timeout: Duration::from_secs(120),
                ..limits
            },
            _ => limits,
        }
    }
}

/// When the edge sends a second copy of a read-only request
/// (`--hedge-after`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HedgeAfter {
    /// After a fixed time.
    Delay(Duration),
    /// After this percentile of the recent read-only latencies, in
    /// hundredths of a percent (`p95` is 9500): about that share of
    /// requests is never hedged.
    Percentile(u32),
}
