//! Runs a scenario against a target and accounts for every request.
//!
//! Open loop: each send has an *intended* time on the schedule; latency is
//! measured from it, so a target that stalls cannot hide its stall by
//! slowing the generator down (no coordinated omission, as wrk2). Closed
//! loop: `concurrency` permits; a send waits for a permit and its intended
//! time is when it got one.
//!
//! Every request ends in exactly one class: replied in time (result or
//! JSON-RPC error), failed at the transport (connection refused or broken,
//! HTTP error without a JSON-RPC body), replied late (after its timeout), or
//! lost (never answered by the end of the run and its drain). `timed_out`
//! counts late + lost-after-timeout. Replies that match no waiting request
//! are counted as duplicated (its id was answered already), late (its id
//! had timed out) or mismatched (no request had that id).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use npamp_gateway::assoc::Scheme;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::http1::HttpConn;
use crate::scenario::{Load, Scenario};
use crate::template::{Expect, Generator, Outbound};

/// Where the load goes.
#[derive(Clone)]
pub enum Target {
    Http(hyper::Uri),
    /// An MCP server over Streamable HTTP (`mcp+http://`): each connection
    /// is an MCP session (initialize, notifications/initialized, then the
    /// load with its `Mcp-Session-Id`); replies as JSON or event streams.
    Mcp(hyper::Uri),
    Ws(String),
    Tcp(String),
    /// Bridge frames straight to a gateway's association port.
    Npamp(Arc<npamp_gateway::gateway::edge::Edge>),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::Http(u) => u.to_string(),
            Target::Mcp(u) => format!("mcp+{u}"),
            Target::Ws(u) => u.clone(),
            Target::Tcp(a) => format!("tcp://{a}"),
            Target::Npamp(e) => match e.peer.scheme {
                Scheme::Npamp => e.peer.to_string(),
                Scheme::Quic | Scheme::Tls => format!("npamp+{}", e.peer),
            },
        }
    }
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
    fn unmatched(&mut self, id: Option<u64>) {
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

/// The shared state of a run.
pub struct Run {
    pub stats: Mutex<Stats>,
    /// Requests, notifications and batches sent (counted without the lock),
    /// then requests of the measured part, and those that left while it
    /// was scheduled.
    sent: [AtomicU64; 6],
    measure_from: Instant,
    measure_until: Instant,
    next_id: AtomicU64,
    timeout: Duration,
    /// Per message of the mix: check successes against the echo.
    verify_echo: Vec<bool>,
}

impl Run {
    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stats with the send counters brought up to date.
    fn stats_now(&self) -> std::sync::MutexGuard<'_, Stats> {
        let mut s = self.stats();
        s.sent_requests = self.sent[0].load(Relaxed);
        s.sent_notifications = self.sent[1].load(Relaxed);
        s.sent_batches = self.sent[2].load(Relaxed);
        s.sent_measured = self.sent[3].load(Relaxed);
        s.sent_in_window = self.sent[4].load(Relaxed);
        s.held_back = self.sent[5].load(Relaxed);
        s
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed)
    }
}

/// One scheduled send.
struct Job {
    send: Outbound,
    intended: Instant,
    _permit: Option<OwnedSemaphorePermit>,
}

