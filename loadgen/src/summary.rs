//! The JSON summary of a run (its schema is `results/schema.json`,
//! [`SCHEMA_ID`]) and how it is computed: from a run's counts
//! ([`summarize`]), its stages of one offered rate ([`stages`]) and its SLO
//! checks ([`checks`]). The table is [`crate::table`]'s, the charts
//! [`crate::report`]'s.

use std::collections::BTreeMap;
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
    /// Requests the open-loop schedule placed that were never sent: the run
    /// was so far behind (the generator, or a target keeping every
    /// connection busy) that they would have left after the schedule's
    /// end. Not in `sent_requests`; failures to the SLO checks. Written
    /// only when there were any.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
    /// The scenario as run ([`crate::scenario::Scenario::run_hash`]): the
    /// same for every worker of one run (empty in summaries from before
    /// it was written).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_hash: String,
    /// `run --run-id`: the run this worker is part of, as its launcher
    /// named it (empty: not named).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    /// Replies to the measured part's requests per second of
    /// `measured_span_s`: the achieved rate.
    pub throughput: f64,
    #[serde(default)]
    pub rates: Rates,
    pub accounting: Accounting,
    pub latency_ms: Latency,
    pub per_method: BTreeMap<String, Latency>,
    /// Replies and errors in each second since the start (warm-up
    /// included), each request in the second of its intended send time.
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
    /// The run was interrupted (Ctrl-C, SIGTERM): its figures are of the
    /// part that ran (`duration_s` ends at the interrupt). Written only
    /// when it was.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interrupted: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
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
    /// Replies to the requests the schedule placed in those seconds, per
    /// second of them (whenever the replies came).
    pub achieved: f64,
    /// Errors (unexpected, transport, timeouts) of those requests.
    pub errors: u64,
    /// Of the replies to those requests.
    pub latency_ms: Latency,
}

/// The stages of a run: runs of seconds with one offered rate after the
/// warm-up (the whole measured part for closed loop), their numbers from
/// the per-second counts and histograms (`intervals`: each second's
/// histogram and its end since the start), all of them by intended send
/// time: a stage's row is its own requests', whenever they were answered.
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
    let accounting = accounting(s);
    let latency = Latency::of(&s.overall);
    let lag = Latency::of(&s.schedule_lag);
    let slo = checks(&scenario.slo, &latency, &accounting, throughput);
    // Every second of the schedule has its row, answered or not.
    let mut per_second: Vec<[u64; 2]> = s.per_second.iter().map(|&(a, b)| [a, b]).collect();
    let offered_per_second = offered_per_second(scenario);
    if per_second.len() < offered_per_second.len() {
        per_second.resize(offered_per_second.len(), [0, 0]);
    }
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
        run_hash: scenario.run_hash(),
        run_id: scenario.run_id.clone().unwrap_or_default(),
        throughput,
        rates,
        accounting,
        latency_ms: latency,
        per_method: per_method(s, scenario),
        per_second,
        offered_per_second,
        outstanding_per_second: Vec::new(),
        stages: Vec::new(),
        generator_kept_schedule: lag.p99 <= LAG_P99_LIMIT_MS
            && s.sent_in_window as f64
                >= SENT_IN_WINDOW_SHARE * (s.sent_measured + s.dropped_measured) as f64,
        schedule_lag_ms: lag,
        held_back_sends: s.held_back,
        slo,
        pass,
        interrupted: s.interrupted.is_some(),
    }
}

/// Every count of a run, as the summary names them.
fn accounting(s: &Stats) -> Accounting {
    Accounting {
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
        dropped: s.dropped,
    }
}

/// The latency of each method name (two messages of one method add up).
fn per_method(s: &Stats, scenario: &Scenario) -> BTreeMap<String, Latency> {
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
    by_name
        .iter()
        .map(|(m, h)| ((*m).to_owned(), Latency::of(h)))
        .collect()
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
    if let Some(r) = &scenario.replay {
        // The capture's own, second by second.
        return r.requests_per_second(seconds);
    }
    (0..seconds)
        .map(|i| {
            let t = i as f64 + 0.5 - warmup;
            scenario.rate_at(t.max(0.0)).unwrap_or(0.0) * per_send
        })
        .collect()
}

