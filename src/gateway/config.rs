//! Gateway options: command-line flags and their TOML form (`--config
//! FILE`), one struct for both. Every flag `--some-flag` is the key
//! `some-flag` in the file; a flag given on the command line wins over the
//! file. Errors name the flag, or the key and its line in the file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::auth::Tokens;
use super::{GatewayConfig, IngressUrl, Limits, MAX_BODY_LIMIT, Upstream};
use crate::assoc::{Endpoint, PeerAddr, TlsFiles};
use crate::bridge::{Effect, ProtocolId};
use crate::handshake::Trust;
use crate::jsonrpc::{EffectTable, SafetyPolicy};

/// The flags of `serve` and `connect` (and the keys of `--config`).
#[derive(clap::Args, Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct GatewayOptions {
    /// Read these options from a TOML file (keys are the flag names without
    /// `--`); flags on the command line win.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Accept associations: quic://ADDR, tls://ADDR, or npamp://ADDR for both
    /// on one port number (repeatable).
    #[arg(long, value_name = "URL")]
    pub listen: Vec<String>,
    /// Deliver to this JSON-RPC server: http://, https://, ws:// or wss:// URL.
    /// With --protocol mcp an http(s) URL is an MCP server's Streamable HTTP
    /// endpoint: one MCP session per association.
    #[arg(long, value_name = "URL", conflicts_with = "upstream_cmd")]
    pub upstream: Option<String>,
    /// Extra CA certificates (PEM) trusted for an https:// or wss://
    /// upstream, besides the Mozilla root set.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,
    /// A header sent with every request to an http(s):// or ws(s):// upstream,
    /// "NAME: VALUE" (repeatable), e.g. "Authorization: Bearer …" for a
    /// hosted MCP server or RPC provider. Secrets belong in the --config
    /// file (`upstream-header = ["…"]`), not on a command line others can
    /// read.
    #[arg(long, value_name = "HEADER")]
    pub upstream_header: Vec<String>,
    /// Deliver to a child process speaking newline-delimited JSON-RPC on
    /// stdio, e.g. an MCP server ("PROGRAM ARGS…", split on whitespace;
    /// restarted with backoff when it exits).
    #[arg(long, value_name = "COMMAND")]
    pub upstream_cmd: Option<String>,
    /// Accept JSON-RPC clients: http://ADDR, ws://ADDR or tcp://ADDR
    /// (newline-delimited); repeatable. Needs --peer.
    #[arg(long, value_name = "URL")]
    pub ingress: Vec<String>,
    /// The peer gateway clients are carried to: quic://ADDR, tls://ADDR, or
    /// npamp://ADDR (QUIC, falling back to TCP + TLS).
    #[arg(long, value_name = "URL")]
    pub peer: Option<String>,
    /// Serve Prometheus /metrics and /healthz on this address.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,

    /// mcp (0x01), a2a (0x02) or jsonrpc (experimental id 0x10): the
    /// protocol_id and SafetyLabel table [default: jsonrpc].
    #[arg(long, value_name = "NAME")]
    pub protocol: Option<String>,
    /// Effect class of a method for labels and policy: METHOD=read-only |
    /// idempotent-write | non-idempotent-write | destructive (repeatable).
    #[arg(long, value_name = "METHOD=CLASS")]
    pub effect: Vec<String>,
    /// Origin: refuse requests of this effect class with SafetyPolicy
    /// (repeatable).
    #[arg(long, value_name = "CLASS")]
    pub refuse_effect: Vec<String>,
    /// Origin: deliver only these methods (MethodUnsupported for others).
    #[arg(long, value_name = "METHOD")]
    pub allow_method: Vec<String>,
    /// Origin: refuse these methods with MethodUnsupported.
    #[arg(long, value_name = "METHOD")]
    pub deny_method: Vec<String>,

    /// Edge: HTTP and WebSocket clients must send `Authorization: Bearer
    /// TOKEN` with a token from this file (one per line, at least 16
    /// characters); others get 401.
    #[arg(long, value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// Edge: pages of this web origin (`https://app.example`, or `*` for
    /// every page) may use the HTTP and WebSocket ingresses (CORS;
    /// repeatable). Pages of other origins are refused with 403, programs
    /// (no Origin header) are not affected.
    #[arg(long, value_name = "ORIGIN")]
    pub cors_origin: Vec<String>,
    /// Edge: the certificate chain (PEM) of the https://, wss:// and
    /// tls+tcp:// ingresses.
    #[arg(long, value_name = "FILE", requires = "ingress_key")]
    pub ingress_cert: Option<PathBuf>,
    /// The private key (PEM) of --ingress-cert.
    #[arg(long, value_name = "FILE", requires = "ingress_cert")]
    pub ingress_key: Option<PathBuf>,
    /// Edge: a client of a TLS ingress presenting a certificate that chains
    /// to these CAs (PEM) is authenticated (no bearer token asked). Without
    /// --auth-token-file a client certificate is required.
    #[arg(long, value_name = "FILE")]
    pub ingress_client_ca: Option<PathBuf>,
    /// Edge: requests per second one client may send (a client is its
    /// bearer token, else its client certificate, else its source address;
    /// a batch counts each element); over it, HTTP gets 429 with
    /// Retry-After and a session -32013.
    #[arg(long, value_name = "PER_SECOND")]
    pub rate_limit: Option<f64>,
    /// Requests a client may send at once beyond --rate-limit
    /// [default: a tenth of a second's worth, at least 1].
    #[arg(long, value_name = "N", requires = "rate_limit")]
    pub rate_limit_burst: Option<f64>,
    /// Edge: octets of JSON-RPC text per second one client may send; its
    /// burst is a tenth of a second's worth, and at least one --max-body.
    #[arg(long, value_name = "PER_SECOND")]
    pub rate_limit_octets: Option<f64>,

    /// This gateway's identity key file (from `keygen`); without it an
    /// ephemeral identity is generated.
    #[arg(long, value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// A trusted peer public key, 64 hex digits (repeatable).
    #[arg(long, value_name = "HEX")]
    pub trust: Vec<String>,
    /// Accept any peer identity. INSECURE: anyone can impersonate the peer.
    #[arg(long)]
    pub insecure_accept_any_peer: bool,
    /// Give up an N-PAMP handshake after this many seconds [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub handshake_timeout: Option<u64>,
    /// QUIC congestion control: cubic (quinn's default) or bbr (quinn:
    /// experimental; far better on paths with random loss) [default: cubic].
    #[arg(long, value_name = "NAME")]
    pub congestion: Option<String>,
    /// Handshakes a listener runs at once; further connections are refused
    /// until one finishes (handshake floods). Connections that have sent
    /// nothing yet do not count [default: 256].
    #[arg(long, value_name = "N")]
    pub max_handshakes: Option<usize>,
    /// Of those, at most this many from one source address [default: 32].
    #[arg(long, value_name = "N")]
    pub max_handshakes_per_source: Option<usize>,
    /// Drop a new connection that sends nothing for this many seconds
    /// (silent sockets; separate from --handshake-timeout) [default: 3].
    #[arg(long, value_name = "SECONDS")]
    pub first_octets_timeout: Option<f64>,
    /// Seconds a traffic key may be used, per channel and direction, before
    /// a KEY_UPDATE [default: 3600].
    #[arg(long, value_name = "SECONDS")]
    pub key_update_after: Option<f64>,
    /// Plaintext octets a traffic key may protect, per channel and
    /// direction, before a KEY_UPDATE [default: 68719476736, 2^36].
    #[arg(long, value_name = "OCTETS")]
    pub key_update_after_bytes: Option<u64>,
    /// Seconds of silence after which a peer is given up; a keepalive PING
    /// goes out after a third of it [default: 45].
    #[arg(long, value_name = "SECONDS")]
    pub peer_timeout: Option<f64>,
    /// TLS certificate chain (PEM) for the listeners instead of a
    /// self-signed one.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Largest JSON-RPC message, octets: what clients send an edge, what an
    /// origin takes from its peer and its upstream; at most 67108864 (64 MiB)
    /// [default: 1048576].
    #[arg(long, value_name = "OCTETS")]
    pub max_body: Option<usize>,
    /// Most elements in a batch [default: 100].
    #[arg(long, value_name = "N")]
    pub max_batch: Option<usize>,
    /// Requests in flight, whole gateway; past this an HTTP request gets
    /// 503 / -32011 and a session's request waits [default: 16384].
    #[arg(long, value_name = "N")]
    pub max_in_flight: Option<usize>,
    /// Requests in flight, one client session; past this its further
    /// requests wait (the client is not read), up to --stall-timeout, then
    /// -32011. The origin takes as many per association [default: 128].
    #[arg(long, value_name = "N")]
    pub max_in_flight_per_connection: Option<usize>,
    /// Octets one session holds in each direction: messages queued for its
    /// client (edge) or upstream (origin), and its party's requests in
    /// flight; past this the party (or the association feeding it) is not
    /// read [default: 262144].
    #[arg(long, value_name = "OCTETS")]
    pub session_buffer: Option<usize>,
    /// Octets of JSON-RPC requests the whole gateway holds in flight; past
    /// this a session's requests wait and an HTTP request gets 503 /
    /// -32011 [default: 67108864].
    #[arg(long, value_name = "OCTETS")]
    pub memory_budget: Option<usize>,
    /// Client connections per ingress [default: 4096].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds before an unanswered request gets a timeout error [default: 30].
    #[arg(long, value_name = "SECONDS")]
    pub request_timeout: Option<f64>,
    /// Seconds a silent session client stays connected [default: 300].
    #[arg(long, value_name = "SECONDS")]
    pub idle_timeout: Option<f64>,
    /// Seconds a client may take to send an HTTP request's headers, then
    /// its body, or a WebSocket handshake, or to take a reply when it does
    /// not read, before it is dropped [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub stall_timeout: Option<f64>,
    /// Associations per peer for HTTP traffic [default: worker threads].
    #[arg(long, value_name = "N")]
    pub pool_size: Option<usize>,
    /// Seconds in-flight requests may take to finish on SIGTERM [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub drain_timeout: Option<f64>,
}

