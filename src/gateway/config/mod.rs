//! Gateway options: command-line flags and their TOML form (`--config
//! FILE`), one struct for both. Every flag `--some-flag` is the key
//! `some-flag` in the file; a flag given on the command line wins over the
//! file. Errors name the flag, or the key and its line in the file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::oauth::ScopeRule;
use super::{GatewayConfig, IngressUrl, Upstream};
use crate::assoc::PeerAddr;
use crate::assoc::endpoint::Congestion;
use crate::framing::Framing;

mod build;
pub mod defaults;
mod sources;
mod values;

pub use sources::Sourced;
pub use values::{
    Count, EffectClass, EffectRule, HedgeAfterArg, HostPort, PeerKey, Protocol, Rate, RouteRule,
    Seconds, UpstreamHeader,
};

/// The flags of `serve` and `connect` (and the keys of `--config`).
#[derive(Deserialize, Debug, Default, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(mut_args(defaults::shown)))]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct GatewayOptions {
    /// Read these options from a TOML file (keys are the flag names without
    /// `--`); flags on the command line win.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Accept associations: quic://ADDR, tls://ADDR, or npamp://ADDR for both
    /// on one port number (repeatable).
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    pub listen: Vec<PeerAddr>,
    /// Deliver to this JSON-RPC server: http://, https://, ws:// or wss:// URL;
    /// http+unix:///PATH, HTTP over a Unix socket (requests to /; for another
    /// path http+unix://%2FPATH/REQUEST-PATH); unix:///PATH, a socket
    /// speaking JSON values back to back (geth's IPC); or tcp://HOST:PORT,
    /// the same over TCP (both LSP-framed as --framing says).
    /// With --protocol mcp an http(s) URL is an MCP server's Streamable HTTP
    /// endpoint: one MCP session per association.
    /// Repeatable (a group): for HTTP upstreams each request goes to the
    /// healthiest, least loaded one, and one not delivered goes to another
    /// when that cannot execute it twice; for WebSocket, unix:// and MCP
    /// upstreams each association's upstream session runs on the healthiest
    /// with the fewest sessions, and moves to another when it fails.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "URL", conflicts_with = "upstream_cmd")
    )]
    #[serde(deserialize_with = "values::one_or_many")]
    pub upstream: Vec<Upstream>,
    /// Origin: requests whose method matches GLOB (`*` for any run of
    /// characters) go to this HTTP upstream instead of the --upstream group
    /// (repeatable; several for one GLOB form its group; the first rule
    /// that matches wins), e.g. "eth_getLogs=http://archive:8545".
    #[cfg_attr(feature = "cli", arg(long, value_name = "GLOB=URL"))]
    pub route: Vec<RouteRule>,
    /// Extra CA certificates (PEM) trusted for an https:// or wss://
    /// upstream, besides the Mozilla root set.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub upstream_ca: Option<PathBuf>,
    /// A header sent with every request to an http(s):// or ws(s):// upstream,
    /// "NAME: VALUE" (repeatable), e.g. "Authorization: Bearer …" for a
    /// hosted MCP server or RPC provider. Secrets belong in the --config
    /// file (`upstream-header = ["…"]`), not on a command line others can
    /// read.
    #[cfg_attr(feature = "cli", arg(long, value_name = "HEADER"))]
    pub upstream_header: Vec<UpstreamHeader>,
    /// Deliver to a child process speaking newline-delimited JSON-RPC on
    /// stdio, e.g. an MCP server ("PROGRAM ARGS…", split on whitespace;
    /// one per association, restarted with backoff when it exits).
    /// Repeatable (a group, as for --upstream): each association's process
    /// is one of them, and the next start after an exit is another's.
    #[cfg_attr(feature = "cli", arg(long, value_name = "COMMAND"))]
    #[serde(deserialize_with = "values::one_or_many")]
    pub upstream_cmd: Vec<String>,
    /// Accept JSON-RPC clients: http://ADDR, ws://ADDR or tcp://ADDR
    /// (newline-delimited); repeatable. Needs --peer.
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    pub ingress: Vec<IngressUrl>,
    /// The origin gateway clients are carried to: quic://ADDR, tls://ADDR,
    /// or npamp://ADDR (QUIC, falling back to TCP + TLS). Repeatable: each
    /// HTTP request goes to the healthiest, least loaded origin, and one
    /// not delivered goes to another when that cannot execute it twice.
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    #[serde(deserialize_with = "values::one_or_many")]
    pub peer: Vec<PeerAddr>,
    /// Serve Prometheus /metrics and /healthz on this address.
    #[cfg_attr(feature = "cli", arg(long, value_name = "ADDR"))]
    pub metrics: Option<HostPort>,

    /// mcp (0x01), a2a (0x02), jsonrpc (experimental id 0x10) or lsp
    /// (experimental id 0x11, the Language Server Protocol, with limits
    /// sized for it: docs/lsp.md): the protocol_id and SafetyLabel table.
    #[cfg_attr(feature = "cli", arg(long, value_name = "NAME"))]
    pub protocol: Option<Protocol>,
    /// How messages are framed on stream transports (the tcp://,
    /// tls+tcp:// and unix+lines:// ingresses, connect's stdio,
    /// --upstream-cmd children, tcp:// and unix:// upstreams): lines (one
    /// message per line), lsp (the Language Server Protocol's
    /// Content-Length headers) or auto (each stream's own, found from its
    /// first octets; what this gateway writes first, to an upstream, is
    /// LSP's with --protocol lsp, else lines).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FRAMING"))]
    pub framing: Option<Framing>,
    /// Effect class of a method for labels and policy: METHOD=read-only |
    /// idempotent-write | non-idempotent-write | destructive (repeatable).
    #[cfg_attr(feature = "cli", arg(long, value_name = "METHOD=CLASS"))]
    pub effect: Vec<EffectRule>,
    /// Origin: refuse requests of this effect class with SafetyPolicy
    /// (repeatable).
    #[cfg_attr(feature = "cli", arg(long, value_name = "CLASS"))]
    pub refuse_effect: Vec<EffectClass>,
    /// Origin: deliver only these methods (MethodUnsupported for others).
    #[cfg_attr(feature = "cli", arg(long, value_name = "METHOD"))]
    pub allow_method: Vec<String>,
    /// Origin: refuse these methods with MethodUnsupported.
    #[cfg_attr(feature = "cli", arg(long, value_name = "METHOD"))]
    pub deny_method: Vec<String>,

    /// Edge: HTTP and WebSocket clients must send `Authorization: Bearer
    /// TOKEN` with a token from this file (one per line, at least 16
    /// characters); others get 401.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub auth_token_file: Option<PathBuf>,
    /// Edge: be an OAuth 2.1 resource server: HTTP and WebSocket clients
    /// must send `Authorization: Bearer` with a JWT access token this
    /// authorization server issued for this edge (`--oauth-audience`),
    /// checked against its keys; others get 401 (403 for a missing scope)
    /// with a challenge naming this edge's RFC 9728 metadata.
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    pub oauth_issuer: Option<String>,
    /// Edge: the resource the tokens must be issued for (`aud`), the URL
    /// clients call.
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    pub oauth_audience: Option<String>,
    /// Edge: the issuer's keys (JWKS).
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    pub oauth_jwks: Option<String>,
    /// Edge: a scope every request's token must hold (repeatable).
    #[cfg_attr(feature = "cli", arg(long, value_name = "SCOPE"))]
    pub oauth_scope: Vec<String>,
    /// Edge: a scope a method's requests need beside --oauth-scope, or,
    /// as `tools/call:TOOL=SCOPE`, `prompts/get:PROMPT=SCOPE` or
    /// `resources/read:URI=SCOPE`, that one tool's, prompt's or
    /// resource's (repeatable); a token without it gets 403 and a
    /// challenge naming it.
    #[cfg_attr(feature = "cli", arg(long, value_name = "METHOD[:NAME]=SCOPE"))]
    #[serde(deserialize_with = "values::one_or_many")]
    pub require_scope: Vec<ScopeRule>,
    /// Edge: carry each HTTP client's `Authorization` header to the
    /// origin, which presents it to its HTTP upstream, and answer the
    /// upstream's 401 or 403 with its status and `WWW-Authenticate`, its
    /// protected-resource metadata served here under --public-url: for an
    /// upstream that is itself the OAuth resource server. Off by default.
    #[cfg_attr(feature = "cli", arg(long))]
    pub forward_authorization: bool,
    /// Edge: the URL clients call, as the upstream's OAuth metadata and
    /// challenges name it to them (--forward-authorization).
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    pub public_url: Option<String>,
    /// Edge: record what clients send, as JSON Lines (arrival time,
    /// method, the message as it came), for `npamp-loadgen replay`. Off
    /// by default; a bounded sample (--capture-max; messages the writer
    /// falls behind on are left out, counted).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub capture: Option<PathBuf>,
    /// Edge: the capture file's size at most, octets; the capture ends
    /// there.
    #[cfg_attr(feature = "cli", arg(long, value_name = "OCTETS"))]
    pub capture_max: Option<Count>,
    /// Edge: in the capture, the params of METHOD (`*`: of any), or their
    /// part at a JSON pointer (`METHOD:/0/password`), are written as
    /// `"<redacted>"` (repeatable).
    #[cfg_attr(feature = "cli", arg(long, value_name = "METHOD[:/POINTER]"))]
    pub capture_redact: Vec<String>,
    /// Edge: pages of this web origin (`https://app.example`, or `*` for
    /// every page) may use the HTTP and WebSocket ingresses (CORS;
    /// repeatable). Pages of other origins are refused with 403, programs
    /// (no Origin header) are not affected.
    #[cfg_attr(feature = "cli", arg(long, value_name = "ORIGIN"))]
    pub cors_origin: Vec<String>,
    /// Edge: the host names the HTTP and WebSocket ingresses answer to
    /// (`edge.example`, `*.corp.example`, or `*` for any; repeatable).
    /// Always allowed: IP addresses and `localhost` names over plain TCP,
    /// any name the ingress certificate was accepted for over TLS. A
    /// request for another (`Host` or `:authority`) is refused with 403:
    /// a page of a name resolved to the edge (DNS rebinding) is not served.
    #[cfg_attr(feature = "cli", arg(long, value_name = "NAME"))]
    pub allowed_host: Vec<String>,
    /// Edge: the certificate chain (PEM) of the https://, wss:// and
    /// tls+tcp:// ingresses.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "FILE", requires = "ingress_key")
    )]
    pub ingress_cert: Option<PathBuf>,
    /// The private key (PEM) of --ingress-cert.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "FILE", requires = "ingress_cert")
    )]
    pub ingress_key: Option<PathBuf>,
    /// Edge: a client of a TLS ingress presenting a certificate that chains
    /// to these CAs (PEM) is authenticated (no bearer token asked). Without
    /// --auth-token-file a client certificate is required.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub ingress_client_ca: Option<PathBuf>,
    /// Edge: requests per second one client may send (a client is its
    /// bearer token, else its client certificate, else its source address;
    /// a batch counts each element); over it, HTTP gets 429 with
    /// Retry-After and a session -32013.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PER_SECOND"))]
    pub rate_limit: Option<Rate>,
    /// Requests a client may send at once beyond --rate-limit.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", requires = "rate_limit"))]
    pub rate_limit_burst: Option<Rate>,
    /// Edge: octets of JSON-RPC text per second one client may send; its
    /// burst is a tenth of a second's worth, and at least one --max-body.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PER_SECOND"))]
    pub rate_limit_octets: Option<Rate>,

    /// This gateway's identity key file (from `keygen`); without it an
    /// ephemeral identity is generated.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub identity: Option<PathBuf>,
    /// A trusted peer public key, 64 hex digits (repeatable).
    #[cfg_attr(feature = "cli", arg(long, value_name = "HEX"))]
    pub trust: Vec<PeerKey>,
    /// Accept any peer identity. INSECURE: anyone can impersonate the peer.
    #[cfg_attr(feature = "cli", arg(long))]
    pub insecure_accept_any_peer: bool,
    /// Give up an N-PAMP handshake after this long (500ms, 10s, or seconds).
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub handshake_timeout: Option<Seconds>,
    /// QUIC congestion control: cubic (quinn's default) or bbr (quinn:
    /// experimental; far better on paths with random loss).
    #[cfg_attr(feature = "cli", arg(long, value_name = "NAME"))]
    pub congestion: Option<Congestion>,
    /// Handshakes a listener runs at once; further connections are refused
    /// until one finishes (handshake floods). Connections that have sent
    /// nothing yet do not count.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_handshakes: Option<Count>,
    /// Of those, at most this many from one source address.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_handshakes_per_source: Option<Count>,
    /// Drop a new connection that sends nothing for this long
    /// (silent sockets; separate from --handshake-timeout).
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub first_octets_timeout: Option<Seconds>,
    /// How long a traffic key may be used, per channel and direction, before
    /// a KEY_UPDATE.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub key_update_after: Option<Seconds>,
    /// Plaintext octets a traffic key may protect, per channel and
    /// direction, before a KEY_UPDATE.
    #[cfg_attr(feature = "cli", arg(long, value_name = "OCTETS"))]
    pub key_update_after_bytes: Option<u64>,
    /// Silence after which a peer is given up; a keepalive PING
    /// goes out after a third of it.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub peer_timeout: Option<Seconds>,
    /// TLS certificate chain (PEM) for the listeners instead of a
    /// self-signed one.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", requires = "tls_key"))]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", requires = "tls_cert"))]
    pub tls_key: Option<PathBuf>,

    /// Largest JSON-RPC message, octets: what clients send an edge, what an
    /// origin takes from its peer and its upstream; at most 67108864 (64 MiB).
    #[cfg_attr(feature = "cli", arg(long, value_name = "OCTETS"))]
    pub max_body: Option<Count>,
    /// Most elements in a batch.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_batch: Option<Count>,
    /// Requests in flight, whole gateway; past this an HTTP request gets
    /// 503 / -32011 and a session's request waits.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_in_flight: Option<Count>,
    /// Requests in flight, one client session; past this its further
    /// requests wait (the client is not read), up to --stall-timeout, then
    /// -32011. The origin takes as many per association.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_in_flight_per_connection: Option<Count>,
    /// Octets one session holds in each direction: messages queued for its
    /// client (edge) or upstream (origin), and its party's requests in
    /// flight; past this the party (or the association feeding it) is not
    /// read.
    #[cfg_attr(feature = "cli", arg(long, value_name = "OCTETS"))]
    pub session_buffer: Option<usize>,
    /// Octets of JSON-RPC requests the whole gateway holds in flight; past
    /// this a session's requests wait and an HTTP request gets 503 /
    /// -32011.
    #[cfg_attr(feature = "cli", arg(long, value_name = "OCTETS"))]
    pub memory_budget: Option<usize>,
    /// Client connections per ingress.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_connections: Option<Count>,
    /// Client connections per ingress from one source address (an IPv6 one
    /// by its /64); one more is closed at once. Default: half of
    /// --max-connections, so one source never holds every slot.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_connections_per_source: Option<Count>,
    /// MCP sessions (`--protocol mcp` over HTTP) one client may hold at an
    /// ingress: its bearer token, else its certificate, else its address.
    /// One more `initialize` gets 503 saying so; --max-connections bounds
    /// them all.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_sessions_per_client: Option<Count>,
    /// Origin: upstream child processes (`--upstream-cmd`, one per
    /// association) running at once; an association past it gets
    /// NotDelivered saying so, and its upstream is tried again after its
    /// backoff. Default: 16 per CPU.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_upstream_processes: Option<Count>,
    /// Time before an unanswered request gets a timeout error.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub request_timeout: Option<Seconds>,
    /// MCP: how long a subscription (`subscriptions/listen`) lasts, in
    /// place of --request-timeout; at its end the client gets the
    /// subscription's graceful end and the server its cancellation.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub listen_timeout: Option<Seconds>,
    /// How long a silent session client stays connected.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub idle_timeout: Option<Seconds>,
    /// Time a client may take to send an HTTP request's headers, then
    /// its body, or a WebSocket handshake, or to take a reply when it does
    /// not read, before it is dropped.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub stall_timeout: Option<Seconds>,
    /// Origin: time to connect to an upstream (TCP and TLS, or a WebSocket
    /// handshake); an HTTP request that gets no connection goes to another
    /// upstream of the group, or is answered NotDelivered.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub upstream_connect_timeout: Option<Seconds>,
    /// Associations per peer for HTTP traffic.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub pool_size: Option<Count>,
    /// Threads that serve connections and associations, each on a runtime
    /// of its own with the connections it was given (as nginx's workers);
    /// 0: every task on one pool of worker threads, moved between them.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub shards: Option<usize>,
    /// Time in-flight requests may take to finish on SIGTERM.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME"))]
    pub drain_timeout: Option<Seconds>,
    /// Edge and origin: retries and hedges may add at most this percent
    /// (0 to 100) of the last 10 s of requests, plus 100.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PERCENT"))]
    pub retry_budget: Option<u32>,
    /// Edge: a read-only request with no reply after this long is also
    /// sent to a second origin (or over a second association to the only
    /// one); the first reply wins. A time (20ms), or a percentile of the
    /// last 5 to 10 s of read-only latencies (p95: about 5 % of them are
    /// hedged; none before 100 have been seen). Off unless given.
    #[cfg_attr(feature = "cli", arg(long, value_name = "TIME|pNN"))]
    pub hedge_after: Option<HedgeAfterArg>,
}

