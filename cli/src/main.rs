//! `npamp-gateway` command line.
//!
//! - `exactly-once` (default): an embedded gateway pair under 64 HTTP
//!   clients, every reply checked against its request.
//! - `serve`: the gateway (origin and/or edge); `connect`: the stdio ingress.
//! - `mock-upstream`: a JSON-RPC server for tests and demos.
//! - `self-check`: seals a JSON-RPC request into an N-PAMP Bridge frame and
//!   opens it again, printing each step.
//! - `keygen --out FILE`: a new Ed25519 identity; prints its public key
//!   (`keygen --show FILE`: the public key of an existing one).
//! - `ping quic://ADDR | tls://ADDR | npamp://ADDR`: handshake, N PINGs, RTT
//!   percentiles.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use npamp_gateway::assoc::endpoint::DEFAULT_HANDSHAKE_TIMEOUT;
use npamp_gateway::assoc::{Endpoint, Link, PeerAddr, Scheme, TlsFiles};
use npamp_gateway::bridge::{
    self, BridgeEnvelope, BridgeMessage, ContentType, Effect, MessageKind, ProtocolId, SafetyLabel,
};
use npamp_gateway::gateway::config::{
    self, GatewayOptions, PeerKey, Seconds, Sourced, random_identity, read_identity,
};
use npamp_gateway::gateway::edge::Edge;
use npamp_gateway::gateway::metrics::Metrics;
use npamp_gateway::gateway::{Ctx, Gateway};
use npamp_gateway::handshake::{Identity, Trust};
use npamp_gateway::record::{Direction, HashAlg, Suite, TrafficKeys, hkdf_extract};
use npamp_gateway::wire::{ChannelId, Deframer, Flags};
use npamp_testkit::exactly_once::EmbeddedPair;
use npamp_testkit::mock::{self, MockAddr};
use tracing::warn;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DEFAULT_MESSAGE: &str =
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;

#[derive(Parser)]
#[command(
    version,
    about = "JSON-RPC 2.0 edge gateway over N-PAMP associations (QUIC, TLS 1.3)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Seal a JSON-RPC request into an N-PAMP Bridge frame, deframe and open
    /// it again, and print each step (the default command).
    SelfCheck {
        /// The JSON-RPC message to carry.
        #[arg(long, default_value = DEFAULT_MESSAGE)]
        message: String,
    },
    /// Closed-loop HTTP clients that check every request gets exactly one
    /// answer, its own: against --url (a gateway's HTTP ingress, or any
    /// JSON-RPC server with an `echo` method), or without it against an
    /// embedded gateway pair (mock upstream, origin and edge in this
    /// process, N-PAMP over QUIC, TLS or negotiated). The default command. Exits
    /// non-zero when anything was lost or mismatched.
    ExactlyOnce {
        /// The HTTP JSON-RPC endpoint; default: an embedded gateway pair.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Concurrent clients, each on its own keep-alive connection.
        #[arg(long, default_value_t = 64)]
        clients: u64,
        /// Seconds to run.
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        /// The embedded pair's transport: quic, tls, or npamp (the origin
        /// accepts both, the edge negotiates).
        #[arg(long, default_value = "quic", value_parser = ["quic", "tls", "npamp"])]
        transport: String,
    },
    /// Create an Ed25519 identity key file and print its public key (hex),
    /// or print the public key of an existing one (--show).
    Keygen {
        /// Where to write the key (hex seed, mode 0600).
        #[arg(long, required_unless_present = "show", conflicts_with = "show")]
        out: Option<PathBuf>,
        /// Overwrite an existing file.
        #[arg(long, requires = "out")]
        force: bool,
        /// Print the public key of this existing key file instead.
        #[arg(long, value_name = "FILE")]
        show: Option<PathBuf>,
    },
    /// Run a gateway: accept associations and deliver to an upstream
    /// (--listen + --upstream/--upstream-cmd), accept JSON-RPC clients and
    /// carry them to a peer (--ingress + --peer), or both. Stops on SIGTERM
    /// or Ctrl-C: stops accepting, drains in-flight requests, closes
    /// associations with CLOSE.
    Serve {
        #[command(flatten)]
        options: GatewayOptions,
    },
    /// The stdio ingress: this process's stdin/stdout is one JSON-RPC client
    /// session (newline-delimited), carried to --peer. Give it to an MCP
    /// client as the server command.
    Connect {
        #[command(flatten)]
        options: GatewayOptions,
    },
    /// A mock JSON-RPC upstream (echo, fail, sleep, notify, ask, subscribe,
    /// exit) for tests and demos.
    MockUpstream {
        /// http://ADDR, https://ADDR, ws://ADDR, wss://ADDR or tcp://ADDR
        /// (repeatable).
        #[arg(long, value_name = "URL", required_unless_present = "stdio")]
        listen: Vec<MockAddr>,
        /// Serve one session on stdin/stdout instead (as a child process).
        #[arg(long, conflicts_with = "listen")]
        stdio: bool,
        /// Certificate chain (PEM) for https:// and wss:// listeners.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key (PEM) of --tls-cert.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        #[command(flatten)]
        behavior: mock::MockOptions,
    },
    /// Connect, run the handshake, send PINGs, print the peer identity,
    /// handshake time and RTT percentiles.
    Ping {
        /// quic://ADDR, tls://ADDR, or npamp://ADDR (QUIC, falling back to
        /// TCP + TLS).
        url: PeerAddr,
        /// Number of PINGs.
        #[arg(long, default_value_t = 10)]
        count: u32,
        /// Pause between PINGs, in milliseconds.
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
        #[command(flatten)]
        peer: PeerFlags,
    },
}