/// A bad option: names the flag, or the key and line in the file.
#[derive(Debug, thiserror::Error)]
#[error("{at}: {message}")]
pub struct ConfigError {
    pub at: String,
    pub message: String,
}

fn read_config(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        at: path.display().to_string(),
        message: format!("cannot read: {e}"),
    })
}

/// Where an option came from, for error messages.
struct Origins<'a> {
    cli: &'a GatewayOptions,
    file: Option<(&'a Path, &'a str)>,
}

impl Origins<'_> {
    fn at(&self, key: &str, on_cli: bool) -> String {
        match (on_cli, self.file) {
            (false, Some((path, text))) => match line_of(text, key) {
                Some(line) => format!("{}: line {line}: key `{key}`", path.display()),
                None => format!("{}: key `{key}`", path.display()),
            },
            _ => format!("--{key}"),
        }
    }
}

/// The line (1-based) where `key` is set in a TOML text.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
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
    upstream_ca,
    upstream_header,
    upstream_cmd,
    ingress,
    metrics,
    refuse_effect,
    allow_method,
    deny_method,
    auth_token_file,
    cors_origin,
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
    pool_size,
    drain_timeout,
);

impl GatewayOptions {
    /// Reads `--config` (if given) under the command-line flags.
    pub fn resolve(&self) -> Result<GatewayConfig, ConfigError> {
        match &self.config {
            Some(path) => {
                let text = read_config(path)?;
                self.resolve_text(path, &text)
            }
            None => self.build(&Origins {
                cli: self,
                file: None,
            }),
        }
    }

    /// Reads `--config` (if given) under the command-line flags, and checks
    /// the options make sense for `command` before anything else (so that
    /// an empty `serve` says there is nothing to do, not that a key is
    /// missing).
    pub fn resolve_for(&self, command: Command) -> Result<GatewayConfig, ConfigError> {
        let text = self.config.as_deref().map(read_config).transpose()?;
        let file = match (&self.config, &text) {
            (Some(path), Some(text)) => Some((path.as_path(), text.as_str())),
            _ => None,
        };
        let merged = match file {
            Some((path, text)) => self.clone().over(Self::parse_file(path, text)?),
            None => self.clone(),
        };
        let o = Origins { cli: self, file };
        match command {
            Command::Serve if merged.listen.is_empty() && merged.ingress.is_empty() => {
                Err(ConfigError {
                    at: "serve".into(),
                    message: "nothing to do: give --listen (with --upstream) to be an origin \
                              and/or --ingress (with --peer) to be an edge"
                        .into(),
                })
            }
            Command::Connect => match merged.serve_only_given() {
                Some(id) => {
                    let key = id.replace('_', "-");
                    let on_cli = self.serve_only_given().is_some_and(|c| c == id);
                    Err(ConfigError {
                        at: o.at(&key, on_cli),
                        message: "belongs to `serve`: connect carries its stdin and stdout \
                                  to --peer and nothing else"
                            .into(),
                    })
                }
                None if merged.peer.is_none() => Err(ConfigError {
                    at: "--peer".into(),
                    message: "connect needs --peer quic://ADDR, tls://ADDR or npamp://ADDR".into(),
                }),
                None => merged.build(&o),
            },
            Command::Serve => merged.build(&o),
        }
    }

