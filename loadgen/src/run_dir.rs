//! A run's directory, as `run` and `merge` leave it: the summary, the
//! report and its chart, and the latency logs.

use std::path::Path;

use crate::merge::Measured;
use crate::{html, report};

/// Writes a run's directory (creating it if needed): `summary.json`,
/// `report.svg`, `report.html`, `latency.hlog` and `histograms.hlog`.
pub fn write(m: &Measured, dir: &Path) -> Result<(), String> {
    let io = |what: &str, e: std::io::Error| format!("{}: {e}", dir.join(what).display());
    std::fs::create_dir_all(dir).map_err(|e| io("", e))?;
    let json = serde_json::to_string_pretty(&m.summary).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("summary.json"), json).map_err(|e| io("summary.json", e))?;
    std::fs::write(
        dir.join("report.svg"),
        report::svg(&m.summary, &m.overall, &m.intervals),
    )
    .map_err(|e| io("report.svg", e))?;
    std::fs::write(dir.join("report.html"), html::page(m, None))
        .map_err(|e| io("report.html", e))?;
    std::fs::write(dir.join("latency.hlog"), m.interval_log()?)
        .map_err(|e| io("latency.hlog", e))?;
    std::fs::write(dir.join("histograms.hlog"), m.histogram_log()?)
        .map_err(|e| io("histograms.hlog", e))?;
    Ok(())
}
