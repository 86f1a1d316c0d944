//! The commands of `npamp-loadgen`, one module each (`main.rs` parses the
//! command line and calls the one asked for), and what they share: exit
//! codes, the embedded pair's and npamp targets' flags, the target a URL
//! names.

pub mod capacity;
pub mod compare;
pub mod flood;
pub mod impair;
pub mod merge;
pub mod replay;
pub mod run;
pub mod slow;
pub mod upstream;

pub(crate) use std::path::PathBuf;
pub(crate) use std::process::ExitCode;
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;

pub(crate) use anyhow::{Context, bail};
pub(crate) use npamp_gateway::assoc::{PeerAddr, Scheme};
pub(crate) use npamp_gateway::gateway::Client;
pub(crate) use npamp_gateway::gateway::config::{Count, GatewayOptions, PeerKey};
pub(crate) use npamp_gateway::gateway::{Limits, MAX_BODY_LIMIT};
pub(crate) use npamp_loadgen::engine::{self, Stats, Target};
pub(crate) use npamp_loadgen::http::HttpTarget;
pub(crate) use npamp_loadgen::merge::{self as merging, Measured};
pub(crate) use npamp_loadgen::scenario::{Load, Scenario, Shard};
pub(crate) use npamp_loadgen::summary::{Machine, Summary, stages, summarize};
pub(crate) use npamp_testkit::exactly_once::EmbeddedPair;
pub(crate) use npamp_testkit::mock::{self, MockAddr};

/// What an embedded pair is called in a run's summary: the same in every
/// run, whatever ports it listened on, so runs of it compare as runs of one
/// target (the ports are printed when it starts).
const EMBEDDED_PAIR: &str = "embedded gateway pair (HTTP ingress, N-PAMP over QUIC, mock upstream)";

pub const EXIT_RUN: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_SLO: u8 = 3;
pub const EXIT_ACCOUNTING: u8 = 4;
pub const EXIT_REGRESSION: u8 = 5;
pub const EXIT_NOT_SERVED: u8 = 6;
/// Interrupted (SIGINT, SIGTERM), as a shell reports a SIGINT's end.
pub const EXIT_INTERRUPTED: u8 = 130;

/// The exit code of a run's (or a merge's) summary.
pub fn verdict(summary: &Summary) -> ExitCode {
    if summary.accounting_failed() {
        ExitCode::from(EXIT_ACCOUNTING)
    } else if summary.not_served().is_some() {
        ExitCode::from(EXIT_NOT_SERVED)
    } else if !summary.pass {
        ExitCode::from(EXIT_SLO)
    } else {
        ExitCode::SUCCESS
    }
}

pub fn fail(code: u8, e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::from(code)
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// What an npamp target and the embedded pair take from the command line.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct GatewayFlags {
    /// npamp targets: this side's identity key file (from `npamp-gateway
    /// keygen`); without it an ephemeral identity is used.
    #[arg(long, value_name = "FILE")]
    identity: Option<PathBuf>,
    /// npamp targets: the gateway's public key, 64 hex digits (repeatable).
    #[arg(long, value_name = "HEX")]
    trust: Vec<PeerKey>,
    /// npamp targets: accept any gateway identity. INSECURE.
    #[arg(long, conflicts_with = "trust")]
    insecure_accept_any_peer: bool,
    /// Largest message, octets: of the embedded pair [default: 67108864,
    /// the most a gateway allows], and of an npamp target's edge [default:
    /// the gateway's, 1048576].
    #[arg(long, value_name = "OCTETS")]
    max_body: Option<Count>,
}

