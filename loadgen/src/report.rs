//! What a run reports: the final table, the JSON summary (its schema is
//! `results/schema.json`), the HdrHistogram interval log and an SVG report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::engine::Stats;
use crate::scenario::Scenario;

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        let q = |p: f64| h.value_at_quantile(p) as f64 / 1e3;
        Self {
            count: h.len(),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: h.max() as f64 / 1e3,
        }
    }
}

/// Every count of a run (see `engine` for what each means).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Accounting {
    /// Requests sent, the warm-up's included.
    pub sent_requests: u64,
    /// Of those, the measured part's.
    #[serde(default)]
    pub sent_measured: u64,
    pub sent_notifications: u64,
    pub sent_batches: u64,
    pub replied: u64,
    pub ok: u64,
    pub expected_errors: u64,
    pub unexpected_errors: u64,
    pub error_codes: BTreeMap<String, u64>,
    pub http_status: BTreeMap<String, u64>,
    pub transport_errors: BTreeMap<String, u64>,
    pub timed_out: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub late: u64,
    pub mismatched: u64,
    /// Successes that were not the request's echo (`verify_echo`).
    #[serde(default)]
    pub wrong_result: u64,
}

/// One SLO check.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Check {
    pub name: String,
    pub limit: f64,
    pub value: f64,
    pub pass: bool,
}

/// The JSON summary of a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub schema: String,
    pub scenario: String,
    pub target: String,
    pub model: String,
    pub date: String,
    pub machine: Machine,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// From the start of the measured part until its last reply came (at
    /// least `duration_s`): longer when the generator or the target fell
    /// behind.
    #[serde(default)]
    pub measured_span_s: f64,
    pub connections: usize,
    /// When the run started, milliseconds since the Unix epoch (shards are
    /// merged on it).
    #[serde(default)]
    pub started_at_ms: u64,
    /// Which part of a run across machines this is.
    #[serde(default)]
    pub shard: Option<crate::scenario::Shard>,
    /// Replies to the measured part's requests per second of
    /// `measured_span_s`: the achieved rate.
    pub throughput: f64,
    #[serde(default)]
    pub rates: Rates,
    pub accounting: Accounting,
    pub latency_ms: Latency,
    pub per_method: BTreeMap<String, Latency>,
    /// Replies and errors in each second since the start (warm-up included).
    pub per_second: Vec<[u64; 2]>,
    /// Requests per second the schedule asked for in each second since the
    /// start (open loop; empty for closed loop).
    #[serde(default)]
    pub offered_per_second: Vec<f64>,
    /// Requests outstanding (sent, not yet settled) at the end of each
    /// second since the start.
    #[serde(default)]
    pub outstanding_per_second: Vec<u64>,
    /// The measured part in stages of one offered rate (one for a steady
    /// run; a ramp's steps), each with its own numbers.
    #[serde(default)]
    pub stages: Vec<StageRow>,
    /// How late the generator itself was against its schedule.
    pub schedule_lag_ms: Latency,
    pub generator_kept_schedule: bool,
    /// Open-loop sends that waited because every connection was busy: when
    /// the schedule slipped, the target held it back.
    #[serde(default)]
    pub held_back_sends: u64,
    pub slo: Vec<Check>,
    pub pass: bool,
}

impl Summary {
    /// Replies in each whole second of the run, as (its end, count): the
    /// last, partial second left out.
    pub fn replies_points(&self) -> Vec<(f64, f64)> {
        self.whole_seconds(0)
    }

    /// Errors in each whole second of the run, likewise.
    pub fn errors_points(&self) -> Vec<(f64, f64)> {
        self.whole_seconds(1)
    }

    /// The offered rate of each second, as (its end, requests/s).
    pub fn offered_points(&self) -> Vec<(f64, f64)> {
        let seconds = self.offered_per_second.iter().enumerate();
        seconds.map(|(i, r)| ((i + 1) as f64, *r)).collect()
    }

    fn whole_seconds(&self, column: usize) -> Vec<(f64, f64)> {
        let run_s = self.warmup_s + self.measured_span_s;
        self.per_second
            .iter()
            .enumerate()
            .map(|(i, r)| ((i + 1) as f64, r[column] as f64))
            .filter(|(t, _)| *t <= run_s + 1e-9)
            .collect()
    }
}

