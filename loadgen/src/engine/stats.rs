//! Every count of a run: sends, replies by class, latency histograms
//! (overall, per method, per second, the generator's own lag).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::mix::Expect;

/// Adds `from` into `into`; every histogram here resizes itself (see
/// [`hist`]), so no count is out of its range.
fn add(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    into.add(from)
        .expect("an auto-resizing histogram takes any other's counts");
}

fn hist() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid precision")
}

/// How one expected reply ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// A JSON-RPC error (code), with the HTTP status when there was one.
    Error {
        code: i64,
        status: Option<u16>,
    },
    /// A success whose result is not the request's echo (`verify_echo`).
    WrongResult,
    /// No JSON-RPC answer: connection failure, HTTP error page, ...
    Transport(String),
    Timeout,
    Lost,
}

/// Every count of a run, or of one share of its connections (the shares
/// are added up into the run's).
#[derive(Clone)]
pub struct Stats {
    pub started: Instant,
    /// `started` on the wall clock, milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// When measuring begins (after warm-up).
    pub measure_from: Instant,
    /// When the measured part's schedule ends.
    pub measure_until: Instant,
    /// When the last reply to a measured request came (its settling).
    pub last_measured_reply: Option<Instant>,
    /// The run's first request id (a shard's ids are its own).
    id_base: u64,
    pub sent_requests: u64,
    /// Of `sent_requests`, those of the measured part (the rest is the
    /// warm-up's).
    pub sent_measured: u64,
    /// Requests that actually left while the measured part was scheduled:
    /// short of `sent_measured` when the generator fell behind.
    pub sent_in_window: u64,
    /// Open-loop sends that found every connection busy and waited: the
    /// target held the schedule back, not the generator.
    pub held_back: u64,
    pub sent_notifications: u64,
    pub sent_batches: u64,
    pub ok: u64,
    pub expected_errors: u64,
    pub unexpected_errors: u64,
    pub error_codes: BTreeMap<i64, u64>,
    pub http_status: BTreeMap<u16, u64>,
    pub transport: BTreeMap<String, u64>,
    pub timed_out: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub late: u64,
    pub mismatched: u64,
    pub overall: Histogram<u64>,
    pub per_method: Vec<Histogram<u64>>,
    /// Replies and errors in each second since the start, each request
    /// counted in the second of its *intended* send time (its slot on the
    /// schedule), not in the second its reply came: a stage's rows hold
    /// its own requests, whenever they were answered.
    pub per_second: Vec<(u64, u64)>,
    /// Latency of the measured requests intended in each second since the
    /// start (as `per_second`); a share's move into the run's at each
    /// snapshot (`Stats::absorb`), so each is allocated once a second at
    /// most, never per request.
    pub latency_per_second: Vec<Option<Histogram<u64>>>,
    /// Latency of the replies that came in the current progress interval
    /// (the live line's; by reply time): in a snapshot, the per-second
    /// histograms it took from the shares added up
    /// (`Stats::interval_of_seconds`), so a reply is recorded once less.
    pub interval: Histogram<u64>,
    /// Replies and errors that came in the current progress interval (the
    /// live line's; by reply time, the warm-up's included).
    pub interval_counts: (u64, u64),
    /// Requests the schedule placed but never sent: the generator (or the
    /// target holding it back) was so far behind that they would have left
    /// after the schedule's end ([`super::run`]).
    pub dropped: u64,
    /// Of `dropped`, those of the measured part.
    pub dropped_measured: u64,
    /// How late the generator itself sent (intended → written), µs.
    pub schedule_lag: Histogram<u64>,
    answered: Vec<u64>,
    expired: Vec<u64>,
    expect_error: Vec<bool>,
    /// Successes whose result was not the request's own params, for
    /// messages with `verify_echo`.
    pub wrong_result: u64,
    /// When the run was interrupted (Ctrl-C), since its start: it ran
    /// that long, and `measure_until` is no later.
    pub interrupted: Option<Duration>,
    /// When a closed loop's count of sends (`requests`) was spent (its
    /// last send taken; what was in flight was then drained), since the
    /// run's start: the measured part ended there.
    pub count_reached: Option<Duration>,
}

