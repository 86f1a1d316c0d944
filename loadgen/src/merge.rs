//! Runs across machines: each worker (`run --shard I/N`) measures from its
//! own intended send times and writes its whole HdrHistograms; `merge` adds
//! them (exact: histograms of one precision add without loss), sums the
//! accounting, lines the workers up on their schedules (second N of each
//! worker's schedule is second N of the run's, however far apart on the
//! wall clock they started: a Kubernetes Job's pods start seconds apart),
//! and evaluates the SLOs once, on the merged result. Workers of different
//! runs are refused: different run ids (`run --run-id`, the Job's uid), a
//! different scenario as run (`run_hash`), or a schedule that began after
//! another's had ended.
//!
//! A run directory holds `summary.json`, `latency.hlog` (one histogram per
//! second, with the run's start as `StartTime`) and `histograms.hlog` (the
//! whole run's histograms, tagged `overall`, `schedule-lag` and
//! `method:NAME`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};

use crate::scenario::Slo;
use crate::summary::{Accounting, Latency, Rates, SCHEMA_ID, Summary, checks, stages};

/// What one run (or one merge) measured, whole.
#[derive(Clone, Debug)]
pub struct Measured {
    pub summary: Summary,
    /// Replies to the measured requests, µs from their intended send time.
    pub overall: Histogram<u64>,
    /// How late the generator sent, µs.
    pub schedule_lag: Histogram<u64>,
    /// Per method name.
    pub per_method: BTreeMap<String, Histogram<u64>>,
    /// One histogram per second: its end, since `summary.started_at_ms`.
    pub intervals: Vec<(Duration, Histogram<u64>)>,
}

fn hist() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid precision")
}

fn start_time(summary: &Summary) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(summary.started_at_ms)
}

/// A tag for a method name (a tag holds no comma, space or line break).
fn method_tag(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if matches!(c, ',' | ' ' | '\r' | '\n') {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!("method:{clean}")
}

impl Measured {
    /// The HdrHistogram interval log: one histogram per second, µs values
    /// (reported in ms, as the max-value divisor says).
    pub fn interval_log(&self) -> Result<Vec<u8>, String> {
        let mut start = Duration::ZERO;
        let entries = self.intervals.iter().map(|(end, h)| {
            let e = (None, start, end.saturating_sub(start), h);
            start = *end;
            e
        });
        log(
            start_time(&self.summary),
            "npamp-loadgen latency per second, microseconds, measured from the intended send time",
            entries.collect(),
        )
    }

    /// The whole run's histograms, tagged.
    pub fn histogram_log(&self) -> Result<Vec<u8>, String> {
        let whole = Duration::from_secs_f64(self.summary.warmup_s + self.summary.measured_span_s);
        let tags: Vec<(String, &Histogram<u64>)> = [
            ("overall".to_owned(), &self.overall),
            ("schedule-lag".to_owned(), &self.schedule_lag),
        ]
        .into_iter()
        .chain(self.per_method.iter().map(|(m, h)| (method_tag(m), h)))
        .collect();
        log(
            start_time(&self.summary),
            "npamp-loadgen whole-run histograms, microseconds",
            tags.iter()
                .map(|(t, h)| (Some(t.as_str()), Duration::ZERO, whole, *h))
                .collect(),
        )
    }

    /// A run known only by its summary: no histograms (all empty).
    pub fn of_summary(summary: Summary) -> Self {
        Self {
            summary,
            overall: hist(),
            schedule_lag: hist(),
            per_method: BTreeMap::new(),
            intervals: Vec::new(),
        }
    }

    /// Reads a run directory written by [`crate::run_dir::write`].
    pub fn read(dir: &Path) -> Result<Self, String> {
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()))
        };
        let summary: Summary = serde_json::from_slice(&read("summary.json")?)
            .map_err(|e| format!("{}: not a loadgen summary: {e}", dir.display()))?;
        let mut overall = None;
        let mut schedule_lag = None;
        let mut per_method = BTreeMap::new();
        for (tag, _, _, h) in parse(&read("histograms.hlog")?)
            .map_err(|e| format!("{}: {e}", dir.join("histograms.hlog").display()))?
        {
            match tag.as_deref() {
                Some("overall") => overall = Some(h),
                Some("schedule-lag") => schedule_lag = Some(h),
                Some(t) if t.starts_with("method:") => {
                    per_method.insert(t["method:".len()..].to_owned(), h);
                }
                _ => {}
            }
        }
        let missing = |what: &str| format!("{}: histograms.hlog has no `{what}`", dir.display());
        let intervals = parse(&read("latency.hlog")?)
            .map_err(|e| format!("{}: {e}", dir.join("latency.hlog").display()))?
            .into_iter()
            .map(|(_, start, duration, h)| (start + duration, h))
            .collect();
        Ok(Self {
            summary,
            overall: overall.ok_or_else(|| missing("overall"))?,
            schedule_lag: schedule_lag.ok_or_else(|| missing("schedule-lag"))?,
            per_method,
            intervals,
        })
    }
}