/// Runs `scenario` against `target`; returns the run's stats. `progress`
/// is called about once a second with the stats so far.
pub async fn run(
    scenario: &Scenario,
    target: Target,
    seed: u64,
    mut progress: impl FnMut(&mut Stats, Duration) + Send,
) -> Result<Stats, String> {
    if matches!(target, Target::Ws(_) | Target::Tcp(_))
        && scenario.mix.messages.iter().any(|m| m.verify_echo)
    {
        return Err(
            "verify_echo is checked on http:// and npamp targets only (a WebSocket or TCP reply is matched by id alone)"
                .into(),
        );
    }
    let mut generator = Generator::new(scenario, seed)?;
    let methods = generator.methods().len();
    let expect_error = scenario
        .mix
        .messages
        .iter()
        .map(|m| m.expect_error)
        .collect();
    let started = Instant::now();
    let run = Arc::new(Run {
        stats: Mutex::new(Stats {
            id_base: scenario.id_base,
            ..Stats::new(
                started,
                scenario.warmup(),
                scenario.measured(),
                methods,
                expect_error,
            )
        }),
        next_id: AtomicU64::new(scenario.id_base + 1),
        sent: Default::default(),
        measure_from: started + scenario.warmup(),
        measure_until: started + scenario.warmup() + scenario.measured(),
        timeout: scenario.timeout(),
        verify_echo: scenario
            .mix
            .messages
            .iter()
            .map(|m| m.verify_echo)
            .collect(),
    });
    let connections = scenario.connections;
    // Connections: each takes jobs from its queue.
    let mut queues = Vec::with_capacity(connections);
    let mut tasks = Vec::with_capacity(connections);
    let mut workers: Vec<Worker> = Vec::new();
    let shared_queue = matches!(target, Target::Http(_) | Target::Mcp(_) | Target::Npamp(_));
    let (shared_tx, shared_rx) = mpsc::channel::<Job>(connections * 64);
    let shared_rx = Arc::new(tokio::sync::Mutex::new(shared_rx));
    let warmup = scenario.warmup();
    let end = started + warmup + scenario.measured();
    // Closed loop over request/response targets: each worker drives its own
    // requests, one in flight on its own connection.
    let closed_workers = match scenario.load {
        Load::Closed { concurrency } if shared_queue => concurrency,
        _ => 0,
    };
    for i in 0..closed_workers {
        let generator = Generator::new(scenario, seed.wrapping_add(1 + i as u64))?;
        let source = Source::Closed { generator, end };
        let run = run.clone();
        match &target {
            Target::Http(uri) => {
                workers.push(Box::pin(http_worker(uri.clone(), false, source, run)));
            }
            Target::Mcp(uri) => workers.push(Box::pin(http_worker(uri.clone(), true, source, run))),
            // The edge's associations run on the runtime that opened them:
            // N-PAMP workers stay on the main one, which outlives the run.
            Target::Npamp(edge) => {
                tasks.push(tokio::spawn(npamp_worker(edge.clone(), source, run)));
            }
            _ => {}
        }
    }
    let open_connections = if closed_workers > 0 { 0 } else { connections };
    for _ in 0..open_connections {
        let run = run.clone();
        match &target {
            Target::Http(uri) | Target::Mcp(uri) => {
                let mcp = matches!(target, Target::Mcp(_));
                let source = Source::Queue(shared_rx.clone());
                workers.push(Box::pin(http_worker(uri.clone(), mcp, source, run)));
            }
            Target::Npamp(edge) => {
                let source = Source::Queue(shared_rx.clone());
                tasks.push(tokio::spawn(npamp_worker(edge.clone(), source, run)));
            }
            Target::Ws(url) => {
                let (tx, rx) = mpsc::channel::<Job>(1024);
                queues.push(tx);
                tasks.push(tokio::spawn(ws_connection(url.clone(), rx, run)));
            }
            Target::Tcp(addr) => {
                let (tx, rx) = mpsc::channel::<Job>(1024);
                queues.push(tx);
                tasks.push(tokio::spawn(tcp_connection(addr.clone(), rx, run)));
            }
        }
    }
    let threads = worker_threads(workers)?;
    // Calls `progress` once a second, when called with the time.
    let mut next_progress = started + Duration::from_secs(1);
    let mut tick = |now: Instant| {
        if now >= next_progress {
            let mut s = run.stats_now();
            progress(&mut s, now.duration_since(started));
            next_progress += Duration::from_secs(1);
        }
    };
    let queue = Queue {
        shared: shared_queue.then_some(shared_tx),
        each: queues,
        next: 0,
    };
    match scenario.load {
        Load::Open { .. } => {
            // The schedule runs on a thread of its own: a thread sleep is
            // precise to tens of microseconds, the runtime's timer to a
            // millisecond, and every microsecond the generator is late is
            // added to the measured latency.
            let (run2, scenario2) = (run.clone(), scenario.clone());
            let schedule = std::thread::Builder::new()
                .name("schedule".into())
                .spawn(move || open_loop(&scenario2, &run2, generator, queue, started, end))
                .map_err(|e| format!("cannot start the schedule thread: {e}"))?;
            while !schedule.is_finished() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let now = Instant::now();
                tick(now);
            }
            let _ = schedule.join();
        }
        Load::Closed { .. } if closed_workers > 0 => {
            while Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let now = Instant::now();
                tick(now);
            }
        }
        Load::Closed { concurrency } => {
            let permits = Arc::new(Semaphore::new(concurrency));
            let mut queue = queue;
            loop {
                let now = Instant::now();
                tick(now);
                let acquire = permits.clone().acquire_owned();
                let wait = end
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(100));
                let permit = match tokio::time::timeout(wait, acquire).await {
                    Ok(Ok(permit)) => permit,
                    _ if Instant::now() >= end => break,
                    _ => continue,
                };
                let intended = Instant::now();
                if intended >= end {
                    break;
                }
                let job = new_job(&run, &mut generator, intended, intended, Some(permit));
                if !queue.send_async(job).await {
                    break;
                }
            }
        }
    }
    // Drain: no more sends; wait for what is outstanding (bounded by the
    // timeout), then whatever is left is lost.
    let drain_until = Instant::now() + run.timeout + Duration::from_secs(1);
    while run.stats_now().outstanding() > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = Instant::now();
        tick(now);
    }
    for t in &tasks {
        t.abort();
    }
    // Request/response workers end once their source is done and their
    // last request answered or timed out.
    let _ = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    })
    .await;
    for t in tasks {
        let _ = t.await;
    }
    let mut s = run.stats_now();
    // Lost: never answered at all — timed out and no late answer either,
    // or still outstanding when the drain ended.
    let left = s.outstanding();
    s.lost += s.timed_out.saturating_sub(s.late) + left;
    let empty = Stats::new(started, Duration::ZERO, Duration::ZERO, 0, Vec::new());
    let stats = std::mem::replace(&mut *s, empty);
    Ok(stats)
}

