//! `npamp-loadgen` command line.
//!
//! Exit codes: 0 pass; 1 the run could not be made; 2 usage or scenario
//! error; 3 an SLO failed; 4 accounting error (lost, duplicated or
//! mismatched replies); 5 `compare` found a regression; 6 the target was
//! not measured: no request got a successful reply, or more than 10 % ended
//! in transport errors without a `max_error_rate` SLO to judge them.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Run(commands::run::RunArgs),
    /// Find the highest open-loop rate at which the target meets an SLO:
    /// steps doubling from --start, then bisection to --precision. A step
    /// passes when the SLO holds and the target answered at least 97 % of
    /// the offered rate; when the generator itself falls behind, the search
    /// stops and says so (the knee is then above what it can offer).
    /// Exit 0 with a knee, 3 when no rate tried meets the SLO.
    Capacity(commands::capacity::CapacityArgs),
    /// Merge the results of the workers of one run (`run --shard I/N
    /// --out DIR`, one DIR each): histograms added, accounting summed,
    /// SLOs evaluated once on the whole; exit codes as `run`'s.
    Merge(commands::merge::MergeArgs),
    /// The mock JSON-RPC upstream (echo, fail, sleep, notify, ask,
    /// subscribe) over HTTP, WebSocket and newline-delimited TCP.
    Upstream(commands::upstream::UpstreamArgs),
    /// A lossy, slow UDP path (a QUIC association's) for fault injection:
    /// datagrams from clients to --to and back are dropped and delayed as
    /// `tc netem loss P delay D J` would, where netem is not available.
    /// Prints the counts on exit (Ctrl-C / SIGTERM).
    Impair(commands::impair::ImpairArgs),
    /// Slow clients (slowloris headers, a body that never finishes, a
    /// WebSocket client that never reads) held against an ingress for a
    /// while; prints how many the server cut off, and after how long.
    Slow(commands::slow::SlowArgs),
    /// Handshake floods against a gateway's association port (loopback
    /// only): silent TCP connections and QUIC attempts that never complete,
    /// with a real association probed every so often. Prints a JSON summary;
    /// exits non-zero when a probe failed or took longer than --probe-limit.
    Flood(commands::flood::FloodArgs),
    /// Compare runs (each a summary.json or its run directory): each NEW
    /// against BASE; exit 5 when one regressed in a gated row: throughput
    /// down or p99 up by more than the threshold, or more lost. The other
    /// rows are shown only.
    Compare(commands::compare::CompareArgs),
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
        Command::Run(args) => commands::run::main(args),
        Command::Capacity(args) => commands::capacity::main(args),
        Command::Merge(args) => commands::merge::main(args),
        Command::Upstream(args) => commands::upstream::main(args),
        Command::Impair(args) => commands::impair::main(args),
        Command::Slow(args) => commands::slow::main(args),
        Command::Flood(args) => commands::flood::main(args),
        Command::Compare(args) => commands::compare::main(args),
    }
}
