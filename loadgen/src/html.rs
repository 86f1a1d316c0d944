//! `report.html`: one self-contained page per run (or merge, or capacity
//! search): nothing is fetched when it is viewed — the charts are inline
//! SVG, the style inline, no script but the one that counts what was drawn
//! (`data-drawn` on the body, which the browser test reads).

use std::fmt::Write as _;

use crate::merge::Measured;
use crate::report::{self, Latency, Summary};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font:14px/1.4 sans-serif;margin:24px;color:#222;max-width:820px}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}\
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
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
        o.push_str(&report::series_svg(
            "outstanding requests",
            &[("outstanding", "#9467bd", &points)],
            s.warmup_s,
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

/// Counts the chart marks the browser laid out with a size.
const DRAWN: &str = "<script>document.body.dataset.drawn=[...document.querySelectorAll('svg polyline,svg circle,svg rect')].filter(e=>{const b=e.getBBox();return b.width>0||b.height>0}).length;</script>";

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
    use crate::report::Summary;

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
    }
}
