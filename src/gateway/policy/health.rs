//! How a gateway judges the members it can send to and spends retries,
//! without I/O: each member's [`Health`] (counters a request updates as it
//! goes; an edge's origins, an origin's upstreams), the choice of one for a
//! stateless request ([`choose`]), and the [`RetryBudget`] that keeps
//! failover from multiplying an outage. The rules below are put in terms
//! of an edge's origins; an origin's upstreams follow the same.
//!
//! - An origin is **ejected** when an association to it cannot be made or
//!   one ends under its requests, and after [`EJECT_AFTER_FAILURES`]
//!   failed answers in a row. It is re-admitted when its backoff has passed
//!   ([`EJECT_BASE`], doubling to [`EJECT_MAX`]), and a reply from it clears
//!   the backoff.
//! - An origin is **stalled** while requests wait on it and none has been
//!   answered for [`STALL_AFTER`]: a killed peer over QUIC is silent until
//!   its associations time out, and new requests must not queue behind it.
//! - Retries and hedges together stay within `--retry-budget` percent of
//!   the requests of the last ten seconds, plus a reserve.
//! - Of the origins in the best state, the one with the least
//!   outstanding requests weighted by its smoothed latency is chosen;
//!   ties go round robin.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize};
use std::time::{Duration, Instant};

use crate::gateway::metrics::Families;

/// Failed answers in a row (not delivered, lost) that eject an origin.
pub const EJECT_AFTER_FAILURES: u32 = 3;
/// The first ejection's length; each one after without a reply doubles it.
pub const EJECT_BASE: Duration = Duration::from_millis(250);
/// The longest ejection.
pub const EJECT_MAX: Duration = Duration::from_secs(8);
/// Requests outstanding and none answered for this long: the origin is
/// stalled.
pub const STALL_AFTER: Duration = Duration::from_secs(1);
/// An idle origin's latency older than this is not weighed.
pub const LATENCY_STALE: Duration = Duration::from_secs(2);

/// An origin's standing, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    Admitted = 0,
    Stalled = 1,
    Ejected = 2,
}

/// What the edge knows of one origin. Times are milliseconds since the
/// edge's `epoch` (0: never).
#[derive(Debug, Default)]
pub struct Health {
    outstanding: AtomicI64,
    /// When `outstanding` last went from 0 to 1.
    busy_since: AtomicU64,
    /// When the last answer came (a reply or a failure from the peer).
    answered_at: AtomicU64,
    /// Smoothed reply latency, µs (weight 1/8; 0: none yet).
    latency_us: AtomicU64,
    /// Failed answers in a row.
    failures: AtomicU32,
    /// Ejections since the last reply: sets the backoff.
    strikes: AtomicU32,
    /// Ejected until this time (0: admitted).
    ejected_until: AtomicU64,
    /// Requests sent here (tries, hedges included).
    pub requests: AtomicU64,
    pub ejections: AtomicU64,
    /// Requests that failed here and were sent to another origin.
    pub retries: AtomicU64,
    /// Second copies of slow read-only requests sent here.
    pub hedges: AtomicU64,
    /// Hedges sent here that answered first.
    pub hedges_won: AtomicU64,
}

/// How one request went, for its origin's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The upstream's reply (a result or its JSON-RPC error).
    Replied(Duration),
    /// The origin answered that it could not deliver.
    NotDelivered,
    /// No association: it could not be made, or it ended under the request.
    Unreachable,
    /// Nothing that says anything about the origin (a timeout, a refusal
    /// of this gateway's own, a request cancelled by a hedge).
    Neutral,
}

impl Health {
    /// A request is sent to this origin.
    pub fn start(&self, now: u64) {
        self.requests.fetch_add(1, Relaxed);
        if self.outstanding.fetch_add(1, Relaxed) == 0 {
            self.busy_since.store(now, Relaxed);
        }
    }

