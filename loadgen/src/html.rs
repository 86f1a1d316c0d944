//! `report.html`: one self-contained page per run (or merge, or capacity
//! search): nothing is fetched when it is viewed — the charts are inline
//! SVG, the style inline, no script but the one that counts what was drawn
//! (`data-drawn` on the body, which the browser test reads).

use std::fmt::Write as _;

use crate::chart::{self, DARK_PALETTE, PALETTE, Scale};
use crate::merge::Measured;
use crate::report;
use crate::summary::{Latency, Summary};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font:14px/1.4 sans-serif;margin:24px;color:#222;max-width:820px}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}\
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}pre{white-space:pre-wrap}\
.pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.note{color:#666}";

fn latency_row(o: &mut String, name: &str, l: &Latency) {
    let _ = writeln!(
        o,
        "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td></tr>",
        esc(name),
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.max,
        l.count
    );
}

const LATENCY_HEAD: &str = "<tr><th></th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>n</th></tr>";

/// The page of a run (`m`), with a capacity search's curve when given.
pub fn page(m: &Measured, capacity_svg: Option<&str>) -> String {
    let s = &m.summary;
    let a = &s.accounting;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>{} — npamp-loadgen</title><style>{STYLE}</style><body>",
        esc(&s.scenario)
    );
    let _ = writeln!(
        o,
        "<h1>{} <span class=\"{}\">{}</span></h1>",
        esc(&s.scenario),
        if verdict_ok(s) { "pass" } else { "fail" },
        verdict(s)
    );
    if s.interrupted {
        o.push_str(
            "<p class=\"fail\">INTERRUPTED (Ctrl-C or SIGTERM): the figures are of the part that ran.</p>",
        );
    }
    let _ = writeln!(
        o,
        "<p>{} loop against <code>{}</code>, {} connections, {:.1} s measured after {:.1} s warm-up{}. {} — {} CPUs, {}.</p>",
        esc(&s.model),
        esc(&s.target),
        s.connections,
        s.duration_s,
        s.warmup_s,
        match s.shard {
            Some(sh) => format!(", worker {} of {}", sh.index, sh.count),
            None => String::new(),
        },
        esc(&s.date),
        s.machine.nproc,
        esc(&s.machine.cpu)
    );
    o.push_str("<h2>Rates</h2><table><tr><th></th><th>requests/s</th></tr>");
    let _ = writeln!(
        o,
        "<tr><td>offered (asked by the schedule)</td><td>{}</td></tr><tr><td>sent while the measured part was scheduled</td><td>{:.0}</td></tr><tr><td>achieved (replies per second of the measured span, {:.1} s)</td><td>{:.0}</td></tr></table>",
        s.rates
            .offered
            .map_or_else(|| "closed loop".to_owned(), |r| format!("{r:.0}")),
        s.rates.sent,
        s.measured_span_s,
        s.rates.achieved
    );
    if !s.slo.is_empty() {
        o.push_str(
            "<h2>SLO</h2><table><tr><th>check</th><th>limit</th><th>measured</th><th></th></tr>",
        );
        for c in &s.slo {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{:.4}</td><td class=\"{}\">{}</td></tr>",
                esc(&c.name),
                c.limit,
                c.value,
                if c.pass { "pass" } else { "fail" },
                if c.pass { "pass" } else { "FAIL" }
            );
        }
        o.push_str("</table>");
    }
    let _ = writeln!(
        o,
        "<h2>Latency</h2><p class=\"note\">From each request's intended send time, measured requests only.</p><table>{LATENCY_HEAD}"
    );
    latency_row(&mut o, "all", &s.latency_ms);
    for (method, l) in &s.per_method {
        latency_row(&mut o, method, l);
    }
    o.push_str("</table>");
    if m.per_method.len() > 1 {
        // One line per method on one spectrum: where each method's tail is.
        let spectra: Vec<(String, Vec<(f64, f64)>)> = m
            .per_method
            .iter()
            .map(|(name, h)| (name.clone(), chart::spectrum(h)))
            .collect();
        let lines: Vec<chart::Line<'_>> = spectra
            .iter()
            .zip(PALETTE.iter().cycle())
            .map(|((name, points), colour)| (name.as_str(), *colour, points.as_slice()))
            .collect();
        o.push_str(&chart::chart_svg(
            chart::spectrum_scale(),
            Scale::fit(spectra.iter().flat_map(|(_, s)| s.iter().map(|p| p.1))),
            "percentile",
            "latency by method, ms",
            None,
            &lines,
        ));
    }
    if !s.stages.is_empty() {
        o.push_str("<h2>Stages</h2><table><tr><th>seconds</th><th>offered/s</th><th>achieved/s</th><th>errors</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th></tr>");
        for st in &s.stages {
            let _ = writeln!(
                o,
                "<tr><td>{:.0}–{:.0}</td><td>{}</td><td>{:.0}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td></tr>",
                st.from_s,
                st.to_s,
                st.offered
                    .map_or_else(|| "—".to_owned(), |r| format!("{r:.0}")),
                st.achieved,
                st.errors,
                st.latency_ms.p50,
                st.latency_ms.p99,
                st.latency_ms.max
            );
        }
        o.push_str("</table>");
    }
    o.push_str("<h2>Accounting</h2><table><tr><th></th><th>count</th></tr>");
    let transport: u64 = a.transport_errors.values().sum();
    for (name, v) in [
        ("requests sent (warm-up included)", a.sent_requests),
        ("of them measured", a.sent_measured),
        ("notifications sent", a.sent_notifications),
        ("batches sent", a.sent_batches),
        ("replied", a.replied),
        ("ok", a.ok),
        ("expected errors", a.expected_errors),
        ("unexpected errors", a.unexpected_errors),
        ("transport errors", transport),
        ("timed out", a.timed_out),
        ("answered late", a.late),
        ("lost", a.lost),
        ("duplicated", a.duplicated),
        ("mismatched", a.mismatched),
        ("wrong result", a.wrong_result),
    ] {
        let _ = writeln!(o, "<tr><td>{name}</td><td>{v}</td></tr>");
    }
    if a.dropped > 0 {
        let _ = writeln!(
            o,
            "<tr><td>dropped (placed on the schedule, never sent)</td><td>{}</td></tr>",
            a.dropped
        );
    }
    o.push_str("</table>");
    for (what, map) in [
        ("JSON-RPC error codes", &a.error_codes),
        ("HTTP status", &a.http_status),
        ("transport errors", &a.transport_errors),
    ] {
        if !map.is_empty() {
            let _ = write!(o, "<p>{what}: ");
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("<code>{}</code> {v}", esc(k)))
                .collect();
            let _ = writeln!(o, "{}</p>", items.join(", "));
        }
    }
    o.push_str("<h2>Over time</h2>");
    o.push_str(&report::svg(s, &m.overall, &m.intervals));
    if !s.outstanding_per_second.is_empty() {
        let points: Vec<(f64, f64)> = s
            .outstanding_per_second
            .iter()
            .enumerate()
            .map(|(i, n)| ((i + 1) as f64, *n as f64))
            .collect();
        // On the time axis of the charts over time above it.
        let most = points.iter().map(|p| p.1).fold(0.0, f64::max);
        o.push_str(&chart::time_chart(
            "outstanding requests",
            Scale::Numbers(most),
            &[("outstanding", chart::PURPLE, &points)],
            s.warmup_s,
            report::time_span(s, &m.intervals),
        ));
    }
    if let Some(svg) = capacity_svg {
        o.push_str("<h2>Capacity</h2>");
        o.push_str(svg);
    }
    let _ = writeln!(
        o,
        "<p class=\"note\">schedule: p99 lag {:.3} ms, max {:.3} ms; {} sends waited for a busy connection{}.</p>",
        s.schedule_lag_ms.p99,
        s.schedule_lag_ms.max,
        s.held_back_sends,
        if s.generator_kept_schedule {
            ""
        } else {
            " — the generator did not keep its schedule"
        }
    );
    o.push_str(DRAWN);
    o.push_str("</body></html>\n");
    o
}

