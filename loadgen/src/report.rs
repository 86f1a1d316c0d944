//! What a run reports: the JSON summary ([`crate::summary`], its schema is
//! `results/schema.json`), the final table ([`crate::table`]), the
//! HdrHistogram interval log ([`crate::merge`]) and `report.svg`, three
//! charts of the chart kit ([`crate::chart`]), drawn here.
//!
//! The summary's and the kit's public items are named here too, at the
//! paths they had before they moved.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::chart::{self, Axes, BLUE, Chart, GREEN, ORANGE, RED, Scale, Series};
pub use crate::chart::{CHAR_WIDTH, Line, label, legend_bottom, series_svg, spectrum, ticks};
pub use crate::summary::{
    Accounting, Check, Latency, Machine, Rates, SCHEMA_ID, StageRow, Summary,
    TRANSPORT_ERROR_SHARE, checks, stages, summarize,
};

/// An SVG report, three charts on round ticks: the latency percentile
/// spectrum; replies per second against the offered rate; p50 and p99 of
/// each second (`intervals`: each second's histogram and its end since the
/// start). The warm-up is shaded, seconds without a measured reply are not
/// drawn as zero, and the last, partial second is left out.
pub fn svg(
    summary: &Summary,
    h: &Histogram<u64>,
    intervals: &[(Duration, Histogram<u64>)],
) -> String {
    let (w, panel) = (760.0, 250.0);
    let mut o = chart::document(w, 40.0 + 3.0 * (panel + 30.0));
    let offered = summary
        .rates
        .offered
        .map_or_else(|| "closed loop".to_owned(), |r| format!("{r:.0}/s"));
    let title = format!(
        "{} — {} — {:.0} replies/s achieved of {offered} offered, p99 {:.3} ms",
        summary.scenario, summary.target, summary.throughput, summary.latency_ms.p99
    );
    chart::heading(&mut o, 10.0, &title);
    let mut frame = Chart {
        x0: 70.0,
        y0: 40.0,
        width: w - 110.0,
        height: panel - 40.0,
    };
    spectrum_chart(&mut o, &frame, h);
    frame.y0 += panel + 30.0;
    rates_chart(&mut o, &frame, summary);
    frame.y0 += panel + 30.0;
    latency_chart(&mut o, &frame, summary, intervals);
    chart::finish(o)
}

/// The latency percentile spectrum of the whole run.
fn spectrum_chart(o: &mut String, frame: &Chart, h: &Histogram<u64>) {
    let spectrum = chart::spectrum(h);
    let axes = Axes {
        x: chart::spectrum_scale(),
        y_max: spectrum.iter().map(|p| p.1).fold(0.0, f64::max),
        x_title: "percentile",
        y_title: "latency, ms",
        shade: None,
    };
    frame.draw(o, &axes, &[Series::line(BLUE, "latency", &spectrum)]);
}

/// The time axis of the charts over time: up to the last whole second,
/// the warm-up shaded.
fn over_time(summary: &Summary) -> (Scale, Option<f64>) {
    let replies = summary.replies_points().len();
    let t_max = replies.max(summary.offered_points().len()).max(1) as f64;
    let warmup = (summary.warmup_s > 0.0).then_some(summary.warmup_s);
    (Scale::Numbers(t_max), warmup)
}

/// Replies per second (whole seconds only) against the offered rate.
fn rates_chart(o: &mut String, frame: &Chart, summary: &Summary) {
    let (replies, errors) = (summary.replies_points(), summary.errors_points());
    let offered = summary.offered_points();
    let (x, shade) = over_time(summary);
    let y_max = replies
        .iter()
        .chain(&offered)
        .chain(&errors)
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let axes = Axes {
        x,
        y_max,
        x_title: "seconds since the start",
        y_title: "per second",
        shade,
    };
    let lines = [
        Series::dashed(ORANGE, "offered", &offered),
        Series::line(BLUE, "replies", &replies),
        Series::line(RED, "errors", &errors),
    ];
    frame.draw(o, &axes, &lines);
}

/// p50 and p99 of each whole second that had measured replies.
fn latency_chart(
    o: &mut String,
    frame: &Chart,
    summary: &Summary,
    intervals: &[(Duration, Histogram<u64>)],
) {
    let run_s = summary.warmup_s + summary.measured_span_s;
    let whole = |second_end: f64| second_end <= run_s + 1e-9;
    let of = |q: f64| -> Vec<(f64, f64)> {
        intervals
            .iter()
            .filter(|(end, h)| !h.is_empty() && whole(end.as_secs_f64().round()))
            .map(|(end, h)| (end.as_secs_f64(), h.value_at_quantile(q) as f64 / 1e3))
            .collect()
    };
    let (p50, p99) = (of(0.5), of(0.99));
    let (x, shade) = over_time(summary);
    let axes = Axes {
        x,
        y_max: p99.iter().map(|p| p.1).fold(0.0, f64::max),
        x_title: "seconds since the start",
        y_title: "latency each second, ms",
        shade,
    };
    let lines = [
        Series::line(GREEN, "p50", &p50),
        Series::line(BLUE, "p99", &p99),
    ];
    frame.draw(o, &axes, &lines);
}