/// One stage of the measured part: the seconds `from_s..to_s` since the
/// start in which the schedule asked for one rate.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StageRow {
    pub from_s: f64,
    pub to_s: f64,
    /// Asked, requests per second (none for closed loop).
    pub offered: Option<f64>,
    /// Replies per second in those seconds.
    pub achieved: f64,
    /// Errors (unexpected, transport, timeouts) in those seconds.
    pub errors: u64,
    /// Of the replies that came in those seconds.
    pub latency_ms: Latency,
}

/// The stages of a run: runs of seconds with one offered rate after the
/// warm-up (the whole measured part for closed loop), their numbers from
/// the per-second counts and histograms (`intervals`: each second's
/// histogram and its end since the start).
pub fn stages(summary: &Summary, intervals: &[(Duration, Histogram<u64>)]) -> Vec<StageRow> {
    let first = summary.warmup_s.round() as usize;
    let last = (summary.warmup_s + summary.duration_s).round() as usize;
    let mut bounds: Vec<(usize, usize, Option<f64>)> = Vec::new();
    for second in first..last.max(first + 1) {
        let offered = summary.offered_per_second.get(second).copied();
        match bounds.last_mut() {
            Some((_, end, o)) if *o == offered => *end = second + 1,
            _ => bounds.push((second, second + 1, offered)),
        }
    }
    bounds
        .into_iter()
        .map(|(from, to, offered)| {
            let mut h = Histogram::<u64>::new(3).expect("valid precision");
            for (end, ih) in intervals {
                let second = end.as_secs_f64().round() as usize;
                if second > from && second <= to {
                    let _ = h.add(ih);
                }
            }
            let seconds = summary
                .per_second
                .get(from..to.min(summary.per_second.len()));
            let (replies, errors) = seconds
                .unwrap_or_default()
                .iter()
                .fold((0, 0), |(r, e), s| (r + s[0], e + s[1]));
            StageRow {
                from_s: from as f64,
                to_s: to as f64,
                offered,
                achieved: replies as f64 / (to - from).max(1) as f64,
                errors,
                latency_ms: Latency::of(&h),
            }
        })
        .collect()
}

/// Requests per second, over the measured part: what the scenario asked
/// for, what left the generator while it was scheduled, what came back.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Rates {
    /// Asked by the schedule (open loop; none for closed loop).
    pub offered: Option<f64>,
    /// Requests that left while the measured part was scheduled, per
    /// second of it.
    pub sent: f64,
    /// Replies per second of the measured span (= `throughput`).
    pub achieved: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub nproc: usize,
    pub cpu: String,
}

impl Machine {
    pub fn here() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
        Self {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
        }
    }
}

pub const SCHEMA_ID: &str = "npamp-loadgen/summary/v2";

/// The generator kept its schedule when 99 % of sends left within 50 ms of
/// their intended time and 99 % of the measured part's requests left while
/// it was scheduled. (Latency is measured from the intended time, so a late
/// send never hides latency; what a lagging generator changes is the load
/// itself, and that is what these two bounds see. A few milliseconds of
/// lag on a loaded machine change neither.)
const LAG_P99_LIMIT_MS: f64 = 50.0;
const SENT_IN_WINDOW_SHARE: f64 = 0.99;

/// A run without a success (or an expected error), or with more than this
/// share of its requests ended by transport errors, did not measure the
/// target: it fails even without an SLO (exit 6). An explicit
/// `max_error_rate` SLO replaces the share.
pub const TRANSPORT_ERROR_SHARE: f64 = 0.10;