/// The SLO checks of `slo` on a run's (or a merged run's) numbers. A
/// dropped request (placed on the schedule, never sent) counts against
/// both: as an error of `max_error_rate` (of the requests scheduled), and
/// as slower than any `p99_ms` limit (more than 1 % of them dropped, the
/// 99th percentile of what was asked is unbounded).
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
            pass: latency.count > 0
                && latency.p99 <= limit
                && accounting.dropped * 100 <= latency.count + accounting.dropped,
        });
    }
    if let Some(limit) = slo.max_error_rate {
        let a = accounting;
        let failed = a.unexpected_errors
            + a.transport_errors.values().sum::<u64>()
            + a.timed_out
            + a.lost
            + a.dropped;
        let rate = failed as f64 / ((a.sent_requests + a.dropped).max(1)) as f64;
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
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

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

    /// The summary of fixed counts, byte for byte (the machine and the
    /// start, which are the clock's and the host's, left out); the
    /// expected JSON is `tests/pages/expected/summarize.summary.json`, and
    /// `NPAMP_PIN_PAGES=1` writes it anew.
    #[test]
    fn the_summary_of_fixed_counts_is_what_was_pinned() {
        let mut s = stats(4800, 5.5, 4700);
        s.sent_notifications = 40;
        s.sent_batches = 7;
        s.expected_errors = 12;
        s.unexpected_errors = 5;
        s.error_codes.insert(-32000, 5);
        s.http_status.insert(502, 2);
        s.transport.insert("reset".into(), 3);
        s.timed_out = 2;
        s.late = 1;
        s.held_back = 9;
        s.sent_in_window = 4750;
        for i in 0..4800u64 {
            let _ = s.overall.record(200 + i * 7 % 5000);
            let _ = s.per_method[0].record(200 + i * 7 % 5000);
            let _ = s.schedule_lag.record(10 + i % 300);
        }
        s.per_second = (0..7).map(|i| (900 + i * 13, i % 3)).collect();
        let mut summary = summary(&s);
        summary.machine = Machine {
            nproc: 0,
            cpu: String::new(),
        };
        summary.started_at_ms = 0;
        // A hash of the scenario's form, which changes with its fields.
        assert_eq!(summary.run_hash.len(), 16);
        summary.run_hash.clear();
        let intervals: Vec<(Duration, Histogram<u64>)> = (1..=7)
            .map(|i| {
                let mut h = Histogram::<u64>::new(3).expect("precision");
                let _ = h.record(1000 * i);
                (Duration::from_secs(i), h)
            })
            .collect();
        summary.stages = stages(&summary, &intervals);
        let json = serde_json::to_string_pretty(&summary).expect("json");
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/pages/expected/summarize.summary.json");
        if std::env::var_os("NPAMP_PIN_PAGES").is_some() {
            std::fs::write(&path, &json).expect("pin");
        }
        let want = std::fs::read_to_string(&path).expect("the pinned summary");
        assert_eq!(json, want, "{}", path.display());
    }

    /// A 1 k / 5 k / 40 k ramp against a target of 19 k/s, on a virtual
    /// clock: every stage row holds exactly the requests its seconds
    /// scheduled, and the saturating stage's p99 is its own requests' p99
    /// (issue 54: rows by reply time counted 2069 / 10700 / 119229 and
    /// understated the saturating stage's p99).
    #[test]
    fn stage_rows_are_the_requests_their_stage_scheduled() {
        let scenario = Scenario::parse(
            r#"
name = "ramp"
warmup = 0
[load]
model = "open"
stages = [{ rate = 1000, duration = 2 }, { rate = 5000, duration = 2 }, { rate = 40000, duration = 3 }]
[mix]
[[mix.message]]
method = "echo"
"#,
            "ramp.toml",
        )
        .expect("scenario");
        let started = Instant::now();
        let mut s = Stats::new(
            started,
            Duration::ZERO,
            Duration::from_secs(7),
            1,
            vec![false],
        );
        // The target answers one request per 1/19000 s, in order.
        let service = Duration::from_secs_f64(1.0 / 19_000.0);
        let mut free = started;
        let mut id = 0;
        let mut own = Vec::new();
        let mut from = 0.0;
        for (rate, seconds) in [(1000.0, 2.0), (5000.0, 2.0), (40000.0, 3.0)] {
            let mut h = Histogram::<u64>::new(3).expect("precision");
            for j in 0..(rate * seconds) as u64 {
                let intended = started + Duration::from_secs_f64(from + (j as f64 + 0.5) / rate);
                free = free.max(intended) + service;
                id += 1;
                let e = crate::mix::Expect { id, message: 0 };
                s.complete_at(e, intended, crate::engine::Outcome::Ok, free);
                let _ = h.record(
                    u64::try_from((free - intended).as_micros())
                        .expect("µs")
                        .max(1),
                );
            }
            own.push(h);
            from += seconds;
        }
        s.sent_requests = id;
        s.sent_measured = id;
        s.sent_in_window = id;
        s.ok = id;
        let mut summary = summarize(&s, &scenario, "t", "now".into());
        summary.stages = stages(&summary, &s.latency_intervals(7));
        let rows: Vec<(f64, f64)> = summary
            .stages
            .iter()
            .map(|r| (r.offered.unwrap_or(0.0), r.achieved * (r.to_s - r.from_s)))
            .collect();
        assert_eq!(
            rows,
            [(1000.0, 2000.0), (5000.0, 10000.0), (40000.0, 120000.0)]
        );
        for (row, h) in summary.stages.iter().zip(&own) {
            assert_eq!(row.latency_ms, Latency::of(h));
            assert_eq!(row.errors, 0);
        }
        // The saturating stage: its requests waited seconds.
        assert!(
            summary.stages[2].latency_ms.p99 > 2000.0,
            "{:?}",
            summary.stages[2]
        );
    }

    #[test]
    fn a_run_that_measured_nothing_is_not_served() {
        let mut s = stats(0, 5.0, 0);
        s.sent_requests = 100;
        s.transport
            .insert("connect: connection refused".into(), 100);
        let dead = summary(&s);
        assert!(dead.not_served().unwrap().contains("no request of 100"));
        // Its table shows no latency where none was measured (not 0.000 ms).
        let table = dead.table();
        assert!(
            table.contains("latency ms no reply measured (n=0)"),
            "{table}"
        );
        assert!(
            !table.contains("0.000 ms") && !table.contains("p99 0.000"),
            "{table}"
        );
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
