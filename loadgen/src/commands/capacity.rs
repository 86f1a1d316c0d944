//! Find the highest open-loop rate at which the target meets an SLO:
//! steps doubling from --start, then bisection to --precision. A step
//! passes when the SLO holds and the target answered at least 97 % of
//! the offered rate; when the generator itself falls behind, the search
//! stops and says so (the knee is then above what it can offer). When the
//! first step fails, it goes down by halving to a rate that passes, then
//! bisects. A step in which no request got a successful reply (`run`'s
//! "not served") ends it at once.
//! Exit 0 with a knee, 3 when no rate tried meets the SLO, 6 (as `run`'s)
//! when a step was not served.

use super::*;

/// `capacity`'s arguments.
#[derive(clap::Args)]
pub struct CapacityArgs {
    /// The scenario: its mix, connections and target (its load model
    /// is replaced by each step's rate).
    pub scenario: PathBuf,
    /// As `run --target`.
    #[arg(long)]
    pub target: Option<String>,
    /// Every term must hold: p50, p90, p99, p99.9 below a time,
    /// errors below a share, e.g. "p99<50ms,errors<0.1%".
    #[arg(long)]
    pub slo: npamp_loadgen::capacity::Slo,
    /// The first rate tried, requests per second.
    #[arg(long, default_value_t = 500.0)]
    pub start: f64,
    /// No rate above this is tried.
    #[arg(long, default_value_t = 1_000_000.0)]
    pub max: f64,
    /// Stop when the failing rate is within this many percent of the
    /// passing one.
    #[arg(long, default_value_t = 5.0)]
    pub precision: f64,
    /// Times each rate is measured; it passes when most of them do, and
    /// shows the median one (3 makes a knee repeat on a noisy machine,
    /// at 3 times the run time).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=9))]
    pub trials: u64,
    /// Time measured at each step (500ms, 5s, or seconds).
    #[arg(long, value_name = "TIME", default_value = "5s", value_parser = npamp_loadgen::scenario::parse_time)]
    pub step: f64,
    /// Time sent before each step is measured.
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = npamp_loadgen::scenario::parse_time)]
    pub warmup: f64,
    /// Connections to the target (replaces the scenario's).
    #[arg(long)]
    pub connections: Option<usize>,
    /// Write capacity.json (every step) and capacity.svg (latency
    /// against throughput) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub reach: TargetFlags,
    #[command(flatten)]
    pub npamp: GatewayFlags,
}

/// Runs `npamp-loadgen capacity`.
pub fn main(args: CapacityArgs) -> ExitCode {
    let CapacityArgs {
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
        reach,
        npamp,
    } = args;
    let mut s = match scenario_with(&scenario, target, connections, &reach) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
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
        Ok(c) if c.not_served.is_some() => ExitCode::from(EXIT_NOT_SERVED),
        Ok(c) if c.knee.is_some() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(EXIT_SLO),
        Err(e) => fail(EXIT_RUN, &e),
    }
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
        let summary = summarize(&stats, &s, &described, String::new());
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
            "machine": Machine::here(),
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