impl Stats {
    pub(crate) fn new(
        started: Instant,
        warmup: Duration,
        measured: Duration,
        methods: usize,
        expect_error: Vec<bool>,
    ) -> Self {
        let started_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .saturating_sub(u64::try_from(started.elapsed().as_millis()).unwrap_or(0));
        Self {
            started,
            started_at_ms,
            measure_from: started + warmup,
            measure_until: started + warmup + measured,
            last_measured_reply: None,
            id_base: 0,
            sent_requests: 0,
            sent_measured: 0,
            sent_in_window: 0,
            held_back: 0,
            sent_notifications: 0,
            sent_batches: 0,
            ok: 0,
            expected_errors: 0,
            unexpected_errors: 0,
            error_codes: BTreeMap::new(),
            http_status: BTreeMap::new(),
            transport: BTreeMap::new(),
            timed_out: 0,
            lost: 0,
            duplicated: 0,
            late: 0,
            mismatched: 0,
            overall: hist(),
            per_method: (0..methods).map(|_| hist()).collect(),
            per_second: Vec::new(),
            latency_per_second: Vec::new(),
            interval: hist(),
            interval_counts: (0, 0),
            dropped: 0,
            dropped_measured: 0,
            schedule_lag: hist(),
            answered: Vec::new(),
            expired: Vec::new(),
            expect_error,
            interrupted: None,
            count_reached: None,
            wrong_result: 0,
        }
    }

    /// The same, for a run whose request ids start above `id_base` (a
    /// shard's are its own).
    pub(super) fn with_id_base(self, id_base: u64) -> Self {
        Self { id_base, ..self }
    }

    fn bit(v: &mut Vec<u64>, id: u64) -> (usize, u64) {
        let (w, b) = ((id / 64) as usize, 1u64 << (id % 64));
        if v.len() <= w {
            v.resize(w + 1, 0);
        }
        (w, b)
    }

    fn mark(v: &mut Vec<u64>, id: u64) {
        let (w, b) = Self::bit(v, id);
        v[w] |= b;
    }

    fn is_marked(v: &[u64], id: u64) -> bool {
        v.get((id / 64) as usize)
            .is_some_and(|w| w & (1u64 << (id % 64)) != 0)
    }

    /// A reply that matched no pending request.
    pub(super) fn unmatched(&mut self, id: Option<u64>) {
        // The bitmaps hold ids from this run's (shard's) first.
        match id.and_then(|id| id.checked_sub(self.id_base)) {
            Some(id) if Self::is_marked(&self.answered, id) => self.duplicated += 1,
            Some(id) if Self::is_marked(&self.expired, id) => {
                // The first answer after the timeout is late; another one
                // would be a duplicate.
                self.late += 1;
                Self::mark(&mut self.answered, id);
            }
            _ => self.mismatched += 1,
        }
    }

    /// Records how one expected reply ended.
    pub fn complete(&mut self, e: Expect, intended: Instant, outcome: Outcome) {
        self.complete_at(e, intended, outcome, Instant::now());
    }

    /// [`Stats::complete`], with the reply's time given: each count goes
    /// to the second of the request's intended send time (an index
    /// computed from it, no lookup).
    pub(crate) fn complete_at(
        &mut self,
        e: Expect,
        intended: Instant,
        outcome: Outcome,
        now: Instant,
    ) {
        let second = intended.saturating_duration_since(self.started).as_secs() as usize;
        if self.per_second.len() <= second {
            self.per_second.resize(second + 1, (0, 0));
        }
        let errors_before = self.per_second[second].1;
        let local = e.id.saturating_sub(self.id_base);
        match &outcome {
            Outcome::Timeout => Self::mark(&mut self.expired, local),
            _ => Self::mark(&mut self.answered, local),
        }
        let replied = matches!(
            outcome,
            Outcome::Ok | Outcome::Error { .. } | Outcome::WrongResult
        );
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::WrongResult => {
                self.wrong_result += 1;
                self.per_second[second].1 += 1;
            }
            Outcome::Error { code, status } => {
                *self.error_codes.entry(code).or_default() += 1;
                if let Some(s) = status {
                    *self.http_status.entry(s).or_default() += 1;
                }
                if self.expect_error.get(e.message).copied().unwrap_or(false) {
                    self.expected_errors += 1;
                } else {
                    self.unexpected_errors += 1;
                    self.per_second[second].1 += 1;
                }
            }
            Outcome::Transport(what) => {
                *self.transport.entry(what).or_default() += 1;
                self.per_second[second].1 += 1;
            }
            Outcome::Timeout => {
                self.timed_out += 1;
                self.per_second[second].1 += 1;
            }
            Outcome::Lost => self.lost += 1,
        }
        self.interval_counts.1 += self.per_second[second].1 - errors_before;
        if replied {
            self.per_second[second].0 += 1;
            self.interval_counts.0 += 1;
            if intended >= self.measure_from {
                self.last_measured_reply =
                    Some(self.last_measured_reply.map_or(now, |t| t.max(now)));
                let us = u64::try_from(now.saturating_duration_since(intended).as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                let _ = self.overall.record(us);
                if let Some(h) = self.per_method.get_mut(e.message) {
                    let _ = h.record(us);
                }
                if self.latency_per_second.len() <= second {
                    self.latency_per_second.resize(second + 1, None);
                }
                let _ = self.latency_per_second[second]
                    .get_or_insert_with(hist)
                    .record(us);
            }
        }
    }

