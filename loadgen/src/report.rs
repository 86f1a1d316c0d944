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
pub use crate::chart::{CHAR_WIDTH, Line, label, log_ticks, series_svg, spectrum, ticks};
pub use crate::summary::{
    Accounting, Check, Latency, Machine, Rates, SCHEMA_ID, StageRow, Summary,
    TRANSPORT_ERROR_SHARE, checks, stages, summarize,
};

/// An SVG report, three charts on round ticks: the latency percentile
/// spectrum; replies per second against the offered rate; p50 and p99 of
/// each second (`intervals`: each second's histogram and its end since the
/// start). The warm-up is shaded, seconds without a measured reply are not
/// drawn as zero, and the last, partial second is left out. The two charts
/// over time share one time axis ([`time_span`]); latency is on a log axis
/// where it spans decades (`chart::Scale::fit`).
pub fn svg(
    summary: &Summary,
    h: &Histogram<u64>,
    intervals: &[(Duration, Histogram<u64>)],
) -> String {
    let w = 760.0;
    let mut o = String::new();
    let offered = summary
        .rates
        .offered
        .map_or_else(|| "closed loop".to_owned(), |r| format!("{r:.0}/s"));
    let title = format!(
        "{} — {} — {:.0} replies/s achieved of {offered} offered, p99 {:.3} ms",
        summary.scenario, summary.target, summary.throughput, summary.latency_ms.p99
    );
    let top = chart::heading(&mut o, 10.0, w - 20.0, &title) + 14.0;
    let frame = |y0: f64| Chart {
        x0: 70.0,
        y0,
        width: w - 110.0,
        height: 210.0,
    };
    let t_max = time_span(summary, intervals);
    let mut bottom = spectrum_chart(&mut o, &frame(top), h);
    bottom = rates_chart(&mut o, &frame(bottom + 24.0), summary, t_max);
    bottom = latency_chart(&mut o, &frame(bottom + 24.0), summary, intervals, t_max);
    chart::finish(chart::document(w, bottom + 10.0) + &o)
}

/// The latency percentile spectrum of the whole run; returns how far down
/// the chart reaches.
fn spectrum_chart(o: &mut String, frame: &Chart, h: &Histogram<u64>) -> f64 {
    let spectrum = chart::spectrum(h);
    let axes = Axes {
        x: chart::spectrum_scale(),
        y: Scale::fit(spectrum.iter().map(|p| p.1)),
        x_title: "percentile",
        y_title: "latency, ms",
        shade: None,
    };
    let lines = [Series::line(BLUE, "latency", &spectrum)];
    frame.draw(o, &axes, &lines);
    frame.y0 + frame.height + chart::below(&lines, frame.width)
}

/// The end of the time axis of a run's charts over time, in seconds: its
/// last whole second with replies, an offered rate, an outstanding count
/// or a measured latency. Every chart over time of a page is drawn to one
/// end (the greatest of its runs'), so that their seconds line up.
pub fn time_span(summary: &Summary, intervals: &[(Duration, Histogram<u64>)]) -> f64 {
    let last = |points: &[(f64, f64)]| points.last().map_or(0.0, |p| p.0);
    [
        last(&summary.replies_points()),
        last(&summary.offered_points()),
        last(&each_second(summary, intervals, 0.5)),
        summary.outstanding_per_second.len() as f64,
    ]
    .into_iter()
    .fold(1.0, f64::max)
}

/// Quantile `q` of each whole second that had measured replies, ms, as
/// (the second's end, its value): the last, partial second left out.
pub fn each_second(
    summary: &Summary,
    intervals: &[(Duration, Histogram<u64>)],
    q: f64,
) -> Vec<(f64, f64)> {
    let run_s = summary.warmup_s + summary.measured_span_s;
    let whole = |second_end: f64| second_end <= run_s + 1e-9;
    intervals
        .iter()
        .filter(|(end, h)| !h.is_empty() && whole(end.as_secs_f64().round()))
        .map(|(end, h)| (end.as_secs_f64(), h.value_at_quantile(q) as f64 / 1e3))
        .collect()
}

/// Replies per second (whole seconds only) against the offered rate, drawn
/// over them (dashed, in a colour of its own), so that both stay in sight
/// where they are equal; returns how far down the chart reaches.
fn rates_chart(o: &mut String, frame: &Chart, summary: &Summary, t_max: f64) -> f64 {
    let (replies, errors) = (summary.replies_points(), summary.errors_points());
    let offered = summary.offered_points();
    let y_max = replies
        .iter()
        .chain(&offered)
        .chain(&errors)
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let axes = Axes {
        x: Scale::Numbers(t_max),
        y: Scale::Numbers(y_max),
        x_title: "seconds since the start",
        y_title: "per second",
        shade: (summary.warmup_s > 0.0).then_some(summary.warmup_s),
    };
    let lines = [
        Series::line(BLUE, "replies", &replies),
        Series::line(RED, "errors", &errors),
        Series::dashed(ORANGE, "offered", &offered),
    ];
    frame.draw(o, &axes, &lines);
    frame.y0 + frame.height + chart::below(&lines, frame.width)
}

/// p50 and p99 of each whole second that had measured replies; returns how
/// far down the chart reaches.
fn latency_chart(
    o: &mut String,
    frame: &Chart,
    summary: &Summary,
    intervals: &[(Duration, Histogram<u64>)],
    t_max: f64,
) -> f64 {
    let (p50, p99) = (
        each_second(summary, intervals, 0.5),
        each_second(summary, intervals, 0.99),
    );
    let axes = Axes {
        x: Scale::Numbers(t_max),
        y: Scale::fit(p50.iter().chain(&p99).map(|p| p.1)),
        x_title: "seconds since the start",
        y_title: "latency each second, ms",
        shade: (summary.warmup_s > 0.0).then_some(summary.warmup_s),
    };
    let lines = [
        Series::line(GREEN, "p50", &p50),
        Series::line(BLUE, "p99", &p99),
    ];
    frame.draw(o, &axes, &lines);
    frame.y0 + frame.height + chart::below(&lines, frame.width)
}