    /// Parses the TOML form of the options (`path` names it in errors).
    pub fn parse_toml(path: &Path, text: &str) -> Result<GatewayOptions, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError {
            at: path.display().to_string(),
            message: e.to_string().trim_end().to_owned(),
        })
    }

    /// The options of the file `path` whose contents are `text`, its
    /// relative paths taken from the file's directory.
    fn parse_file(path: &Path, text: &str) -> Result<GatewayOptions, ConfigError> {
        let mut file = Self::parse_toml(path, text)?;
        if let Some(dir) = path.parent() {
            for p in [
                &mut file.identity,
                &mut file.auth_token_file,
                &mut file.tls_cert,
                &mut file.tls_key,
                &mut file.upstream_ca,
                &mut file.ingress_cert,
                &mut file.ingress_key,
                &mut file.ingress_client_ca,
            ]
            .into_iter()
            .flatten()
            {
                if p.is_relative() {
                    *p = dir.join(&*p);
                }
            }
        }
        Ok(file)
    }

    /// These options (the command line) over the file `path` whose
    /// contents are `text`.
    pub fn resolve_text(&self, path: &Path, text: &str) -> Result<GatewayConfig, ConfigError> {
        let file = Self::parse_file(path, text)?;
        self.clone().over(file).build(&Origins {
            cli: self,
            file: Some((path, text)),
        })
    }

    /// `self` (the command line) over `file`.
    fn over(self, file: GatewayOptions) -> GatewayOptions {
        macro_rules! pick {
            ($($f:ident),*) => {
                GatewayOptions {
                    config: self.config,
                    insecure_accept_any_peer: self.insecure_accept_any_peer
                        || file.insecure_accept_any_peer,
                    $($f: pick_one(self.$f, file.$f),)*
                }
            };
        }
        pick!(
            listen,
            upstream,
            upstream_ca,
            upstream_header,
            upstream_cmd,
            ingress,
            peer,
            metrics,
            protocol,
            effect,
            refuse_effect,
            allow_method,
            deny_method,
            auth_token_file,
            cors_origin,
            ingress_cert,
            ingress_key,
            ingress_client_ca,
            rate_limit,
            rate_limit_burst,
            rate_limit_octets,
            identity,
            trust,
            handshake_timeout,
            congestion,
            max_handshakes,
            max_handshakes_per_source,
            first_octets_timeout,
            key_update_after,
            key_update_after_bytes,
            peer_timeout,
            tls_cert,
            tls_key,
            max_body,
            max_batch,
            max_in_flight,
            max_in_flight_per_connection,
            session_buffer,
            memory_budget,
            max_connections,
            request_timeout,
            idle_timeout,
            stall_timeout,
            pool_size,
            drain_timeout
        )
    }

    fn build(&self, o: &Origins<'_>) -> Result<GatewayConfig, ConfigError> {
        let cli = o.cli;
        let err = |key: &str, on_cli: bool, message: String| ConfigError {
            at: o.at(key, on_cli),
            message,
        };
        let listen = self
            .listen
            .iter()
            .map(|s| {
                s.parse::<PeerAddr>()
                    .map_err(|e| err("listen", !cli.listen.is_empty(), e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let peer = self
            .peer
            .as_deref()
            .map(|s| {
                s.parse::<PeerAddr>()
                    .map_err(|e| err("peer", cli.peer.is_some(), e.to_string()))
            })
            .transpose()?;
        let ingress = self
            .ingress
            .iter()
            .map(|s| {
                s.parse::<IngressUrl>()
                    .map_err(|m| err("ingress", !cli.ingress.is_empty(), m))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let upstream = match (&self.upstream, &self.upstream_cmd) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "upstream",
                    cli.upstream.is_some(),
                    "give --upstream or --upstream-cmd, not both".into(),
                ));
            }
            (Some(url), None) => {
                Some(parse_upstream(url).map_err(|m| err("upstream", cli.upstream.is_some(), m))?)
            }
            (None, Some(cmd)) => {
                let argv: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
                if argv.is_empty() {
                    return Err(err(
                        "upstream-cmd",
                        cli.upstream_cmd.is_some(),
                        "empty command".into(),
                    ));
                }
                Some(Upstream::Cmd(argv))
            }
            (None, None) => None,
        };
        let upstream_headers = self
            .upstream_header
            .iter()
            .map(|h| parse_header(h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| err("upstream-header", !cli.upstream_header.is_empty(), m))?;
        if !upstream_headers.is_empty()
            && !matches!(upstream, Some(Upstream::Http(_) | Upstream::Ws(_)))
        {
            return Err(err(
                "upstream-header",
                !cli.upstream_header.is_empty(),
                "headers go to an http(s):// or ws(s):// --upstream; there is none".into(),
            ));
        }
        if !ingress.is_empty() && peer.is_none() {
            return Err(err(
                "ingress",
                !cli.ingress.is_empty(),
                "accepting clients needs a peer gateway: --peer quic://ADDR, tls://ADDR or npamp://ADDR".into(),
            ));
        }
        let metrics = self
            .metrics
            .as_deref()
            .map(|s| {
                std::net::ToSocketAddrs::to_socket_addrs(s)
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| {
                        err(
                            "metrics",
                            cli.metrics.is_some(),
                            format!("bad address {s:?}: expected HOST:PORT"),
                        )
                    })
            })
            .transpose()?;
        let protocol = match self.protocol.as_deref().unwrap_or("jsonrpc") {
            "mcp" => ProtocolId::MCP,
            "a2a" => ProtocolId::A2A,
            "jsonrpc" => ProtocolId::JSONRPC_EXPERIMENTAL,
            other => {
                return Err(err(
                    "protocol",
                    cli.protocol.is_some(),
                    format!("unknown protocol {other:?}: expected mcp, a2a or jsonrpc"),
                ));
            }
        };
        let mut effects = EffectTable::for_protocol(protocol);
        for e in &self.effect {
            let (method, class) = e.split_once('=').ok_or_else(|| {
                err(
                    "effect",
                    !cli.effect.is_empty(),
                    format!("{e:?}: expected METHOD=CLASS"),
                )
            })?;
            let class =
                parse_effect(class.trim()).map_err(|m| err("effect", !cli.effect.is_empty(), m))?;
            effects = effects.with(method.trim(), class);
        }
        let mut policy = SafetyPolicy::allow_all();
        for c in &self.refuse_effect {
            policy = policy.refuse(
                parse_effect(c)
                    .map_err(|m| err("refuse-effect", !cli.refuse_effect.is_empty(), m))?,
            );
        }
        let allow_methods =
            (!self.allow_method.is_empty()).then(|| self.allow_method.iter().cloned().collect());
        let deny_methods: HashSet<String> = self.deny_method.iter().cloned().collect();
        let on_cli = cli.auth_token_file.is_some();
        let tokens = self
            .auth_token_file
            .as_deref()
            .map(|path| Tokens::load(path).map_err(|m| err("auth-token-file", on_cli, m)))
            .transpose()?;
        if tokens.is_some() {
            if ingress.is_empty() {
                return Err(err(
                    "auth-token-file",
                    on_cli,
                    "bearer tokens guard an ingress: give --ingress http://ADDR or ws://ADDR"
                        .into(),
                ));
            }
            let certificates = self.ingress_client_ca.is_some();
            if let Some(url) = ingress
                .iter()
                .find(|i| !(i.kind().carries_tokens() || i.is_tls() && certificates))
            {
                let how = if url.is_tls() {
                    "authenticate its clients by certificate (--ingress-client-ca)"
                } else {
                    "serve it over TLS with client certificates (tls+tcp:// and --ingress-client-ca), or from a gateway without --auth-token-file"
                };
                return Err(err(
                    "auth-token-file",
                    on_cli,
                    format!(
                        "a {}:// ingress ({url}) has no way to present a token: {how}",
                        url.scheme()
                    ),
                ));
            }
        }
        let browsers = super::ingress::browser::BrowserOrigins::parse(&self.cors_origin)
            .map_err(|m| err("cors-origin", !cli.cors_origin.is_empty(), m))?;
        let ingress_tls = self.ingress_tls(&ingress, tokens.is_some(), o)?;
        if !browsers.is_empty() && ingress.is_empty() {
            return Err(err(
                "cors-origin",
                !cli.cors_origin.is_empty(),
                "web origins are allowed at an ingress: give --ingress http://ADDR or ws://ADDR"
                    .into(),
            ));
        }

        let seed = match &self.identity {
            Some(path) => {
                read_identity(path).map_err(|m| err("identity", cli.identity.is_some(), m))?
            }
            None => random_identity().map_err(|m| err("identity", false, m))?,
        };
        let trust = if self.insecure_accept_any_peer {
            if !self.trust.is_empty() {
                return Err(err(
                    "insecure-accept-any-peer",
                    cli.insecure_accept_any_peer,
                    "conflicts with --trust".into(),
                ));
            }
            Trust::InsecureAcceptAny
        } else if self.trust.is_empty() {
            return Err(err(
                "trust",
                true,
                "no trusted peer key: pass --trust HEX (the peer's `keygen` public key), or --insecure-accept-any-peer to skip authentication".into(),
            ));
        } else {
            Trust::Pinned(
                self.trust
                    .iter()
                    .map(|h| parse_key(h).map_err(|m| err("trust", !cli.trust.is_empty(), m)))
                    .collect::<Result<_, _>>()?,
            )
        };
        let mut endpoint = Endpoint::with_seed(seed, trust);
        if let Some(s) = self.handshake_timeout {
            endpoint.handshake_timeout = Duration::from_secs(s.max(1));
        }
        if let Some(c) = &self.congestion {
            endpoint.congestion =
                c.parse()
                    .map_err(|e: crate::assoc::endpoint::UnknownCongestion| {
                        err("congestion", cli.congestion.is_some(), e.to_string())
                    })?;
        }
        if let Some(n) = self.max_handshakes {
            if n == 0 {
                return Err(err(
                    "max-handshakes",
                    cli.max_handshakes.is_some(),
                    "must be at least 1".into(),
                ));
            }
            endpoint.max_handshakes = n;
        }
        if let Some(n) = self.max_handshakes_per_source {
            if n == 0 {
                return Err(err(
                    "max-handshakes-per-source",
                    cli.max_handshakes_per_source.is_some(),
                    "must be at least 1".into(),
                ));
            }
            endpoint.max_handshakes_per_source = n;
        }
        if let Some(s) = self.first_octets_timeout {
            endpoint.first_octets_timeout = Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    err(
                        "first-octets-timeout",
                        cli.first_octets_timeout.is_some(),
                        format!("{s}: expected a number of seconds above 0"),
                    )
                })?;
        }
        if let (Some(cert_chain), Some(private_key)) = (&self.tls_cert, &self.tls_key) {
            endpoint.tls_files = Some(TlsFiles {
                cert_chain: cert_chain.clone(),
                private_key: private_key.clone(),
            });
        }

        let mut limits = Limits::default();
        let positive = |key: &str, on_cli: bool, v: usize| {
            if v == 0 {
                Err(err(key, on_cli, "must be at least 1".into()))
            } else {
                Ok(v)
            }
        };
        let seconds = |key: &str, on_cli: bool, v: f64| {
            if v.is_finite() && v > 0.0 && v < 1e7 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(err(
                    key,
                    on_cli,
                    format!("{v}: expected a positive number of seconds"),
                ))
            }
        };
        if let Some(v) = self.max_body {
            if v > MAX_BODY_LIMIT {
                return Err(err(
                    "max-body",
                    cli.max_body.is_some(),
                    format!("{v}: at most {MAX_BODY_LIMIT} (64 MiB, one message per frame)"),
                ));
            }
            limits.max_body = positive("max-body", cli.max_body.is_some(), v)?;
        }
        if let Some(v) = self.max_batch {
            limits.max_batch = positive("max-batch", cli.max_batch.is_some(), v)?;
        }
        if let Some(v) = self.max_in_flight {
            limits.max_in_flight = positive("max-in-flight", cli.max_in_flight.is_some(), v)?;
        }
        if let Some(v) = self.max_in_flight_per_connection {
            limits.max_in_flight_per_connection = positive(
                "max-in-flight-per-connection",
                cli.max_in_flight_per_connection.is_some(),
                v,
            )?;
        }
        if let Some(v) = self.session_buffer {
            if !(64 << 10..=super::outbox::MAX_BUDGET).contains(&v) {
                return Err(err(
                    "session-buffer",
                    cli.session_buffer.is_some(),
                    format!(
                        "{v}: expected 65536 to {} octets",
                        super::outbox::MAX_BUDGET
                    ),
                ));
            }
            limits.session_buffer = v;
        }
        if let Some(v) = self.memory_budget {
            if v < 1 << 20 {
                return Err(err(
                    "memory-budget",
                    cli.memory_budget.is_some(),
                    format!("{v}: at least 1048576 octets (1 MiB)"),
                ));
            }
            limits.memory_budget = v;
        }
        if let Some(v) = self.max_connections {
            limits.max_connections = positive("max-connections", cli.max_connections.is_some(), v)?;
        }
        if let Some(v) = self.pool_size {
            limits.pool_size = positive("pool-size", cli.pool_size.is_some(), v)?;
        }
        if let Some(v) = self.request_timeout {
            limits.request_timeout = seconds("request-timeout", cli.request_timeout.is_some(), v)?;
        }
        if let Some(v) = self.idle_timeout {
            limits.idle_timeout = seconds("idle-timeout", cli.idle_timeout.is_some(), v)?;
        }
        if let Some(v) = self.stall_timeout {
            limits.stall_timeout = seconds("stall-timeout", cli.stall_timeout.is_some(), v)?;
        }
        if let Some(v) = self.key_update_after {
            endpoint.assoc.key_update_after =
                seconds("key-update-after", cli.key_update_after.is_some(), v)?;
        }
        if let Some(v) = self.key_update_after_bytes {
            if v < 1 << 16 {
                return Err(err(
                    "key-update-after-bytes",
                    cli.key_update_after_bytes.is_some(),
                    format!(
                        "{v}: at least 65536 octets (a key update per few frames helps no one)"
                    ),
                ));
            }
            endpoint.assoc.key_update_after_bytes = v;
        }
        if let Some(v) = self.peer_timeout {
            let timeout = seconds("peer-timeout", cli.peer_timeout.is_some(), v)?;
            endpoint.assoc.peer_timeout = timeout;
            endpoint.assoc.keepalive_after = timeout / 3;
        }
        if let Some(v) = self.drain_timeout {
            limits.drain_timeout = seconds("drain-timeout", cli.drain_timeout.is_some(), v)?;
        }
        // An association's reader waits while its local party takes nothing
        // (a session client at an edge, an upstream at an origin) and answers
        // no PING meanwhile, until the stall timeout gives that party up: the
        // peer must not give up on the association first.
        let carries = !self.ingress.is_empty() || !listen.is_empty();
        if carries && endpoint.assoc.peer_timeout <= limits.stall_timeout {
            return Err(err(
                "peer-timeout",
                cli.peer_timeout.is_some() || self.peer_timeout.is_none(),
                format!(
                    "{:?} must exceed --stall-timeout ({:?}): an association held up by a client or upstream that takes nothing answers no keepalive until that party is given up",
                    endpoint.assoc.peer_timeout, limits.stall_timeout
                ),
            ));
        }
        let rate_limit = self.rate_limit(!ingress.is_empty(), limits.max_body, o)?;
        Ok(GatewayConfig {
            listen,
            upstream,
            upstream_ca: self.upstream_ca.clone(),
            upstream_headers,
            ingress,
            peer,
            metrics,
            protocol,
            effects,
            policy,
            allow_methods,
            deny_methods,
            tokens,
            browsers,
            ingress_tls,
            rate_limit,
            ephemeral_identity: self.identity.is_none(),
            limits,
            // The frame limit an association takes from its peer.
            ..GatewayConfig::new(endpoint)
        })
    }
}