pub fn summarize(s: &Stats, scenario: &Scenario, target: &str, date: String) -> Summary {
    let measured = scenario.measured().as_secs_f64();
    let span = s
        .last_measured_reply
        .map_or(s.measure_until, |t| t.max(s.measure_until))
        .saturating_duration_since(s.measure_from)
        .as_secs_f64()
        .max(measured);
    let throughput = s.overall.len() as f64 / span.max(1e-9);
    let rates = Rates {
        offered: scenario.offered_rate(),
        sent: s.sent_in_window as f64 / measured.max(1e-9),
        achieved: throughput,
    };
    let accounting = Accounting {
        sent_requests: s.sent_requests,
        sent_measured: s.sent_measured,
        sent_notifications: s.sent_notifications,
        sent_batches: s.sent_batches,
        replied: s.answered(),
        ok: s.ok,
        expected_errors: s.expected_errors,
        unexpected_errors: s.unexpected_errors,
        error_codes: s
            .error_codes
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        http_status: s
            .http_status
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        transport_errors: s.transport.clone(),
        timed_out: s.timed_out,
        lost: s.lost,
        duplicated: s.duplicated,
        late: s.late,
        mismatched: s.mismatched,
        wrong_result: s.wrong_result,
    };
    let latency = Latency::of(&s.overall);
    // One row per method name (two messages of one method add up).
    let mut by_name: BTreeMap<&str, Histogram<u64>> = BTreeMap::new();
    for (m, h) in scenario.mix.messages.iter().zip(&s.per_method) {
        match by_name.get_mut(m.method.as_str()) {
            Some(into) => {
                let _ = into.add(h);
            }
            None => {
                by_name.insert(&m.method, h.clone());
            }
        }
    }
    let per_method = by_name
        .iter()
        .map(|(m, h)| ((*m).to_owned(), Latency::of(h)))
        .collect();
    let lag = Latency::of(&s.schedule_lag);
    let slo = checks(&scenario.slo, &latency, &accounting, throughput);
    let pass = slo.iter().all(|c| c.pass);
    Summary {
        schema: SCHEMA_ID.into(),
        scenario: scenario.name.clone(),
        target: target.into(),
        model: match scenario.load {
            crate::scenario::Load::Open { .. } => "open".into(),
            crate::scenario::Load::Closed { .. } => "closed".into(),
        },
        date,
        machine: Machine::here(),
        duration_s: measured,
        warmup_s: scenario.warmup().as_secs_f64(),
        measured_span_s: span,
        connections: scenario.connections,
        started_at_ms: s.started_at_ms,
        shard: scenario.shard,
        throughput,
        rates,
        accounting,
        latency_ms: latency,
        per_method,
        per_second: s.per_second.iter().map(|&(a, b)| [a, b]).collect(),
        offered_per_second: offered_per_second(scenario),
        outstanding_per_second: Vec::new(),
        stages: Vec::new(),
        generator_kept_schedule: lag.p99 <= LAG_P99_LIMIT_MS
            && s.sent_in_window as f64 >= SENT_IN_WINDOW_SHARE * s.sent_measured as f64,
        schedule_lag_ms: lag,
        held_back_sends: s.held_back,
        slo,
        pass,
    }
}

/// The schedule's requests per second in each second of a run, the
/// warm-up's included (it runs at the first stage's rate).
fn offered_per_second(scenario: &Scenario) -> Vec<f64> {
    if scenario.sends_per_second().is_none() {
        return Vec::new();
    }
    let per_send = scenario.requests_per_send();
    let (warmup, measured) = (scenario.warmup, scenario.measured().as_secs_f64());
    let seconds = (warmup + measured).ceil() as usize;
    (0..seconds)
        .map(|i| {
            let t = i as f64 + 0.5 - warmup;
            scenario.rate_at(t.max(0.0)).unwrap_or(0.0) * per_send
        })
        .collect()
}

/// The SLO checks of `slo` on a run's (or a merged run's) numbers.
pub fn checks(
    slo: &crate::scenario::Slo,
    latency: &Latency,
    accounting: &Accounting,
    throughput: f64,
) -> Vec<Check> {
    let mut checks = Vec::new();
    if let Some(limit) = slo.p99_ms {
        checks.push(Check {
            name: "p99_ms".into(),
            limit,
            value: latency.p99,
            pass: latency.count > 0 && latency.p99 <= limit,
        });
    }
    if let Some(limit) = slo.max_error_rate {
        let a = accounting;
        let failed =
            a.unexpected_errors + a.transport_errors.values().sum::<u64>() + a.timed_out + a.lost;
        let rate = failed as f64 / (a.sent_requests.max(1)) as f64;
        checks.push(Check {
            name: "max_error_rate".into(),
            limit,
            value: rate,
            pass: rate <= limit,
        });
    }
    if let Some(limit) = slo.min_throughput {
        checks.push(Check {
            name: "min_throughput".into(),
            limit,
            value: throughput,
            pass: throughput >= limit,
        });
    }
    checks
}

