//! Compare runs (each a summary.json or its run directory): each NEW
//! against BASE; exit 5 when one regressed in a gated row: throughput
//! down by more than the threshold (at one offered rate), p99 up by more
//! than the threshold and the noise floor, or more lost. The other rows
//! are shown only; runs that are not like for like (offered rates,
//! scenarios, targets) are warned of.

use super::*;

/// `compare`'s arguments.
#[derive(clap::Args)]
pub struct CompareArgs {
    pub base: PathBuf,
    /// One run or more.
    #[arg(required = true, num_args = 1..)]
    pub new: Vec<PathBuf>,
    /// A gated row regresses only when worse by more than this, percent.
    #[arg(long, default_value_t = npamp_loadgen::compare::DEFAULT_THRESHOLD_PCT, value_parser = at_least_zero)]
    pub threshold: f64,
    /// The p99 regresses only when it also rose by more than this, ms: a
    /// smaller change is the noise of a shared machine (a scheduling
    /// hiccup), whatever its percentage (0.323 → 0.606 ms is +88 %).
    #[arg(long, value_name = "MS", default_value_t = npamp_loadgen::compare::DEFAULT_NOISE_FLOOR_MS, value_parser = at_least_zero)]
    pub noise_floor_ms: f64,
    /// Also write DIR/compare.html: the tables and the runs overlaid
    /// (latency, replies per second, p99 each second).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs `npamp-loadgen compare`.
pub fn main(args: CompareArgs) -> ExitCode {
    let CompareArgs {
        base,
        new,
        threshold,
        noise_floor_ms,
        out,
    } = args;
    let gates = npamp_loadgen::compare::Gates {
        threshold_pct: threshold,
        noise_floor_ms,
    };
    match compare(&base, &new, &gates, out.as_deref()) {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(EXIT_REGRESSION),
        Err(e) => fail(EXIT_USAGE, &e),
    }
}

/// A number of `--threshold` or `--noise-floor-ms`: finite, not negative.
fn at_least_zero(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{text:?}: expected a number, 0 or more"))
}

fn compare(
    base: &std::path::Path,
    new: &[PathBuf],
    gates: &npamp_loadgen::compare::Gates,
    out: Option<&std::path::Path>,
) -> anyhow::Result<bool> {
    use npamp_loadgen::html::Compared;
    use npamp_loadgen::merge::Measured;
    // A run directory with its histograms, or a summary.json alone.
    let read = |p: &std::path::Path| -> anyhow::Result<Compared> {
        // Named by its directory (a summary.json's too).
        let named = if p.is_dir() {
            p
        } else {
            p.parent().unwrap_or(p)
        };
        let label = named.file_name().map_or_else(
            || named.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        if p.is_dir() && p.join("histograms.hlog").is_file() {
            let run = Measured::read(p).map_err(|e| anyhow::anyhow!(e))?;
            return Ok(Compared {
                label,
                run,
                histograms: true,
            });
        }
        let file = p.join("summary.json");
        let p = if p.is_dir() { file.as_path() } else { p };
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let summary: Summary = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a loadgen summary", p.display()))?;
        Ok(Compared {
            label,
            run: Measured::of_summary(summary),
            histograms: false,
        })
    };
    let mut runs = vec![read(base)?];
    for p in new {
        runs.push(read(p)?);
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let (mut tables, mut regressed) = (String::new(), false);
    let base = &runs[0];
    for new in &runs[1..] {
        if runs.len() > 2 {
            tables.push_str(&format!("== {} against {} ==\n", new.label, base.label));
        }
        let (table, worse) =
            npamp_loadgen::compare::compare(&base.run.summary, &new.run.summary, gates);
        tables.push_str(&table);
        regressed |= worse;
    }
    print!("{tables}");
    if let Some(dir) = out {
        let page = dir.join("compare.html");
        let html = npamp_loadgen::html::compare_page(&runs, &tables, regressed);
        std::fs::write(&page, html).with_context(|| format!("writing {}", page.display()))?;
        eprintln!("wrote {}", page.display());
    }
    Ok(regressed)
}