    /// A request sent with [`Health::start`] is over.
    pub fn finish(&self, now: u64, outcome: Outcome) {
        self.outstanding.fetch_sub(1, Relaxed);
        match outcome {
            Outcome::Replied(latency) => {
                self.answered_at.store(now, Relaxed);
                self.revive();
                let sample = u64::try_from(latency.as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                let old = self.latency_us.load(Relaxed);
                let new = if old == 0 {
                    sample
                } else {
                    old - old / 8 + sample / 8
                };
                self.latency_us.store(new, Relaxed);
            }
            Outcome::NotDelivered => {
                self.answered_at.store(now, Relaxed);
                if self.failures.fetch_add(1, Relaxed) + 1 >= EJECT_AFTER_FAILURES {
                    self.eject(now);
                }
            }
            Outcome::Unreachable => self.eject(now),
            Outcome::Neutral => {}
        }
    }

    /// A reply came: admitted again, its failures forgotten. Written only
    /// when set: every reply of every request comes here, and a shared
    /// line written by all cores costs.
    pub fn revive(&self) {
        for flag in [&self.failures, &self.strikes] {
            if flag.load(Relaxed) != 0 {
                flag.store(0, Relaxed);
            }
        }
        if self.ejected_until.load(Relaxed) != 0 {
            self.ejected_until.store(0, Relaxed);
        }
    }

    /// Forgets past failures: the next ejection is the shortest.
    pub fn clear(&self) {
        self.failures.store(0, Relaxed);
        self.strikes.store(0, Relaxed);
        self.ejected_until.store(0, Relaxed);
    }

    /// Takes the origin out of rotation for its backoff.
    pub fn eject(&self, now: u64) {
        // Once per backoff, however many requests saw it fail.
        if self.ejected_until.load(Relaxed) > now {
            return;
        }
        let strikes = self.strikes.fetch_add(1, Relaxed).min(16);
        let backoff = EJECT_BASE.saturating_mul(1 << strikes).min(EJECT_MAX);
        let until = now + u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX);
        self.failures.store(0, Relaxed);
        self.ejected_until.store(until, Relaxed);
        self.ejections.fetch_add(1, Relaxed);
    }

    /// Whether requests may go here now (not ejected; a stalled one still
    /// takes them when nothing better is left).
    pub fn is_up(&self, now: u64) -> bool {
        self.ejected_until.load(Relaxed) <= now
    }

    pub fn standing(&self, now: u64) -> Standing {
        if self.ejected_until.load(Relaxed) > now {
            return Standing::Ejected;
        }
        if self.outstanding.load(Relaxed) > 0 {
            let heard = self
                .answered_at
                .load(Relaxed)
                .max(self.busy_since.load(Relaxed));
            if now.saturating_sub(heard) >= STALL_AFTER.as_millis() as u64 {
                return Standing::Stalled;
            }
        }
        Standing::Admitted
    }

    pub fn outstanding(&self) -> u64 {
        self.outstanding.load(Relaxed).max(0) as u64
    }

    /// The smoothed reply latency (zero before the first reply).
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_us.load(Relaxed))
    }

    /// What choosing it costs: its outstanding requests (one more with
    /// this one) times its latency, so a slow origin gets fewer. A latency
    /// not refreshed for [`LATENCY_STALE`] while idle no longer counts: an
    /// origin that was slow once (or just came back) is tried again rather
    /// than passed over for good.
    fn load(&self, now: u64) -> u128 {
        let idle = self.outstanding.load(Relaxed) <= 0;
        let stale =
            now.saturating_sub(self.answered_at.load(Relaxed)) >= LATENCY_STALE.as_millis() as u64;
        let latency = if idle && stale {
            1
        } else {
            self.latency_us.load(Relaxed).max(1)
        };
        u128::from(self.outstanding() + 1) * u128::from(latency)
    }
}

/// The origin for the next request: of those not in `tried` (a bit per
/// origin, so at most 64), the best standing, then the least load; `start` breaks ties
/// (a counter, for round robin). `None` when every origin was tried.
pub fn choose<'a>(
    n: usize,
    health: impl Fn(usize) -> &'a Health,
    tried: u64,
    now: u64,
    start: usize,
) -> Option<usize> {
    (0..n)
        .map(|k| (start + k) % n)
        .filter(|&i| tried & (1 << i) == 0)
        .min_by_key(|&i| (health(i).standing(now), health(i).load(now)))
}