impl Summary {
    /// Lost, duplicated or mismatched replies: the accounting did not close.
    pub fn accounting_failed(&self) -> bool {
        let a = &self.accounting;
        a.lost > 0 || a.duplicated > 0 || a.mismatched > 0 || a.wrong_result > 0
    }

    /// Why the run did not measure its target, if it did not: no success
    /// at all, or too many transport errors (see [`TRANSPORT_ERROR_SHARE`]).
    pub fn not_served(&self) -> Option<String> {
        let a = &self.accounting;
        if a.sent_requests > 0 && a.ok + a.expected_errors == 0 {
            return Some(format!(
                "no request of {} got a successful reply",
                a.sent_requests
            ));
        }
        let transport: u64 = a.transport_errors.values().sum();
        let share = transport as f64 / a.sent_requests.max(1) as f64;
        let gated = self.slo.iter().any(|c| c.name == "max_error_rate");
        (!gated && share > TRANSPORT_ERROR_SHARE).then(|| {
            format!(
                "{:.1} % of the requests ended in transport errors (more than {:.0} %; a max_error_rate SLO sets the bound)",
                share * 100.0,
                TRANSPORT_ERROR_SHARE * 100.0
            )
        })
    }

    /// The final table.
    pub fn table(&self) -> String {
        let a = &self.accounting;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "scenario   {} ({} loop) against {}",
            self.scenario, self.model, self.target
        );
        let late = if self.measured_span_s > self.duration_s + 0.05 {
            format!(" (its last reply came at {:.1} s)", self.measured_span_s)
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "measured   {:.1} s{late} after {:.1} s warm-up, {} connections",
            self.duration_s, self.warmup_s, self.connections
        );
        let _ = writeln!(
            o,
            "sent       {} requests ({} measured, {} in warm-up), {} notifications, {} batches",
            a.sent_requests,
            a.sent_measured,
            a.sent_requests.saturating_sub(a.sent_measured),
            a.sent_notifications,
            a.sent_batches
        );
        let _ = writeln!(
            o,
            "replied    {} ({} ok, {} expected errors, {} unexpected errors)",
            a.replied, a.ok, a.expected_errors, a.unexpected_errors
        );
        if !a.error_codes.is_empty() {
            let _ = writeln!(o, "  codes    {:?}", a.error_codes);
        }
        if !a.http_status.is_empty() {
            let _ = writeln!(o, "  HTTP     {:?}", a.http_status);
        }
        let transport: u64 = a.transport_errors.values().sum();
        if transport == 0 {
            let _ = writeln!(o, "transport  no errors");
        } else {
            let _ = writeln!(o, "transport  {transport} errors {:?}", a.transport_errors);
        }
        let _ = writeln!(
            o,
            "timed out  {} ({} answered late)   lost {}   duplicated {}   mismatched {}   wrong result {}",
            a.timed_out, a.late, a.lost, a.duplicated, a.mismatched, a.wrong_result
        );
        let r = &self.rates;
        let offered = r
            .offered
            .map_or_else(|| "closed loop".to_owned(), |v| format!("{v:.0}/s"));
        let _ = writeln!(
            o,
            "rate       offered {offered}   sent {:.0}/s   achieved {:.0} replies/s",
            r.sent, r.achieved
        );
        let l = &self.latency_ms;
        let _ = writeln!(
            o,
            "latency ms p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  (n={})",
            l.p50, l.p90, l.p99, l.p999, l.max, l.count
        );
        for (m, l) in &self.per_method {
            let _ = writeln!(
                o,
                "  {m:<20} p50 {:.3}  p99 {:.3}  max {:.3}  (n={})",
                l.p50, l.p99, l.max, l.count
            );
        }
        let _ = writeln!(
            o,
            "schedule   p99 lag {:.3} ms, max {:.3} ms{}",
            self.schedule_lag_ms.p99,
            self.schedule_lag_ms.max,
            match (self.generator_kept_schedule, self.held_back_sends) {
                (true, _) => String::new(),
                (false, 0) => "  — THE GENERATOR COULD NOT KEEP ITS SCHEDULE: the target got less load than asked".to_owned(),
                (false, n) => format!(
                    "  — the schedule slipped: {n} sends waited for a busy connection (the target, or too few connections)"
                ),
            }
        );
        if let Some(why) = self.not_served() {
            let _ = writeln!(o, "NOT SERVED {why}");
        }
        for c in &self.slo {
            let _ = writeln!(
                o,
                "SLO        {:<16} {} (limit {}, measured {:.4})",
                c.name,
                if c.pass { "pass" } else { "FAIL" },
                c.limit,
                c.value
            );
        }
        o
    }
}

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
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}" font-family="sans-serif" font-size="12">"#,
        40.0 + 3.0 * (panel + 30.0)
    );
    let _ = writeln!(
        o,
        r#"<text x="10" y="20" font-size="14">{} — {} — {:.0} replies/s achieved of {} offered, p99 {:.3} ms</text>"#,
        xml(&summary.scenario),
        xml(&summary.target),
        summary.throughput,
        summary
            .rates
            .offered
            .map_or_else(|| "closed loop".to_owned(), |r| format!("{r:.0}/s")),
        summary.latency_ms.p99
    );
    let spectrum = spectrum(h);
    let mut chart = Chart {
        x0: 70.0,
        y0: 40.0,
        width: w - 110.0,
        height: panel - 40.0,
    };
    chart.draw(
        &mut o,
        &Axes {
            x: spectrum_scale(),
            y_max: spectrum.iter().map(|p| p.1).fold(0.0, f64::max),
            x_title: "percentile",
            y_title: "latency, ms",
            shade: None,
        },
        &[Series::line("#1f77b4", "latency", &spectrum)],
    );
    // Replies per second (whole seconds only) against the offered rate.
    let run_s = summary.warmup_s + summary.measured_span_s;
    let whole = |second_end: f64| second_end <= run_s + 1e-9;
    let (replies, errors) = (summary.replies_points(), summary.errors_points());
    let offered = summary.offered_points();
    let t_max = replies.len().max(offered.len()).max(1) as f64;
    let warmup = (summary.warmup_s > 0.0).then_some(summary.warmup_s);
    chart.y0 += panel + 30.0;
    let rate_max = replies
        .iter()
        .chain(&offered)
        .chain(&errors)
        .map(|p| p.1)
        .fold(0.0, f64::max);
    chart.draw(
        &mut o,
        &Axes {
            x: Scale::Numbers(t_max),
            y_max: rate_max,
            x_title: "seconds since the start",
            y_title: "per second",
            shade: warmup,
        },
        &[
            Series::dashed("#ff7f0e", "offered", &offered),
            Series::line("#1f77b4", "replies", &replies),
            Series::line("#d62728", "errors", &errors),
        ],
    );
    // p50 and p99 of each second that had measured replies.
    let of = |q: f64| -> Vec<(f64, f64)> {
        intervals
            .iter()
            .filter(|(end, h)| !h.is_empty() && whole(end.as_secs_f64().round()))
            .map(|(end, h)| (end.as_secs_f64(), h.value_at_quantile(q) as f64 / 1e3))
            .collect()
    };
    let (p50, p99) = (of(0.5), of(0.99));
    chart.y0 += panel + 30.0;
    chart.draw(
        &mut o,
        &Axes {
            x: Scale::Numbers(t_max),
            y_max: p99.iter().map(|p| p.1).fold(0.0, f64::max),
            x_title: "seconds since the start",
            y_title: "latency each second, ms",
            shade: warmup,
        },
        &[
            Series::line("#2ca02c", "p50", &p50),
            Series::line("#1f77b4", "p99", &p99),
        ],
    );
    o.push_str("</svg>\n");
    o
}

