//! Slow clients (slowloris headers, a body that never finishes, a
//! WebSocket client that never reads) held against an ingress for a
//! while; prints how many the server cut off, and after how long.

use super::*;

/// `slow`'s arguments.
#[derive(clap::Args)]
pub struct SlowArgs {
    /// Loopback HOST:PORT of the HTTP (headers, body), WebSocket
    /// (ws-no-read) or TCP (tcp-no-read) ingress.
    #[arg(long)]
    pub target: String,
    #[arg(long, value_enum)]
    pub mode: npamp_loadgen::slow::Mode,
    #[arg(long, default_value_t = 100)]
    pub connections: usize,
    /// Time to hold them: 500ms, 5s, 2m, or seconds (as `run`'s).
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = npamp_loadgen::scenario::parse_time)]
    pub duration: f64,
    /// Octets of each request of the no-read modes.
    #[arg(long, default_value_t = 60_000)]
    pub size: usize,
    /// Loopback HOST:PORT of an HTTP ingress for a healthy client
    /// beside them (one echo request every 20 ms, each timed).
    #[arg(long)]
    pub probe: Option<String>,
}

/// Runs `npamp-loadgen slow`.
pub fn main(args: SlowArgs) -> ExitCode {
    let SlowArgs {
        target,
        mode,
        connections,
        duration,
        size,
        probe,
    } = args;
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