/// Identity and trust, shared by `serve` and `ping`.
#[derive(Args)]
struct PeerFlags {
    /// This side's identity key file (from `keygen`). Without it a new
    /// ephemeral identity is used.
    #[arg(long)]
    identity: Option<PathBuf>,
    /// A trusted peer public key (64 hex digits); repeat for several.
    #[arg(long = "trust", value_name = "HEX")]
    trust: Vec<PeerKey>,
    /// Accept any peer identity. INSECURE: anyone can impersonate the peer.
    #[arg(long, conflicts_with = "trust")]
    insecure_accept_any_peer: bool,
    /// Give up a handshake after this long (500ms, 10s, or seconds).
    #[arg(long, value_name = "TIME", default_value_t = Seconds(DEFAULT_HANDSHAKE_TIMEOUT))]
    handshake_timeout: Seconds,
}

impl PeerFlags {
    fn endpoint(&self) -> anyhow::Result<Endpoint> {
        let seed = match &self.identity {
            Some(path) => read_identity(path),
            None => random_identity(),
        }
        .map_err(anyhow::Error::msg)?;
        let trust = if self.insecure_accept_any_peer {
            warn!("{}", npamp_gateway::gateway::INSECURE_PEERS_WARNING);
            Trust::InsecureAcceptAny
        } else if self.trust.is_empty() {
            bail!(
                "no trusted peer key: pass --trust HEX (the peer's `keygen` public key), or --insecure-accept-any-peer to skip authentication"
            );
        } else {
            Trust::Pinned(self.trust.iter().map(|k| k.0).collect())
        };
        let mut ep = Endpoint::with_seed(seed, trust);
        ep.handshake_timeout = self.handshake_timeout.0;
        Ok(ep)
    }
}

fn keygen(out: &Path, force: bool) -> anyhow::Result<()> {
    if out.exists() && !force {
        bail!(
            "{} exists; pass --force to overwrite it, or `keygen --show {}` for its public key",
            out.display(),
            out.display()
        );
    }
    let seed = random_identity().map_err(anyhow::Error::msg)?;
    let identity = Identity::from_seed(&seed)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(out)
        .with_context(|| format!("creating {}", out.display()))?;
    let text = zeroize::Zeroizing::new(format!("{}\n", hex::encode(seed.as_ref())));
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    println!("{}", hex::encode(identity.public_key()));
    Ok(())
}