/// The latency percentile spectrum of `h`, ms: x = log10(1/(1-q)), from
/// 0 (p0) to 5 (p99.999); empty for an empty histogram.
pub fn spectrum(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (0..=100)
        .map(|i| {
            let x = 5.0 * f64::from(i) / 100.0;
            let q = 1.0 - 10f64.powf(-x);
            (x, h.value_at_quantile(q) as f64 / 1e3)
        })
        .collect()
}

/// The x axis of [`spectrum`]: its percentiles named.
pub(crate) fn spectrum_scale() -> Scale {
    let quantiles = ["p0", "p90", "p99", "p99.9", "p99.99", "p99.999"]
        .iter()
        .enumerate()
        .map(|(i, l)| (i as f64, (*l).to_owned()))
        .collect();
    Scale::Labels(quantiles, 5.0)
}

/// A named, coloured line: its points.
pub type Line<'a> = (&'a str, &'a str, &'a [(f64, f64)]);

/// One chart over time, the warm-up shaded, in an SVG of its own.
pub fn series_svg(title: &str, series: &[Line<'_>], warmup_s: f64) -> String {
    let t_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    chart_svg(
        Scale::Numbers(t_max),
        "seconds since the start",
        title,
        (warmup_s > 0.0).then_some(warmup_s),
        series,
    )
}

/// One chart of `series` on the x axis `x`, in an SVG of its own; a line
/// whose name ends in "offered" is dashed.
pub(crate) fn chart_svg(
    x: Scale,
    x_title: &str,
    y_title: &str,
    shade: Option<f64>,
    series: &[Line<'_>],
) -> String {
    let (w, h) = (760.0, 250.0);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let chart = Chart {
        x0: 70.0,
        y0: 10.0,
        width: w - 110.0,
        height: h - 50.0,
    };
    let y_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let lines: Vec<Series<'_>> = series
        .iter()
        .map(|(name, colour, points)| {
            if name.ends_with("offered") {
                Series::dashed(colour, name, points)
            } else {
                Series::line(colour, name, points)
            }
        })
        .collect();
    chart.draw(
        &mut o,
        &Axes {
            x,
            y_max,
            x_title,
            y_title,
            shade,
        },
        &lines,
    );
    o.push_str("</svg>\n");
    o
}

/// A chart's frame on the page.
pub(crate) struct Chart {
    pub x0: f64,
    pub y0: f64,
    pub width: f64,
    pub height: f64,
}

/// Where a drawn chart puts a value, for marks of a caller's own.
pub(crate) struct Plot {
    x0: f64,
    y0: f64,
    width: f64,
    height: f64,
    x_top: f64,
    y_top: f64,
}

impl Plot {
    pub fn x(&self, x: f64) -> f64 {
        self.x0 + (x / self.x_top).clamp(0.0, 1.0) * self.width
    }

    pub fn y(&self, y: f64) -> f64 {
        self.y0 + self.height - (y / self.y_top).clamp(0.0, 1.0) * self.height
    }
}

pub(crate) enum Scale {
    /// Named positions (the spectrum's percentiles) on 0..max.
    Labels(Vec<(f64, String)>, f64),
    /// Round numbers from 0 to at least this.
    Numbers(f64),
}

pub(crate) struct Axes<'a> {
    pub x: Scale,
    pub y_max: f64,
    pub x_title: &'a str,
    pub y_title: &'a str,
    /// Shade 0..this on the x axis (the warm-up).
    pub shade: Option<f64>,
}

pub(crate) struct Series<'a> {
    colour: &'a str,
    name: &'a str,
    dashed: bool,
    points: &'a [(f64, f64)],
}

