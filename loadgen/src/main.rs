//! `npamp-loadgen` command line.
//!
//! Exit codes: 0 pass; 1 the run could not be made; 2 usage or scenario
//! error; 3 an SLO failed; 4 accounting error (lost, duplicated or
//! mismatched replies); 5 `compare` found a regression; 6 the target was
//! not measured: no request got a successful reply, or more than 10 % ended
//! in transport errors without a `max_error_rate` SLO to judge them.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use npamp_gateway::assoc::{PeerAddr, Scheme};
use npamp_gateway::gateway::Client;
use npamp_gateway::gateway::config::{Count, GatewayOptions, PeerKey};
use npamp_gateway::gateway::{Limits, MAX_BODY_LIMIT};
use npamp_loadgen::engine::{self, Stats, Target};
use npamp_loadgen::merge::{self, Measured};
use npamp_loadgen::report::{self, Summary};
use npamp_loadgen::scenario::{Load, Scenario, Shard};
use npamp_testkit::exactly_once::EmbeddedPair;
use npamp_testkit::mock::{self, MockAddr};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EXIT_RUN: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_SLO: u8 = 3;
const EXIT_ACCOUNTING: u8 = 4;
const EXIT_REGRESSION: u8 = 5;
const EXIT_NOT_SERVED: u8 = 6;