/// Prints the public key of an existing identity key file.
fn show_key(path: &Path) -> anyhow::Result<()> {
    let seed = read_identity(path).map_err(anyhow::Error::msg)?;
    println!("{}", hex::encode(Identity::from_seed(&seed)?.public_key()));
    Ok(())
}

/// `serve`: `matches` are its command line, read again on each reload.
async fn serve(matches: clap::ArgMatches) -> anyhow::Result<()> {
    let options = Sourced::from_matches(&matches)?;
    let config = options.resolve_for(config::Command::Serve)?;
    let me = Identity::from_seed(&config.endpoint.identity_seed)?;
    let seed = config.endpoint.identity_seed.clone();
    let mut gateway = Gateway::start(config).await?;
    println!("identity {}", hex::encode(me.public_key()));
    for l in &gateway.listening {
        println!("listening on {l}");
    }
    for i in &gateway.ingress {
        println!("ingress {i}");
    }
    if let Some(m) = gateway.metrics_addr {
        println!("metrics http://{m}/metrics");
    }
    // SIGHUP, or a change of the --config file, reloads what can change
    // while serving; SIGTERM or Ctrl-C stops.
    let mut hup = reload_signal()?;
    let mut file_stamp = config_stamp(&options);
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            r = &mut stop => { r?; break; }
            _ = hup.recv() => {
                file_stamp = config_stamp(&options);
                reload(&mut gateway, &matches, &seed, "SIGHUP");
            }
            _ = tokio::time::sleep(Duration::from_secs(2)), if options.file().is_some() => {
                let stamp = config_stamp(&options);
                if stamp != file_stamp {
                    file_stamp = stamp;
                    reload(&mut gateway, &matches, &seed, "the config file changed");
                }
            }
        }
    }
    let m = gateway.metrics().clone();
    eprintln!("shutting down: draining requests in flight");
    let left = gateway.shutdown().await;
    eprintln!(
        "stopped: {} associations opened, {} handshakes failed, {} requests left unanswered at the drain deadline",
        // Both roles: every established association is tracked once.
        m.associations_opened(),
        m.handshake_failures.load(Relaxed) + m.serve.handshake_failures.load(Relaxed),
        left
    );
    Ok(())
}

async fn connect(matches: clap::ArgMatches) -> anyhow::Result<()> {
    let config = Sourced::from_matches(&matches)?.resolve_for(config::Command::Connect)?;
    if config.peers.is_empty() {
        anyhow::bail!("connect needs --peer quic://ADDR, tls://ADDR or npamp://ADDR");
    }
    let ctx = Arc::new(Ctx::new(&config, Arc::new(Metrics::default())));
    let edge = Arc::new(Edge::with_peers(
        &config.peers,
        config.endpoint.clone(),
        ctx,
    ));
    npamp_gateway::gateway::ingress::stdio::serve(edge).await;
    Ok(())
}