/// One side of `compare`: a run read from its directory (with its
/// histograms) or from its `summary.json` alone (`histograms` false: the
/// latency curve is then the summary's percentiles).
pub struct Compared {
    pub label: String,
    pub run: Measured,
    pub histograms: bool,
}

impl Compared {
    /// The latency spectrum: the whole histogram's, or the summary's
    /// percentiles on the same axis.
    fn spectrum(&self) -> Vec<(f64, f64)> {
        if self.histograms {
            return chart::spectrum(&self.run.overall);
        }
        let l = &self.run.summary.latency_ms;
        let x = chart::percentile_x;
        vec![
            (x(0.5), l.p50),
            (x(0.9), l.p90),
            (x(0.99), l.p99),
            (x(0.999), l.p999),
        ]
    }

    /// The p99 of each whole second with measured replies (histograms
    /// only), as `report.svg` draws it.
    fn p99_each_second(&self) -> Vec<(f64, f64)> {
        report::each_second(&self.run.summary, &self.run.intervals, 0.99)
    }
}

/// `compare --out`: the tables (each later run against the first, their
/// warnings in red) and the runs overlaid: latency spectrum, replies
/// against offered rate each second, and p99 each second when every run
/// has its histograms. Latency is on a log axis where the runs' span
/// decades (a 0.6 ms base beside a 30 ms new run); the charts over time
/// share one time axis, the longest run's.
pub fn compare_page(runs: &[Compared], tables: &str, regressed: bool) -> String {
    let mut o = String::new();
    let names: Vec<String> = runs.iter().map(|r| esc(&r.label)).collect();
    let title = names.join(" vs ");
    let _ = writeln!(
        o,
        "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>{title} — npamp-loadgen</title><style>{STYLE}</style><body>"
    );
    let _ = writeln!(
        o,
        "<h1>{title} <span class=\"{}\">{}</span></h1><pre>{}</pre>",
        if regressed { "fail" } else { "pass" },
        if regressed {
            "REGRESSED"
        } else {
            "no regression"
        },
        warnings_marked(tables)
    );
    // The first run is the base; each colour is one run in every chart.
    let labels: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| match i {
            0 => format!("base: {}", r.label),
            _ if runs.len() == 2 => format!("new: {}", r.label),
            _ => format!("{i}: {}", r.label),
        })
        .collect();
    o.push_str("<h2>Latency</h2>");
    if !runs.iter().all(|r| r.histograms) {
        o.push_str("<p class=\"note\">A run given as summary.json alone is drawn from its percentiles (p50 to p99.9).</p>");
    }
    let spectra: Vec<_> = runs.iter().map(Compared::spectrum).collect();
    o.push_str(&chart::chart_svg(
        chart::spectrum_scale(),
        latency_scale(&spectra),
        "percentile",
        "latency, ms",
        None,
        &overlay(&labels, &spectra),
    ));
    let replies: Vec<_> = runs
        .iter()
        .map(|r| r.run.summary.replies_points())
        .collect();
    let offered: Vec<_> = runs
        .iter()
        .map(|r| r.run.summary.offered_points())
        .collect();
    let offered_labels: Vec<String> = labels.iter().map(|l| format!("{l} offered")).collect();
    // Each run's offered rate dashed over its replies, in its colour's
    // dark shade: drawn after every replies line, it is never hidden.
    let mut rates = overlay(&labels, &replies);
    rates.extend(overlay_in(&offered_labels, &offered, &DARK_PALETTE));
    let most = replies.iter().chain(&offered).flatten().map(|p| p.1);
    let t_max = runs
        .iter()
        .map(|r| report::time_span(&r.run.summary, &r.run.intervals))
        .fold(1.0, f64::max);
    o.push_str("<h2>Replies per second</h2>");
    o.push_str(&chart::time_chart(
        "per second",
        Scale::Numbers(most.fold(0.0, f64::max)),
        &rates,
        0.0,
        t_max,
    ));
    if runs.iter().all(|r| r.histograms) {
        let p99: Vec<_> = runs.iter().map(Compared::p99_each_second).collect();
        o.push_str("<h2>p99 each second</h2>");
        o.push_str(&chart::time_chart(
            "p99, ms",
            latency_scale(&p99),
            &overlay(&labels, &p99),
            0.0,
            t_max,
        ));
    }
    o.push_str(DRAWN);
    o.push_str("</body></html>\n");
    o
}

