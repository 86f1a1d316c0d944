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
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::scenario::{Load, Scenario};
use crate::template::{Expect, Generator, Outbound};

/// Where the load goes.
#[derive(Clone)]
pub enum Target {
    Http(hyper::Uri),
    Ws(String),
    Tcp(String),
    /// Bridge frames straight to a gateway's association port.
    Npamp(Arc<npamp_gateway::gateway::edge::Edge>),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::Http(u) => u.to_string(),
            Target::Ws(u) => u.clone(),
            Target::Tcp(a) => format!("tcp://{a}"),
            Target::Npamp(e) => format!("npamp+{}", e.peer),
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
    /// No JSON-RPC answer: connection failure, HTTP error page, ...
    Transport(String),
    Timeout,
    Lost,
}

/// Every count of a run; shared by the connections, under one lock.
pub struct Stats {
    pub started: Instant,
    /// When measuring begins (after warm-up).
    pub measure_from: Instant,
    pub sent_requests: u64,
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
}

impl Stats {
    fn new(started: Instant, warmup: Duration, methods: usize, expect_error: Vec<bool>) -> Self {
        Self {
            started,
            measure_from: started + warmup,
            sent_requests: 0,
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
        match id {
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
        match &outcome {
            Outcome::Timeout => Self::mark(&mut self.expired, e.id),
            _ => Self::mark(&mut self.answered, e.id),
        }
        let replied = matches!(outcome, Outcome::Ok | Outcome::Error { .. });
        match outcome {
            Outcome::Ok => self.ok += 1,
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
        self.ok + self.expected_errors + self.unexpected_errors
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
    next_id: AtomicU64,
    timeout: Duration,
}

impl Run {
    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
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
        stats: Mutex::new(Stats::new(
            started,
            scenario.warmup(),
            methods,
            expect_error,
        )),
        next_id: AtomicU64::new(1),
        timeout: scenario.timeout(),
    });
    let connections = scenario.connections;
    // Connections: each takes jobs from its queue.
    let mut queues = Vec::with_capacity(connections);
    let mut tasks = Vec::with_capacity(connections);
    let shared_queue = matches!(target, Target::Http(_) | Target::Npamp(_));
    let (shared_tx, shared_rx) = mpsc::channel::<Job>(connections * 64);
    let shared_rx = Arc::new(tokio::sync::Mutex::new(shared_rx));
    for _ in 0..connections {
        let run = run.clone();
        match &target {
            Target::Http(uri) => {
                let (uri, rx) = (uri.clone(), shared_rx.clone());
                tasks.push(tokio::spawn(http_connection(uri, rx, run)));
            }
            Target::Npamp(edge) => {
                let (edge, rx) = (edge.clone(), shared_rx.clone());
                tasks.push(tokio::spawn(npamp_connection(edge, rx, run)));
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
    let warmup = scenario.warmup();
    let end = started + warmup + scenario.measured();
    let mut next_progress = started + Duration::from_secs(1);
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
                if now >= next_progress {
                    let mut s = run.stats();
                    progress(&mut s, now.duration_since(started));
                    next_progress += Duration::from_secs(1);
                }
            }
            let _ = schedule.join();
        }
        Load::Closed { concurrency } => {
            let permits = Arc::new(Semaphore::new(concurrency));
            let mut queue = queue;
            loop {
                let now = Instant::now();
                if now >= next_progress {
                    let mut s = run.stats();
                    progress(&mut s, now.duration_since(started));
                    next_progress += Duration::from_secs(1);
                }
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
                let job = new_job(&run, &mut generator, intended, Some(permit));
                if !queue.send_async(job).await {
                    break;
                }
            }
        }
    }
    // Drain: no more sends; wait for what is outstanding (bounded by the
    // timeout), then whatever is left is lost.
    let drain_until = Instant::now() + run.timeout + Duration::from_secs(1);
    while run.stats().outstanding() > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = Instant::now();
        if now >= next_progress {
            let mut s = run.stats();
            progress(&mut s, now.duration_since(started));
            next_progress += Duration::from_secs(1);
        }
    }
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut s = run.stats();
    // Lost: never answered at all — timed out and no late answer either,
    // or still outstanding when the drain ended.
    let left = s.outstanding();
    s.lost += s.timed_out.saturating_sub(s.late) + left;
    let stats = std::mem::replace(&mut *s, Stats::new(started, Duration::ZERO, 0, Vec::new()));
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

    fn send_blocking(&mut self, job: Job) -> bool {
        match self.pick() {
            Some(q) => q.blocking_send(job).is_ok(),
            None => false,
        }
    }
}

fn new_job(
    run: &Run,
    generator: &mut Generator,
    intended: Instant,
    permit: Option<OwnedSemaphorePermit>,
) -> Job {
    let send = generator.next(|| run.id());
    let mut s = run.stats();
    s.sent_requests += send.expects.len() as u64;
    s.sent_notifications += u64::from(send.notifications);
    s.sent_batches += u64::from(send.batch);
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
        let job = new_job(run, &mut generator, intended, None);
        // A full queue (every connection busy) blocks here: the schedule
        // slips, and the lag below says so.
        if !queue.send_blocking(job) {
            return;
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

/// Matches the objects of a reply (one, or a batch array) to what the send
/// expected.
fn settle(run: &Run, job: &Job, body: &[u8], status: Option<u16>) {
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
                    s.complete(e, job.intended, classify(v, status));
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

async fn next_job(rx: &tokio::sync::Mutex<mpsc::Receiver<Job>>) -> Option<Job> {
    rx.lock().await.recv().await
}

async fn http_connection(
    uri: hyper::Uri,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    run: Arc<Run>,
) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(1)
        .build_http::<Full<Bytes>>();
    while let Some(job) = next_job(&rx).await {
        let req = hyper::Request::post(uri.clone())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(job.send.text.clone())));
        let Ok(req) = req else {
            fail_all(&run, &job, "bad request URI");
            continue;
        };
        let result = tokio::time::timeout(run.timeout, async {
            let resp = client.request(req).await.map_err(|e| connect_class(&e))?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|_| "connection broken mid-reply".to_owned())?
                .to_bytes();
            Ok::<_, String>((status, body))
        })
        .await;
        match result {
            Ok(Ok((status, body))) => {
                let status = (status != 200).then_some(status);
                if let Some(code) = status
                    && job.send.expects.is_empty()
                    && code != 204
                {
                    let mut s = run.stats();
                    *s.http_status.entry(code).or_default() += 1;
                    continue;
                }
                settle(&run, &job, &body, status);
            }
            Ok(Err(what)) => fail_all(&run, &job, &what),
            Err(_) => {
                let mut s = run.stats();
                for e in &job.send.expects {
                    s.complete(*e, job.intended, Outcome::Timeout);
                }
            }
        }
    }
}