async fn exactly_once(
    url: Option<String>,
    clients: u64,
    seconds: f64,
    transport: &str,
) -> anyhow::Result<()> {
    if !(seconds.is_finite() && seconds > 0.0) {
        bail!("--duration must be a positive number of seconds");
    }
    let duration = Duration::from_secs_f64(seconds);
    let (pair, url) = match url {
        Some(url) => (None, url),
        None => {
            let scheme = match transport {
                "tls" => Scheme::Tls,
                "npamp" => Scheme::Npamp,
                _ => Scheme::Quic,
            };
            let pair = EmbeddedPair::start(scheme, Default::default())
                .await
                .map_err(|e| anyhow::anyhow!("starting the embedded pair: {e}"))?;
            println!(
                "embedded pair: HTTP ingress {} -> edge -> N-PAMP at {} -> origin -> mock upstream {}",
                pair.ingress, pair.origin.listening[0], pair.upstream
            );
            let url = pair.ingress.clone();
            (Some(pair), url)
        }
    };
    println!(
        "{clients} clients, {seconds} s, closed loop: echo requests with unique ids, each reply checked against its request"
    );
    let t = npamp_testkit::exactly_once::run(&url, clients, duration)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let errors: u64 = t.errors.values().sum();
    let q = |p: f64| t.latency_us.value_at_quantile(p) as f64 / 1e3;
    println!("sent       {}", t.sent);
    println!("own reply  {}", t.ok);
    println!("errors     {errors} {:?}", t.errors);
    println!("lost       {}", t.lost);
    println!("mismatched {}", t.mismatched);
    println!("rate       {:.0} requests/s", t.rate());
    println!(
        "latency ms p50={:.3} p90={:.3} p99={:.3} p99.9={:.3} max={:.3}",
        q(0.5),
        q(0.9),
        q(0.99),
        q(0.999),
        t.latency_us.max() as f64 / 1e3
    );
    if let Some(pair) = pair {
        let m = pair.edge.metrics();
        println!(
            "edge metrics: requests {} success {} in flight {}",
            m.requests(npamp_gateway::gateway::metrics::Ingress::HTTP),
            m.replies(npamp_gateway::gateway::metrics::ReplyClass::Success),
            m.in_flight.load(Relaxed)
        );
        pair.edge.shutdown().await;
        pair.origin.shutdown().await;
    }
    if !t.exact() {
        bail!(
            "not exactly once: {} lost, {} mismatched",
            t.lost,
            t.mismatched
        );
    }
    println!("ok: every request got exactly one answer, its own");
    Ok(())
}

async fn mock_upstream(
    listen: Vec<MockAddr>,
    stdio: bool,
    tls: Option<TlsFiles>,
    behavior: Arc<mock::Behavior>,
) -> anyhow::Result<()> {
    if stdio {
        mock::lines(tokio::io::stdin(), tokio::io::stdout(), behavior).await;
        return Ok(());
    }
    let tls = match tls {
        Some(files) => {
            let mut config = npamp_gateway::assoc::tls_server_config(Some(&files))?;
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(Arc::new(config))
        }
        None => None,
    };
    for addr in listen {
        let bound = mock::spawn(addr, tls.clone(), behavior.clone())
            .await
            .with_context(|| format!("listening on {addr}"))?;
        println!("mock upstream {bound}");
    }
    shutdown_signal().await?;
    Ok(())
}

/// Ctrl-C, or SIGTERM where there is one.
/// The --config file's modification time and length, to notice it change.
fn config_stamp(options: &Sourced) -> Option<(std::time::SystemTime, u64)> {
    let meta = std::fs::metadata(options.file()?).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Reads the options again and applies them; one log line says what
/// changed, what could not, or why nothing did.
fn reload(
    gateway: &mut Gateway,
    matches: &clap::ArgMatches,
    seed: &zeroize::Zeroizing<[u8; 32]>,
    why: &str,
) {
    let read = Sourced::from_matches(matches).and_then(|o| o.resolve_for(config::Command::Serve));
    let mut config = match read {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(%why, error = %e, "reload: the configuration is not valid; nothing changed");
            return;
        }
    };
    if config.ephemeral_identity {
        // An ephemeral identity is drawn anew at each reading: keep ours.
        config.endpoint.identity_seed = seed.clone();
    }
    match gateway.reload(config) {
        Ok(r) if r.changed.is_empty() && r.refused.is_empty() => {
            tracing::info!(%why, generation = r.generation, "reload: nothing changed");
        }
        Ok(r) => {
            if !r.changed.is_empty() {
                tracing::info!(%why, generation = r.generation, changed = ?r.changed, "reload: applied");
            }
            if !r.refused.is_empty() {
                tracing::warn!(%why, refused = ?r.refused, "reload: these cannot change while serving and were left as they run; restart to apply them");
            }
        }
        Err(e) => {
            tracing::error!(%why, error = %e, "reload: nothing changed");
        }
    }
}