/// A bad option: names the flag, or the key and line in the file.
#[derive(Debug, thiserror::Error)]
#[error("{at}: {message}")]
pub struct ConfigError {
    pub at: String,
    pub message: String,
}

/// Which command the options are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `serve`: an origin, an edge, or both; at least one role is needed.
    Serve,
    /// `connect`: the stdio ingress to `--peer`; the options only `serve`
    /// acts on ([`GatewayOptions::SERVE_ONLY`]) are refused.
    Connect,
}

/// Lists the options only `serve` acts on, once: their clap ids and a
/// check of which is given.
macro_rules! serve_only {
    ($($f:ident),* $(,)?) => {
        impl GatewayOptions {
            /// The options only `serve` acts on (clap ids): `connect` hides
            /// them from its help and refuses them.
            pub const SERVE_ONLY: &[&str] = &[$(stringify!($f)),*];

            /// The first option only `serve` acts on that is given here.
            fn serve_only_given(&self) -> Option<&'static str> {
                $(if self.$f.is_set() {
                    return Some(stringify!($f));
                })*
                None
            }
        }
    };
}

serve_only!(
    listen,
    upstream,
    route,
    upstream_ca,
    upstream_header,
    upstream_cmd,
    ingress,
    metrics,
    refuse_effect,
    allow_method,
    deny_method,
    auth_token_file,
    oauth_issuer,
    oauth_audience,
    oauth_jwks,
    oauth_scope,
    require_scope,
    forward_authorization,
    public_url,
    capture,
    capture_max,
    capture_redact,
    cors_origin,
    allowed_host,
    ingress_cert,
    ingress_key,
    ingress_client_ca,
    rate_limit,
    rate_limit_burst,
    rate_limit_octets,
    max_handshakes,
    max_handshakes_per_source,
    first_octets_timeout,
    tls_cert,
    tls_key,
    max_connections,
    max_connections_per_source,
    max_sessions_per_client,
    max_upstream_processes,
    pool_size,
    shards,
    drain_timeout,
    upstream_connect_timeout,
);

