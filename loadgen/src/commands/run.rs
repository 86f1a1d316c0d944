//! Run a scenario. Without a target (here or in the scenario), an
//! embedded gateway pair is started in this process (mock upstream,
//! origin, edge, N-PAMP over QUIC) and loaded through its HTTP ingress.

use super::*;

/// `run`'s arguments.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The scenario file (scenarios/*.toml).
    pub scenario: PathBuf,
    /// http://, https://, mcp+http(s):// (an MCP server over Streamable
    /// HTTP: a session per connection), ws://, wss://, tcp://HOST:PORT,
    /// tcp+lsp://HOST:PORT, npamp://, npamp+quic:// or npamp+tls://
    /// (Bridge frames straight to a gateway's association port).
    #[arg(long)]
    pub target: Option<String>,
    /// Requests per second (open loop; replaces the scenario's stages).
    #[arg(long)]
    pub rate: Option<f64>,
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
    /// Requests in flight (switches to closed loop). Not with --rate
    /// (open loop): which one was meant cannot be told.
    #[arg(long, conflicts_with = "rate")]
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
    let RunArgs {
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
        run_id,
        reach,
        npamp,
    } = args;
    let shard = match (shard, shards) {
        (Some(s), _) => Some(s),
        (None, Some(n)) => match std::env::var("JOB_COMPLETION_INDEX")
            .map_err(|_| {
                "--shards needs JOB_COMPLETION_INDEX (set in a Kubernetes Indexed Job)".to_owned()
            })
            .and_then(|i| format!("{}/{n}", i.trim()).parse::<Shard>())
        {
            Ok(s) => Some(s),
            Err(e) => return fail(EXIT_USAGE, &anyhow::anyhow!("--shards {n}: {e}")),
        },
        (None, None) => None,
    };
    let mut s = match scenario_with(&scenario, target, connections, &reach) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
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
    let mut s = match checked(s, &scenario) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    if let Some(shard) = shard {
        s.shard(shard);
    }
    s.run_id = run_id.filter(|id| !id.trim().is_empty());
    if let Some(dir) = &out
        && let Err(e) = writable(dir)
    {
        return fail(EXIT_USAGE, &e);
    }
    // Each worker its own randomness.
    let seed = seed.wrapping_add(shard.map_or(0, |s| u64::from(s.index)));
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(EXIT_RUN, &e),
    };
    let interrupt = engine::Interrupt::default();
    let result = rt.block_on(run(s, out, seed, quiet, npamp, interrupt.clone()));
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
    quiet: bool,
    npamp: GatewayFlags,
    interrupt: engine::Interrupt,
) -> anyhow::Result<Summary> {
    on_signals(interrupt.clone())?;
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
            let done = (t.as_secs_f64() / total).clamp(0.0, 1.0);
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
    // Interrupted: the figures are of the part that ran.
    let scenario = match stats.interrupted {
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