type Entry<'a> = (Option<&'a str>, Duration, Duration, &'a Histogram<u64>);

fn log(start: SystemTime, comment: &str, entries: Vec<Entry<'_>>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    {
        let mut w = IntervalLogWriterBuilder::new()
            .add_comment(comment)
            .with_start_time(start)
            .with_max_value_divisor(1000.0)
            .begin_log_with(&mut out, &mut ser)
            .map_err(|e| format!("interval log: {e:?}"))?;
        for (tag, start, duration, h) in entries {
            w.write_histogram(h, start, duration, tag.and_then(Tag::new))
                .map_err(|e| format!("interval log: {e:?}"))?;
        }
    }
    Ok(out)
}

/// The histograms of an interval log: tag, start (since the log's
/// `StartTime`), duration, histogram.
type Parsed = Vec<(Option<String>, Duration, Duration, Histogram<u64>)>;

fn parse(bytes: &[u8]) -> Result<Parsed, String> {
    let mut out = Vec::new();
    let mut deserializer = Deserializer::new();
    for entry in IntervalLogIterator::new(bytes) {
        match entry.map_err(|e| format!("not an interval log: {e:?}"))? {
            LogEntry::Interval(i) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(i.encoded_histogram())
                    .map_err(|e| format!("a histogram is not base64: {e}"))?;
                let h: Histogram<u64> = deserializer
                    .deserialize(&mut raw.as_slice())
                    .map_err(|e| format!("a histogram does not decode: {e:?}"))?;
                out.push((
                    i.tag().map(|t| t.as_str().to_owned()),
                    i.start_timestamp(),
                    i.duration(),
                    h,
                ));
            }
            LogEntry::StartTime(_) | LogEntry::BaseTime(_) => {}
        }
    }
    Ok(out)
}

/// Adds `b` into `a` (same precision: exact).
fn add(a: &mut Histogram<u64>, b: &Histogram<u64>) -> Result<(), String> {
    a.add(b)
        .map_err(|e| format!("histograms do not add: {e:?}"))
}