trait IsSet {
    fn is_set(&self) -> bool;
}

impl<T> IsSet for Option<T> {
    fn is_set(&self) -> bool {
        self.is_some()
    }
}

impl IsSet for bool {
    fn is_set(&self) -> bool {
        *self
    }
}

impl<T> IsSet for Vec<T> {
    fn is_set(&self) -> bool {
        !self.is_empty()
    }
}

impl GatewayOptions {
    /// The gateway these options (set in code, no `config` file) describe;
    /// errors name the flag. See [`Sourced`] for files and command lines.
    pub fn resolve(&self) -> Result<GatewayConfig, ConfigError> {
        Sourced::new(self.clone())?.resolve()
    }

    /// As [`GatewayOptions::resolve`], checked first against `command`.
    pub fn resolve_for(&self, command: Command) -> Result<GatewayConfig, ConfigError> {
        Sourced::new(self.clone())?.resolve_for(command)
    }
}

/// Parses a 32-octet public key in hex./// Parses a 32-octet public key in hex.
pub fn parse_key(hex_key: &str) -> Result<[u8; 32], String> {
    hex_key.parse::<PeerKey>().map(|k| k.0)
}

/// A fresh random identity seed.
pub fn random_seed() -> Result<[u8; 32], String> {
    Ok(*random_identity()?)
}

/// A fresh random identity seed, zeroized when dropped.
pub fn random_identity() -> Result<zeroize::Zeroizing<[u8; 32]>, String> {
    use aws_lc_rs::rand::SecureRandom;
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    aws_lc_rs::rand::SystemRandom::new()
        .fill(seed.as_mut())
        .map_err(|_| "the OS random number generator failed".to_owned())?;
    Ok(seed)
}

/// Reads an identity key file written by `keygen` (hex seed); the seed and
/// every copy of the file's text are zeroized when dropped.
pub fn read_identity(path: &Path) -> Result<zeroize::Zeroizing<[u8; 32]>, String> {
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(path)
            .map_err(|e| format!("reading identity file {}: {e}", path.display()))?,
    );
    let bytes = zeroize::Zeroizing::new(
        hex::decode(text.trim())
            .map_err(|_| format!("{} is not a hex key file from `keygen`", path.display()))?,
    );
    <[u8; 32]>::try_from(bytes.as_slice())
        .map(zeroize::Zeroizing::new)
        .map_err(|_| {
            format!(
                "{} must hold a 32-octet seed (64 hex digits)",
                path.display()
            )
        })
}

#[cfg(all(test, feature = "cli"))]
mod tests;
