//! Handshake floods against a gateway's association port (loopback
//! only): silent TCP connections and QUIC attempts that never complete,
//! with a real association probed every so often. Prints a JSON summary;
//! exits non-zero when a probe failed or took longer than --probe-limit.

use super::*;

/// `flood`'s arguments.
#[derive(clap::Args)]
pub struct FloodArgs {
    /// tls://, quic:// or npamp://HOST:PORT on 127.0.0.0/8 or ::1.
    #[arg(long)]
    pub target: PeerAddr,
    /// Silent TCP connections held at once.
    #[arg(long, default_value_t = 0)]
    pub silent: usize,
    /// QUIC connection attempts per second that never complete.
    #[arg(long, default_value_t = 0.0)]
    pub quic_rate: f64,
    /// Time the flood lasts: 500ms, 5s, 2m, or seconds (as `run`'s).
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = npamp_loadgen::scenario::parse_time)]
    pub duration: f64,
    /// Time between probes (a real association and a PING), as
    /// --duration.
    #[arg(long, value_name = "TIME", value_parser = npamp_loadgen::scenario::parse_time)]
    pub probe_every: Option<f64>,
    /// A probe taking longer than this fails the run: 500ms, 2s, or
    /// seconds.
    #[arg(long, value_name = "TIME", default_value = "2s", value_parser = npamp_loadgen::scenario::parse_time)]
    pub probe_limit: f64,
    /// The probe's identity (a `npamp-gateway keygen` file).
    #[arg(long)]
    pub identity: Option<PathBuf>,
    /// The target's public key (64 hex digits); without it the probe
    /// accepts any (INSECURE, fine on loopback).
    #[arg(long)]
    pub trust: Option<String>,
    /// Flood from this loopback address (e.g. 127.0.0.2: another host
    /// as far as the target can tell); probes come from the default.
    #[arg(long)]
    pub source: Option<std::net::IpAddr>,
}

/// Runs `npamp-loadgen flood`.
pub fn main(args: FloodArgs) -> ExitCode {
    let FloodArgs {
        target,
        silent,
        quic_rate,
        duration,
        probe_every,
        probe_limit,
        identity,
        trust,
        source,
    } = args;
    if probe_limit > duration {
        return fail(
            EXIT_USAGE,
            &anyhow::anyhow!(
                "--probe-limit {probe_limit} s is longer than the flood ({duration} s): a time is seconds, or give its unit (2000ms)"
            ),
        );
    }
    match flood_command(
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
    }
}

/// What `flood` throws at its target.
struct FloodLoad {
    silent: usize,
    quic_rate: f64,
    duration: f64,
    source: Option<std::net::IpAddr>,
}

/// `flood`: runs it, prints the JSON summary; `true` when every probe
/// worked within `probe_limit` seconds.
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
    Ok(ok == probes && worst <= probe_limit * 1e3)
}
