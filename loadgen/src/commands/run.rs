//! Run a scenario. Without a target (here or in the scenario), an
//! embedded gateway pair is started in this process (mock upstream,
//! origin, edge, N-PAMP over QUIC) and loaded through its HTTP ingress.

use super::*;

/// `run`'s arguments.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The scenario file (scenarios/*.toml); none for a one-liner
    /// (--method).
    #[arg(required_unless_present = "method")]
    pub scenario: Option<PathBuf>,
    /// A one-liner, no scenario file: send requests of this method (to
    /// --target, or to the embedded pair), closed loop with a request in
    /// flight on each connection unless --rate, --ramp or --concurrency
    /// says otherwise; 10 s unless --duration or -n does.
    #[arg(long, conflicts_with = "scenario")]
    pub method: Option<String>,
    /// The one-liner's params: JSON, with the scenarios' placeholders
    /// (`{seq}`, `{rand:N}`, `{hex:N}`, `{bytes:N}`).
    #[arg(long, value_name = "JSON", requires = "method")]
    pub params: Option<String>,
    /// http://, https://, mcp+http(s):// (an MCP server over Streamable
    /// HTTP: a session per connection), ws://, wss://, tcp://HOST:PORT,
    /// tcp+lsp://HOST:PORT, npamp://, npamp+quic:// or npamp+tls://
    /// (Bridge frames straight to a gateway's association port).
    #[arg(long)]
    pub target: Option<String>,
    /// Sends per second, open loop: 1000, 1000/s, 60000/m (replaces the
    /// scenario's load).
    #[arg(long, value_parser = npamp_loadgen::scenario::parse_rate)]
    pub rate: Option<f64>,
    /// A linear ramp over the duration, open loop: FROM..TO, each a rate
    /// (100/s..5000/s; replaces the scenario's load).
    #[arg(long, value_name = "FROM..TO", value_parser = npamp_loadgen::scenario::parse_ramp, conflicts_with = "rate")]
    pub ramp: Option<(f64, f64)>,
    /// Sends measured: with --rate, the run lasts COUNT / rate; closed
    /// loop, it ends once COUNT were sent and answered (or at --duration,
    /// 1 h without it).
    #[arg(
        short = 'n',
        long = "requests",
        value_name = "COUNT",
        conflicts_with = "ramp"
    )]
    pub requests: Option<u64>,
    /// Time measured: 500ms, 5s, 2m, or seconds (replaces the
    /// scenario's duration; with stages, give --rate as well). It bounds
    /// the run: open loop, a send that would leave more than 50 ms after
    /// the schedule's end (the run fell that far behind) is not sent but
    /// counted as dropped (a failure to the SLOs), and what was sent has
    /// the scenario's timeout plus 1 s to be answered.
    #[arg(long, value_name = "TIME", value_parser = npamp_loadgen::scenario::parse_time)]
    pub duration: Option<f64>,
    /// Connections to the target.
    #[arg(long)]
    pub connections: Option<usize>,
    /// Requests in flight (switches to closed loop). Not with --rate or
    /// --ramp (open loop): which one was meant cannot be told.
    #[arg(long, conflicts_with_all = ["rate", "ramp"])]
    pub concurrency: Option<usize>,
    /// Write summary.json, report.html, report.svg, latency.hlog (each
    /// second's latency) and histograms.hlog (the whole run's, which
    /// `merge` adds) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of the generated values.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No live progress line.
    #[arg(long)]
    pub quiet: bool,
    /// Write the summary (as summary.json) to stdout, the table to stderr.
    #[arg(long)]
    pub json: bool,
    /// Be worker I (0 to N-1) of N running this scenario together: a
    /// N-th of its rate, connections and concurrency, request ids of
    /// its own; `merge` adds the workers' results.
    #[arg(long, value_name = "I/N", conflicts_with = "shards")]
    pub shard: Option<Shard>,
    /// As --shard, with I from $JOB_COMPLETION_INDEX (a Kubernetes
    /// Indexed Job's).
    #[arg(long, value_name = "N")]
    pub shards: Option<u32>,
    /// Names the run this worker is part of (a Kubernetes Job passes its
    /// uid): `merge` refuses workers of different run ids, as it does
    /// two runs of one scenario that it could not tell apart otherwise.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    #[command(flatten)]
    pub reach: TargetFlags,
    #[command(flatten)]
    pub npamp: GatewayFlags,
}

/// Runs `npamp-loadgen run`.
pub fn main(args: RunArgs) -> ExitCode {
    let shard = match shard_of(args.shard, args.shards) {
        Ok(s) => s,
        Err(e) => return fail(EXIT_USAGE, &e),
    };
    let s = match scenario_of(&args) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let named = args
        .scenario
        .clone()
        .unwrap_or_else(|| PathBuf::from("the command line"));
    let mut s = match load_of(&args, s, &named).and_then(|s| checked(s, &named)) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let RunArgs {
        out,
        seed,
        quiet,
        json,
        run_id,
        npamp,
        ..
    } = args;
    if let Some(shard) = shard {
        s.shard(shard);
    }
    s.run_id = run_id.filter(|id| !id.trim().is_empty());
    // Each worker its own randomness.
    let seed = seed.wrapping_add(shard.map_or(0, |s| u64::from(s.index)));
    execute(s, out, seed, Shown { quiet, json }, npamp)
}