impl GatewayOptions {
    /// The rate limits per client, when asked for (an edge's).
    fn rate_limit(
        &self,
        edge: bool,
        max_body: usize,
        o: &Origins<'_>,
    ) -> Result<Option<super::ingress::limit::RateLimit>, ConfigError> {
        let cli = o.cli;
        let rate = |key: &str, on_cli: bool, v: Option<f64>| match v {
            Some(v) if !(v.is_finite() && v > 0.0 && v < 1e12) => Err(ConfigError {
                at: o.at(key, on_cli),
                message: format!("{v}: expected a number above 0"),
            }),
            v => Ok(v),
        };
        let requests = rate("rate-limit", cli.rate_limit.is_some(), self.rate_limit)?;
        let octets = rate(
            "rate-limit-octets",
            cli.rate_limit_octets.is_some(),
            self.rate_limit_octets,
        )?;
        let burst = rate(
            "rate-limit-burst",
            cli.rate_limit_burst.is_some(),
            self.rate_limit_burst,
        )?;
        if requests.is_none() && octets.is_none() {
            return Ok(None);
        }
        if !edge {
            let key = if requests.is_some() {
                "rate-limit"
            } else {
                "rate-limit-octets"
            };
            return Err(ConfigError {
                at: o.at(
                    key,
                    cli.rate_limit.is_some() || cli.rate_limit_octets.is_some(),
                ),
                message: "rate limits are per client of an ingress: give --ingress".into(),
            });
        }
        let tenth = |r: Option<f64>| r.map_or(1.0, |r| (r / 10.0).max(1.0));
        Ok(Some(super::ingress::limit::RateLimit {
            requests,
            burst: burst.unwrap_or_else(|| tenth(requests)),
            octets,
            octets_burst: tenth(octets).max(max_body as f64),
        }))
    }