/// `/readyz` for a set of origins or upstreams (`what`): ready while one
/// of them is not ejected; else why not.
pub fn readiness<'a>(
    what: &str,
    healths: impl IntoIterator<Item = &'a Health>,
    now: u64,
) -> Result<(), String> {
    let mut ejected = 0;
    for h in healths {
        if h.is_up(now) {
            return Ok(());
        }
        ejected += 1;
    }
    Err(format!(
        "no {what} is up: {ejected} ejected after failing, each tried again after its backoff"
    ))
}

/// What every chooser of origins or upstreams keeps: the clock its
/// healths count in, and the turn that breaks ties round robin.
#[derive(Debug)]
pub struct Chooser {
    epoch: Instant,
    turn: AtomicUsize,
}

impl Chooser {
    /// A chooser whose healths count time from `epoch` (the shell reads
    /// the clock for it).
    pub fn starting(epoch: Instant) -> Self {
        Self {
            epoch,
            turn: AtomicUsize::new(0),
        }
    }

    /// Where the clock counts from.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Where the next round-robin scan starts.
    pub fn turn(&self) -> usize {
        self.turn.fetch_add(1, Relaxed)
    }

    /// `t` as its healths count time: milliseconds since the epoch, at
    /// least 1.
    pub fn at(&self, t: Instant) -> u64 {
        millis(self.epoch, t)
    }

    /// [`choose`] at `now` (from [`Chooser::at`]), from the next turn.
    pub fn choose_at<'a>(
        &self,
        now: u64,
        n: usize,
        health: impl Fn(usize) -> &'a Health,
        tried: u64,
    ) -> Option<usize> {
        choose(n, health, tried, now, self.turn())
    }
}

