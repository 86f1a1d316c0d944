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
//!
//! Every count is the request's *intended* send time's: the per-second
//! series and histograms (and so the stages made of them) are indexed by
//! the second of the request's slot on the schedule, not by when its reply
//! came.
//!
//! The run ends with its schedule: open loop, a send that would leave
//! more than [`SEND_GRACE`] after the schedule's end (the generator, or a
//! target holding every connection busy, put it that far behind) is not
//! sent but counted as dropped, and so is a queued one no connection took
//! by then. What was sent has the scenario's `timeout` and [`DRAIN_GRACE`]
//! more to settle: a run lasts at most its warm-up, its duration,
//! `SEND_GRACE`, its timeout and `DRAIN_GRACE`.
//!
//! A run can be cut short ([`Interrupt`], Ctrl-C): no more sends, what is
//! queued is dropped, and what was sent has [`DRAIN_GRACE`] to settle
//! (not its timeout too); the stats are then of the part that ran.

mod exchange;
mod stats;
mod stream;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use npamp_gateway::assoc::Scheme;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::http::HttpTarget;
use crate::mix::{Generator, Outbound};
use crate::scenario::{Load, Scenario};
pub use stats::{Outcome, Stats};
pub use stream::WsTarget;

/// How long past the scenario's `timeout` a run waits, after its schedule
/// ended, for the replies still outstanding; then they are lost.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// How long after the schedule's end an open-loop send may still leave
/// (the few milliseconds a loaded machine's generator or connection is
/// late by, as [`crate::summary`]'s lag bound allows); one later is
/// dropped.
pub const SEND_GRACE: Duration = Duration::from_millis(50);

/// Ends a run before its schedule does (Ctrl-C, SIGTERM): set from any
/// thread, seen by the schedule and the connections within about 50 ms.
#[derive(Clone, Debug, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// Stops the run: no more sends, then a drain of [`DRAIN_GRACE`].
    pub fn interrupt(&self) {
        self.0.store(true, Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// Where the load goes.
#[derive(Clone)]
pub enum Target {
    Http(HttpTarget),
    /// An MCP server over Streamable HTTP (`mcp+http://`, `mcp+https://`):
    /// each connection is an MCP session (initialize,
    /// notifications/initialized, then the load with its
    /// `Mcp-Session-Id`); replies as JSON or event streams.
    Mcp(HttpTarget),
    Ws(stream::WsTarget),
    Tcp(String),
    /// A language server, or an edge's TCP ingress, speaking LSP's
    /// `Content-Length` framing (`tcp+lsp://`): each connection is an LSP
    /// session (`initialize`, `initialized`, the scenario's `didOpen`s),
    /// whose server-to-client requests the connection answers.
    Lsp(String, Arc<crate::scenario::LspSession>),
    /// Bridge frames straight to a gateway's association port.
    Npamp(Arc<npamp_gateway::gateway::Client>),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::Http(t) => t.describe(),
            Target::Mcp(t) => format!("mcp+{}", t.describe()),
            Target::Ws(t) => t.url.clone(),
            Target::Tcp(a) => format!("tcp://{a}"),
            Target::Lsp(a, _) => format!("tcp+lsp://{a}"),
            Target::Npamp(e) => match e.peer().scheme {
                Scheme::Npamp => e.peer().to_string(),
                Scheme::Quic | Scheme::Tls => format!("npamp+{}", e.peer()),
            },
        }
    }

    /// Whether a connection pipelines (many requests in flight, replies
    /// matched by id: WebSocket, TCP) instead of exchanging one request at
    /// a time (HTTP, MCP, N-PAMP).
    fn pipelines(&self) -> bool {
        matches!(self, Target::Ws(_) | Target::Tcp(_) | Target::Lsp(..))
    }

    /// The target as one run uses it (HTTP/2: its `connections` shared
    /// connections), and how many request/response workers an open-loop
    /// run of `connections` connections has (HTTP/2: `streams` on each).
    fn for_run(&self, connections: usize) -> (Self, usize) {
        match self {
            Target::Http(t) => (
                Target::Http(t.for_run(connections)),
                connections * t.streams,
            ),
            Target::Mcp(t) => (Target::Mcp(t.for_run(connections)), connections * t.streams),
            t => (t.clone(), connections),
        }
    }

    /// Starts worker `i`'s connection's worth of load, taking its jobs
    /// from `source`. HTTP/1.1 and MCP connections run on the worker
    /// threads; N-PAMP ones on the main runtime, where the edge's
    /// associations run (it outlives the run); HTTP/2's there too (a
    /// connection serves workers of any thread), and streaming ones.
    fn start(&self, i: usize, source: Source, run: Lane, pool: &mut Pool) {
        use exchange::{Http, Npamp};
        match self {
            Target::Http(t) | Target::Mcp(t) => {
                let mcp = matches!(self, Target::Mcp(_));
                let worker = exchange::worker(Http::connect(t, mcp, i), source, run);
                if t.shares_connections() {
                    pool.task(worker);
                } else {
                    pool.thread(worker);
                }
            }
            Target::Npamp(edge) => {
                pool.task(exchange::worker(Ok(Npamp(edge.clone())), source, run));
            }
            Target::Ws(t) => pool.task(stream::worker(stream::ws(t.clone()), source, run)),
            Target::Tcp(addr) => pool.task(stream::worker(stream::tcp(addr.clone()), source, run)),
            Target::Lsp(addr, session) => pool.task(stream::worker(
                stream::lsp(addr.clone(), session.clone()),
                source,
                run,
            )),
        }
    }
}