fn sum_maps(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn sum_accounting(parts: &[Measured]) -> Accounting {
    let mut a = Accounting {
        sent_requests: 0,
        sent_measured: 0,
        sent_notifications: 0,
        sent_batches: 0,
        replied: 0,
        ok: 0,
        expected_errors: 0,
        unexpected_errors: 0,
        error_codes: BTreeMap::new(),
        http_status: BTreeMap::new(),
        transport_errors: BTreeMap::new(),
        timed_out: 0,
        lost: 0,
        duplicated: 0,
        late: 0,
        mismatched: 0,
        wrong_result: 0,
        dropped: 0,
    };
    for p in parts {
        let b = &p.summary.accounting;
        a.sent_requests += b.sent_requests;
        a.sent_measured += b.sent_measured;
        a.sent_notifications += b.sent_notifications;
        a.sent_batches += b.sent_batches;
        a.replied += b.replied;
        a.ok += b.ok;
        a.expected_errors += b.expected_errors;
        a.unexpected_errors += b.unexpected_errors;
        sum_maps(&mut a.error_codes, &b.error_codes);
        sum_maps(&mut a.http_status, &b.http_status);
        sum_maps(&mut a.transport_errors, &b.transport_errors);
        a.timed_out += b.timed_out;
        a.lost += b.lost;
        a.duplicated += b.duplicated;
        a.late += b.late;
        a.mismatched += b.mismatched;
        a.wrong_result += b.wrong_result;
        a.dropped += b.dropped;
    }
    a
}

/// Checks that `parts` are the shards of one run: one scenario and model
/// as run, shard indexes 0 to N-1 once each, schedules that overlap.
fn check_shards(parts: &[Measured]) -> Result<(), String> {
    let first = &parts.first().ok_or("nothing to merge")?.summary;
    let mut seen = Vec::new();
    for p in parts {
        let s = &p.summary;
        if (&s.scenario, &s.model) != (&first.scenario, &first.model) {
            return Err(format!(
                "runs of different scenarios: {} ({} loop) and {} ({} loop)",
                first.scenario, first.model, s.scenario, s.model
            ));
        }
        match (s.shard, first.shard) {
            (Some(a), Some(b)) if a.count == b.count => seen.push(a.index),
            _ => {
                return Err(format!(
                    "{}: not a shard of the same run as the others (run them with --shard I/N, one N)",
                    s.scenario
                ));
            }
        }
    }
    // What names a run, where the workers wrote it: one of each.
    let one_of = |what: &str, key: fn(&Summary) -> &str| {
        let named: std::collections::BTreeSet<&str> = parts
            .iter()
            .map(|p| key(&p.summary))
            .filter(|k| !k.is_empty())
            .collect();
        match named.len() {
            0 | 1 => Ok(()),
            _ => Err(format!(
                "workers of different runs of {}: {what} {}",
                first.scenario,
                named.into_iter().collect::<Vec<_>>().join(" and ")
            )),
        }
    };
    one_of("run ids (run --run-id)", |s| &s.run_id)?;
    one_of(
        "run hashes (the scenario was run differently: its target, rate, duration, mix or SLOs, or by another version of this program)",
        |s| &s.run_hash,
    )?;
    // Workers of one run are started together, give or take a Job's
    // stagger: one whose schedule began after another's ended is of
    // another run.
    let ends = |s: &Summary| s.started_at_ms + ((s.warmup_s + s.duration_s) * 1e3) as u64;
    let last_start = parts
        .iter()
        .map(|p| &p.summary)
        .max_by_key(|s| s.started_at_ms);
    let first_end = parts.iter().map(|p| &p.summary).min_by_key(|s| ends(s));
    if let (Some(late), Some(early)) = (last_start, first_end)
        && late.started_at_ms >= ends(early)
    {
        return Err(format!(
            "not one run: worker {} started {:.1} s after worker {}'s schedule had ended",
            late.shard.map_or(0, |s| s.index),
            (late.started_at_ms - ends(early)) as f64 / 1e3,
            early.shard.map_or(0, |s| s.index),
        ));
    }
    let count = first.shard.map_or(0, |s| s.count);
    seen.sort_unstable();
    let expected: Vec<u32> = (0..count).collect();
    if seen != expected {
        return Err(format!(
            "shards {seen:?} of {count}: each of 0 to {} must be given once",
            count.saturating_sub(1)
        ));
    }
    Ok(())
}

/// The SLO limits the shards judged by, for the whole run (a shard's
/// `min_throughput` is its share of the run's).
fn whole_run_slo(parts: &[Measured]) -> Slo {
    let mut slo = Slo::default();
    for c in &parts[0].summary.slo {
        match c.name.as_str() {
            "p99_ms" => slo.p99_ms = Some(c.limit),
            "max_error_rate" => slo.max_error_rate = Some(c.limit),
            "min_throughput" => {
                slo.min_throughput = Some(
                    parts
                        .iter()
                        .flat_map(|p| &p.summary.slo)
                        .filter(|c| c.name == "min_throughput")
                        .map(|c| c.limit)
                        .sum(),
                );
            }
            _ => {}
        }
    }
    slo
}

/// A per-second series of every shard, second N of each schedule added to
/// second N of the run's by `add`.
fn aligned<T: Copy + Default>(
    parts: &[Measured],
    series: impl Fn(&Summary) -> &Vec<T>,
    add: impl Fn(&mut T, T),
) -> Vec<T> {
    let mut sum: Vec<T> = Vec::new();
    for p in parts {
        for (i, v) in series(&p.summary).iter().enumerate() {
            if sum.len() <= i {
                sum.resize(i + 1, T::default());
            }
            add(&mut sum[i], *v);
        }
    }
    sum
}

/// Merges the shards of one run into one result, as if one generator had
/// measured it.
pub fn merge(parts: &[Measured]) -> Result<Measured, String> {
    check_shards(parts)?;
    let first = &parts[0].summary;
    let origin = parts
        .iter()
        .map(|p| p.summary.started_at_ms)
        .min()
        .unwrap_or(first.started_at_ms);
    let mut overall = hist();
    let mut schedule_lag = hist();
    let mut per_method: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    // Seconds of the schedule, every shard's on the run's.
    let mut seconds: BTreeMap<u64, Histogram<u64>> = BTreeMap::new();
    for p in parts {
        add(&mut overall, &p.overall)?;
        add(&mut schedule_lag, &p.schedule_lag)?;
        for (m, h) in &p.per_method {
            add(per_method.entry(m.clone()).or_insert_with(hist), h)?;
        }
        for (end, h) in &p.intervals {
            let second = end.as_secs_f64().ceil() as u64;
            add(seconds.entry(second).or_insert_with(hist), h)?;
        }
    }
    let accounting = sum_accounting(parts);
    let latency = Latency::of(&overall);
    // The measured part, on the schedule: until the last reply of any.
    let span = parts
        .iter()
        .map(|p| p.summary.measured_span_s)
        .fold(first.duration_s, f64::max);
    let throughput = overall.len() as f64 / span.max(1e-9);
    let offered = parts
        .iter()
        .map(|p| p.summary.rates.offered)
        .sum::<Option<f64>>();
    let rates = Rates {
        offered,
        sent: parts.iter().map(|p| p.summary.rates.sent).sum(),
        achieved: throughput,
    };
    let slo = checks(&whole_run_slo(parts), &latency, &accounting, throughput);
    let pass = slo.iter().all(|c| c.pass);
    let summary = Summary {
        schema: SCHEMA_ID.into(),
        scenario: first.scenario.clone(),
        target: first.target.clone(),
        model: first.model.clone(),
        date: first.date.clone(),
        machine: first.machine.clone(),
        duration_s: first.duration_s,
        warmup_s: first.warmup_s,
        measured_span_s: span,
        connections: parts.iter().map(|p| p.summary.connections).sum(),
        started_at_ms: origin,
        shard: None,
        run_hash: String::new(),
        run_id: first.run_id.clone(),
        throughput,
        rates,
        accounting,
        latency_ms: latency,
        per_method: per_method
            .iter()
            .map(|(m, h)| (m.clone(), Latency::of(h)))
            .collect(),
        per_second: aligned(
            parts,
            |s| &s.per_second,
            |a, [replies, errors]| {
                a[0] += replies;
                a[1] += errors;
            },
        ),
        offered_per_second: aligned(parts, |s| &s.offered_per_second, |a, v| *a += v),
        outstanding_per_second: aligned(parts, |s| &s.outstanding_per_second, |a, v| *a += v),
        stages: Vec::new(),
        schedule_lag_ms: Latency::of(&schedule_lag),
        generator_kept_schedule: parts.iter().all(|p| p.summary.generator_kept_schedule),
        held_back_sends: parts.iter().map(|p| p.summary.held_back_sends).sum(),
        slo,
        pass,
        interrupted: parts.iter().any(|p| p.summary.interrupted),
    };
    let intervals: Vec<(Duration, Histogram<u64>)> = seconds
        .into_iter()
        .map(|(s, h)| (Duration::from_secs(s), h))
        .collect();
    let mut summary = summary;
    summary.stages = stages(&summary, &intervals);
    Ok(Measured {
        summary,
        overall,
        schedule_lag,
        per_method,
        intervals,
    })
}
