//! Replay a gateway's capture (`npamp-gateway serve --capture FILE`):
//! open loop, each send at its captured time from the first, divided by
//! `--speed`, with `run`'s accounting, table, reports and exit codes.

use super::*;
use npamp_loadgen::replay::{Recording, Replay, parse_speed};
use npamp_loadgen::scenario::{Message, Slo};

/// `replay`'s arguments.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The capture file (`npamp-gateway serve --capture FILE`).
    pub capture: PathBuf,
    /// As `run --target`; none: the embedded gateway pair.
    #[arg(long)]
    pub target: Option<String>,
    /// How much faster than captured: 1x, 2x, 0.5x (the gaps between sends
    /// divided by it).
    #[arg(long, default_value = "1x", value_parser = parse_speed)]
    pub speed: f64,
    /// Connections to the target.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Before an unanswered request counts as timed out: 500ms, 5s, 2m.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = npamp_loadgen::scenario::parse_time)]
    pub timeout: f64,
    /// Pass or fail, as a scenario's [slo]: "p99<50ms,errors<0.1%".
    #[arg(long)]
    pub slo: Option<npamp_loadgen::capacity::Slo>,
    /// Write summary.json, report.html, report.svg, latency.hlog and
    /// histograms.hlog here, as `run --out`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No live progress line.
    #[arg(long)]
    pub quiet: bool,
    /// Write the summary to stdout, the table to stderr.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub reach: TargetFlags,
    #[command(flatten)]
    pub npamp: GatewayFlags,
}

/// Runs `npamp-loadgen replay`.
pub fn main(args: ReplayArgs) -> ExitCode {
    let recording = match Recording::read(&args.capture) {
        Ok(r) => r,
        Err(e) => return fail(EXIT_USAGE, &anyhow::anyhow!(e)),
    };
    if recording.skipped > 0 {
        eprintln!(
            "{}: {} messages that are answers, not requests, are not replayed",
            args.capture.display(),
            recording.skipped
        );
    }
    let s = match scenario(&args, recording) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let s = match checked(s, &args.capture) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let shown = run::Shown {
        quiet: args.quiet,
        json: args.json,
    };
    run::execute(s, args.out, 1, shown, args.npamp)
}

/// The scenario of a replay: the capture's methods, its times at
/// `--speed`, the command line's target, connections, timeout and SLO.
fn scenario(args: &ReplayArgs, recording: Recording) -> Result<Scenario, ExitCode> {
    let usage = |e: String| fail(EXIT_USAGE, &anyhow::anyhow!(e));
    let first = recording.methods.first().cloned().unwrap_or_default();
    let mut s = Scenario::one_request(args.target.clone(), &first, None)
        .map_err(|e| usage(e.to_string()))?;
    s.mix.messages = recording
        .methods
        .iter()
        .map(|m| Message {
            method: m.clone(),
            weight: 1.0,
            params: None,
            expect_error: false,
            verify_echo: false,
        })
        .collect();
    let replay = Replay {
        recording: Arc::new(recording),
        speed: args.speed,
    };
    let duration = replay.duration().as_secs_f64();
    s.name = format!(
        "replay of {} at {}x",
        args.capture.file_name().map_or_else(
            || args.capture.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        ),
        args.speed
    );
    s.load = Load::Open {
        rate: replay.recording.sends.len() as f64 / duration,
        stages: Vec::new(),
    };
    s.duration = duration;
    s.connections = args.connections.max(1);
    s.timeout = args.timeout;
    s.replay = Some(replay);
    if let Some(slo) = &args.slo {
        s.slo = slo_of(slo).map_err(usage)?;
    }
    args.reach.apply(&mut s).map_err(|e| fail(EXIT_USAGE, &e))?;
    Ok(s)
}

/// `--slo` as a scenario's `[slo]`: p99 and errors.
fn slo_of(slo: &npamp_loadgen::capacity::Slo) -> Result<Slo, String> {
    let mut out = Slo {
        max_error_rate: slo.errors,
        ..Slo::default()
    };
    for (name, ms) in &slo.latency {
        if name != "p99" {
            return Err(format!(
                "--slo {name}: a replay judges p99 and errors, as a scenario's [slo] does"
            ));
        }
        out.p99_ms = Some(*ms);
    }
    Ok(out)
}