/// How a run reaches an HTTP or WebSocket target: its headers, TLS,
/// HTTP/2.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TargetFlags {
    /// A header of every HTTP request and WebSocket handshake (repeatable;
    /// replaces a scenario's header of its name).
    #[arg(long = "header", short = 'H', value_name = "'NAME: VALUE'")]
    headers: Vec<npamp_loadgen::header::Header>,
    /// Send `Authorization: Bearer TOKEN`, the token this file holds.
    #[arg(long, value_name = "FILE")]
    bearer_file: Option<PathBuf>,
    /// https://, mcp+https://, wss://: trust the CA certificates of this PEM
    /// file as well as the system's.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// https://, mcp+https://, wss://: do not check the server's
    /// certificate at all. INSECURE.
    #[arg(long, conflicts_with = "ca")]
    insecure: bool,
    /// HTTP/2: by ALPN over TLS (https://), with prior knowledge (h2c)
    /// over TCP (http://).
    #[arg(long)]
    http2: bool,
    /// HTTP/2: requests in flight on each connection; open loop, the run
    /// has connections × streams of them [default: 1, or the scenario's].
    #[arg(long, value_name = "N")]
    streams: Option<usize>,
}

impl TargetFlags {
    /// The scenario with these in place of, or beside, its own.
    pub fn apply(&self, s: &mut Scenario) -> anyhow::Result<()> {
        let mut given = self.headers.clone();
        if let Some(file) = &self.bearer_file {
            if given.iter().any(|h| h.is("authorization")) {
                bail!(
                    "--bearer-file and --header 'Authorization: ...' both give the Authorization header"
                );
            }
            given.push(npamp_loadgen::header::bearer_from(file).map_err(anyhow::Error::msg)?);
        }
        s.headers = npamp_loadgen::header::merged(&s.headers, &given);
        s.http2 |= self.http2;
        if let Some(n) = self.streams {
            s.streams = n;
        }
        s.tls = npamp_loadgen::tls::TlsOptions {
            ca: self.ca.clone(),
            insecure: self.insecure,
        };
        // A CA file that cannot be used is a usage error, said before the run.
        if self.ca.is_some() {
            npamp_loadgen::tls::Tls::new(&s.tls, "localhost", &[]).map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }
}

impl GatewayFlags {
    fn max_body(&self) -> usize {
        self.max_body.map_or(MAX_BODY_LIMIT, Count::get)
    }
}

pub async fn target_of(
    url: &str,
    scenario: &Scenario,
    npamp: &GatewayFlags,
) -> anyhow::Result<Target> {
    // `npamp://` names a gateway as such (transport negotiated);
    // `npamp+quic://` and `npamp+tls://` fix the transport.
    let peer_url = url
        .strip_prefix("npamp+")
        .or_else(|| url.starts_with("npamp://").then_some(url));
    if let Some(rest) = peer_url {
        let peer: PeerAddr = rest.parse()?;
        let options = GatewayOptions {
            identity: npamp.identity.clone(),
            trust: npamp.trust.clone(),
            insecure_accept_any_peer: npamp.insecure_accept_any_peer,
            max_body: npamp.max_body,
            peer: vec![peer],
            ..GatewayOptions::default()
        };
        let config = options.resolve()?;
        return Ok(Target::Npamp(Arc::new(Client::new(&config)?)));
    }
    if let Some(addr) = url.strip_prefix("tcp+lsp://") {
        let session = scenario.lsp.clone().unwrap_or_default();
        return Ok(Target::Lsp(
            addr.trim_end_matches('/').to_owned(),
            Arc::new(session),
        ));
    }
    if let Some(addr) = url.strip_prefix("tcp://") {
        return Ok(Target::Tcp(addr.trim_end_matches('/').to_owned()));
    }
    if let Some(target) = web_target(url, scenario) {
        return target.map_err(anyhow::Error::msg);
    }
    bail!(
        "unknown target {url:?}: expected http://, https://, mcp+http://, mcp+https://, ws://, wss://, tcp://, tcp+lsp://, npamp://, npamp+quic:// or npamp+tls://"
    )
}

/// The scenario's target, or an embedded gateway pair when it has none;
/// and the target's name in the summary.
pub async fn prepare(
    scenario: &Scenario,
    npamp: &GatewayFlags,
) -> anyhow::Result<(Option<EmbeddedPair>, Target, String)> {
    Ok(match &scenario.target {
        Some(url) => {
            let target = target_of(url, scenario, npamp).await?;
            let described = target.describe();
            (None, target, described)
        }
        None => {
            // The embedded pair carries what the scenario sends (4 MiB
            // messages, say): --max-body if given, else the largest a
            // gateway allows.
            let max_body = npamp.max_body();
            if max_body > MAX_BODY_LIMIT {
                bail!("--max-body {max_body}: expected 1 to {MAX_BODY_LIMIT}");
            }
            let limits = Limits {
                max_body,
                ..Limits::default()
            };
            let pair = EmbeddedPair::start(Scheme::Quic, limits)
                .await
                .map_err(|e| anyhow::anyhow!("starting the embedded gateway pair: {e}"))?;
            eprintln!(
                "embedded gateway pair: HTTP ingress {} -> N-PAMP over QUIC -> mock upstream {}",
                pair.ingress, pair.upstream
            );
            let uri = pair.ingress.parse()?;
            let t = Target::Http(
                HttpTarget::new(
                    uri,
                    &scenario.tls,
                    scenario.http2,
                    scenario.streams,
                    scenario.headers.clone(),
                )
                .map_err(anyhow::Error::msg)?,
            );
            (Some(pair), t, EMBEDDED_PAIR.to_owned())
        }
    })
}

/// Checks before a run that its results can be written to `dir`
/// (created if missing).
pub fn writable(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out {}: cannot create it", dir.display()))?;
    let probe = dir.join(".npamp-loadgen-probe");
    std::fs::write(&probe, b"")
        .with_context(|| format!("--out {}: cannot write there", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// The scenario file at `path`, with the command line's `--target`,
/// `--connections` and target flags in place of its own, checked again;
/// the exit code of a usage error (said) where it cannot be used.
pub fn scenario_with(
    path: &std::path::Path,
    target: Option<String>,
    connections: Option<usize>,
    reach: &TargetFlags,
) -> Result<Scenario, ExitCode> {
    let mut s = Scenario::load(path).map_err(|e| fail(EXIT_USAGE, &e.into()))?;
    if let Some(t) = target {
        s.target = Some(t);
    }
    if let Some(c) = connections {
        s.connections = c.max(1);
    }
    reach.apply(&mut s).map_err(|e| fail(EXIT_USAGE, &e))?;
    checked(s, path)
}

/// `s` if it holds with the command line's overrides; else the exit code
/// of a usage error, said.
pub fn checked(s: Scenario, path: &std::path::Path) -> Result<Scenario, ExitCode> {
    match s
        .check()
        .and_then(|()| reachable(&s).map_err(|m| ("target", m)))
    {
        Ok(()) => Ok(s),
        Err((key, message)) => {
            eprintln!(
                "error: {} (with the command-line overrides): {key}: {message}",
                path.display()
            );
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}

/// An HTTP or WebSocket target as the run will make it (its URL, its TLS
/// options), before anything runs: what cannot be is a usage error.
fn reachable(s: &Scenario) -> Result<(), String> {
    match s.target.as_deref().and_then(|url| web_target(url, s)) {
        Some(Err(why)) => Err(why),
        _ => Ok(()),
    }
}

/// The HTTP (MCP) or WebSocket target `url` names, with the scenario's
/// TLS options, HTTP/2 and headers; `None` for a target of another kind.
fn web_target(url: &str, scenario: &Scenario) -> Option<Result<Target, String>> {
    use npamp_loadgen::scenario::TargetKind;
    let headers = scenario.headers.clone();
    match TargetKind::of(url) {
        TargetKind::Ws => Some(engine::WsTarget::new(url, &scenario.tls, headers).map(Target::Ws)),
        TargetKind::Http => {
            let (mcp, http) = match url.strip_prefix("mcp+") {
                Some(http) => (true, http),
                None => (false, url),
            };
            Some((|| {
                let uri = http.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
                let target = HttpTarget::new(
                    uri,
                    &scenario.tls,
                    scenario.http2,
                    scenario.streams,
                    headers,
                )?;
                Ok(if mcp {
                    Target::Mcp(target)
                } else {
                    Target::Http(target)
                })
            })())
        }
        TargetKind::Other => None,
    }
}