    /// The TLS settings of the ingresses: a TLS ingress needs a
    /// certificate, and a certificate or a client CA needs a TLS ingress.
    fn ingress_tls(
        &self,
        ingress: &[IngressUrl],
        tokens: bool,
        o: &Origins<'_>,
    ) -> Result<Option<super::ingress::tls::IngressTls>, ConfigError> {
        let cli = o.cli;
        let tls_ingress = ingress.iter().find(|i| i.is_tls());
        match (&self.ingress_cert, &self.ingress_key, tls_ingress) {
            (Some(cert_chain), Some(private_key), Some(_)) => {
                Ok(Some(super::ingress::tls::IngressTls {
                    files: TlsFiles {
                        cert_chain: cert_chain.clone(),
                        private_key: private_key.clone(),
                    },
                    client_ca: self.ingress_client_ca.clone(),
                    certless: tokens,
                }))
            }
            (None, None, None) if self.ingress_client_ca.is_none() => Ok(None),
            (_, _, Some(url)) => Err(ConfigError {
                at: o.at("ingress", !cli.ingress.is_empty()),
                message: format!("{url}: a TLS ingress needs --ingress-cert and --ingress-key"),
            }),
            (_, _, None) => {
                let key = if self.ingress_client_ca.is_some() && self.ingress_cert.is_none() {
                    "ingress-client-ca"
                } else {
                    "ingress-cert"
                };
                Err(ConfigError {
                    at: o.at(key, cli.ingress_cert.is_some() || cli.ingress_client_ca.is_some()),
                    message: "certificates are for a TLS ingress: give --ingress https://ADDR, wss://ADDR or tls+tcp://ADDR".into(),
                })
            }
        }
    }
}