#[derive(Parser)]
#[command(
    version,
    about = "Load generator for JSON-RPC services and npamp-gateway"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a scenario. Without a target (here or in the scenario), an
    /// embedded gateway pair is started in this process (mock upstream,
    /// origin, edge, N-PAMP over QUIC) and loaded through its HTTP ingress.
    Run {
        /// The scenario file (scenarios/*.toml).
        scenario: PathBuf,
        /// http://, mcp+http:// (an MCP server over Streamable HTTP: a
        /// session per connection), ws://, tcp://HOST:PORT, npamp://,
        /// npamp+quic:// or npamp+tls://
        /// (Bridge frames straight to a gateway's association port).
        #[arg(long)]
        target: Option<String>,
        /// Requests per second (open loop; replaces the scenario's stages).
        #[arg(long)]
        rate: Option<f64>,
        /// Time measured: 500ms, 5s, 2m, or seconds (replaces the
        /// scenario's duration; with stages, give --rate as well).
        #[arg(long, value_name = "TIME", value_parser = npamp_loadgen::scenario::parse_time)]
        duration: Option<f64>,
        /// Connections to the target.
        #[arg(long)]
        connections: Option<usize>,
        /// Requests in flight (switches to closed loop).
        #[arg(long)]
        concurrency: Option<usize>,
        /// Write summary.json, report.svg and latency.hlog here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Seed of the generated values.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// No live progress line.
        #[arg(long)]
        quiet: bool,
        /// Be worker I (0 to N-1) of N running this scenario together: a
        /// N-th of its rate, connections and concurrency, request ids of
        /// its own; `merge` adds the workers' results.
        #[arg(long, value_name = "I/N", conflicts_with = "shards")]
        shard: Option<Shard>,
        /// As --shard, with I from $JOB_COMPLETION_INDEX (a Kubernetes
        /// Indexed Job's).
        #[arg(long, value_name = "N")]
        shards: Option<u32>,
        #[command(flatten)]
        npamp: GatewayFlags,
    },
    /// Find the highest open-loop rate at which the target meets an SLO:
    /// steps doubling from --start, then bisection to --precision. A step
    /// passes when the SLO holds and the target answered at least 97 % of
    /// the offered rate; when the generator itself falls behind, the search
    /// stops and says so (the knee is then above what it can offer).
    /// Exit 0 with a knee, 3 when no rate tried meets the SLO.
    Capacity {
        /// The scenario: its mix, connections and target (its load model
        /// is replaced by each step's rate).
        scenario: PathBuf,
        /// As `run --target`.
        #[arg(long)]
        target: Option<String>,
        /// Every term must hold: p50, p90, p99, p99.9 below a time,
        /// errors below a share, e.g. "p99<50ms,errors<0.1%".
        #[arg(long)]
        slo: npamp_loadgen::capacity::Slo,
        /// The first rate tried, requests per second.
        #[arg(long, default_value_t = 500.0)]
        start: f64,
        /// No rate above this is tried.
        #[arg(long, default_value_t = 1_000_000.0)]
        max: f64,
        /// Stop when the failing rate is within this many percent of the
        /// passing one.
        #[arg(long, default_value_t = 5.0)]
        precision: f64,
        /// Times each rate is measured; it passes when most of them do, and
        /// shows the median one (3 makes a knee repeat on a noisy machine,
        /// at 3 times the run time).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=9))]
        trials: u64,
        /// Time measured at each step (500ms, 5s, or seconds).
        #[arg(long, value_name = "TIME", default_value = "5s", value_parser = npamp_loadgen::scenario::parse_time)]
        step: f64,
        /// Time sent before each step is measured.
        #[arg(long, value_name = "TIME", default_value = "1s", value_parser = npamp_loadgen::scenario::parse_time)]
        warmup: f64,
        /// Connections to the target (replaces the scenario's).
        #[arg(long)]
        connections: Option<usize>,
        /// Write capacity.json (every step) and capacity.svg (latency
        /// against throughput) here.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        npamp: GatewayFlags,
    },
    /// Merge the results of the workers of one run (`run --shard I/N
    /// --out DIR`, one DIR each): histograms added, accounting summed,
    /// SLOs evaluated once on the whole; exit codes as `run`'s.
    Merge {
        /// The workers' run directories.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Write the merged summary.json, report.svg and logs here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The mock JSON-RPC upstream (echo, fail, sleep, notify, ask,
    /// subscribe) over HTTP, WebSocket and newline-delimited TCP.
    Upstream {
        /// http://ADDR, ws://ADDR or tcp://ADDR (repeatable).
        #[arg(long, required = true)]
        listen: Vec<MockAddr>,
        #[command(flatten)]
        behavior: mock::MockOptions,
    },
    /// A lossy, slow UDP path (a QUIC association's) for fault injection:
    /// datagrams from clients to --to and back are dropped and delayed as
    /// `tc netem loss P delay D J` would, where netem is not available.
    /// Prints the counts on exit (Ctrl-C / SIGTERM).
    Impair {
        /// Where clients send (HOST:PORT; port 0 picks one, printed).
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// The server the datagrams are for (HOST:PORT).
        #[arg(long)]
        to: std::net::SocketAddr,
        /// Share of datagrams dropped, each direction (0–1).
        #[arg(long, default_value_t = 0.05)]
        loss: f64,
        /// Base delay, milliseconds, each direction.
        #[arg(long, default_value_t = 20.0)]
        delay_ms: f64,
        /// Each datagram's delay is uniform in delay ± jitter, milliseconds.
        #[arg(long, default_value_t = 10.0)]
        jitter_ms: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Slow clients (slowloris headers, a body that never finishes, a
    /// WebSocket client that never reads) held against an ingress for a
    /// while; prints how many the server cut off, and after how long.
    Slow {
        /// Loopback HOST:PORT of the HTTP (headers, body), WebSocket
        /// (ws-no-read) or TCP (tcp-no-read) ingress.
        #[arg(long)]
        target: String,
        #[arg(long, value_enum)]
        mode: npamp_loadgen::slow::Mode,
        #[arg(long, default_value_t = 100)]
        connections: usize,
        /// Seconds to hold them.
        #[arg(long, default_value_t = 30.0)]
        duration: f64,
        /// Octets of each request of the no-read modes.
        #[arg(long, default_value_t = 60_000)]
        size: usize,
        /// Loopback HOST:PORT of an HTTP ingress for a healthy client
        /// beside them (one echo request every 20 ms, each timed).
        #[arg(long)]
        probe: Option<String>,
    },
    /// Handshake floods against a gateway's association port (loopback
    /// only): silent TCP connections and QUIC attempts that never complete,
    /// with a real association probed every so often. Prints a JSON summary;
    /// exits non-zero when a probe failed or took longer than --probe-limit.
    Flood {
        /// tls://, quic:// or npamp://HOST:PORT on 127.0.0.0/8 or ::1.
        #[arg(long)]
        target: PeerAddr,
        /// Silent TCP connections held at once.
        #[arg(long, default_value_t = 0)]
        silent: usize,
        /// QUIC connection attempts per second that never complete.
        #[arg(long, default_value_t = 0.0)]
        quic_rate: f64,
        /// Seconds the flood lasts.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Seconds between probes (a real association and a PING).
        #[arg(long)]
        probe_every: Option<f64>,
        /// A probe taking longer than this many milliseconds fails the run.
        #[arg(long, default_value_t = 2000.0)]
        probe_limit: f64,
        /// The probe's identity (a `npamp-gateway keygen` file).
        #[arg(long)]
        identity: Option<PathBuf>,
        /// The target's public key (64 hex digits); without it the probe
        /// accepts any (INSECURE, fine on loopback).
        #[arg(long)]
        trust: Option<String>,
        /// Flood from this loopback address (e.g. 127.0.0.2: another host
        /// as far as the target can tell); probes come from the default.
        #[arg(long)]
        source: Option<std::net::IpAddr>,
    },
    /// Compare runs (each a summary.json or its run directory): each NEW
    /// against BASE; exit 5 when one regressed in a gated row: throughput
    /// down or p99 up by more than the threshold, or more lost. The other
    /// rows are shown only.
    Compare {
        base: PathBuf,
        /// One run or more.
        #[arg(required = true, num_args = 1..)]
        new: Vec<PathBuf>,
        /// Percent.
        #[arg(long, default_value_t = 10.0)]
        threshold: f64,
        /// Also write DIR/compare.html: the tables and the runs overlaid
        /// (latency, replies per second, p99 each second).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Compare {
            base,
            new,
            threshold,
            out,
        } => match compare(&base, &new, threshold, out.as_deref()) {
            Ok(false) => ExitCode::SUCCESS,
            Ok(true) => ExitCode::from(EXIT_REGRESSION),
            Err(e) => fail(EXIT_USAGE, &e),
        },
        Command::Impair {
            listen,
            to,
            loss,
            delay_ms,
            jitter_ms,
            seed,
        } => {
            let ms = |v: f64, what: &str| {
                if v.is_finite() && (0.0..=60_000.0).contains(&v) {
                    Ok(Duration::from_secs_f64(v / 1000.0))
                } else {
                    Err(anyhow::anyhow!("--{what}: {v} is not 0–60000 ms"))
                }
            };
            let how = match (ms(delay_ms, "delay-ms"), ms(jitter_ms, "jitter-ms")) {
                (Ok(delay), Ok(jitter)) if (0.0..=1.0).contains(&loss) => {
                    npamp_loadgen::impair::Impairment {
                        loss,
                        delay,
                        jitter,
                    }
                }
                (Err(e), _) | (_, Err(e)) => return fail(EXIT_USAGE, &e),
                _ => return fail(EXIT_USAGE, &anyhow::anyhow!("--loss {loss}: not 0–1")),
            };
            match runtime().and_then(|rt| rt.block_on(impair(listen, to, how, seed))) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(EXIT_RUN, &e),
            }
        }
        Command::Flood {
            target,
            silent,
            quic_rate,
            duration,
            probe_every,
            probe_limit,
            identity,
            trust,
            source,
        } => match flood_command(
            target,
            FloodLoad {
                silent,
                quic_rate,
                duration,
                source,
            },
            probe_every,
            probe_limit,
            identity,
            trust,
        ) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(EXIT_SLO),
            Err(e) => fail(EXIT_USAGE, &e),
        },
        Command::Slow {
            target,
            mode,
            connections,
            duration,
            size,
            probe,
        } => {
            if !(duration.is_finite() && duration > 0.0 && duration < 1e6) {
                return fail(
                    EXIT_USAGE,
                    &anyhow::anyhow!("--duration {duration}: a positive number of seconds"),
                );
            }
            let run = npamp_loadgen::slow::run(npamp_loadgen::slow::Slow {
                target,
                mode,
                connections,
                duration: Duration::from_secs_f64(duration),
                size,
                probe,
            });
            match runtime().map(|rt| rt.block_on(run)) {
                Ok(Ok(stats)) => {
                    println!("{stats}");
                    ExitCode::SUCCESS
                }
                Ok(Err(e)) => fail(EXIT_USAGE, &e.into()),
                Err(e) => fail(EXIT_RUN, &e),
            }
        }
        Command::Upstream { listen, behavior } => {
            match runtime().and_then(|rt| rt.block_on(upstream(listen, behavior.behavior()))) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(EXIT_RUN, &e),
            }
        }
        Command::Run {
            scenario,
            target,
            rate,
            duration,
            connections,
            concurrency,
            out,
            seed,
            quiet,
            shard,
            shards,
            npamp,
        } => {
            let shard = match (shard, shards) {
                (Some(s), _) => Some(s),
                (None, Some(n)) => match std::env::var("JOB_COMPLETION_INDEX")
                    .map_err(|_| {
                        "--shards needs JOB_COMPLETION_INDEX (set in a Kubernetes Indexed Job)"
                            .to_owned()
                    })
                    .and_then(|i| format!("{}/{n}", i.trim()).parse::<Shard>())
                {
                    Ok(s) => Some(s),
                    Err(e) => return fail(EXIT_USAGE, &anyhow::anyhow!("--shards {n}: {e}")),
                },
                (None, None) => None,
            };
            let mut s = match Scenario::load(&scenario) {
                Ok(s) => s,
                Err(e) => return fail(EXIT_USAGE, &e.into()),
            };
            if let Some(t) = target {
                s.target = Some(t);
            }
            if let Some(c) = connections {
                s.connections = c.max(1);
            }
            if let Some(c) = concurrency {
                s.load = Load::Closed {
                    concurrency: c.max(1),
                };
            }
            if let Some(r) = rate {
                s.load = Load::Open {
                    rate: r,
                    stages: Vec::new(),
                };
            }
            if let Some(d) = duration {
                if let Load::Open { stages, .. } = &s.load
                    && !stages.is_empty()
                {
                    eprintln!(
                        "error: --duration: {} is a ramp of {} stages ({:.1} s): --duration would flatten it; give --rate too to run one rate instead, or change the stages",
                        scenario.display(),
                        stages.len(),
                        s.measured().as_secs_f64()
                    );
                    return ExitCode::from(EXIT_USAGE);
                }
                s.duration = d;
            }
            if let Err((key, message)) = s.check() {
                eprintln!(
                    "error: {} (with the command-line overrides): {key}: {message}",
                    scenario.display()
                );
                return ExitCode::from(EXIT_USAGE);
            }
            if let Some(shard) = shard {
                s.shard(shard);
            }
            if let Some(dir) = &out
                && let Err(e) = writable(dir)
            {
                return fail(EXIT_USAGE, &e);
            }
            // Each worker its own randomness.
            let seed = seed.wrapping_add(shard.map_or(0, |s| u64::from(s.index)));
            match runtime().and_then(|rt| rt.block_on(run(s, out, seed, quiet, npamp))) {
                Ok(summary) => verdict(&summary),
                Err(e) => fail(EXIT_RUN, &e),
            }
        }
        Command::Capacity {
            scenario,
            target,
            slo,
            start,
            max,
            precision,
            trials,
            step,
            warmup,
            connections,
            out,
            seed,
            npamp,
        } => {
            let mut s = match Scenario::load(&scenario) {
                Ok(s) => s,
                Err(e) => return fail(EXIT_USAGE, &e.into()),
            };
            if let Some(t) = target {
                s.target = Some(t);
            }
            if let Some(c) = connections {
                s.connections = c.max(1);
            }
            s.duration = step;
            s.warmup = warmup;
            if !(start > 0.0 && max >= start && precision > 0.0 && precision < 100.0) {
                return fail(
                    EXIT_USAGE,
                    &anyhow::anyhow!("expected 0 < --start <= --max and 0 < --precision < 100"),
                );
            }
            if let Some(dir) = &out
                && let Err(e) = writable(dir)
            {
                return fail(EXIT_USAGE, &e);
            }
            let how = npamp_loadgen::capacity::Search {
                trials: trials as usize,
                start,
                max,
                precision: precision / 100.0,
            };
            match runtime().and_then(|rt| rt.block_on(capacity(s, slo, how, seed, out, npamp))) {
                Ok(c) if c.knee.is_some() => ExitCode::SUCCESS,
                Ok(_) => ExitCode::from(EXIT_SLO),
                Err(e) => fail(EXIT_RUN, &e),
            }
        }
        Command::Merge { dirs, out } => {
            if let Some(dir) = &out
                && let Err(e) = writable(dir)
            {
                return fail(EXIT_USAGE, &e);
            }
            let merged = dirs
                .iter()
                .map(|d| Measured::read(d))
                .collect::<Result<Vec<_>, _>>()
                .and_then(|parts| merge::merge(&parts));
            match merged {
                Ok(m) => {
                    print!("{}", m.summary.table());
                    if let Some(dir) = out {
                        if let Err(e) = npamp_loadgen::run_dir::write(&m, &dir) {
                            return fail(EXIT_RUN, &anyhow::anyhow!(e));
                        }
                        eprintln!(
                            "wrote {}, report.html, report.svg, latency.hlog, histograms.hlog",
                            dir.join("summary.json").display()
                        );
                    }
                    verdict(&m.summary)
                }
                Err(e) => fail(EXIT_USAGE, &anyhow::anyhow!(e)),
            }
        }
    }
}