/// Milliseconds from `epoch` to `now` (at least 1, so 0 can mean never).
pub fn millis(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(epoch).as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Retries (and hedges) as a share of requests: over the last
/// [`RetryBudget::WINDOW`], at most `percent` % of the requests plus
/// [`RetryBudget::RESERVE`]. Counted in one slot per second; a retry the
/// budget refuses is counted in `exhausted`.
#[derive(Debug)]
pub struct RetryBudget {
    percent: u64,
    slots: [Second; Self::SECONDS],
    pub exhausted: AtomicU64,
}

#[derive(Debug, Default)]
struct Second {
    /// Which second (since the edge's epoch) the counts are of.
    second: AtomicU64,
    requests: AtomicU64,
    retries: AtomicU64,
}

impl RetryBudget {
    const SECONDS: usize = 10;
    /// How far back requests earn retries.
    pub const WINDOW: Duration = Duration::from_secs(Self::SECONDS as u64);
    /// Retries allowed per window beyond the share: the requests in flight
    /// at an origin that dies while traffic is light.
    pub const RESERVE: u64 = 100;

    pub fn new(percent: u32) -> Self {
        Self {
            percent: u64::from(percent.min(100)),
            slots: Default::default(),
            exhausted: AtomicU64::new(0),
        }
    }

    /// The slot of the second `now` (ms) falls in, emptied when it last
    /// counted an older second. (Two threads starting a second at once may
    /// lose a count: the budget is approximate by that much.)
    fn slot(&self, now: u64) -> &Second {
        let second = now / 1000 + 1;
        let slot = &self.slots[second as usize % Self::SECONDS];
        let was = slot.second.load(Relaxed);
        if was != second
            && slot
                .second
                .compare_exchange(was, second, Relaxed, Relaxed)
                .is_ok()
        {
            slot.requests.store(0, Relaxed);
            slot.retries.store(0, Relaxed);
        }
        slot
    }

    /// A request came in at `now` (ms).
    pub fn deposit(&self, now: u64) {
        self.slot(now).requests.fetch_add(1, Relaxed);
    }

    /// A retry at `now` (ms): false (and counted) when the window's share
    /// is spent.
    pub fn withdraw(&self, now: u64) -> bool {
        let current = self.slot(now);
        let second = now / 1000 + 1;
        let (mut requests, mut retries) = (0, 0);
        for s in &self.slots {
            if second - s.second.load(Relaxed) < Self::SECONDS as u64 {
                requests += s.requests.load(Relaxed);
                retries += s.retries.load(Relaxed);
            }
        }
        if retries < Self::RESERVE + requests * self.percent / 100 {
            current.retries.fetch_add(1, Relaxed);
            true
        } else {
            self.exhausted.fetch_add(1, Relaxed);
            false
        }
    }
}

/// A percentile of recent latencies (`--hedge-after p95`), without locks:
/// latencies are counted in buckets an eighth of an octave wide (within
/// 9 %), in two windows of [`Percentile::WINDOW`] each, the current one
/// and the one before; the percentile is taken from both, again at most
/// every [`Percentile::REFRESH`], and is `None` before
/// [`Percentile::MIN_SAMPLES`] latencies.
#[derive(Debug)]
pub struct Percentile {
    /// Hundredths of a percent (`p95` is 9500).
    hundredths: u64,
    windows: [Window; 2],
    /// The last percentile taken, µs (0: none).
    value_us: AtomicU64,
    /// When to take it again (ms since the epoch).
    refresh_at: AtomicU64,
}

#[derive(Debug)]
struct Window {
    /// Which window (since the epoch, from 1) the counts are of.
    number: AtomicU64,
    counts: [AtomicU64; Percentile::BUCKETS],
}

impl Default for Window {
    fn default() -> Self {
        Self {
            number: AtomicU64::new(0),
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Percentile {
    pub const WINDOW: Duration = Duration::from_secs(5);
    pub const REFRESH: Duration = Duration::from_millis(100);
    pub const MIN_SAMPLES: u64 = 100;
    /// Eight buckets per octave of microseconds, up to 2^27 µs (134 s).
    const OCTAVES: usize = 28;
    const BUCKETS: usize = 8 + (Self::OCTAVES - 3) * 8;

    pub fn new(hundredths: u32) -> Self {
        Self {
            hundredths: u64::from(hundredths.min(9999)),
            windows: Default::default(),
            value_us: AtomicU64::new(0),
            refresh_at: AtomicU64::new(0),
        }
    }

    /// The bucket of `us` microseconds: below 8, one per value; above, the
    /// octave and its top three bits after the leading one.
    fn bucket(us: u64) -> usize {
        let us = us.clamp(1, (1 << Self::OCTAVES) - 1);
        if us < 8 {
            return us as usize;
        }
        let octave = 63 - us.leading_zeros() as usize;
        let eighth = ((us >> (octave - 3)) & 7) as usize;
        8 + (octave - 3) * 8 + eighth
    }

    /// The largest value in bucket `b` (what a percentile reports, so that
    /// a hedge waits at least as long as the percentile asks).
    fn upper(b: usize) -> u64 {
        if b < 8 {
            return b as u64;
        }
        let (octave, eighth) = ((b - 8) / 8 + 3, ((b - 8) % 8) as u64);
        ((8 + eighth + 1) << (octave - 3)) - 1
    }

    fn number(now: u64) -> u64 {
        now / Self::WINDOW.as_millis() as u64 + 1
    }

    /// The window for `now` (ms), emptied when it last counted an older
    /// one. (A count racing the emptying may be lost: an estimate.)
    fn window(&self, now: u64) -> &Window {
        let number = Self::number(now);
        let w = &self.windows[number as usize % 2];
        let was = w.number.load(Relaxed);
        if was != number
            && w.number
                .compare_exchange(was, number, Relaxed, Relaxed)
                .is_ok()
        {
            for c in &w.counts {
                c.store(0, Relaxed);
            }
        }
        w
    }

    /// A latency seen at `now` (ms).
    pub fn record(&self, now: u64, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.window(now).counts[Self::bucket(us)].fetch_add(1, Relaxed);
    }

    /// The percentile at `now` (ms), as last taken.
    pub fn get(&self, now: u64) -> Option<Duration> {
        let due = self.refresh_at.load(Relaxed);
        if now >= due
            && self
                .refresh_at
                .compare_exchange(
                    due,
                    now + Self::REFRESH.as_millis() as u64,
                    Relaxed,
                    Relaxed,
                )
                .is_ok()
        {
            self.value_us.store(self.take(now).unwrap_or(0), Relaxed);
        }
        match self.value_us.load(Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// The percentile of the current and the last window, µs.
    fn take(&self, now: u64) -> Option<u64> {
        let number = Self::number(now);
        let recent: Vec<&Window> = self
            .windows
            .iter()
            .filter(|w| number.saturating_sub(w.number.load(Relaxed)) <= 1)
            .collect();
        let count = |b: usize| {
            recent
                .iter()
                .map(|w| w.counts[b].load(Relaxed))
                .sum::<u64>()
        };
        let counts: Vec<u64> = (0..Self::BUCKETS).map(count).collect();
        let total: u64 = counts.iter().sum();
        if total < Self::MIN_SAMPLES {
            return None;
        }
        // The smallest latency at or above which fewer than (100 - p) %
        // of them lie: rank ⌈total × p⌉.
        let rank = (total * self.hundredths).div_ceil(10_000).max(1);
        let mut seen = 0;
        counts.iter().enumerate().find_map(|(b, &c)| {
            seen += c;
            (seen >= rank).then(|| Self::upper(b).max(1))
        })
    }
}

/// The `/metrics` families of these (name, health) pairs of `what`
/// (origin, upstream), as `{family}_up{{{what}="name"}}` and so on, and
/// the budget's refusals.
pub fn render(
    o: &mut Families,
    family: &str,
    what: &str,
    shown: &[(String, &Health)],
    now: u64,
    budget: &RetryBudget,
) {
    let name = |suffix: &str| format!("{family}_{suffix}");
    type Value = fn(&Health, u64) -> f64;
    let gauges: [(&str, String, Value); 3] = [
        (
            "up",
            format!("1 while new requests go to this {what}; 0 while it is ejected or stalled."),
            |h, now| f64::from(u8::from(h.standing(now) == Standing::Admitted)),
        ),
        (
            "outstanding",
            format!("Requests sent to this {what} and not yet answered."),
            |h, _| h.outstanding() as f64,
        ),
        (
            "latency_seconds",
            format!("Smoothed reply latency of this {what}."),
            |h, _| h.latency().as_secs_f64(),
        ),
    ];
    for (suffix, help, value) in gauges {
        let mut samples = o.gauge(&name(suffix), &help);
        for (shown, h) in shown {
            samples.with(&[(what, shown)], value(h, now));
        }
    }
    type Count = fn(&Health) -> u64;
    let counters: [(&str, &str, Count); 5] = [
        (
            "requests_total",
            "Requests sent to this {} (retries and hedges included).",
            |h| h.requests.load(Relaxed),
        ),
        (
            "ejections_total",
            "Times this {} was taken out of rotation.",
            |h| h.ejections.load(Relaxed),
        ),
        (
            "retries_total",
            "Requests not delivered by this {} and sent to another.",
            |h| h.retries.load(Relaxed),
        ),
        (
            "hedges_total",
            "Second copies of slow read-only requests sent to this {}.",
            |h| h.hedges.load(Relaxed),
        ),
        (
            "hedges_won_total",
            "Hedges sent to this {} that answered first.",
            |h| h.hedges_won.load(Relaxed),
        ),
    ];
    for (suffix, help, value) in counters {
        let mut samples = o.counter(&name(suffix), &help.replace("{}", what));
        for (shown, h) in shown {
            samples.with(&[(what, shown)], value(h) as f64);
        }
    }
    (o.counter(
        &name("retries_refused_total"),
        "Retries and hedges the retry budget refused.",
    ))
    .value(budget.exhausted.load(Relaxed) as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    fn pick(h: &[&Health], tried: u64, now: u64, start: usize) -> Option<usize> {
        choose(h.len(), |i| h[i], tried, now, start)
    }

    #[test]
    fn a_percentile_is_within_a_bucket_of_the_exact_one_and_forgets_old_windows() {
        // Every bucket's values lie in it, and its upper bound is its last.
        for us in 1..5000u64 {
            let b = Percentile::bucket(us);
            assert!(Percentile::upper(b) >= us, "{us}");
            assert!(b == 0 || Percentile::upper(b - 1) < us, "{us}");
            assert!(
                Percentile::upper(b) as f64 <= us as f64 * 1.125 + 1.0,
                "{us}"
            );
        }
        let p = Percentile::new(9500);
        assert_eq!(p.get(1), None, "nothing seen");
        // 99 latencies are too few: no hedging yet.
        for i in 1..=99 {
            p.record(1, Duration::from_micros(i * 100));
        }
        assert_eq!(p.take(1), None);
        // 1000 latencies, 0.1 to 100 ms: the exact p95 is 95 ms.
        for i in 100..=1000 {
            p.record(1, Duration::from_micros(i * 100));
        }
        let got = p.take(1).expect("a percentile") as f64;
        assert!((95_000.0..=95_000.0 * 1.125).contains(&got), "{got}");
        // `get` takes it again only once REFRESH has passed (the first
        // `get`, at 1, took it: none then).
        let refresh = ms(Percentile::REFRESH);
        assert_eq!(
            p.get(refresh).map(|d| d.as_micros() as f64),
            None,
            "not yet due"
        );
        assert_eq!(p.get(1 + refresh).map(|d| d.as_micros() as f64), Some(got));
        for _ in 0..100_000 {
            p.record(3, Duration::from_micros(10));
        }
        assert_eq!(
            p.get(2 * refresh).map(|d| d.as_micros() as f64),
            Some(got),
            "not yet due"
        );
        let soon = p.get(1 + 2 * refresh).expect("taken again");
        assert!(soon <= Duration::from_micros(12), "{soon:?}");
        // Two windows later, nothing recent is left.
        let later = 3 + 2 * ms(Percentile::WINDOW);
        assert_eq!(p.take(later), None);
        p.record(later, Duration::from_millis(7));
        assert_eq!(p.take(later), None, "one sample is too few");
    }

    #[test]
    fn least_load_wins_and_ties_go_round_robin() {
        let (a, b) = (Health::default(), Health::default());
        assert_eq!(pick(&[&a, &b], 0, 10, 0), Some(0));
        assert_eq!(pick(&[&a, &b], 0, 10, 1), Some(1));
        a.start(10);
        assert_eq!(pick(&[&a, &b], 0, 10, 0), Some(1), "b has none outstanding");
        assert_eq!(pick(&[&a, &b], 0b10, 10, 0), Some(0), "b was tried");
        assert_eq!(pick(&[&a, &b], 0b11, 10, 0), None);
    }

    #[test]
    fn a_slow_origin_gets_fewer_requests() {
        let (fast, slow) = (Health::default(), Health::default());
        for h in [&fast, &slow] {
            h.start(1);
        }
        fast.finish(2, Outcome::Replied(Duration::from_millis(1)));
        slow.finish(2, Outcome::Replied(Duration::from_millis(20)));
        // Up to 19 outstanding at the fast one cost less than 1 at the slow.
        for _ in 0..10 {
            fast.start(3);
        }
        slow.start(3);
        assert_eq!(pick(&[&fast, &slow], 0, 3, 1), Some(0));
    }

    #[test]
    fn a_silent_origin_stalls_and_a_reply_brings_it_back() {
        let (dead, live) = (Health::default(), Health::default());
        let t0 = 1000;
        dead.start(t0);
        dead.start(t0);
        assert_eq!(dead.standing(t0 + 10), Standing::Admitted);
        // More outstanding at the live one, but the dead one said nothing.
        for _ in 0..5 {
            live.start(t0);
        }
        let later = t0 + ms(STALL_AFTER);
        live.finish(later - 1, Outcome::Replied(Duration::from_millis(1)));
        assert_eq!(dead.standing(later), Standing::Stalled);
        assert_eq!(live.standing(later), Standing::Admitted);
        assert_eq!(pick(&[&dead, &live], 0, later, 0), Some(1));
        dead.finish(later, Outcome::Replied(Duration::from_millis(1)));
        assert_eq!(dead.standing(later), Standing::Admitted);
    }

    #[test]
    fn an_origin_slow_once_is_tried_again_once_its_latency_is_stale() {
        let (slow, fast) = (Health::default(), Health::default());
        for (h, ms) in [(&slow, 20), (&fast, 1)] {
            h.start(10);
            h.finish(10, Outcome::Replied(Duration::from_millis(ms)));
        }
        // One request at a time: the fast one, while the slow one's
        // latency is fresh...
        assert_eq!(pick(&[&slow, &fast], 0, 11, 0), Some(1));
        fast.start(500);
        fast.finish(500, Outcome::Replied(Duration::from_millis(1)));
        // ... and the idle slow one when its latency is old.
        let later = 10 + ms(LATENCY_STALE);
        assert_eq!(pick(&[&slow, &fast], 0, later, 0), Some(0));
    }

    #[test]
    fn an_idle_origin_is_not_stalled_by_its_first_request() {
        let h = Health::default();
        h.start(5);
        h.finish(6, Outcome::Replied(Duration::from_millis(1)));
        let much_later = 6 + 60_000;
        h.start(much_later);
        assert_eq!(h.standing(much_later + 10), Standing::Admitted);
    }

    #[test]
    fn ejection_backs_off_doubling_and_a_reply_clears_it() {
        let h = Health::default();
        let t = 100;
        h.finish_unreachable(t);
        assert_eq!(h.standing(t + ms(EJECT_BASE) - 1), Standing::Ejected);
        assert_eq!(h.standing(t + ms(EJECT_BASE)), Standing::Admitted);
        // Re-admitted, and unreachable again: twice as long.
        let t2 = t + ms(EJECT_BASE);
        h.finish_unreachable(t2);
        assert_eq!(h.standing(t2 + 2 * ms(EJECT_BASE) - 1), Standing::Ejected);
        assert_eq!(h.ejections.load(Relaxed), 2);
        // Many requests failing at once count as one ejection.
        h.finish_unreachable(t2 + 1);
        assert_eq!(h.ejections.load(Relaxed), 2);
        assert_eq!(h.standing(t2 + 2 * ms(EJECT_BASE)), Standing::Admitted);
        h.start(t2 + 600);
        h.finish(t2 + 601, Outcome::Replied(Duration::from_millis(1)));
        h.finish_unreachable(t2 + 700);
        assert_eq!(h.standing(t2 + 700 + ms(EJECT_BASE)), Standing::Admitted);
        // Never longer than the most.
        for k in 0..40 {
            h.eject(10_000 + k * ms(EJECT_MAX));
        }
        assert_eq!(h.standing(20_000 + 40 * ms(EJECT_MAX)), Standing::Admitted);
    }

    #[test]
    fn failed_answers_in_a_row_eject_and_a_reply_resets_the_count() {
        let h = Health::default();
        for _ in 0..EJECT_AFTER_FAILURES - 1 {
            h.start(1);
            h.finish(1, Outcome::NotDelivered);
        }
        h.start(1);
        h.finish(1, Outcome::Replied(Duration::from_millis(1)));
        h.start(1);
        h.finish(1, Outcome::NotDelivered);
        assert_eq!(h.standing(2), Standing::Admitted);
        for _ in 0..EJECT_AFTER_FAILURES - 1 {
            h.start(2);
            h.finish(2, Outcome::NotDelivered);
        }
        assert_eq!(h.standing(3), Standing::Ejected);
    }

    #[test]
    fn an_ejected_origin_is_still_chosen_when_every_one_is() {
        let (a, b) = (Health::default(), Health::default());
        a.eject(10);
        b.eject(10);
        assert!(pick(&[&a, &b], 0, 11, 0).is_some());
    }

    #[test]
    fn the_budget_allows_its_share_plus_the_reserve_per_window() {
        let b = RetryBudget::new(20);
        let mut allowed = 0;
        // 1000 requests a second for 5 s, every one wanting a retry.
        for n in 0..5000u64 {
            let now = 5 + n;
            b.deposit(now);
            if b.withdraw(now) {
                allowed += 1;
            }
        }
        assert_eq!(allowed, RetryBudget::RESERVE + 1000, "the reserve and 20 %");
        assert_eq!(b.exhausted.load(Relaxed), 5000 - allowed);
        // An outage after quiet traffic: the requests of the window back.
        let b = RetryBudget::new(20);
        for n in 0..5000u64 {
            b.deposit(n);
        }
        let burst = (0..5000).filter(|_| b.withdraw(5000)).count() as u64;
        assert_eq!(burst, RetryBudget::RESERVE + 1000);
        // Ten seconds on, those requests earn nothing.
        let later = 5000 + ms(RetryBudget::WINDOW);
        let after = (0..5000).filter(|_| b.withdraw(later)).count() as u64;
        assert_eq!(after, RetryBudget::RESERVE);
        let none = RetryBudget::new(0);
        none.deposit(1);
        assert_eq!(
            (0..500).filter(|_| none.withdraw(1)).count() as u64,
            RetryBudget::RESERVE
        );
    }

    impl Health {
        fn finish_unreachable(&self, now: u64) {
            self.start(now);
            self.finish(now, Outcome::Unreachable);
        }
    }
}