/// One line per run, run `i` in colour `i`.
fn overlay<'a>(labels: &'a [String], points: &'a [Vec<(f64, f64)>]) -> Vec<chart::Line<'a>> {
    overlay_in(labels, points, &PALETTE)
}

/// One line per run, run `i` in colour `i` of `palette`.
fn overlay_in<'a>(
    labels: &'a [String],
    points: &'a [Vec<(f64, f64)>],
    palette: &[&'static str],
) -> Vec<chart::Line<'a>> {
    (labels.iter().zip(points).enumerate())
        .map(|(i, (l, p))| (l.as_str(), palette[i % palette.len()], p.as_slice()))
        .collect()
}

/// The y axis of latency lines: log where they span decades.
fn latency_scale(lines: &[Vec<(f64, f64)>]) -> Scale {
    Scale::fit(lines.iter().flatten().map(|p| p.1))
}

/// `tables`, escaped, each line of a warning in red: a comparison of
/// runs that are not like for like must not be read past.
fn warnings_marked(tables: &str) -> String {
    let lines: Vec<String> = tables
        .lines()
        .map(|l| match l.starts_with("WARNING") {
            true => format!("<span class=\"fail\">{}</span>", esc(l)),
            false => esc(l),
        })
        .collect();
    let mut o = lines.join("\n");
    if tables.ends_with('\n') {
        o.push('\n');
    }
    o
}