/// SIGHUP (never on other systems).
struct ReloadSignal(#[cfg(unix)] tokio::signal::unix::Signal);

impl ReloadSignal {
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            if self.0.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await
    }
}

fn reload_signal() -> std::io::Result<ReloadSignal> {
    #[cfg(unix)]
    {
        Ok(ReloadSignal(tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::hangup(),
        )?))
    }
    #[cfg(not(unix))]
    Ok(ReloadSignal())
}

async fn shutdown_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await
}

async fn ping(url: PeerAddr, count: u32, interval: Duration, ep: Endpoint) -> anyhow::Result<()> {
    let mut link = Link::connect(url, &ep)
        .await
        .with_context(|| format!("association with {url}"))?;
    println!("peer     {}", hex::encode(link.peer_identity()));
    println!("transport {}", link.transport().name());
    println!(
        "handshake {:.3} ms",
        link.handshake_time.as_secs_f64() * 1e3
    );
    let mut rtts = Vec::with_capacity(count as usize);
    for i in 0..count {
        if i > 0 {
            tokio::time::sleep(interval).await;
        }
        rtts.push(
            link.ping()
                .await
                .with_context(|| format!("PING to {url}"))?,
        );
    }
    link.close().await?;
    if rtts.is_empty() {
        return Ok(());
    }
    rtts.sort();
    let pct = |p: f64| {
        let i = ((p / 100.0) * (rtts.len() - 1) as f64).round() as usize;
        rtts[i.min(rtts.len() - 1)].as_secs_f64() * 1e3
    };
    println!(
        "rtt ms   n={} p50={:.3} p90={:.3} p99={:.3} max={:.3}",
        rtts.len(),
        pct(50.0),
        pct(90.0),
        pct(99.0),
        pct(100.0)
    );
    Ok(())
}

/// A gateway holds a descriptor per client, association and waiting
/// connection: the soft limit (often 1024) goes up to the hard one, as
/// servers do (nginx's worker_rlimit_nofile, Go since 1.19).
fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum || (limit.current.is_some() && limit.maximum.is_none()) {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::debug!(from = ?limit.current, to = ?limit.maximum, "open files limit raised")
            }
            Err(e) => tracing::debug!(error = %e, "open files limit left as it is"),
        }
    }
}

/// The command line. `connect` shares `serve`'s option struct; the options
/// only `serve` acts on are hidden from its help (and refused if given).
/// Also returns the matches, which say where each option came from.
fn parse_cli() -> Result<(Cli, clap::ArgMatches), clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command().mut_subcommand("connect", |c| {
        GatewayOptions::SERVE_ONLY
            .iter()
            .fold(c, |c, id| c.mut_arg(*id, |a| a.hide(true)))
    });
    let matches = command.get_matches();
    Ok((Cli::from_arg_matches(&matches)?, matches))
}

