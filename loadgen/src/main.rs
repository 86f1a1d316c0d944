//! `npamp-loadgen` command line.
//!
//! Exit codes: 0 pass; 1 the run could not be made; 2 usage or scenario
//! error; 3 an SLO failed; 4 accounting error (lost, duplicated or
//! mismatched replies); 5 `compare` found a regression; 6 the target was
//! not measured: no request got a successful reply, or more than 10 % ended
//! in transport errors without a `max_error_rate` SLO to judge them; 130
//! `run` was interrupted (Ctrl-C, SIGTERM), after printing and writing
//! what it measured.

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
    /// Replay a gateway's capture (`npamp-gateway serve --capture FILE`):
    /// open loop, each send at its captured time (divided by --speed),
    /// its methods and params as captured, ids of the run's own; the
    /// accounting, table, reports and exit codes of `run`.
    Replay(commands::replay::ReplayArgs),
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
    /// down by more than the threshold (at one offered rate), p99 up by
    /// more than the threshold and the noise floor, or more lost. The
    /// other rows are shown only; runs that are not like for like
    /// (offered rates, scenarios, targets) are warned of.
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
        Command::Replay(args) => commands::replay::main(args),
        Command::Upstream(args) => commands::upstream::main(args),
        Command::Impair(args) => commands::impair::main(args),
        Command::Slow(args) => commands::slow::main(args),
        Command::Flood(args) => commands::flood::main(args),
        Command::Compare(args) => commands::compare::main(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(["npamp-loadgen"].iter().chain(args))
    }

    /// Every command takes a time as `run --duration` does (issue 54).
    #[test]
    fn one_time_syntax_for_every_command() {
        let slow = ["slow", "--target", "127.0.0.1:1", "--mode", "headers"];
        for (given, seconds) in [("5s", 5.0), ("500ms", 0.5), ("2m", 120.0), ("7", 7.0)] {
            let cli = parse(&[&slow[..], &["--duration", given]].concat());
            let Ok(Cli {
                command: Command::Slow(a),
            }) = cli
            else {
                panic!("slow --duration {given}: {:?}", cli.err());
            };
            assert_eq!(a.duration, seconds, "slow --duration {given}");
        }
        let flood = ["flood", "--target", "quic://127.0.0.1:1"];
        let cli = parse(
            &[
                &flood[..],
                &[
                    "--duration",
                    "5s",
                    "--probe-every",
                    "500ms",
                    "--probe-limit",
                    "250ms",
                ],
            ]
            .concat(),
        );
        let Ok(Cli {
            command: Command::Flood(a),
        }) = cli
        else {
            panic!("flood --duration 5s: {:?}", cli.err());
        };
        assert_eq!(
            (a.duration, a.probe_every, a.probe_limit),
            (5.0, Some(0.5), 0.25)
        );
        // The defaults, as before.
        let Ok(Cli {
            command: Command::Slow(a),
        }) = parse(&slow)
        else {
            panic!("slow");
        };
        assert_eq!(a.duration, 30.0);
        let Ok(Cli {
            command: Command::Flood(a),
        }) = parse(&flood)
        else {
            panic!("flood");
        };
        assert_eq!((a.duration, a.probe_limit), (10.0, 2.0));
    }

    /// Closed loop or open loop: `run` cannot tell which was meant, so it
    /// refuses both rather than drop one (issue 54).
    #[test]
    fn concurrency_and_rate_are_refused_together() {
        let both = ["run", "s.toml", "--concurrency", "16", "--rate", "1000"];
        match parse(&both) {
            Err(e) => assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict),
            Ok(_) => panic!("--concurrency 16 --rate 1000 accepted"),
        }
        assert!(parse(&["run", "s.toml", "--concurrency", "16"]).is_ok());
        assert!(parse(&["run", "s.toml", "--rate", "1000"]).is_ok());
    }

    /// `--header`, `--bearer-file`, `--http2`, `--streams`, `--ca` reach
    /// the scenario a run uses; a command-line header replaces the
    /// scenario's of its name (issue 54).
    #[test]
    fn target_flags_reach_the_scenario() {
        let dir = std::env::temp_dir().join(format!("loadgen-flags-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let token = dir.join("token");
        std::fs::write(&token, "s3cret\n").expect("token");
        let token = token.to_string_lossy().into_owned();
        let cli = parse(&[
            "run",
            "s.toml",
            "-H",
            "X-Api-Key: b",
            "--header",
            "X-Trace: on",
            "--bearer-file",
            &token,
            "--http2",
            "--streams",
            "4",
        ]);
        let Ok(Cli {
            command: Command::Run(args),
        }) = cli
        else {
            panic!("{:?}", cli.err());
        };
        let mut s = npamp_loadgen::scenario::Scenario::parse(
            r#"
name = "s"
target = "https://rpc.example/"
headers = ["x-api-key: a", "X-Client: loadgen"]
[load]
model = "open"
rate = 10
[mix]
[[mix.message]]
method = "m"
"#,
            "s",
        )
        .expect("scenario");
        args.reach.apply(&mut s).expect("apply");
        let shown: Vec<String> = s
            .headers
            .iter()
            .map(|h| format!("{}: {}", h.name, h.value))
            .collect();
        assert_eq!(
            shown,
            [
                "X-Client: loadgen",
                "X-Api-Key: b",
                "X-Trace: on",
                "Authorization: Bearer s3cret"
            ]
        );
        assert!(s.http2);
        assert_eq!(s.streams, 4);
        assert!(s.check().is_ok());
        // Both ways of giving the Authorization header: refused.
        let cli = parse(&[
            "run",
            "s.toml",
            "-H",
            "Authorization: Basic x",
            "--bearer-file",
            &token,
        ]);
        let Ok(Cli {
            command: Command::Run(args),
        }) = cli
        else {
            panic!("{:?}", cli.err());
        };
        assert!(args.reach.apply(&mut s).is_err());
        // --ca and --insecure together: refused.
        assert!(parse(&["run", "s.toml", "--ca", "c.pem", "--insecure"]).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