/// The connections of a run: futures for the worker threads, and tasks on
/// the main runtime.
#[derive(Default)]
struct Pool {
    threads: Vec<Worker>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Pool {
    fn thread(&mut self, worker: impl std::future::Future<Output = ()> + Send + 'static) {
        self.threads.push(Box::pin(worker));
    }

    fn task(&mut self, worker: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(worker));
    }
}

/// The shared state of a run.
pub struct Run {
    /// The counts, in shares: each connection settles its replies into its
    /// lane's share (one per worker thread, about), never into one lock
    /// for all; the last share is the schedule's. Added up once a second
    /// and at the end (`snapshot`).
    shares: Vec<Mutex<Stats>>,
    /// What a snapshot starts from: the run's clock and sizes, no counts.
    blank: Stats,
    /// Requests, notifications and batches sent (counted without the lock),
    /// then requests of the measured part, those that left while it was
    /// scheduled, the sends held back by busy connections, the requests
    /// dropped (placed on the schedule, never sent) and those of them of the
    /// measured part.
    sent: [AtomicU64; 8],
    /// Set at the schedule's end (open loop), or when the run is
    /// interrupted: a job taken from a queue after it is dropped, not sent.
    over: AtomicBool,
    interrupt: Interrupt,
    /// Closed loop: the sends of the measured part still to make (the
    /// scenario's `requests`; unbounded without).
    budget: AtomicU64,
    /// The latency per second by intended send time, moved here from the
    /// shares at each snapshot.
    seconds: Mutex<Vec<Option<hdrhistogram::Histogram<u64>>>>,
    measure_from: Instant,
    measure_until: Instant,
    next_id: AtomicU64,
    timeout: Duration,
    /// Per message of the mix: check successes against the echo.
    verify_echo: Vec<bool>,
}

impl Run {
    fn share(&self, i: usize) -> std::sync::MutexGuard<'_, Stats> {
        self.shares[i % self.shares.len()]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The share the schedule records its own lag in.
    fn schedule_share(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.share(self.shares.len() - 1)
    }

    /// The shares added up, with the send counters brought up to date; each
    /// share's progress interval moves into it (and starts anew).
    fn snapshot(&self) -> Stats {
        let mut s = self.blank.clone();
        for i in 0..self.shares.len() {
            s.absorb(&mut self.share(i));
        }
        s.sent_requests = self.sent[0].load(Relaxed);
        s.sent_notifications = self.sent[1].load(Relaxed);
        s.sent_batches = self.sent[2].load(Relaxed);
        s.sent_measured = self.sent[3].load(Relaxed);
        s.sent_in_window = self.sent[4].load(Relaxed);
        s.held_back = self.sent[5].load(Relaxed);
        s.dropped = self.sent[6].load(Relaxed);
        s.dropped_measured = self.sent[7].load(Relaxed);
        s.interval_of_seconds();
        stats::move_seconds(
            &mut self.seconds.lock().unwrap_or_else(|p| p.into_inner()),
            &mut s.latency_per_second,
        );
        s.latency_per_second.clear();
        s
    }