fn connect_class(e: &hyper_util::client::legacy::Error) -> String {
    if e.is_connect() {
        "connection refused or failed".into()
    } else {
        "connection broken".into()
    }
}

fn fail_all(run: &Run, job: &Job, what: &str) {
    let mut s = run.stats();
    for e in &job.send.expects {
        s.complete(*e, job.intended, Outcome::Transport(what.to_owned()));
    }
}

async fn npamp_connection(
    edge: Arc<npamp_gateway::gateway::edge::Edge>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    run: Arc<Run>,
) {
    use npamp_gateway::gateway::carry::Reply;
    use npamp_gateway::jsonrpc::{Kind, Scanned, scan};
    while let Some(job) = next_job(&rx).await {
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
        for (t, k) in &kinds {
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
        settle(&run, &job, &body, None);
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

fn register(pending: &Mutex<Pending>, job: &Arc<Job>) {
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    for e in &job.send.expects {
        p.by_id.insert(e.id, (*e, job.intended, job.clone()));
    }
}

async fn ws_connection(url: String, mut rx: mpsc::Receiver<Job>, run: Arc<Run>) {
    use tokio_tungstenite::tungstenite::Message;
    let ws = match tokio_tungstenite::connect_async(url.as_str()).await {
        Ok((ws, _)) => ws,
        Err(e) => {
            let what = format!("WebSocket connect: {e}");
            while let Some(job) = rx.recv().await {
                fail_all(&run, &job, &what);
            }
            return;
        }
    };
    let (mut sink, mut stream) = ws.split();
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
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            job = rx.recv() => {
                let Some(job) = job else { break };
                let job = Arc::new(job);
                register(&pending, &job);
                if sink.send(Message::Text(job.send.text.clone().into())).await.is_err() {
                    expire(&run, &pending, Some("connection broken"));
                    break;
                }
            }
            _ = tick.tick() => expire(&run, &pending, None),
        }
    }
    // Keep timing out what is left until the run stops this task.
    loop {
        tick.tick().await;
        expire(&run, &pending, None);
        if reader.is_finished() {
            return;
        }
    }
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
    let (r, mut w) = tcp.into_split();
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
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            job = rx.recv() => {
                let Some(job) = job else { break };
                let job = Arc::new(job);
                register(&pending, &job);
                let mut line = job.send.text.clone().into_bytes();
                line.push(b'\n');
                if w.write_all(&line).await.is_err() {
                    expire(&run, &pending, Some("connection broken"));
                    break;
                }
            }
            _ = tick.tick() => expire(&run, &pending, None),
        }
    }
    loop {
        tick.tick().await;
        expire(&run, &pending, None);
        if reader.is_finished() {
            return;
        }
    }
}
