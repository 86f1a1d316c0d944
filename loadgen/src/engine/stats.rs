//! Every count of a run: sends, replies by class, latency histograms
//! (overall, per method, per second, the generator's own lag).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::template::Expect;

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

/// Every count of a run; shared by the connections, under one lock.
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
    /// Replies and errors per second since the start.
    pub per_second: Vec<(u64, u64)>,
    /// Latency of the current progress interval.
    pub interval: Histogram<u64>,
    /// How late the generator itself sent (intended → written), µs.
    pub schedule_lag: Histogram<u64>,
    answered: Vec<u64>,
    expired: Vec<u64>,
    expect_error: Vec<bool>,
    /// Successes whose result was not the request's own params, for
    /// messages with `verify_echo`.
    pub wrong_result: u64,
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
            interval: hist(),
            schedule_lag: hist(),
            answered: Vec::new(),
            expired: Vec::new(),
            expect_error,
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
        let now = Instant::now();
        let second = now.duration_since(self.started).as_secs() as usize;
        if self.per_second.len() <= second {
            self.per_second.resize(second + 1, (0, 0));
        }
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
        if replied {
            self.per_second[second].0 += 1;
            if intended >= self.measure_from {
                self.last_measured_reply =
                    Some(self.last_measured_reply.map_or(now, |t| t.max(now)));
                let us = u64::try_from(now.saturating_duration_since(intended).as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                let _ = self.overall.record(us);
                let _ = self.interval.record(us);
                if let Some(h) = self.per_method.get_mut(e.message) {
                    let _ = h.record(us);
                }
            }
        }
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