    /// A queued job no connection took before the schedule's end: it
    /// waited for a busy connection (held back, as a send the full queue
    /// kept waiting), and is not sent. (One the full queue also kept
    /// waiting was counted then too: the count of held-back sends says the
    /// target held the schedule back, and may count such a send twice.)
    fn drop_queued(&self, job: &Job) {
        self.sent[5].fetch_add(1, Relaxed);
        self.drop_job(job);
    }

    /// A job that will not be sent: its counts as sent undone, its
    /// requests counted as dropped.
    fn drop_job(&self, job: &Job) {
        let requests = job.send.expects.len() as u64;
        self.sent[0].fetch_sub(requests, Relaxed);
        self.sent[1].fetch_sub(u64::from(job.send.notifications), Relaxed);
        self.sent[2].fetch_sub(u64::from(job.send.batch), Relaxed);
        if job.intended >= self.measure_from {
            self.sent[3].fetch_sub(requests, Relaxed);
            self.sent[7].fetch_add(requests, Relaxed);
        }
        if job.in_window {
            self.sent[4].fetch_sub(requests, Relaxed);
        }
        self.sent[6].fetch_add(requests, Relaxed);
    }

    /// Whether a send at `now` may be made: in the warm-up always, in the
    /// measured part while the closed loop's count allows (taking one).
    fn take_send(&self, now: Instant) -> bool {
        now < self.measure_from
            || self
                .budget
                .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }

    /// Whether the closed loop's count of sends is spent.
    fn count_spent(&self) -> bool {
        self.budget.load(Relaxed) == 0
    }

    /// Requests that got no reply of any kind yet (the counts alone, no
    /// histograms added).
    fn outstanding(&self) -> u64 {
        let done: u64 = (0..self.shares.len())
            .map(|i| {
                let s = self.share(i);
                s.answered() + s.transport.values().sum::<u64>() + s.timed_out + s.lost
            })
            .sum();
        self.sent[0].load(Relaxed).saturating_sub(done)
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed)
    }
}

/// The run as one connection sees it: its counts go to its lane's share.
#[derive(Clone)]
struct Lane {
    run: Arc<Run>,
    share: usize,
}

impl Lane {
    /// The lane of the `i`-th connection, of `lanes` shares.
    fn new(run: &Arc<Run>, i: usize, lanes: usize) -> Self {
        Self {
            run: run.clone(),
            share: i % lanes,
        }
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.run.share(self.share)
    }
}

impl std::ops::Deref for Lane {
    type Target = Run;

    fn deref(&self) -> &Run {
        &self.run
    }
}

/// One scheduled send.
struct Job {
    send: Outbound,
    intended: Instant,
    /// Counted as left while the measured part was scheduled.
    in_window: bool,
    _permit: Option<OwnedSemaphorePermit>,
}

/// Runs `scenario` against `target`; returns the run's stats. `progress`
/// is called about once a second with the stats so far.
pub async fn run(
    scenario: &Scenario,
    target: Target,
    seed: u64,
    progress: impl FnMut(&mut Stats, Duration) + Send,
) -> Result<Stats, String> {
    run_until(scenario, target, seed, Interrupt::default(), progress).await
}