/// `flood`: runs it, prints the JSON summary; `true` when every probe
/// worked within `probe_limit` ms.
/// What `flood` throws at its target.
struct FloodLoad {
    silent: usize,
    quic_rate: f64,
    duration: f64,
    source: Option<std::net::IpAddr>,
}

fn flood_command(
    target: PeerAddr,
    load: FloodLoad,
    probe_every: Option<f64>,
    probe_limit: f64,
    identity: Option<PathBuf>,
    trust: Option<String>,
) -> anyhow::Result<bool> {
    let seconds = |what: &str, v: f64| {
        Duration::try_from_secs_f64(v)
            .ok()
            .filter(|d| !d.is_zero() && v < 1e6)
            .ok_or_else(|| anyhow::anyhow!("--{what} {v}: a positive number of seconds"))
    };
    let duration = seconds("duration", load.duration)?;
    let probe_every = probe_every.map(|v| seconds("probe-every", v)).transpose()?;
    let seed = match &identity {
        Some(path) => npamp_gateway::gateway::config::read_identity(path)
            .map_err(|e| anyhow::anyhow!("--identity {}: {e}", path.display()))?,
        None => npamp_gateway::gateway::config::random_identity()
            .map_err(|e| anyhow::anyhow!("a probe identity: {e}"))?,
    };
    let trust = match trust {
        Some(hex) => npamp_gateway::handshake::Trust::Pinned(vec![
            npamp_gateway::gateway::config::parse_key(&hex)
                .map_err(|e| anyhow::anyhow!("--trust: {e}"))?,
        ]),
        None => npamp_gateway::handshake::Trust::InsecureAcceptAny,
    };
    let flood = npamp_loadgen::flood::Flood {
        target,
        silent: load.silent,
        quic_rate: load.quic_rate,
        duration,
        probe_every,
        probe: Some(npamp_gateway::assoc::Endpoint::with_seed(seed, trust)),
        source: load.source,
    };
    let stats = Arc::new(npamp_loadgen::flood::FloodStats::default());
    runtime()?.block_on(flood.run(stats.clone()))?;
    let summary = stats.to_json();
    println!("{summary}");
    let probes = summary["probes"].as_u64().unwrap_or(0);
    let ok = summary["probes_ok"].as_u64().unwrap_or(0);
    let worst = summary["probe_worst_ms"].as_f64().unwrap_or(0.0);
    Ok(ok == probes && worst <= probe_limit)
}