fn pick_one<T: IsSet>(cli: T, file: T) -> T {
    if cli.is_set() { cli } else { file }
}

trait IsSet {
    fn is_set(&self) -> bool;
}

impl<T> IsSet for Option<T> {
    fn is_set(&self) -> bool {
        self.is_some()
    }
}

impl<T> IsSet for Vec<T> {
    fn is_set(&self) -> bool {
        !self.is_empty()
    }
}

/// Headers the gateway sets itself on upstream requests.
const MANAGED_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "sec-websocket-key",
    "sec-websocket-version",
];

/// "NAME: VALUE" as a header (its value marked sensitive: never logged).
fn parse_header(
    s: &str,
) -> Result<(hyper::header::HeaderName, hyper::header::HeaderValue), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected \"NAME: VALUE\""))?;
    let name = hyper::header::HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("{:?} is not a header name", name.trim()))?;
    if MANAGED_HEADERS.contains(&name.as_str()) {
        return Err(format!("{name} is set by the gateway itself"));
    }
    let mut value = hyper::header::HeaderValue::from_str(value.trim())
        .map_err(|_| format!("the value of {name} is not a valid header value"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

fn parse_upstream(s: &str) -> Result<Upstream, String> {
    let uri: hyper::Uri = s.parse().map_err(|e| format!("bad URL {s:?}: {e}"))?;
    if uri.host().is_none() {
        return Err(format!("bad URL {s:?}: no host"));
    }
    match uri.scheme_str() {
        Some("http" | "https") => Ok(Upstream::Http(uri)),
        Some("ws" | "wss") => Ok(Upstream::Ws(s.to_owned())),
        _ => Err(format!(
            "bad URL {s:?}: expected http://, https://, ws:// or wss://"
        )),
    }
}

fn parse_effect(s: &str) -> Result<Effect, String> {
    match s {
        "read-only" | "readonly" | "read_only" => Ok(Effect::ReadOnly),
        "idempotent-write" => Ok(Effect::IdempotentWrite),
        "non-idempotent-write" => Ok(Effect::NonIdempotentWrite),
        "destructive" => Ok(Effect::Destructive),
        _ => Err(format!(
            "unknown effect class {s:?}: expected read-only, idempotent-write, non-idempotent-write or destructive"
        )),
    }
}

/// Parses a 32-octet public key in hex.
pub fn parse_key(hex_key: &str) -> Result<[u8; 32], String> {
    let bytes = hex::decode(hex_key.trim()).map_err(|_| format!("{hex_key:?} is not hex"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("a key is 32 octets (64 hex digits), got {}", b.len()))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn with_file(text: &str, cli: GatewayOptions) -> Result<GatewayConfig, ConfigError> {
        let dir = std::env::temp_dir().join(format!(
            "npamp-config-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("gw.toml");
        std::fs::write(&path, text).unwrap();
        GatewayOptions {
            config: Some(path),
            ..cli
        }
        .resolve()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("npamp-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn paths_in_a_config_file_are_taken_from_its_directory() {
        let dir = temp_dir("relative");
        let seed = [7u8; 32];
        std::fs::write(dir.join("id.key"), hex::encode(seed)).unwrap();
        let path = dir.join("gw.toml");
        let text = "listen = [\"quic://127.0.0.1:0\"]\nidentity = \"id.key\"\ninsecure-accept-any-peer = true\n";
        std::fs::write(&path, text).unwrap();
        // The working directory is not the file's.
        assert_ne!(std::env::current_dir().ok(), Some(dir.clone()));
        let o = GatewayOptions {
            config: Some(path),
            ..GatewayOptions::default()
        };
        for config in [o.resolve(), o.resolve_for(Command::Serve)] {
            let config = config.expect("identity next to the file");
            assert_eq!(*config.endpoint.identity_seed, seed);
        }
        // A relative path on the command line stays relative to the
        // working directory.
        let e = GatewayOptions {
            identity: Some("id.key".into()),
            ..o
        }
        .resolve()
        .unwrap_err();
        assert_eq!(e.at, "--identity");
    }

    #[test]
    fn an_empty_serve_has_nothing_to_do_and_connect_refuses_what_only_serve_does() {
        let e = GatewayOptions::default()
            .resolve_for(Command::Serve)
            .unwrap_err();
        assert!(e.message.starts_with("nothing to do"), "{e}");
        let connect = GatewayOptions {
            peer: Some("quic://127.0.0.1:4433".into()),
            insecure_accept_any_peer: true,
            ..GatewayOptions::default()
        };
        assert!(connect.resolve_for(Command::Connect).is_ok());
        let e = GatewayOptions {
            metrics: Some("127.0.0.1:9090".into()),
            ..connect.clone()
        }
        .resolve_for(Command::Connect)
        .unwrap_err();
        assert_eq!(e.at, "--metrics");
        assert!(e.message.contains("belongs to `serve`"), "{e}");
        let dir = temp_dir("connect");
        let path = dir.join("edge.toml");
        std::fs::write(&path, "protocol = \"mcp\"\nupstream-cmd = \"cat\"\n").unwrap();
        let e = GatewayOptions {
            config: Some(path),
            ..connect.clone()
        }
        .resolve_for(Command::Connect)
        .unwrap_err();
        assert!(e.at.ends_with("line 2: key `upstream-cmd`"), "{e}");
        let e = GatewayOptions {
            peer: None,
            ..connect
        }
        .resolve_for(Command::Connect)
        .unwrap_err();
        assert_eq!(e.at, "--peer");
        // Every serve-only id is a field clap knows.
        let ids: Vec<_> = <GatewayOptions as clap::Args>::augment_args(clap::Command::new("t"))
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        for id in GatewayOptions::SERVE_ONLY {
            assert!(ids.iter().any(|i| i == id), "{id}");
        }
    }

    #[test]
    fn file_keys_are_flag_names_and_flags_win() {
        let text = "listen = [\"quic://127.0.0.1:0\"]\nupstream = \"http://127.0.0.1:8545\"\ninsecure-accept-any-peer = true\nrequest-timeout = 2.5\npool-size = 3\n";
        let cli = GatewayOptions {
            pool_size: Some(7),
            ..Default::default()
        };
        let c = with_file(text, cli).expect("valid");
        assert_eq!(c.listen.len(), 1);
        assert_eq!(c.limits.request_timeout, Duration::from_millis(2500));
        assert_eq!(c.limits.pool_size, 7, "the flag wins");
        assert!(matches!(c.upstream, Some(Upstream::Http(_))));
    }

    #[test]
    fn errors_name_the_key_and_the_line() {
        let text = "insecure-accept-any-peer = true\n\npeer = \"udp://x\"\ningress = [\"http://127.0.0.1:0\"]\n";
        let e = with_file(text, GatewayOptions::default()).unwrap_err();
        assert!(e.at.ends_with("line 3: key `peer`"), "{e}");

        let e = with_file(
            "insecure-accept-any-peer = true\npoolsize = 3\n",
            GatewayOptions::default(),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("line 2") && msg.contains("poolsize"), "{msg}");

        let e = with_file(
            "insecure-accept-any-peer = true\nmax-body = \"big\"\n",
            GatewayOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn bearer_tokens_need_an_ingress_that_can_carry_them() {
        let dir = std::env::temp_dir().join(format!("npamp-config-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tokens = dir.join("tokens");
        std::fs::write(&tokens, "abcdefghijklmnopqrstuvwxyz\n").unwrap();
        let o = |ingress: &[&str]| GatewayOptions {
            insecure_accept_any_peer: true,
            ingress: ingress.iter().map(|s| (*s).to_owned()).collect(),
            peer: Some("quic://127.0.0.1:7000".into()),
            auth_token_file: Some(tokens.clone()),
            ..Default::default()
        };
        let c = o(&["http://127.0.0.1:0", "ws://127.0.0.1:0"])
            .resolve()
            .expect("HTTP and WS carry tokens");
        assert!(c.tokens.is_some());
        let e = o(&["http://127.0.0.1:0", "tcp://127.0.0.1:0"])
            .resolve()
            .unwrap_err();
        assert_eq!(e.at, "--auth-token-file");
        assert!(e.message.contains("tcp://"), "{e}");
        // Over TLS, a line client can be authenticated by certificate.
        let tls = |client_ca: Option<&str>| GatewayOptions {
            ingress_cert: Some("cert.pem".into()),
            ingress_key: Some("key.pem".into()),
            ingress_client_ca: client_ca.map(Into::into),
            ..o(&["tls+tcp://127.0.0.1:0"])
        };
        let e = tls(None).resolve().unwrap_err();
        assert!(e.message.contains("--ingress-client-ca"), "{e}");
        let c = tls(Some("ca.pem"))
            .resolve()
            .expect("certificates for lines");
        let t = c.ingress_tls.expect("TLS settings");
        assert!(t.certless, "token holders may come without a certificate");
        std::fs::write(&tokens, "short\n").unwrap();
        let e = o(&["http://127.0.0.1:0"]).resolve().unwrap_err();
        assert!(e.message.contains("at least 16"), "{e}");
    }

    #[test]
    fn tls_ingresses_and_their_certificates_come_together() {
        let o = |ingress: &str, cert: bool, client_ca: bool| GatewayOptions {
            insecure_accept_any_peer: true,
            ingress: vec![ingress.to_owned()],
            peer: Some("quic://127.0.0.1:7000".into()),
            ingress_cert: cert.then(|| "cert.pem".into()),
            ingress_key: cert.then(|| "key.pem".into()),
            ingress_client_ca: client_ca.then(|| "ca.pem".into()),
            ..Default::default()
        };
        let e = o("https://127.0.0.1:0", false, false)
            .resolve()
            .unwrap_err();
        assert!(
            e.message.contains("needs --ingress-cert and --ingress-key"),
            "{e}"
        );
        let e = o("http://127.0.0.1:0", true, false).resolve().unwrap_err();
        assert_eq!(e.at, "--ingress-cert");
        let e = o("http://127.0.0.1:0", false, true).resolve().unwrap_err();
        assert_eq!(e.at, "--ingress-client-ca");
        let c = o("wss://127.0.0.1:0", true, true).resolve().expect("wss");
        let t = c.ingress_tls.expect("TLS settings");
        assert!(
            !t.certless,
            "without tokens a client CA makes certificates required"
        );
        assert!(c.ingress[0].is_tls());
        assert!(
            o("http://127.0.0.1:0", false, false)
                .resolve()
                .expect("plain")
                .ingress_tls
                .is_none()
        );
    }

    #[test]
    fn upstream_headers_are_checked_and_kept_secret() {
        let o = |upstream: Option<&str>, h: &[&str]| GatewayOptions {
            insecure_accept_any_peer: true,
            listen: vec!["quic://127.0.0.1:0".into()],
            upstream: upstream.map(str::to_owned),
            upstream_header: h.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        };
        let up = Some("https://rpc.example:443/");
        let c = o(up, &["Authorization: Bearer s3cret", "X-Api-Key:k"])
            .resolve()
            .expect("valid");
        assert_eq!(c.upstream_headers.len(), 2);
        assert_eq!(c.upstream_headers[1].1, "k");
        assert!(!format!("{:?}", c.upstream_headers).contains("s3cret"));
        for (bad, says) in [
            ("Authorization Bearer x", "NAME: VALUE"),
            ("Bad Name: x", "not a header name"),
            ("Content-Type: text/plain", "set by the gateway"),
            ("X-A: line\nbreak", "not a valid header value"),
        ] {
            let e = o(up, &[bad]).resolve().unwrap_err();
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
        let e = o(None, &["X-A: b"]).resolve().unwrap_err();
        assert!(e.to_string().contains("there is none"), "{e}");
    }

    #[test]
    fn congestion_control_is_chosen_by_name() {
        use crate::assoc::Congestion;
        let o = |c: Option<&str>| GatewayOptions {
            insecure_accept_any_peer: true,
            ingress: vec!["http://127.0.0.1:0".into()],
            peer: Some("quic://127.0.0.1:7000".into()),
            congestion: c.map(str::to_owned),
            ..Default::default()
        };
        let congestion = |c| o(c).resolve().map(|c| c.endpoint.congestion);
        assert_eq!(congestion(None).unwrap(), Congestion::Cubic);
        assert_eq!(congestion(Some("bbr")).unwrap(), Congestion::Bbr);
        let e = congestion(Some("reno")).unwrap_err();
        assert_eq!(e.at, "--congestion");
        assert!(e.message.contains("cubic or bbr"), "{e}");
    }

    #[test]
    fn key_update_budgets_and_peer_timeout_reach_the_associations() {
        let o = |f: &dyn Fn(&mut GatewayOptions)| {
            let mut o = GatewayOptions {
                insecure_accept_any_peer: true,
                ingress: vec!["http://127.0.0.1:0".into()],
                peer: Some("quic://127.0.0.1:7000".into()),
                ..Default::default()
            };
            f(&mut o);
            o.resolve().map(|c| c.endpoint.assoc)
        };
        let defaults = o(&|_| {}).unwrap();
        // A gateway takes frames up to the largest --max-body from its peer
        // (its own --max-body is checked per message).
        assert_eq!(
            defaults,
            crate::assoc::AssocConfig {
                max_payload_len: crate::gateway::MAX_FRAME_PAYLOAD,
                ..crate::assoc::AssocConfig::default()
            }
        );
        let set = o(&|o| {
            o.key_update_after = Some(600.0);
            o.key_update_after_bytes = Some(1 << 30);
            o.peer_timeout = Some(30.0);
        })
        .unwrap();
        assert_eq!(set.key_update_after, Duration::from_secs(600));
        assert_eq!(set.key_update_after_bytes, 1 << 30);
        assert_eq!(set.peer_timeout, Duration::from_secs(30));
        assert_eq!(set.keepalive_after, Duration::from_secs(10));
        let e = o(&|o| o.key_update_after_bytes = Some(100)).unwrap_err();
        assert_eq!(e.at, "--key-update-after-bytes");
        let e = o(&|o| o.peer_timeout = Some(-1.0)).unwrap_err();
        assert_eq!(e.at, "--peer-timeout");
        let e = o(&|o| o.key_update_after = Some(f64::NAN)).unwrap_err();
        assert_eq!(e.at, "--key-update-after");
        // An edge's peer timeout must exceed its stall timeout (10 s).
        let e = o(&|o| o.peer_timeout = Some(10.0)).unwrap_err();
        assert_eq!(e.at, "--peer-timeout");
        assert!(e.message.contains("--stall-timeout"), "{e}");
        let ok = o(&|o| {
            o.peer_timeout = Some(1.0);
            o.stall_timeout = Some(0.5);
        });
        assert_eq!(ok.unwrap().peer_timeout, Duration::from_secs(1));
        // So must an origin's: its reader waits on an upstream that takes
        // nothing until the stall timeout restarts that upstream.
        let origin = |peer_timeout| {
            GatewayOptions {
                insecure_accept_any_peer: true,
                listen: vec!["quic://127.0.0.1:0".into()],
                upstream: Some("http://127.0.0.1:8545".into()),
                peer_timeout: Some(peer_timeout),
                ..Default::default()
            }
            .resolve()
        };
        let e = origin(5.0).unwrap_err();
        assert_eq!(e.at, "--peer-timeout");
        assert!(e.message.contains("upstream"), "{e}");
        assert!(origin(11.0).is_ok());
    }

    #[test]
    fn the_session_buffer_is_bounded_both_ways() {
        let o = |v| {
            GatewayOptions {
                insecure_accept_any_peer: true,
                ingress: vec!["ws://127.0.0.1:0".into()],
                peer: Some("quic://127.0.0.1:7000".into()),
                session_buffer: Some(v),
                ..Default::default()
            }
            .resolve()
        };
        assert_eq!(o(1 << 20).unwrap().limits.session_buffer, 1 << 20);
        assert_eq!(o(100).unwrap_err().at, "--session-buffer");
        assert_eq!(o(usize::MAX).unwrap_err().at, "--session-buffer");
    }

    #[test]
    fn the_memory_budget_has_a_floor_and_a_default() {
        let o = |v| {
            GatewayOptions {
                insecure_accept_any_peer: true,
                ingress: vec!["ws://127.0.0.1:0".into()],
                peer: Some("quic://127.0.0.1:7000".into()),
                memory_budget: v,
                ..Default::default()
            }
            .resolve()
        };
        assert_eq!(o(None).unwrap().limits.memory_budget, 64 << 20);
        assert_eq!(o(Some(8 << 20)).unwrap().limits.memory_budget, 8 << 20);
        let e = o(Some(1000)).unwrap_err();
        assert_eq!(e.at, "--memory-budget");
        assert!(e.message.contains("1 MiB"), "{e}");
    }

    #[test]
    fn flag_errors_name_the_flag() {
        let o = GatewayOptions {
            insecure_accept_any_peer: true,
            ingress: vec!["ftp://127.0.0.1:1".into()],
            peer: Some("quic://127.0.0.1:1".into()),
            ..Default::default()
        };
        let e = o.resolve().unwrap_err();
        assert_eq!(e.at, "--ingress");
        let o = GatewayOptions {
            listen: vec!["npamp://127.0.0.1:0/tools".into()],
            insecure_accept_any_peer: true,
            ..Default::default()
        };
        let e = o.resolve().unwrap_err();
        assert_eq!(e.at, "--listen");
        assert!(e.message.contains("no resource path"), "{}", e.message);
        // Listening alone (no upstream) is allowed: associations for `ping`.
        let o = GatewayOptions {
            listen: vec!["npamp://127.0.0.1:0".into()],
            insecure_accept_any_peer: true,
            ..Default::default()
        };
        assert!(o.resolve().expect("listen alone").upstream.is_none());
        let o = GatewayOptions::default();
        assert!(o.resolve().unwrap_err().message.contains("--trust"));
    }
}