/// The matches of the subcommand `name`.
fn sub_matches(matches: &clap::ArgMatches, name: &str) -> clap::ArgMatches {
    matches
        .subcommand_matches(name)
        .cloned()
        .unwrap_or_default()
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let (cli, matches) = match parse_cli() {
        Ok(parsed) => parsed,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        None => runtime().and_then(|rt| rt.block_on(exactly_once(None, 64, 5.0, "quic"))),
        Some(Command::ExactlyOnce {
            url,
            clients,
            duration,
            transport,
        }) => {
            runtime().and_then(|rt| rt.block_on(exactly_once(url, clients, duration, &transport)))
        }
        Some(Command::SelfCheck { message }) => self_check(&message),
        Some(Command::Keygen { out, force, show }) => match (show, out) {
            (Some(path), _) => show_key(&path),
            (None, Some(out)) => keygen(&out, force),
            (None, None) => Err(anyhow::anyhow!("keygen needs --out FILE or --show FILE")),
        },
        Some(Command::Serve { .. }) => {
            raise_open_files_limit();
            let matches = sub_matches(&matches, "serve");
            runtime().and_then(|rt| rt.block_on(serve(matches)))
        }
        Some(Command::Connect { .. }) => {
            let matches = sub_matches(&matches, "connect");
            runtime().and_then(|rt| {
                let done = rt.block_on(connect(matches));
                // stdin is read on a blocking thread that no one can stop:
                // a session ended by its peer (a language server that
                // exited) must not wait for the editor's next keystroke.
                rt.shutdown_timeout(Duration::from_millis(100));
                done
            })
        }
        Some(Command::MockUpstream {
            listen,
            stdio,
            tls_cert,
            tls_key,
            behavior,
        }) => runtime().and_then(|rt| {
            let tls = match (tls_cert, tls_key) {
                (Some(cert_chain), Some(private_key)) => Some(TlsFiles {
                    cert_chain,
                    private_key,
                }),
                _ => None,
            };
            rt.block_on(mock_upstream(listen, stdio, tls, behavior.behavior()))
        }),
        Some(Command::Ping {
            url,
            count,
            interval_ms,
            peer,
        }) => peer.endpoint().and_then(|ep| {
            runtime()?.block_on(ping(url, count, Duration::from_millis(interval_ms), ep))
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause the message
/// before it already quotes (this crate's errors include their source).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if !last.ends_with(&msg) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&msg);
        }
        last = msg;
    }
    out
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn self_check(message: &str) -> anyhow::Result<()> {
    // A fixed, public master secret: this demonstrates the framing, it protects nothing.
    let master = hkdf_extract(HashAlg::Sha256, b"", b"npamp-gateway self-check");
    let derive = || {
        TrafficKeys::derive(
            &master,
            Direction::ClientToServer,
            0,
            Suite::AES_256_GCM,
            ChannelId::BRIDGE,
        )
    };
    let (sender, receiver) = (derive()?, derive()?);

    let msg = BridgeMessage {
        frame_type: bridge::BRIDGE_REQUEST,
        envelope: BridgeEnvelope {
            protocol_id: ProtocolId::MCP,
            message_kind: MessageKind::REQUEST,
            content_type: ContentType::JSON,
            flags: 0,
            correlation_id: b"1",
            method: "tools/call",
        },
        safety: Some(SafetyLabel {
            effect: Effect::Destructive,
            scope: "",
        }),
        extension: None,
        foreign: message.as_bytes(),
    };
    let mut plaintext = Vec::with_capacity(msg.encoded_len());
    msg.encode_into(&mut plaintext)?;
    let mut wire = Vec::new();
    let header = sender.seal_frame_into(
        &mut wire,
        Flags::NONE,
        msg.frame_type,
        ChannelId::BRIDGE,
        0,
        |out| out.extend_from_slice(&plaintext),
    )?;
    println!("sealed   {header:?}");
    println!(
        "         {} octets on the wire for a {}-octet message",
        wire.len(),
        message.len()
    );

    let (frame, used) = Deframer::default()
        .span(&wire)?
        .map(|span| (span, span.len))
        .context("deframer wants more bytes for a complete frame")?;
    let plaintext = receiver.open_frame_with_header(&frame.header, &mut wire[..used])?;
    let got = BridgeMessage::decode(frame.header.frame_type, plaintext)?;
    println!(
        "opened   method={} correlation_id={:?} safety={:?}",
        got.envelope.method,
        String::from_utf8_lossy(got.envelope.correlation_id),
        got.safety.map(|s| s.effect)
    );
    if got.foreign != message.as_bytes() {
        bail!("the carried message changed in transit");
    }
    println!("carried  {}", String::from_utf8_lossy(got.foreign));
    println!("ok: the message crossed the record layer octet for octet");
    Ok(())
}