/// Runs `s` (as `run` and `replay` do): the table and `out`'s files
/// written, the exit code its verdict's, or 130 when interrupted.
pub(super) fn execute(
    s: Scenario,
    out: Option<PathBuf>,
    seed: u64,
    shown: Shown,
    npamp: GatewayFlags,
) -> ExitCode {
    if let Some(dir) = &out
        && let Err(e) = writable(dir)
    {
        return fail(EXIT_USAGE, &e);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(EXIT_RUN, &e),
    };
    let interrupt = engine::Interrupt::default();
    let result = rt.block_on(run(s, out, seed, shown, npamp, interrupt.clone()));
    if interrupt.is_set() {
        // Connections still waiting on a reply are not waited for.
        rt.shutdown_background();
        return match result {
            Ok(_) => ExitCode::from(EXIT_INTERRUPTED),
            Err(e) => fail(EXIT_INTERRUPTED, &e),
        };
    }
    match result {
        Ok(summary) => verdict(&summary),
        Err(e) => fail(EXIT_RUN, &e),
    }
}

/// `--shard`, or `--shards` with the index a Kubernetes Indexed Job gives.
fn shard_of(shard: Option<Shard>, shards: Option<u32>) -> anyhow::Result<Option<Shard>> {
    Ok(match (shard, shards) {
        (Some(s), _) => Some(s),
        (None, Some(n)) => Some(
            std::env::var("JOB_COMPLETION_INDEX")
                .map_err(|_| {
                    "--shards needs JOB_COMPLETION_INDEX (set in a Kubernetes Indexed Job)"
                        .to_owned()
                })
                .and_then(|i| format!("{}/{n}", i.trim()).parse::<Shard>())
                .map_err(|e| anyhow::anyhow!("--shards {n}: {e}"))?,
        ),
        (None, None) => None,
    })
}

/// The scenario file with the command line's target and connections, or
/// a one-liner's scenario.
fn scenario_of(args: &RunArgs) -> Result<Scenario, ExitCode> {
    let (target, connections) = (args.target.clone(), args.connections);
    match (&args.scenario, &args.method) {
        (Some(path), _) => scenario_with(path, target, connections, &args.reach),
        (None, Some(method)) => {
            let mut s = Scenario::one_request(target, method, args.params.clone())
                .map_err(|e| fail(EXIT_USAGE, &e.into()))?;
            if let Some(c) = connections {
                s.connections = c.max(1);
                s.load = Load::Closed {
                    concurrency: s.connections,
                };
            }
            args.reach.apply(&mut s).map_err(|e| fail(EXIT_USAGE, &e))?;
            Ok(s)
        }
        // clap requires one or the other.
        (None, None) => Err(fail(
            EXIT_USAGE,
            &anyhow::anyhow!("give a scenario file, or --method for a one-liner"),
        )),
    }
}

/// The longest a closed loop bounded by `-n` alone runs.
const COUNT_BOUND_S: f64 = 3600.0;

/// The scenario with the command line's load: `--concurrency`, `--rate`,
/// `--ramp`, `--duration`, `-n`; what contradicts itself is refused.
fn load_of(args: &RunArgs, mut s: Scenario, named: &std::path::Path) -> Result<Scenario, ExitCode> {
    let usage = |m: String| fail(EXIT_USAGE, &anyhow::anyhow!(m));
    let ramped = |s: &Scenario| match &s.load {
        Load::Open { stages, .. } if !stages.is_empty() => Some(stages.len()),
        _ => None,
    };
    // A load that replaces the file's stages keeps their length, unless
    // --duration says otherwise.
    if ramped(&s).is_some()
        && (args.rate.is_some() || args.ramp.is_some() || args.concurrency.is_some())
    {
        s.duration = s.measured().as_secs_f64();
    }
    if let Some(c) = args.concurrency {
        s.load = Load::Closed {
            concurrency: c.max(1),
        };
    }
    if let Some(r) = args.rate {
        s.load = Load::Open {
            rate: r,
            stages: Vec::new(),
        };
    }
    if let Some(d) = args.duration {
        if let Some(n) = ramped(&s).filter(|_| args.ramp.is_none()) {
            return Err(usage(format!(
                "--duration: {} is a ramp of {n} stages ({:.1} s): --duration would flatten it; give --rate or --ramp too to replace it, or change the stages",
                named.display(),
                s.measured().as_secs_f64()
            )));
        }
        s.duration = d;
    }
    if let Some((from, to)) = args.ramp {
        s.load = Load::Open {
            rate: from,
            stages: vec![npamp_loadgen::scenario::Stage {
                rate: from,
                ramp_to: Some(to).filter(|t| *t != from),
                duration: s.duration,
            }],
        };
    }
    // HTTP/1.1 carries one request at a time on a connection: closed loop,
    // each request in flight has its own, whatever `connections` says.
    let one_per_connection = !s.http2
        && s.target.as_deref().is_none_or(|t| {
            npamp_loadgen::scenario::TargetKind::of(t) == npamp_loadgen::scenario::TargetKind::Http
        });
    if let Load::Closed { concurrency } = s.load
        && one_per_connection
    {
        if let Some(c) = args.connections.filter(|c| *c != concurrency) {
            return Err(usage(format!(
                "--connections {c}: over HTTP/1.1 a closed loop of {concurrency} requests in flight (--concurrency, or the scenario's) has a connection of its own for each ({concurrency}); several on one connection need --http2"
            )));
        }
        s.connections = concurrency;
    }
    if let Some(n) = args.requests {
        match &s.load {
            _ if ramped(&s).is_some() => {
                return Err(usage(format!(
                    "-n {n}: {} is a ramp: its stages make the count; give --rate to run one rate for {n} sends",
                    named.display()
                )));
            }
            Load::Open { .. } if args.duration.is_some() => {
                return Err(usage(format!(
                    "-n {n} and --duration: at a rate, the count makes the duration; give one of them"
                )));
            }
            Load::Open { rate, .. } => s.duration = n as f64 / rate,
            Load::Closed { .. } => {
                s.requests = Some(n);
                if args.duration.is_none() {
                    s.duration = COUNT_BOUND_S;
                }
            }
        }
    }
    Ok(s)
}