    /// Adds the counts of `other` (another share of the same run's
    /// connections) to these, and moves its current progress interval's
    /// counts and its histograms per second here, so that `other` starts
    /// anew. The id bitmaps stay: they only
    /// tell, within a share, a duplicate or late reply from a stray one.
    pub(super) fn absorb(&mut self, other: &mut Stats) {
        self.last_measured_reply = self.last_measured_reply.max(other.last_measured_reply);
        for (into, from) in [
            (&mut self.ok, other.ok),
            (&mut self.expected_errors, other.expected_errors),
            (&mut self.unexpected_errors, other.unexpected_errors),
            (&mut self.timed_out, other.timed_out),
            (&mut self.lost, other.lost),
            (&mut self.duplicated, other.duplicated),
            (&mut self.late, other.late),
            (&mut self.mismatched, other.mismatched),
            (&mut self.wrong_result, other.wrong_result),
            (&mut self.dropped, other.dropped),
            (&mut self.dropped_measured, other.dropped_measured),
        ] {
            *into += from;
        }
        for (code, n) in &other.error_codes {
            *self.error_codes.entry(*code).or_default() += n;
        }
        for (status, n) in &other.http_status {
            *self.http_status.entry(*status).or_default() += n;
        }
        for (what, n) in &other.transport {
            *self.transport.entry(what.clone()).or_default() += n;
        }
        add(&mut self.overall, &other.overall);
        add(&mut self.schedule_lag, &other.schedule_lag);
        self.interval_counts.0 += other.interval_counts.0;
        self.interval_counts.1 += other.interval_counts.1;
        other.interval_counts = (0, 0);
        move_seconds(&mut self.latency_per_second, &mut other.latency_per_second);
        for (into, from) in self.per_method.iter_mut().zip(&other.per_method) {
            add(into, from);
        }
        if self.per_second.len() < other.per_second.len() {
            self.per_second.resize(other.per_second.len(), (0, 0));
        }
        for (into, from) in self.per_second.iter_mut().zip(&other.per_second) {
            into.0 += from.0;
            into.1 += from.1;
        }
    }

    /// `interval`: the latency of the replies in this snapshot's
    /// per-second histograms, which came since the last one.
    pub(super) fn interval_of_seconds(&mut self) {
        for h in self.latency_per_second.iter().flatten() {
            add(&mut self.interval, h);
        }
    }

    /// The latency of each second since the start, by intended send time,
    /// as (the second's end, its histogram): empty seconds included, the
    /// schedule's every second at least (`seconds`).
    pub fn latency_intervals(&self, seconds: usize) -> Vec<(Duration, Histogram<u64>)> {
        (0..self.latency_per_second.len().max(seconds))
            .map(|i| {
                let h = self.latency_per_second.get(i).and_then(Option::as_ref);
                (
                    Duration::from_secs(i as u64 + 1),
                    h.cloned().unwrap_or_else(hist),
                )
            })
            .collect()
    }

    pub fn answered(&self) -> u64 {
        self.ok + self.expected_errors + self.unexpected_errors + self.wrong_result
    }

    /// Requests that got no reply of any kind yet.
    pub fn outstanding(&self) -> u64 {
        let done =
            self.answered() + self.transport.values().sum::<u64>() + self.timed_out + self.lost;
        self.sent_requests.saturating_sub(done)
    }
}