/// The exit code of a run's (or a merge's) summary.
fn verdict(summary: &Summary) -> ExitCode {
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

fn fail(code: u8, e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::from(code)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

async fn upstream(listen: Vec<MockAddr>, behavior: Arc<mock::Behavior>) -> anyhow::Result<()> {
    for addr in listen {
        let bound = mock::spawn(addr, None, behavior.clone())
            .await
            .with_context(|| format!("listening on {addr}"))?;
        println!("mock upstream {bound}");
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}

async fn impair(
    listen: std::net::SocketAddr,
    to: std::net::SocketAddr,
    how: npamp_loadgen::impair::Impairment,
    seed: u64,
) -> anyhow::Result<()> {
    let stats = Arc::new(npamp_loadgen::impair::PathStats::default());
    let path = npamp_loadgen::impair::run(listen, to, how, seed, stats.clone(), |a| {
        println!("impaired path {a} -> {to}");
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = path => r.with_context(|| format!("the path {listen} -> {to}"))?,
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!("{stats}");
    Ok(())
}

/// What an npamp target and the embedded pair take from the command line.
#[derive(clap::Args, Clone, Debug, Default)]
struct GatewayFlags {
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

impl GatewayFlags {
    fn max_body(&self) -> usize {
        self.max_body.map_or(MAX_BODY_LIMIT, Count::get)
    }
}

async fn target_of(url: &str, npamp: &GatewayFlags) -> anyhow::Result<Target> {
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
    if let Some(addr) = url.strip_prefix("tcp://") {
        return Ok(Target::Tcp(addr.trim_end_matches('/').to_owned()));
    }
    if url.starts_with("ws://") || url.starts_with("wss://") {
        return Ok(Target::Ws(url.to_owned()));
    }
    if url.starts_with("http://") {
        return Ok(Target::Http(
            url.parse().with_context(|| format!("bad URL {url:?}"))?,
        ));
    }
    if let Some(http) = url.strip_prefix("mcp+")
        && http.starts_with("http://")
    {
        return Ok(Target::Mcp(
            http.parse().with_context(|| format!("bad URL {url:?}"))?,
        ));
    }
    bail!(
        "unknown target {url:?}: expected http://, mcp+http://, ws://, tcp://, npamp://, npamp+quic:// or npamp+tls://"
    )
}

/// What an embedded pair is called in a run's summary: the same in every
/// run, whatever ports it listened on, so runs of it compare as runs of one
/// target (the ports are printed when it starts).
const EMBEDDED_PAIR: &str = "embedded gateway pair (HTTP ingress, N-PAMP over QUIC, mock upstream)";

/// The scenario's target, or an embedded gateway pair when it has none;
/// and the target's name in the summary.
async fn prepare(
    scenario: &Scenario,
    npamp: &GatewayFlags,
) -> anyhow::Result<(Option<EmbeddedPair>, Target, String)> {
    Ok(match &scenario.target {
        Some(url) => {
            let target = target_of(url, npamp).await?;
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
            let t = Target::Http(pair.ingress.parse()?);
            (Some(pair), t, EMBEDDED_PAIR.to_owned())
        }
    })
}

/// `capacity`: the search, one engine run per step against one target.
async fn capacity(
    scenario: Scenario,
    slo: npamp_loadgen::capacity::Slo,
    how: npamp_loadgen::capacity::Search,
    seed: u64,
    out: Option<PathBuf>,
    npamp: GatewayFlags,
) -> anyhow::Result<npamp_loadgen::capacity::Capacity> {
    use npamp_loadgen::capacity::{Capacity, Step};
    let (pair, target, described) = prepare(&scenario, &npamp).await?;
    eprintln!(
        "capacity of {described} ({}, {} connections, {:.1} s per step after {:.1} s warm-up) for {slo}",
        scenario.name, scenario.connections, scenario.duration, scenario.warmup
    );
    let mut n = 0u64;
    let rt = tokio::runtime::Handle::current();
    let mut trial = |rate: f64| -> anyhow::Result<Step> {
        let mut s = scenario.clone();
        s.load = Load::Open {
            rate,
            stages: Vec::new(),
        };
        s.slo = Default::default();
        s.check()
            .map_err(|(key, message)| anyhow::anyhow!("step at {rate}/s: {key}: {message}"))?;
        n += 1;
        let stats = tokio::task::block_in_place(|| {
            rt.block_on(engine::run(
                &s,
                target.clone(),
                seed.wrapping_add(n),
                |_, _| {},
            ))
        })
        .map_err(|e| anyhow::anyhow!(e))?;
        let summary = report::summarize(&stats, &s, &described, String::new());
        let step = Step::judge(rate, &summary, &slo);
        eprintln!(
            "step {n:>2}: offered {rate:>9.0}/s  achieved {:>9.0}/s  p99 {:>9.3} ms  errors {:.3} %  {}",
            step.achieved,
            step.p99_ms,
            step.error_share * 100.0,
            step.why
                .as_deref()
                .map_or("pass".to_owned(), |w| format!("fail: {w}"))
        );
        Ok(step)
    };
    let trials = how.trials.max(1);
    let mut measure = |rate: f64| -> anyhow::Result<Step> {
        let steps = (0..trials)
            .map(|_| trial(rate))
            .collect::<anyhow::Result<Vec<Step>>>()?;
        Step::of_trials(steps).ok_or_else(|| anyhow::anyhow!("no trial at {rate}/s"))
    };
    let found = Capacity::search(&slo, how, &mut measure)?;
    print!("{}", found.table());
    if let Some(pair) = pair {
        pair.edge.shutdown().await;
        pair.origin.shutdown().await;
    }
    if let Some(dir) = out {
        let doc = serde_json::json!({
            "scenario": scenario.name,
            "target": described,
            "machine": report::Machine::here(),
            "connections": scenario.connections,
            "step_s": scenario.duration,
            "warmup_s": scenario.warmup,
            "trials": trials,
            "capacity": found,
        });
        std::fs::write(
            dir.join("capacity.json"),
            serde_json::to_string_pretty(&doc)?,
        )?;
        std::fs::write(
            dir.join("capacity.svg"),
            npamp_loadgen::capacity::svg(&found, &scenario.name),
        )?;
        std::fs::write(
            dir.join("report.html"),
            npamp_loadgen::html::capacity_page(&found, &scenario.name, &described),
        )?;
        eprintln!(
            "wrote {}, capacity.svg, report.html",
            dir.join("capacity.json").display()
        );
    }
    Ok(found)
}

async fn run(
    scenario: Scenario,
    out: Option<PathBuf>,
    seed: u64,
    quiet: bool,
    npamp: GatewayFlags,
) -> anyhow::Result<Summary> {
    let (pair, target, described) = prepare(&scenario, &npamp).await?;
    eprintln!(
        "{}: {} loop, {} connections, {:.1} s (+{:.1} s warm-up) against {described}",
        scenario.name,
        match scenario.load {
            Load::Open { .. } => "open",
            Load::Closed { .. } => "closed",
        },
        scenario.connections,
        scenario.measured().as_secs_f64(),
        scenario.warmup().as_secs_f64()
    );
    let mut intervals: Vec<(Duration, hdrhistogram::Histogram<u64>)> = Vec::new();
    let mut outstanding: Vec<u64> = Vec::new();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let stats: Stats = engine::run(&scenario, target, seed, |s, t| {
        let h = std::mem::replace(
            &mut s.interval,
            hdrhistogram::Histogram::new(3).expect("valid precision"),
        );
        let second = s
            .per_second
            .get(t.as_secs().saturating_sub(1) as usize)
            .copied();
        if !quiet {
            let (replies, errors) = second.unwrap_or((0, 0));
            let total = (scenario.warmup() + scenario.measured()).as_secs_f64();
            let done = (t.as_secs_f64() / total).clamp(0.0, 1.0);
            let bar: String = (0..20)
                .map(|i| if f64::from(i) < done * 20.0 { '#' } else { '.' })
                .collect();
            let p99 = if t <= scenario.warmup() {
                "warm-up    ".to_owned()
            } else {
                format!("{:>8.3} ms", h.value_at_quantile(0.99) as f64 / 1e3)
            };
            let line = format!(
                "[{bar}] t={:>4}s  replies/s {:>7}  p99 {p99}  errors {:>5}  outstanding {}",
                t.as_secs(),
                replies,
                errors,
                s.outstanding()
            );
            // On a terminal the bar updates in place; in a log, a line a second.
            if tty {
                eprint!("\r{line}\x1b[K");
            } else {
                eprintln!("{line}");
            }
        }
        intervals.push((t, h));
        outstanding.push(s.outstanding());
    })
    .await
    .map_err(|e| anyhow::anyhow!(e))?;
    if tty && !quiet {
        eprintln!();
    }
    if let Some(pair) = pair {
        pair.edge.shutdown().await;
        pair.origin.shutdown().await;
    }
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let mut summary = report::summarize(&stats, &scenario, &described, date);
    summary.outstanding_per_second = outstanding;
    summary.stages = report::stages(&summary, &intervals);
    print!("{}", summary.table());
    if let Some(dir) = out {
        let mut per_method: std::collections::BTreeMap<String, hdrhistogram::Histogram<u64>> =
            Default::default();
        for (m, h) in scenario.mix.messages.iter().zip(&stats.per_method) {
            match per_method.get_mut(&m.method) {
                Some(into) => into.add(h).map_err(|e| anyhow::anyhow!("{e:?}"))?,
                None => {
                    per_method.insert(m.method.clone(), h.clone());
                }
            }
        }
        let measured = Measured {
            summary: summary.clone(),
            overall: stats.overall.clone(),
            schedule_lag: stats.schedule_lag.clone(),
            per_method,
            intervals,
        };
        npamp_loadgen::run_dir::write(&measured, &dir).map_err(anyhow::Error::msg)?;
        eprintln!(
            "wrote {}, report.html, report.svg, latency.hlog, histograms.hlog",
            dir.join("summary.json").display()
        );
    }
    if summary.accounting_failed() {
        eprintln!("ACCOUNTING FAILED: lost, duplicated, mismatched or wrong-result replies");
    }
    Ok(summary)
}

/// Checks before a run that its results can be written to `dir`
/// (created if missing).
fn writable(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out {}: cannot create it", dir.display()))?;
    let probe = dir.join(".npamp-loadgen-probe");
    std::fs::write(&probe, b"")
        .with_context(|| format!("--out {}: cannot write there", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

fn compare(
    base: &std::path::Path,
    new: &[PathBuf],
    threshold: f64,
    out: Option<&std::path::Path>,
) -> anyhow::Result<bool> {
    use npamp_loadgen::html::Compared;
    use npamp_loadgen::merge::Measured;
    // A run directory with its histograms, or a summary.json alone.
    let read = |p: &std::path::Path| -> anyhow::Result<Compared> {
        // Named by its directory (a summary.json's too).
        let named = if p.is_dir() {
            p
        } else {
            p.parent().unwrap_or(p)
        };
        let label = named.file_name().map_or_else(
            || named.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        if p.is_dir() && p.join("histograms.hlog").is_file() {
            let run = Measured::read(p).map_err(|e| anyhow::anyhow!(e))?;
            return Ok(Compared {
                label,
                run,
                histograms: true,
            });
        }
        let file = p.join("summary.json");
        let p = if p.is_dir() { file.as_path() } else { p };
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let summary: Summary = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a loadgen summary", p.display()))?;
        Ok(Compared {
            label,
            run: Measured::of_summary(summary),
            histograms: false,
        })
    };
    let mut runs = vec![read(base)?];
    for p in new {
        runs.push(read(p)?);
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let (mut tables, mut regressed) = (String::new(), false);
    let base = &runs[0];
    for new in &runs[1..] {
        if runs.len() > 2 {
            tables.push_str(&format!("== {} against {} ==\n", new.label, base.label));
        }
        let (table, worse) =
            npamp_loadgen::compare::compare(&base.run.summary, &new.run.summary, threshold);
        tables.push_str(&table);
        regressed |= worse;
    }
    print!("{tables}");
    if let Some(dir) = out {
        let page = dir.join("compare.html");
        let html = npamp_loadgen::html::compare_page(&runs, &tables, regressed);
        std::fs::write(&page, html).with_context(|| format!("writing {}", page.display()))?;
        eprintln!("wrote {}", page.display());
    }
    Ok(regressed)
}