/// Where jobs go: one queue all connections take from (HTTP, N-PAMP), or
/// one per connection, round robin (WebSocket, TCP).
struct Queue {
    shared: Option<mpsc::Sender<Job>>,
    each: Vec<mpsc::Sender<Job>>,
    next: usize,
}

impl Queue {
    fn pick(&mut self) -> Option<&mpsc::Sender<Job>> {
        if let Some(s) = &self.shared {
            return Some(s);
        }
        self.next = (self.next + 1) % self.each.len().max(1);
        self.each.get(self.next)
    }

    async fn send_async(&mut self, job: Job) -> bool {
        match self.pick() {
            Some(q) => q.send(job).await.is_ok(),
            None => false,
        }
    }

    /// Sends `job`, waiting while the queue is full; says whether it had
    /// to wait (every connection busy: the target's backpressure).
    fn send_blocking(&mut self, job: Job) -> Option<bool> {
        let q = self.pick()?;
        match q.try_send(job) {
            Ok(()) => Some(false),
            Err(mpsc::error::TrySendError::Full(job)) => q.blocking_send(job).ok().map(|()| true),
            Err(mpsc::error::TrySendError::Closed(_)) => None,
        }
    }
}

/// The next send, counted; `intended` is when the schedule meant it to
/// leave, `left` when it leaves (the caller has the clock already).
fn new_job(
    run: &Run,
    generator: &mut Generator,
    intended: Instant,
    left: Instant,
    permit: Option<OwnedSemaphorePermit>,
) -> Job {
    let send = generator.next(|| run.id());
    let requests = send.expects.len() as u64;
    if intended >= run.measure_from {
        run.sent[3].fetch_add(requests, Relaxed);
        if left < run.measure_until {
            run.sent[4].fetch_add(requests, Relaxed);
        }
    }
    run.sent[0].fetch_add(requests, Relaxed);
    run.sent[1].fetch_add(u64::from(send.notifications), Relaxed);
    run.sent[2].fetch_add(u64::from(send.batch), Relaxed);
    Job {
        send,
        intended,
        _permit: permit,
    }
}