impl<'a> Series<'a> {
    pub fn line(colour: &'a str, name: &'a str, points: &'a [(f64, f64)]) -> Self {
        Self {
            colour,
            name,
            dashed: false,
            points,
        }
    }

    fn dashed(colour: &'a str, name: &'a str, points: &'a [(f64, f64)]) -> Self {
        Self {
            dashed: true,
            ..Self::line(colour, name, points)
        }
    }
}

impl Chart {
    /// Draws the frame, the axes and `series` into `o`.
    pub fn draw(&self, o: &mut String, axes: &Axes<'_>, series: &[Series<'_>]) -> Plot {
        let Chart {
            x0,
            y0,
            width,
            height,
        } = *self;
        let (x_ticks, x_top): (Vec<(f64, String)>, f64) = match &axes.x {
            Scale::Labels(l, max) => (l.clone(), *max),
            Scale::Numbers(max) => {
                let t = ticks(*max, 8);
                let top = t.last().copied().unwrap_or(1.0);
                (t.into_iter().map(|v| (v, label(v))).collect(), top)
            }
        };
        let y_ticks = ticks(axes.y_max, 5);
        let y_top = y_ticks.last().copied().unwrap_or(1.0).max(1e-9);
        let plot = Plot {
            x0,
            y0,
            width,
            height,
            x_top,
            y_top,
        };
        let (px, py) = (|x| plot.x(x), |y| plot.y(y));
        if let Some(end) = axes.shade {
            let _ = writeln!(
                o,
                r##"<rect x="{x0}" y="{y0}" width="{:.1}" height="{height}" fill="#eee"/><text x="{:.1}" y="{:.1}" fill="#777" text-anchor="middle">warm-up</text>"##,
                px(end) - x0,
                (x0 + px(end)) / 2.0,
                y0 + 14.0
            );
        }
        let _ = writeln!(
            o,
            r##"<rect x="{x0}" y="{y0}" width="{width}" height="{height}" fill="none" stroke="#888"/>"##
        );
        let last = x_ticks.len().saturating_sub(1);
        for (i, (x, text)) in x_ticks.iter().enumerate() {
            // The last label ends at the frame, so it is never clipped.
            let anchor = if i == last && i > 0 { "end" } else { "middle" };
            let _ = writeln!(
                o,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"#,
                px(*x),
                y0 + height + 15.0,
                xml(text)
            );
        }
        for y in &y_ticks {
            let _ = writeln!(
                o,
                r##"<line x1="{x0}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{:.1}" y="{yy:.1}" text-anchor="end" dominant-baseline="middle">{}</text>"##,
                x0 + width,
                x0 - 5.0,
                label(*y),
                yy = py(*y)
            );
        }
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x0 + width / 2.0,
            y0 + height + 30.0,
            xml(axes.x_title)
        );
        let _ = writeln!(
            o,
            r#"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
            y0 + height / 2.0,
            y0 + height / 2.0,
            xml(axes.y_title)
        );
        let dash = |s: &Series<'_>| {
            if s.dashed {
                r#" stroke-dasharray="6 3""#
            } else {
                ""
            }
        };
        for s in series {
            let points: Vec<String> = s
                .points
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.8"{} points="{}"/>"#,
                s.colour,
                dash(s),
                points.join(" ")
            );
        }
        // The legend over the lines, inside the frame's top right corner,
        // as wide as its longest name.
        if series.len() > 1 {
            let longest = series
                .iter()
                .map(|s| s.name.chars().count())
                .max()
                .unwrap_or(0);
            let box_w = 34.0 + CHAR_WIDTH * longest as f64;
            let lx = x0 + width - box_w - 4.0;
            let _ = writeln!(
                o,
                r##"<rect x="{lx:.1}" y="{:.1}" width="{box_w:.1}" height="{:.1}" fill="#fff" fill-opacity="0.85"/>"##,
                y0 + 4.0,
                legend_bottom(series.len()) - 4.0
            );
            for (i, s) in series.iter().enumerate() {
                let ly = y0 + 14.0 + 15.0 * i as f64;
                let _ = writeln!(
                    o,
                    r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{}/><text x="{:.1}" y="{ly:.1}" dominant-baseline="middle">{}</text>"#,
                    lx + 4.0,
                    lx + 24.0,
                    s.colour,
                    dash(s),
                    lx + 30.0,
                    xml(s.name)
                );
            }
        }
        plot
    }
}

