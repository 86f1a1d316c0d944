//! Merge the results of the workers of one run (`run --shard I/N
//! --out DIR`, one DIR each): histograms added, accounting summed,
//! SLOs evaluated once on the whole; exit codes as `run`'s.

use super::*;

/// `merge`'s arguments.
#[derive(clap::Args)]
pub struct MergeArgs {
    /// The workers' run directories.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Write the merged summary.json, report.svg and logs here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `npamp-loadgen merge`.
pub fn main(args: MergeArgs) -> ExitCode {
    let MergeArgs { dirs, out } = args;
    if let Some(dir) = &out
        && let Err(e) = writable(dir)
    {
        return fail(EXIT_USAGE, &e);
    }
    let merged = dirs
        .iter()
        .map(|d| Measured::read(d))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|parts| {
            warn_of_stagger(&parts);
            merging::merge(&parts)
        });
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

/// Workers lined up on their schedules carried the summed rate together
/// only while all of them ran: a stagger longer than the warm-up (which
/// is there to cover it) is said.
fn warn_of_stagger(parts: &[Measured]) {
    let starts = parts.iter().map(|p| p.summary.started_at_ms);
    let (Some(first), Some(last)) = (starts.clone().min(), starts.max()) else {
        return;
    };
    let stagger = (last - first) as f64 / 1e3;
    let warmup = parts.first().map_or(0.0, |p| p.summary.warmup_s);
    if stagger > warmup {
        eprintln!(
            "warning: the workers started up to {stagger:.1} s apart, more than the warm-up ({warmup:.1} s): the target carried the summed rate only while all of them ran"
        );
    }
}