/// The open-loop schedule: each send at its intended time, the rate
/// following the scenario's stages; records how late each send left.
fn open_loop(
    scenario: &Scenario,
    run: &Run,
    mut generator: Generator,
    mut queue: Queue,
    started: Instant,
    end: Instant,
) {
    let measure_from = started + scenario.warmup();
    let mut intended = started;
    loop {
        let t = intended
            .saturating_duration_since(measure_from)
            .as_secs_f64();
        let rate = scenario.rate_at(t).unwrap_or(1.0).max(1e-3);
        intended += Duration::from_secs_f64(1.0 / rate);
        if intended >= end {
            return;
        }
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        // It leaves on time after the sleep, or now when the schedule is late.
        let job = new_job(run, &mut generator, intended, now.max(intended), None);
        // A full queue (every connection busy) blocks here: the schedule
        // slips, and the lag below says so; the count of such sends says
        // the target, not the generator, held it back.
        match queue.send_blocking(job) {
            None => return,
            Some(true) => {
                run.sent[5].fetch_add(1, Relaxed);
            }
            Some(false) => {}
        }
        let lag = Instant::now().saturating_duration_since(intended);
        let _ = run
            .stats()
            .schedule_lag
            .record(u64::try_from(lag.as_micros()).unwrap_or(u64::MAX).max(1));
    }
}

/// Classifies one JSON-RPC reply object against the request it answers.
fn classify(v: &Value, status: Option<u16>) -> Outcome {
    match v.get("error") {
        Some(err) => Outcome::Error {
            code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
            status,
        },
        None => Outcome::Ok,
    }
}

fn reply_id(v: &Value) -> Option<u64> {
    v.get("id").and_then(Value::as_u64)
}

/// The common case, found with the gateway's scanner instead of building a
/// JSON value: one success reply carrying the one request's id.
fn own_success(job: &Job, body: &[u8]) -> Option<Expect> {
    use npamp_gateway::jsonrpc::{IdKind, Kind, Limits, Scanned, scan};
    let [e] = job.send.expects.as_slice() else {
        return None;
    };
    if job.send.batch {
        return None;
    }
    match scan(body, &Limits::default()) {
        Ok(Scanned::Single(Kind::Success { id })) if id.kind == IdKind::Number => {
            let token = std::str::from_utf8(body.get(id.token)?).ok()?;
            (token.parse::<u64>().ok()? == e.id).then_some(*e)
        }
        _ => None,
    }
}

/// Whether reply `v` carries, as its result, the params of the request
/// with id `id` in `request` (one object or a batch).
fn echoes(request: &[u8], id: u64, v: &Value) -> bool {
    let Ok(sent) = serde_json::from_slice::<Value>(request) else {
        return false;
    };
    let own = |o: &Value| o.get("id").and_then(Value::as_u64) == Some(id);
    let params = match &sent {
        Value::Array(elements) => elements.iter().find(|o| own(o)),
        o => Some(o).filter(|o| own(o)),
    }
    .and_then(|o| o.get("params"));
    params.is_some() && params == v.get("result")
}

/// Matches the objects of a reply (one, or a batch array) to what the send
/// expected.
fn settle(run: &Run, job: &Job, request: &[u8], body: &[u8], status: Option<u16>) {
    let verifies = |e: &Expect| run.verify_echo.get(e.message).copied().unwrap_or(false);
    // With `verify_echo`, a success is judged against its request's params.
    let judge = |e: &Expect, v: &Value| match classify(v, status) {
        Outcome::Ok if verifies(e) && !echoes(request, e.id, v) => Outcome::WrongResult,
        outcome => outcome,
    };
    if status.is_none()
        && let Some(e) = own_success(job, body).filter(|e| !verifies(e))
    {
        run.stats().complete(e, job.intended, Outcome::Ok);
        return;
    }
    let mut s = run.stats();
    let expects = &job.send.expects;
    if expects.is_empty() {
        // Notifications only: nothing may come back.
        if !body.iter().all(u8::is_ascii_whitespace) {
            s.unmatched(None);
        }
        return;
    }
    let parsed: Result<Value, _> = serde_json::from_slice(body);
    let objects = match parsed {
        Ok(Value::Array(a)) if job.send.batch => a,
        Ok(v @ Value::Object(_)) if !job.send.batch || v.get("id") == Some(&Value::Null) => {
            // A batch answered with one error object (the whole batch was
            // refused) answers every element.
            if job.send.batch {
                let outcome = classify(&v, status);
                for e in expects {
                    s.complete(*e, job.intended, outcome.clone());
                }
                return;
            }
            vec![v]
        }
        _ => {
            let what = match status {
                Some(code) => format!("HTTP {code} without a JSON-RPC reply"),
                None => "a reply that is not JSON-RPC".to_owned(),
            };
            for e in expects {
                s.complete(*e, job.intended, Outcome::Transport(what.clone()));
            }
            return;
        }
    };
    let mut open: Vec<Option<Expect>> = expects.iter().copied().map(Some).collect();
    for v in &objects {
        let id = reply_id(v);
        match open
            .iter_mut()
            .find(|e| e.is_some_and(|e| Some(e.id) == id))
        {
            Some(slot) => {
                if let Some(e) = slot.take() {
                    s.complete(e, job.intended, judge(&e, v));
                }
            }
            None => {
                if id.is_none() && v.get("error").is_some() {
                    // An error that could not name its request: it answers one.
                    if let Some(slot) = open.iter_mut().find(|e| e.is_some())
                        && let Some(e) = slot.take()
                    {
                        s.complete(e, job.intended, classify(v, status));
                        continue;
                    }
                }
                s.unmatched(id);
            }
        }
    }
    for e in open.into_iter().flatten() {
        s.complete(e, job.intended, Outcome::Lost);
    }
}