/// What `run` shows as it goes and at its end.
#[derive(Clone, Copy)]
pub(super) struct Shown {
    /// No live line.
    pub quiet: bool,
    /// The summary's JSON on stdout, the table on stderr.
    pub json: bool,
}

/// Sets `interrupt` at the first SIGINT (Ctrl-C) or SIGTERM; exits at
/// once, 130, at the second.
fn on_signals(interrupt: engine::Interrupt) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        for second in [false, true] {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            if second {
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
            eprintln!(
                "\ninterrupted: sending stopped, draining at most {} ms; again to quit at once",
                engine::DRAIN_GRACE.as_millis()
            );
            interrupt.interrupt();
        }
    });
    Ok(())
}

async fn run(
    scenario: Scenario,
    out: Option<PathBuf>,
    seed: u64,
    Shown { quiet, json }: Shown,
    npamp: GatewayFlags,
    interrupt: engine::Interrupt,
) -> anyhow::Result<Summary> {
    on_signals(interrupt.clone())?;
    let (pair, target, described) = prepare(&scenario, &npamp).await?;
    let span = match scenario.requests {
        Some(n) => format!(
            "{n} sends (at most {:.1} s)",
            scenario.measured().as_secs_f64()
        ),
        None => format!("{:.1} s", scenario.measured().as_secs_f64()),
    };
    let model = match scenario.load {
        Load::Open { .. } => format!("open loop, {} connections", scenario.connections),
        Load::Closed { concurrency } => format!("closed loop, {concurrency} in flight"),
    };
    eprintln!(
        "{}: {model}, {span} (+{:.1} s warm-up) against {described}",
        scenario.name,
        scenario.warmup().as_secs_f64()
    );
    let mut outstanding: Vec<u64> = Vec::new();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let stats: Stats = engine::run_until(&scenario, target, seed, interrupt, |s, t| {
        let h = std::mem::replace(
            &mut s.interval,
            hdrhistogram::Histogram::new(3).expect("valid precision"),
        );
        // The live line is the last interval's, by reply time.
        let (replies, errors) = std::mem::take(&mut s.interval_counts);
        if !quiet {
            let total = (scenario.warmup() + scenario.measured()).as_secs_f64();
            let done = match scenario.requests {
                // A count: how much of it was sent.
                Some(n) => s.sent_measured as f64 / n as f64,
                None => t.as_secs_f64() / total,
            }
            .clamp(0.0, 1.0);
            let bar: String = (0..20)
                .map(|i| if f64::from(i) < done * 20.0 { '#' } else { '.' })
                .collect();
            let p99 = if t <= scenario.warmup() {
                "warm-up    ".to_owned()
            } else if h.is_empty() {
                // No reply this second: there is no p99 to show, not 0.
                "no reply   ".to_owned()
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
    // Interrupted, or a count reached: the figures are of the part that
    // ran.
    let scenario = match stats.interrupted.or(stats.count_reached) {
        Some(ran) => scenario.cut(ran),
        None => scenario,
    };
    let mut summary = summarize(&stats, &scenario, &described, date);
    // Each second's latency, by intended send time, every second of the
    // schedule.
    let seconds = (scenario.warmup() + scenario.measured())
        .as_secs_f64()
        .ceil() as usize;
    let intervals = stats.latency_intervals(seconds);
    summary.outstanding_per_second = outstanding;
    summary.stages = stages(&summary, &intervals);
    if json {
        eprint!("{}", summary.table());
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).context("the summary as JSON")?
        );
    } else {
        print!("{}", summary.table());
    }
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
