//! A lossy, slow UDP path (a QUIC association's) for fault injection:
//! datagrams from clients to --to and back are dropped and delayed as
//! `tc netem loss P delay D J` would, where netem is not available.
//! Prints the counts on exit (Ctrl-C / SIGTERM).

use super::*;

/// `impair`'s arguments.
#[derive(clap::Args)]
pub struct ImpairArgs {
    /// Where clients send (HOST:PORT; port 0 picks one, printed).
    #[arg(long)]
    pub listen: std::net::SocketAddr,
    /// The server the datagrams are for (HOST:PORT).
    #[arg(long)]
    pub to: std::net::SocketAddr,
    /// Share of datagrams dropped, each direction (0–1).
    #[arg(long, default_value_t = 0.05)]
    pub loss: f64,
    /// Base delay, milliseconds, each direction.
    #[arg(long, default_value_t = 20.0)]
    pub delay_ms: f64,
    /// Each datagram's delay is uniform in delay ± jitter, milliseconds.
    #[arg(long, default_value_t = 10.0)]
    pub jitter_ms: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs `npamp-loadgen impair`.
pub fn main(args: ImpairArgs) -> ExitCode {
    let ImpairArgs {
        listen,
        to,
        loss,
        delay_ms,
        jitter_ms,
        seed,
    } = args;
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