type Worker = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Runs request/response workers on threads of their own, each a
/// single-threaded runtime (as wrk runs one event loop per thread): a
/// worker and its connection share a thread, so no reply crosses threads.
fn worker_threads(workers: Vec<Worker>) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    if workers.is_empty() {
        return Ok(Vec::new());
    }
    let n = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(workers.len());
    let mut shares: Vec<Vec<Worker>> = (0..n).map(|_| Vec::new()).collect();
    for (i, w) in workers.into_iter().enumerate() {
        shares[i % n].push(w);
    }
    shares
        .into_iter()
        .enumerate()
        .map(|(i, share)| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("worker runtime: {e}"))?;
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || {
                    rt.block_on(futures_util::future::join_all(share));
                })
                .map_err(|e| format!("worker thread: {e}"))
        })
        .collect()
}

/// Where a request/response worker (HTTP, N-PAMP) gets its jobs: the
/// shared queue of the open-loop schedule, or (closed loop) its own
/// generator, one request in flight at a time, until the end.
enum Source {
    Queue(Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>),
    Closed { generator: Generator, end: Instant },
}

impl Source {
    async fn next(&mut self, run: &Run) -> Option<Job> {
        match self {
            Source::Queue(rx) => rx.lock().await.recv().await,
            Source::Closed { generator, end } => {
                let now = Instant::now();
                (now < *end).then(|| new_job(run, generator, now, now, None))
            }
        }
    }
}

/// One connection's worth of load: plain JSON-RPC over HTTP, or (`mcp`)
/// an MCP session over Streamable HTTP.
async fn http_worker(uri: hyper::Uri, mcp: bool, mut source: Source, run: Arc<Run>) {
    let mut conn = match HttpConn::new(&uri, mcp) {
        Ok(c) => c,
        Err(e) => {
            while let Some(job) = source.next(&run).await {
                fail_all(&run, &job, &e);
            }
            return;
        }
    };
    let mut session_open = !mcp;
    while let Some(mut job) = source.next(&run).await {
        if !session_open {
            match tokio::time::timeout(run.timeout, conn.open_mcp_session()).await {
                Ok(Ok(())) => session_open = true,
                Ok(Err(e)) => {
                    fail_all(&run, &job, &e);
                    continue;
                }
                Err(_) => {
                    conn.stream = None;
                    fail_all(&run, &job, "MCP initialize: no answer in time");
                    continue;
                }
            }
        }
        let request = Bytes::from(std::mem::take(&mut job.send.text));
        match tokio::time::timeout(run.timeout, conn.send(request.clone())).await {
            // The server ended the MCP session: a new one for what follows.
            Ok(Ok(r)) if mcp && r.status == 404 => {
                session_open = false;
                fail_all(&run, &job, "MCP session ended by the server (HTTP 404)");
            }
            Ok(Ok(r)) => {
                let status = (r.status != 200).then_some(r.status);
                if let Some(code) = status
                    && job.send.expects.is_empty()
                    && code != 204
                    && !(mcp && code == 202)
                {
                    let mut s = run.stats();
                    *s.http_status.entry(code).or_default() += 1;
                    continue;
                }
                let status = status.filter(|&c| !(mcp && c == 202));
                settle(&run, &job, &request, &r.reply(), status);
            }
            Ok(Err(what)) => fail_all(&run, &job, &what),
            Err(_) => {
                // The connection is stuck on this request: a new one for the next.
                conn.stream = None;
                let mut s = run.stats();
                for e in &job.send.expects {
                    s.complete(*e, job.intended, Outcome::Timeout);
                }
            }
        }
    }
    if mcp && session_open {
        let _ = tokio::time::timeout(Duration::from_secs(1), conn.end_mcp_session()).await;
    }
}