/// About how wide a character of the charts' 12 px sans-serif text is.
pub const CHAR_WIDTH: f64 = 6.6;

/// How far below the frame's top the legend of `series` lines ends.
pub fn legend_bottom(series: usize) -> f64 {
    15.0 * series as f64 + 8.0
}

/// Round tick values from 0 to at least `max`: 1, 2 or 5 times a power of
/// ten apart, about `n` of them.
pub fn ticks(max: f64, n: usize) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let n = n.max(1);
    let power = 10f64.powf((max / n as f64).log10().floor());
    // The smallest round step that needs at most n + 1 ticks.
    let step = [1.0, 2.0, 5.0, 10.0, 20.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| (max / s).ceil() as usize <= n + 1)
        .unwrap_or(20.0 * power);
    let count = (max / step).ceil() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

/// A tick label without needless digits (`2.5`, `10`, `0.05`).
pub fn label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    // Three significant digits at most, then no trailing zeros.
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let text = format!("{v:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// `s` as XML text.
pub(crate) fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            ticks(10075.0, 5),
            vec![0.0, 2000.0, 4000.0, 6000.0, 8000.0, 10000.0, 12000.0]
        );
        assert_eq!(ticks(5.0, 5), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(
            ticks(0.37, 4),
            vec![0.0, 0.1, 0.2, 0.30000000000000004, 0.4]
        );
        assert_eq!(label(0.30000000000000004), "0.3");
        assert_eq!(label(12000.0), "12000");
        assert_eq!(label(2.5), "2.5");
        assert_eq!(label(0.05), "0.05");
    }

    const SCENARIO: &str = r#"