/// Moves the per-second histograms of `from` into `into` (`from` keeps
/// none: a share allocates a second's anew when its next reply comes).
pub(super) fn move_seconds(
    into: &mut Vec<Option<Histogram<u64>>>,
    from: &mut [Option<Histogram<u64>>],
) {
    if into.len() < from.len() {
        into.resize(from.len(), None);
    }
    for (into, from) in into.iter_mut().zip(from.iter_mut()) {
        if let Some(h) = from.take() {
            match into {
                Some(into) => add(into, &h),
                None => *into = Some(h),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request is counted in the second of its intended send time, not
    /// in the second its reply came (issue 54: a ramp's stages counted
    /// replies that belonged to the stage before).
    #[test]
    fn replies_count_in_the_second_their_request_was_intended() {
        let started = Instant::now() - Duration::from_millis(3500);
        let mut s = Stats::new(
            started,
            Duration::ZERO,
            Duration::from_secs(4),
            1,
            vec![false],
        );
        let e = |id| Expect { id, message: 0 };
        // Intended 1.2 s and 2.9 s after the start, answered now (3.5 s).
        s.complete(e(1), started + Duration::from_millis(1200), Outcome::Ok);
        s.complete(
            e(2),
            started + Duration::from_millis(2900),
            Outcome::Timeout,
        );
        assert_eq!(s.per_second.get(1), Some(&(1, 0)), "{:?}", s.per_second);
        assert_eq!(s.per_second.get(2), Some(&(0, 1)), "{:?}", s.per_second);
        assert_eq!(s.per_second.get(3).copied().unwrap_or_default(), (0, 0));
    }

    #[test]
    fn shares_add_up_to_what_one_would_have_counted() {
        let started = Instant::now() - Duration::from_secs(2);
        let blank = Stats::new(
            started,
            Duration::ZERO,
            Duration::from_secs(5),
            2,
            vec![false, true],
        );
        let (mut one, mut a, mut b) = (blank.clone(), blank.clone(), blank.clone());
        let outcomes = [
            Outcome::Ok,
            Outcome::Error {
                code: -32000,
                status: Some(500),
            },
            Outcome::Transport("refused".into()),
            Outcome::Timeout,
            Outcome::WrongResult,
            Outcome::Ok,
        ];
        for (i, outcome) in outcomes.iter().enumerate() {
            let e = Expect {
                id: i as u64 + 1,
                message: i % 2,
            };
            let intended = Instant::now() - Duration::from_millis(1 + i as u64);
            one.complete(e, intended, outcome.clone());
            let share = if i % 2 == 0 { &mut a } else { &mut b };
            share.complete(e, intended, outcome.clone());
        }
        // A late answer to the request that timed out, in its own share.
        one.unmatched(Some(4));
        b.unmatched(Some(4));
        let mut sum = blank.clone();
        sum.absorb(&mut a);
        sum.absorb(&mut b);
        let counts = |s: &Stats| {
            (
                (s.ok, s.expected_errors, s.unexpected_errors, s.wrong_result),
                (s.timed_out, s.late, s.lost, s.duplicated, s.mismatched),
                (
                    s.error_codes.clone(),
                    s.http_status.clone(),
                    s.transport.clone(),
                ),
                s.per_second.clone(),
                (
                    s.overall.len(),
                    s.per_method[0].len(),
                    s.per_method[1].len(),
                ),
            )
        };
        assert_eq!(counts(&sum), counts(&one));
        // Latency is read at each completion: the same within the test's
        // own time, at least the 6 ms the last request was late by.
        let max_ms = |s: &Stats| s.overall.max() / 1000;
        assert!(max_ms(&sum) >= 6 && max_ms(&sum).abs_diff(max_ms(&one)) <= 50);
        // The shares' histograms per second moved into the sum.
        let seconds = |s: &Stats| -> Vec<u64> {
            let each = s.latency_per_second.iter();
            each.map(|h| h.as_ref().map_or(0, Histogram::len)).collect()
        };
        assert_eq!(seconds(&sum), seconds(&one));
        assert!(seconds(&a).iter().chain(&seconds(&b)).all(|n| *n == 0));
        sum.interval_of_seconds();
        assert_eq!(sum.interval.len(), one.overall.len());
        assert_eq!(
            sum.last_measured_reply.is_some(),
            one.last_measured_reply.is_some()
        );
    }
}