/// Counts the chart marks the browser laid out with a size (`data-drawn`),
/// and the texts it laid out past their chart's left or right edge
/// (`data-clipped`, the y axes' turned titles aside): the browser test
/// reads both, the second with the browser's own font.
const DRAWN: &str = "<script>document.body.dataset.drawn=[...document.querySelectorAll('svg polyline,svg circle,svg rect')].filter(e=>{const b=e.getBBox();return b.width>0||b.height>0}).length;document.body.dataset.clipped=[...document.querySelectorAll('svg text:not([transform])')].filter(t=>{const b=t.getBBox();return b.x<0||b.x+b.width>t.ownerSVGElement.width.baseVal.value}).map(t=>t.textContent).join('|');</script>";

fn verdict_ok(s: &Summary) -> bool {
    s.pass && !s.accounting_failed() && s.not_served().is_none()
}

fn verdict(s: &Summary) -> String {
    if s.accounting_failed() {
        "ACCOUNTING FAILED".into()
    } else if let Some(why) = s.not_served() {
        format!("NOT SERVED: {}", esc(&why))
    } else if !s.pass {
        "SLO FAILED".into()
    } else {
        "pass".into()
    }
}

/// The page of a capacity search: its verdict, the curve, every step.
pub fn capacity_page(c: &crate::capacity::Capacity, scenario: &str, target: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>capacity of {} — npamp-loadgen</title><style>{STYLE}</style><body>",
        esc(target)
    );
    let _ = writeln!(
        o,
        "<h1>Capacity: <span class=\"{}\">{}</span></h1><p>{} against <code>{}</code>, SLO <code>{}</code>. A step passes when the SLO holds and at least {:.0} % of the offered rate was answered.</p>",
        if c.knee.is_some() { "pass" } else { "fail" },
        esc(&c.verdict()),
        esc(scenario),
        esc(target),
        esc(&c.slo.to_string()),
        crate::capacity::KEPT_UP * 100.0
    );
    o.push_str(&crate::capacity::svg(c, scenario));
    o.push_str("<h2>Steps, in the order run</h2><table><tr><th>offered/s</th><th>achieved/s</th><th>p50 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>errors</th><th>verdict</th></tr>");
    for st in &c.steps {
        let _ = writeln!(
            o,
            "<tr><td>{:.0}</td><td>{:.0}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3} %</td><td class=\"{}\">{}</td></tr>",
            st.rate,
            st.achieved,
            st.p50_ms,
            st.p99_ms,
            st.p999_ms,
            st.error_share * 100.0,
            if st.pass { "pass" } else { "fail" },
            st.why
                .as_deref()
                .map_or("pass".to_owned(), |w| format!("fail: {}", esc(w)))
        );
    }
    o.push_str("</table>");
    o.push_str(DRAWN);
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hdrhistogram::Histogram;

    use crate::merge::Measured;
    use crate::summary::Summary;

    fn measured() -> Measured {
        let summary: Summary =
            serde_json::from_str(include_str!("compare_fixture.json")).expect("fixture");
        let mut h = Histogram::<u64>::new(3).expect("precision");
        for v in [900, 1200, 5000] {
            h.record(v).expect("record");
        }
        Measured {
            summary,
            overall: h.clone(),
            schedule_lag: h.clone(),
            per_method: [("echo".to_owned(), h.clone())].into_iter().collect(),
            intervals: vec![(Duration::from_secs(1), h)],
        }
    }

    #[test]
    fn the_page_is_self_contained() {
        let m = measured();
        let page = super::page(&m, Some("<svg></svg>"));
        assert!(page.starts_with("<!doctype html>"));
        for fetching in ["src=", "href=", "@import", "url("] {
            assert!(!page.contains(fetching), "{fetching}");
        }
        assert!(page.contains("<h2>Rates</h2>") && page.contains("<h2>Capacity</h2>"));
        // One method: no chart of methods.
        assert!(!page.contains("latency by method"));
        let mut two = measured();
        let h = two.overall.clone();
        two.per_method.insert("other".into(), h);
        let page = super::page(&two, None);
        assert!(page.contains("latency by method"));
        assert!(page.contains(">echo</text>") && page.contains(">other</text>"));
    }

    #[test]
    fn the_comparison_overlays_both_runs_and_says_what_it_drew_from() {
        use super::{Compared, PALETTE, compare_page};
        let with = |label: &str, histograms: bool| Compared {
            label: label.into(),
            run: if histograms {
                measured()
            } else {
                Measured::of_summary(measured().summary)
            },
            histograms,
        };
        let page = compare_page(&[with("a<b", true), with("new", true)], "the table", false);
        for fetching in ["src=", "href=", "@import", "url("] {
            assert!(!page.contains(fetching), "{fetching}");
        }
        assert!(page.contains("a&lt;b vs new") && page.contains("<pre>the table</pre>"));
        assert_eq!(
            page.matches("<svg").count(),
            3,
            "latency, rates, p99 each second"
        );
        assert!(page.contains("base: a&lt;b") && page.contains("new: new offered"));
        assert!(!page.contains("drawn from its percentiles"));
        // A side known by its summary alone: no per-second p99, and a note.
        let page = compare_page(&[with("a", true), with("b", false)], "t", true);
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("drawn from its percentiles") && page.contains("REGRESSED"));
        // Three runs: each later one numbered, in a colour of its own.
        let page = compare_page(
            &[with("a", true), with("b", true), with("c", true)],
            "t",
            false,
        );
        assert!(page.contains("a vs b vs c"));
        for label in ["base: a", "1: b", "2: c", "2: c offered"] {
            assert!(page.contains(label), "{label}");
        }
        for colour in &PALETTE[..3] {
            assert!(page.contains(colour), "{colour}");
        }
        assert!(!page.contains(PALETTE[3]), "only three runs' colours");
    }
}