name = "t"
duration = 5
warmup = 1
[load]
model = "open"
rate = 1000
[mix]
[[mix.message]]
method = "echo"
"#;

    /// Stats of a 1 s warm-up and 5 s measured run in which `replies`
    /// measured requests were answered, the last at `last` seconds after
    /// the measured part began.
    fn stats(replies: u64, last: f64, sent_in_window: u64) -> Stats {
        let started = Instant::now();
        let mut s = Stats::new(
            started,
            Duration::from_secs(1),
            Duration::from_secs(5),
            1,
            vec![false],
        );
        for _ in 0..replies {
            let _ = s.overall.record(1000);
        }
        s.sent_requests = replies + 1000;
        s.sent_measured = replies;
        s.sent_in_window = sent_in_window;
        s.ok = replies;
        s.last_measured_reply = Some(s.measure_from + Duration::from_secs_f64(last));
        s
    }

    fn summary(s: &Stats) -> Summary {
        let scenario = Scenario::parse(SCENARIO, "t.toml").expect("scenario");
        summarize(s, &scenario, "t", "now".into())
    }

    #[test]
    fn throughput_is_replies_per_second_of_the_measured_span() {
        // On schedule: 5000 replies in 5 s.
        let on_time = summary(&stats(5000, 5.0, 5000));
        assert_eq!(on_time.throughput, 1000.0);
        assert_eq!(on_time.rates.offered, Some(1000.0));
        assert!(on_time.generator_kept_schedule);
        // Behind: the same 5000 replies, the last 10 s into the measured
        // part (the run took 11 s instead of 6): 500 replies/s, not 1000.
        let behind = summary(&stats(5000, 10.0, 2600));
        assert_eq!(behind.measured_span_s, 10.0);
        assert_eq!(behind.throughput, 500.0);
        assert_eq!(behind.rates.achieved, 500.0);
        assert_eq!(behind.rates.sent, 520.0);
        assert!(!behind.generator_kept_schedule, "half the sends left late");
        let t = behind.table();
        assert!(
            t.contains("offered 1000/s   sent 520/s   achieved 500 replies/s"),
            "{t}"
        );
        assert!(t.contains("its last reply came at 10.0 s"), "{t}");
        assert!(t.contains("(5000 measured, 1000 in warm-up)"), "{t}");
        assert!(t.contains("transport  no errors"), "{t}");
    }

    #[test]
    fn a_few_milliseconds_of_lag_are_no_alarm() {
        // 2 % of sends 8 ms late (a loaded 2-core machine), all within the
        // window: the load was what was asked.
        let mut s = stats(5000, 5.0, 5000);
        for i in 0..5000 {
            let _ = s.schedule_lag.record(if i % 50 == 0 { 8000 } else { 50 });
        }
        let quiet = summary(&s);
        assert!(quiet.schedule_lag_ms.p99 > 5.0);
        assert!(quiet.generator_kept_schedule, "{}", quiet.table());
        assert!(!quiet.table().contains("COULD NOT KEEP"));
        // 2 % of sends half a second late: the shape of the load changed.
        for _ in 0..200 {
            let _ = s.schedule_lag.record(500_000);
        }
        assert!(!summary(&s).generator_kept_schedule);
    }

    #[test]
    fn a_run_that_measured_nothing_is_not_served() {
        let mut s = stats(0, 5.0, 0);
        s.sent_requests = 100;
        s.transport
            .insert("connect: connection refused".into(), 100);
        let dead = summary(&s);
        assert!(dead.not_served().unwrap().contains("no request of 100"));
        // 20 % transport errors, no SLO to judge them: not served.
        let mut s = stats(800, 5.0, 800);
        s.sent_requests = 1000;
        s.transport.insert("reset".into(), 200);
        let flaky = summary(&s);
        assert!(
            flaky.not_served().unwrap().contains("20.0 %"),
            "{:?}",
            flaky.not_served()
        );
        // 5 %: served.
        let mut s = stats(950, 5.0, 950);
        s.sent_requests = 1000;
        s.transport.insert("reset".into(), 50);
        assert_eq!(summary(&s).not_served(), None);
    }
}