/// As [`run`], ended early when `interrupt` is set: then the stats are of
/// the part that ran ([`Stats::interrupted`] says how long it ran; the
/// measured part ends there), and the connections' threads still waiting
/// on a reply after [`DRAIN_GRACE`] are not waited for (they end with the
/// process).
pub async fn run_until(
    scenario: &Scenario,
    target: Target,
    seed: u64,
    interrupt: Interrupt,
    mut progress: impl FnMut(&mut Stats, Duration) + Send,
) -> Result<Stats, String> {
    if target.pipelines() && scenario.mix.messages.iter().any(|m| m.verify_echo) {
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
    let blank = Stats::new(
        started,
        scenario.warmup(),
        scenario.measured(),
        methods,
        expect_error,
    )
    .with_id_base(scenario.id_base);
    // A share per worker thread's worth of connections, and the schedule's.
    let lanes = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(scenario.connections.max(1));
    let run = Arc::new(Run {
        shares: (0..=lanes).map(|_| Mutex::new(blank.clone())).collect(),
        blank,
        next_id: AtomicU64::new(scenario.id_base + 1),
        sent: Default::default(),
        over: AtomicBool::new(false),
        interrupt: interrupt.clone(),
        budget: AtomicU64::new(scenario.requests.unwrap_or(u64::MAX)),
        seconds: Mutex::new(Vec::new()),
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
    let (target, request_workers) = target.for_run(scenario.connections);
    let connections = scenario.connections;
    // Connections: request/response ones take jobs from one shared queue,
    // pipelining ones each from its own, filled round robin.
    let pipelines = target.pipelines();
    let mut queues = Vec::with_capacity(connections);
    let (shared_tx, shared_rx) = mpsc::channel::<Job>(request_workers.max(1) * 64);
    let shared_rx = Arc::new(tokio::sync::Mutex::new(shared_rx));
    let mut pool = Pool::default();
    let warmup = scenario.warmup();
    let end = started + warmup + scenario.measured();
    // Closed loop over request/response targets: each worker drives its own
    // requests, one in flight on its own connection.
    let closed_workers = match scenario.load {
        Load::Closed { concurrency } if !pipelines => concurrency,
        _ => 0,
    };
    for i in 0..closed_workers {
        let generator = Generator::new(scenario, seed.wrapping_add(1 + i as u64))?;
        let lane = Lane::new(&run, i, lanes);
        target.start(i, Source::Closed { generator, end }, lane, &mut pool);
    }
    let open_connections = match closed_workers {
        0 if pipelines => connections,
        0 => request_workers,
        _ => 0,
    };
    for i in 0..open_connections {
        let source = if pipelines {
            let (tx, rx) = mpsc::channel::<Job>(1024);
            queues.push(tx);
            Source::Own(rx)
        } else {
            Source::Shared(shared_rx.clone())
        };
        target.start(i, source, Lane::new(&run, i, lanes), &mut pool);
    }
    let Pool { threads, tasks } = pool;
    let threads = worker_threads(threads)?;
    // Calls `progress` once a second, when called with the time.
    let mut next_progress = started + Duration::from_secs(1);
    let mut tick = |now: Instant| {
        if now >= next_progress {
            let mut s = run.snapshot();
            progress(&mut s, now.duration_since(started));
            next_progress += Duration::from_secs(1);
        }
    };
    let queue = Queue {
        shared: (!pipelines).then_some(shared_tx),
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
                if interrupt.is_set() {
                    run.over.store(true, Relaxed);
                }
                let now = Instant::now();
                tick(now);
            }
            let _ = schedule.join();
        }
        Load::Closed { .. } if closed_workers > 0 => {
            while Instant::now() < end && !interrupt.is_set() && !run.count_spent() {
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
                    _ if Instant::now() >= end || interrupt.is_set() => break,
                    _ => continue,
                };
                let intended = Instant::now();
                if intended >= end || interrupt.is_set() || !run.take_send(intended) {
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
    // timeout; after an interrupt, by DRAIN_GRACE alone), then whatever is
    // left is lost.
    let interrupted = interrupt
        .is_set()
        .then(|| Instant::now().saturating_duration_since(started));
    // The count of a closed loop spent: what was sent is answered below,
    // and the measured part ends with its last send.
    let count_reached = (interrupted.is_none() && run.count_spent())
        .then(|| Instant::now().saturating_duration_since(started));
    if interrupted.is_some() {
        // What a connection takes from its own queue from now on is
        // dropped, not sent (closed loop's pipelining connections too).
        run.over.store(true, Relaxed);
    }
    let drain_until = match interrupted {
        Some(_) => Instant::now() + DRAIN_GRACE,
        None => Instant::now() + run.timeout + DRAIN_GRACE,
    };
    // Interrupted: what is still queued for a busy connection is not sent
    // (at most the queue's capacity; a connection waiting on the queue
    // holds its lock and drops what it takes itself).
    if interrupted.is_some()
        && let Ok(mut rx) = shared_rx.try_lock()
    {
        while let Ok(job) = rx.try_recv() {
            run.drop_queued(&job);
        }
    }
    while run.outstanding() > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = Instant::now();
        tick(now);
    }
    for t in &tasks {
        t.abort();
    }
    // Request/response workers end once their source is done and their
    // last request answered or timed out; after an interrupt, they are not
    // waited for (what they settle later is not counted).
    let joined = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    });
    if interrupted.is_none() {
        let _ = joined.await;
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut s = run.snapshot();
    s.latency_per_second =
        std::mem::take(&mut *run.seconds.lock().unwrap_or_else(|p| p.into_inner()));
    // Lost: never answered at all — timed out and no late answer either,
    // or still outstanding when the drain ended.
    let left = s.outstanding();
    s.lost += s.timed_out.saturating_sub(s.late) + left;
    if let Some(at) = interrupted {
        s.interrupted = Some(at);
        s.measure_until = s.measure_until.min((started + at).max(s.measure_from));
    }
    if let Some(at) = count_reached {
        s.count_reached = Some(at);
        s.measure_until = s.measure_until.min((started + at).max(s.measure_from));
    }
    Ok(s)
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

    /// Queues `job`, waiting while the queue is full (every connection
    /// busy: the target's backpressure), but not past `end` nor past an
    /// interrupt (on `waits`, a runtime of the calling thread's own).
    fn send_until(
        &mut self,
        job: Job,
        end: Instant,
        interrupt: &Interrupt,
        waits: &tokio::runtime::Runtime,
    ) -> Queued {
        let Some(q) = self.pick() else {
            return Queued::Closed;
        };
        match q.try_send(job) {
            Ok(()) => Queued::Now,
            Err(mpsc::error::TrySendError::Full(job)) => {
                // The timer is made inside the runtime; it wakes every 50 ms
                // to see an interrupt (at most one wake-up per 50 ms of the
                // wait, which ends at `end`).
                let wait = async {
                    loop {
                        let until = end.min(Instant::now() + Duration::from_millis(50));
                        match tokio::time::timeout_at(until.into(), q.reserve()).await {
                            Err(_) if until < end && !interrupt.is_set() => continue,
                            done => return done,
                        }
                    }
                };
                match waits.block_on(wait) {
                    Ok(Ok(slot)) => {
                        slot.send(job);
                        Queued::AfterWaiting
                    }
                    Ok(Err(_)) => Queued::Closed,
                    Err(_) => Queued::TooLate(job),
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Queued::Closed,
        }
    }
}

/// What became of a job the schedule queued.
enum Queued {
    Now,
    /// After waiting for a busy connection.
    AfterWaiting,
    /// The schedule ended while every connection was still busy.
    TooLate(Job),
    /// No connection takes jobs any more.
    Closed,
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
    let in_window = intended >= run.measure_from && left < run.measure_until;
    if intended >= run.measure_from {
        run.sent[3].fetch_add(requests, Relaxed);
        if in_window {
            run.sent[4].fetch_add(requests, Relaxed);
        }
    }
    run.sent[0].fetch_add(requests, Relaxed);
    run.sent[1].fetch_add(u64::from(send.notifications), Relaxed);
    run.sent[2].fetch_add(u64::from(send.batch), Relaxed);
    Job {
        send,
        intended,
        in_window,
        _permit: permit,
    }
}

/// The open-loop schedule: each send at its intended time, the rate
/// following the scenario's stages; records how late each send left. A
/// send that would leave more than [`SEND_GRACE`] after `end` is not sent:
/// it and every slot after it are counted as dropped. Then the run is
/// over: a connection drops what it takes from its queue after that.
fn open_loop(
    scenario: &Scenario,
    run: &Run,
    generator: Generator,
    queue: Queue,
    started: Instant,
    end: Instant,
) {
    schedule(scenario, run, generator, queue, started, end);
    let (now, cutoff) = (Instant::now(), end + SEND_GRACE);
    if cutoff > now && !run.interrupt.is_set() {
        std::thread::sleep(cutoff - now);
    }
    run.over.store(true, Relaxed);
}

fn schedule(
    scenario: &Scenario,
    run: &Run,
    mut generator: Generator,
    mut queue: Queue,
    started: Instant,
    end: Instant,
) {
    let Some(slots) = scenario.schedule() else {
        return;
    };
    // Waits for a busy connection, bounded by the end (a timer needs a
    // runtime; this thread's is its own).
    let waits = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return,
    };
    let slot = |k: u64| slots.at(k).map(|t| started + t);
    let mut k = 0;
    while let Some(intended) = slot(k) {
        k += 1;
        let now = Instant::now();
        if intended > now {
            if !sleep_until(intended, &run.interrupt) {
                // Interrupted: the slots left are not placed.
                return;
            }
        } else if run.interrupt.is_set() {
            return;
        } else if now >= end + SEND_GRACE {
            // So far behind that this send would leave after the end.
            return drop_slots(run, &mut generator, slot, k - 1);
        }
        // It leaves on time after the sleep, or now when the schedule is late.
        let job = new_job(run, &mut generator, intended, now.max(intended), None);
        // A full queue (every connection busy) waits here: the schedule
        // slips, and the lag below says so; the count of such sends says
        // the target, not the generator, held it back.
        match queue.send_until(job, end + SEND_GRACE, &run.interrupt, &waits) {
            Queued::Closed => return,
            Queued::Now => {}
            Queued::AfterWaiting => {
                run.sent[5].fetch_add(1, Relaxed);
            }
            Queued::TooLate(job) if run.interrupt.is_set() => {
                run.drop_job(&job);
                return;
            }
            Queued::TooLate(job) => {
                run.sent[5].fetch_add(1, Relaxed);
                run.drop_job(&job);
                return drop_slots(run, &mut generator, slot, k);
            }
        }
        let lag = Instant::now().saturating_duration_since(intended);
        let _ = run
            .schedule_share()
            .schedule_lag
            .record(u64::try_from(lag.as_micros()).unwrap_or(u64::MAX).max(1));
    }
}

/// Sleeps until `at`, waking every 50 ms to see whether the run was
/// interrupted; whether it was not.
fn sleep_until(at: Instant, interrupt: &Interrupt) -> bool {
    // At most one wake-up per 50 ms of the wait.
    loop {
        if interrupt.is_set() {
            return false;
        }
        let now = Instant::now();
        if at <= now {
            return true;
        }
        std::thread::sleep((at - now).min(Duration::from_millis(50)));
    }
}

/// Counts the slots from the `k`-th to the schedule's end as dropped: the
/// requests each send would have carried, none sent.
fn drop_slots(
    run: &Run,
    generator: &mut Generator,
    slot: impl Fn(u64) -> Option<Instant>,
    mut k: u64,
) {
    let (mut all, mut measured) = (0, 0);
    while let Some(intended) = slot(k) {
        let requests = generator.skip();
        all += requests;
        if intended >= run.measure_from {
            measured += requests;
        }
        k += 1;
    }
    run.sent[6].fetch_add(all, Relaxed);
    run.sent[7].fetch_add(measured, Relaxed);
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

/// Where a connection gets its jobs: the queue all request/response
/// connections share, a pipelining connection's own queue, or (closed loop
/// over request/response) its own generator, one request in flight at a
/// time, until the end.
enum Source {
    Shared(Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>),
    Own(mpsc::Receiver<Job>),
    Closed { generator: Generator, end: Instant },
}

impl Source {
    async fn next(&mut self, run: &Run) -> Option<Job> {
        match self {
            // After the schedule's end a queued job is not sent.
            Source::Shared(rx) => loop {
                let job = rx.lock().await.recv().await?;
                if !run.over.load(Relaxed) {
                    return Some(job);
                }
                run.drop_queued(&job);
            },
            Source::Own(rx) => loop {
                let job = rx.recv().await?;
                if !run.over.load(Relaxed) {
                    return Some(job);
                }
                run.drop_queued(&job);
            },
            Source::Closed { generator, end } => {
                let now = Instant::now();
                (now < *end && !run.interrupt.is_set() && run.take_send(now))
                    .then(|| new_job(run, generator, now, now, None))
            }
        }
    }

    /// Fails every job still to come with `why` (a connection that could
    /// not be set up), so each is counted.
    async fn fail_every_job(&mut self, run: &Lane, why: &str) {
        while let Some(job) = self.next(run).await {
            exchange::fail_all(run, &job, why);
        }
    }
}