fn fail_all(run: &Run, job: &Job, what: &str) {
    let mut s = run.stats();
    for e in &job.send.expects {
        s.complete(*e, job.intended, Outcome::Transport(what.to_owned()));
    }
}

async fn npamp_worker(
    edge: Arc<npamp_gateway::gateway::edge::Edge>,
    mut source: Source,
    run: Arc<Run>,
) {
    use npamp_gateway::jsonrpc::{Kind, Scanned, scan};
    use npamp_gateway::relay::Reply;
    while let Some(job) = source.next(&run).await {
        let text = Bytes::from(job.send.text.clone());
        let kinds: Vec<(Bytes, Kind)> = match scan(&text, &edge.ctx.scan) {
            Ok(Scanned::Single(k)) => vec![(text.clone(), k)],
            Ok(Scanned::Batch(elements)) => elements
                .into_iter()
                .filter_map(|e| {
                    let start = e.range.start;
                    e.kind
                        .ok()
                        .map(|k| (text.slice(e.range), k.relative_to(start)))
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        let mut bodies = Vec::new();
        for (t, k) in kinds {
            match k {
                Kind::Request { .. } => match edge.call(t, k).await {
                    Reply::Message { text, .. } => bodies.push(text),
                    Reply::Failed(f) => bodies.push(Bytes::from(f.response(None))),
                },
                _ => {
                    let _ = edge.notify(t, k).await;
                }
            }
        }
        let body: Vec<u8> = if job.send.batch {
            let mut b = vec![b'['];
            for (i, x) in bodies.iter().enumerate() {
                if i > 0 {
                    b.push(b',');
                }
                b.extend_from_slice(x);
            }
            b.push(b']');
            b
        } else {
            bodies.first().map(|b| b.to_vec()).unwrap_or_default()
        };
        settle(&run, &job, &text, &body, None);
    }
}

/// What a streaming connection has sent and not yet had answered.
struct Pending {
    by_id: HashMap<u64, (Expect, Instant, Arc<Job>)>,
}

/// Handles one message from a streaming target.
fn on_stream_message(run: &Run, pending: &Mutex<Pending>, text: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(text) else {
        run.stats().unmatched(None);
        return;
    };
    let objects = match v {
        Value::Array(a) => a,
        v => vec![v],
    };
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    for o in objects {
        if o.get("method").is_some() {
            // A notification or request from the server: not an answer.
            continue;
        }
        let id = reply_id(&o);
        match id.and_then(|id| p.by_id.remove(&id)) {
            Some((e, intended, _job)) => run.stats().complete(e, intended, classify(&o, None)),
            None => run.stats().unmatched(id),
        }
    }
}

/// Times out what waited too long; on a broken connection, fails the rest.
fn expire(run: &Run, pending: &Mutex<Pending>, all: Option<&str>) {
    let now = Instant::now();
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    let expired: Vec<u64> = p
        .by_id
        .iter()
        .filter(|(_, (_, t, _))| all.is_some() || now.saturating_duration_since(*t) >= run.timeout)
        .map(|(id, _)| *id)
        .collect();
    let mut s = run.stats();
    for id in expired {
        if let Some((e, intended, _)) = p.by_id.remove(&id) {
            let outcome = match all {
                Some(what) => Outcome::Transport(what.to_owned()),
                None => Outcome::Timeout,
            };
            s.complete(e, intended, outcome);
        }
    }
}

/// Where a streaming connection writes one message.
trait TextOut: Send {
    fn send(&mut self, text: String) -> impl std::future::Future<Output = bool> + Send;
}

/// A WebSocket: one text frame per message.
struct WsOut<S>(S);

impl<S> TextOut for WsOut<S>
where
    S: futures_util::Sink<tokio_tungstenite::tungstenite::Message> + Unpin + Send,
{
    async fn send(&mut self, text: String) -> bool {
        use tokio_tungstenite::tungstenite::Message;
        self.0.send(Message::Text(text.into())).await.is_ok()
    }
}

/// Newline-delimited TCP: one line per message.
struct LineOut<W>(W);

impl<W: tokio::io::AsyncWrite + Unpin + Send> TextOut for LineOut<W> {
    async fn send(&mut self, text: String) -> bool {
        let mut line = text.into_bytes();
        line.push(b'\n');
        self.0.write_all(&line).await.is_ok()
    }
}

/// A streaming connection's sending side: each job is registered, its text
/// handed to `send` (moved, not copied), and what waits too long is timed
/// out; after the last send, timing out goes on until the reader is done
/// (or the run stops this task).
async fn send_loop(
    rx: &mut mpsc::Receiver<Job>,
    run: &Run,
    pending: &Mutex<Pending>,
    reader: &tokio::task::JoinHandle<()>,
    mut out: impl TextOut,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            job = rx.recv() => {
                let Some(mut job) = job else { break };
                let text = std::mem::take(&mut job.send.text);
                register(pending, &Arc::new(job));
                if !out.send(text).await {
                    expire(run, pending, Some("connection broken"));
                    break;
                }
            }
            _ = tick.tick() => expire(run, pending, None),
        }
    }
    while !reader.is_finished() {
        tick.tick().await;
        expire(run, pending, None);
    }
}

fn register(pending: &Mutex<Pending>, job: &Arc<Job>) {
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    for e in &job.send.expects {
        p.by_id.insert(e.id, (*e, job.intended, job.clone()));
    }
}

async fn ws_connection(url: String, mut rx: mpsc::Receiver<Job>, run: Arc<Run>) {
    use tokio_tungstenite::tungstenite::Message;
    // Small reads, as the gateway's own WebSocket connections (tungstenite
    // zero-fills its whole read buffer, 128 KiB by default, before each read).
    // Messages as large as a gateway may carry, in one frame (tungstenite's
    // default frame limit is 16 MiB).
    let max = npamp_gateway::gateway::MAX_BODY_LIMIT;
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(npamp_gateway::gateway::WS_READ_BUFFER)
        .max_message_size(Some(max))
        .max_frame_size(Some(max));
    let ws = match tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), false)
        .await
    {
        Ok((ws, _)) => ws,
        Err(e) => {
            let what = format!("WebSocket connect: {e}");
            while let Some(job) = rx.recv().await {
                fail_all(&run, &job, &what);
            }
            return;
        }
    };
    let (sink, mut stream) = ws.split();
    let pending = Arc::new(Mutex::new(Pending {
        by_id: HashMap::new(),
    }));
    let reader = {
        let (pending, run) = (pending.clone(), run.clone());
        tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                match msg {
                    Ok(Message::Text(t)) => on_stream_message(&run, &pending, t.as_bytes()),
                    Ok(Message::Binary(b)) => on_stream_message(&run, &pending, &b),
                    Ok(Message::Close(_)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            expire(&run, &pending, Some("connection closed"));
        })
    };
    send_loop(&mut rx, &run, &pending, &reader, WsOut(sink)).await;
}

async fn tcp_connection(addr: String, mut rx: mpsc::Receiver<Job>, run: Arc<Run>) {
    let tcp = match tokio::net::TcpStream::connect(addr.as_str()).await {
        Ok(t) => t,
        Err(e) => {
            let what = format!("TCP connect: {e}");
            while let Some(job) = rx.recv().await {
                fail_all(&run, &job, &what);
            }
            return;
        }
    };
    let _ = tcp.set_nodelay(true);
    let (r, w) = tcp.into_split();
    let pending = Arc::new(Mutex::new(Pending {
        by_id: HashMap::new(),
    }));
    let reader = {
        let (pending, run) = (pending.clone(), run.clone());
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                on_stream_message(&run, &pending, line.as_bytes());
            }
            expire(&run, &pending, Some("connection closed"));
        })
    };
    send_loop(&mut rx, &run, &pending, &reader, LineOut(w)).await;
}
