//! One edge, two origins, one upstream that counts how often it executed
//! each request id. An origin is killed with SIGKILL under steady load and
//! started again: read-only requests never fail; a method that may not run
//! twice is never executed twice, and only the requests caught at the
//! killed origin fail, each with -32014 (may have executed). A slow
//! upstream's tail is hedged.
//!
//! The rules themselves (where a try goes, when it goes on, hedging, the
//! budget, an origin's upstream group, a member's death and return) are
//! held in milliseconds on the policy's virtual clock
//! (`src/gateway/policy/tests.rs`). These check the wiring with real
//! processes: that a kill is told apart as the rules need (lost, or
//! perhaps executed), that a restarted member is used again, that the
//! hedge's timer and the connect timeout are the ones configured. A group's
//! read-only requests through many upstream kills are the soak below.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use support::{Pair, PairOptions, Proc, Up, http_get, keygen, tempdir};

/// These tests load the machine (1000 requests a second through several
/// processes): one at a time, so that none measures another's load.
async fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ONE.lock().await
}

/// What the test's upstream executed: id → times.
#[derive(Default)]
struct Executions(Mutex<HashMap<String, u32>>);

impl Executions {
    fn of(&self, id: &str) -> u32 {
        self.lock().get(id).copied().unwrap_or(0)
    }

    fn total(&self) -> u64 {
        self.lock().values().map(|&n| u64::from(n)).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An HTTP JSON-RPC upstream on 127.0.0.1: answers each request with the
/// number of times it has executed that id; every `slow_every`-th execution
/// (0: none) first sleeps 200 ms.
async fn upstream(slow_every: u64) -> (String, Arc<Executions>) {
    let seen = Arc::new(Executions::default());
    let up = Upstream::start("127.0.0.1:0", slow_every, Duration::ZERO, seen.clone()).await;
    let url = up.url.clone();
    // Serves until the test ends.
    std::mem::forget(up);
    (url, seen)
}

/// A running test upstream that can be killed: its listener and every
/// connection dropped at once, as a process killed with SIGKILL would.
struct Upstream {
    url: String,
    addr: std::net::SocketAddr,
    tasks: Arc<Mutex<Tasks>>,
}

/// An upstream's tasks, and whether it was killed: a connection its
/// accept loop takes while it is being killed is dropped at once.
#[derive(Default)]
struct Tasks {
    killed: bool,
    running: Vec<tokio::task::AbortHandle>,
}

impl Tasks {
    fn lock(tasks: &Mutex<Tasks>) -> std::sync::MutexGuard<'_, Tasks> {
        tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `task` to kill later, or kills it now if that time has come.
    fn add(tasks: &Mutex<Tasks>, task: tokio::task::AbortHandle) {
        let mut t = Tasks::lock(tasks);
        if t.killed {
            task.abort();
        } else {
            t.running.push(task);
        }
    }
}

impl Upstream {
    /// Serves at `addr`; every execution takes `delay`, and every
    /// `slow_every`-th (0: none) 200 ms more. Executions are counted in
    /// `seen` before the delay (a request cut during it may have executed).
    async fn start(addr: &str, slow_every: u64, delay: Duration, seen: Arc<Executions>) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let tasks: Arc<Mutex<Tasks>> = Arc::default();
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let all = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (seen, counter) = (seen.clone(), counter.clone());
                let conn = tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (seen, counter) = (seen.clone(), counter.clone());
                            async move {
                                let body = req.into_body().collect().await?.to_bytes();
                                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                                let id = v["id"].as_str().unwrap_or("").to_owned();
                                let n = {
                                    let mut m = seen.lock();
                                    let n = m.entry(id).or_insert(0);
                                    *n += 1;
                                    *n
                                };
                                let k =
                                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                                let slow = slow_every > 0 && k % slow_every == 0;
                                let wait =
                                    delay + Duration::from_millis(if slow { 200 } else { 0 });
                                if !wait.is_zero() {
                                    tokio::time::sleep(wait).await;
                                }
                                let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": n});
                                Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from(
                                    reply.to_string(),
                                ))))
                            }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(socket);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
                Tasks::add(&all, conn.abort_handle());
            }
        });
        Tasks::add(&tasks, accept.abort_handle());
        Upstream {
            url: format!("http://{addr}"),
            addr,
            tasks,
        }
    }

    fn kill(&self) {
        let mut tasks = Tasks::lock(&self.tasks);
        tasks.killed = true;
        for t in tasks.running.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Two origins delivering to `upstream`, and edges in front of both.
struct Trio {
    origins: Vec<Proc>,
    origin_args: Vec<Vec<String>>,
    keys: tempdir::Dir,
    origin_pub: String,
}

impl Trio {
    async fn start(transport: &str, upstream: &str) -> Trio {
        let keys = tempdir::Dir::new();
        let (origin_key, edge_key) = (keys.0.join("origin.key"), keys.0.join("edge.key"));
        let (origin_pub, edge_pub) = (keygen(&origin_key), keygen(&edge_key));
        let origin_key = origin_key.to_string_lossy().into_owned();
        let mut origins = Vec::new();
        let mut origin_args = Vec::new();
        for _ in 0..2 {
            let listen = format!("{transport}://127.0.0.1:0");
            let mut args: Vec<String> = ["serve", "--listen", &listen, "--upstream", upstream]
                .map(String::from)
                .to_vec();
            args.extend(["--identity", &origin_key, "--trust", &edge_pub].map(String::from));
            let p = Proc::start(&as_strs(&args), "listening on").await;
            args[2] = p.printed("listening on ");
            origins.push(p);
            origin_args.push(args);
        }
        Trio {
            origins,
            origin_args,
            keys,
            origin_pub,
        }
    }

    fn peer(&self, i: usize) -> &str {
        &self.origin_args[i][2]
    }

    /// An edge with an HTTP ingress and metrics, carrying to both origins.
    async fn edge(&self, extra: &[&str]) -> (Proc, String) {
        let key = self.keys.0.join("edge.key").to_string_lossy().into_owned();
        let mut args = vec![
            "serve",
            "--ingress",
            "http://127.0.0.1:0",
            "--peer",
            self.peer(0),
            "--peer",
            self.peer(1),
            "--identity",
            &key,
            "--trust",
            &self.origin_pub,
            "--metrics",
            "127.0.0.1:0",
            "--effect",
            "get=read-only",
            // The load comes from one address, at 1000/s open loop: while
            // an origin is killed its requests wait, each on a connection
            // of its own, and a slow machine can pass the default 2048
            // (then a connection is refused, and the client sees an
            // incomplete message, not the answer the test is about).
            "--max-connections-per-source",
            "65536",
        ];
        args.extend(extra);
        let edge = Proc::start(&args, "metrics").await;
        let http = edge.printed("ingress ");
        (edge, http)
    }

    fn kill(&mut self, i: usize) {
        let pid = self.origins[i].pid().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
    }

    async fn restart(&mut self, i: usize) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.origins[i].child.wait()).await;
        self.origins[i] = Proc::start(&as_strs(&self.origin_args[i]), "listening on").await;
    }
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// One reply as the client saw it.
#[derive(Debug)]
struct Seen {
    id: String,
    status: u16,
    body: Value,
    latency: Duration,
}

/// POSTs `method` at `rate` per second for `seconds` (open loop: each
/// request on its own task at its own time); every reply once all are in
/// (each within 40 s).
async fn steady_load(http: &str, method: &str, rate: u32, seconds: f64, prefix: &str) -> Vec<Seen> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let total = (f64::from(rate) * seconds) as u64;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for n in 0..total {
        let at = start + Duration::from_secs_f64(n as f64 / f64::from(rate));
        tokio::time::sleep_until(at.into()).await;
        let id = format!("{prefix}-{n}");
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": []});
        let req = hyper::Request::post(http)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let resp = tokio::time::timeout(Duration::from_secs(40), client.request(req))
                .await
                .expect("an answer within 40 s")
                .expect("an HTTP answer");
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.expect("body").to_bytes();
            Seen {
                id,
                status,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                latency: sent.elapsed(),
            }
        }));
    }
    let mut seen = Vec::with_capacity(tasks.len());
    for t in tasks {
        seen.push(t.await.expect("request task"));
    }
    seen
}

/// A labelled metric's value, `name{origin="peer"}`.
async fn origin_metric(edge: &Proc, name: &str, peer: &str) -> f64 {
    gauge(edge, &format!("{name}{{origin=\"{peer}\"}}")).await
}

/// The value of the metric whose line starts with `name` and a space.
async fn gauge(edge: &Proc, name: &str) -> f64 {
    let (status, text) = http_get(&edge.printed("metrics ")).await;
    assert_eq!(status, 200, "{text}");
    let line = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line)?.parse().ok())
        .unwrap_or_else(|| panic!("no {line} in /metrics"))
}

/// A gateway's metrics, without help lines and histogram buckets.
async fn counters(p: &Proc) -> String {
    let (_, text) = http_get(&p.printed("metrics ")).await;
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.contains("_bucket{"))
        .collect();
    kept.join("\n")
}

/// Kills origin 0 at 1.5 s into a 5 s steady load and starts it again at
/// 3 s; the replies.
async fn load_through_a_kill(trio: &mut Trio, http: &str, method: &str) -> Vec<Seen> {
    let load = steady_load(http, method, 1000, 5.0, method);
    tokio::pin!(load);
    tokio::select! {
        _ = &mut load => panic!("the load ended early"),
        () = tokio::time::sleep(Duration::from_millis(1500)) => {}
    }
    trio.kill(0);
    tokio::select! {
        _ = &mut load => panic!("the load ended early"),
        () = tokio::time::sleep(Duration::from_millis(1500)) => {}
    }
    trio.restart(0).await;
    load.await
}

/// Whether a request failed: anything but a result.
fn failed(s: &Seen) -> bool {
    s.status != 200 || s.body.get("result").is_none()
}

/// Every reply a result.
fn assert_none_failed(seen: &[Seen]) {
    let bad: Vec<&Seen> = seen.iter().filter(|s| failed(s)).collect();
    assert!(
        bad.is_empty(),
        "{} of {} failed, first {:?}",
        bad.len(),
        seen.len(),
        bad.first()
    );
}

/// Checks that no request was executed twice, that each success was its
/// request's only execution, and that every failure is -32014 (may have
/// executed); their number, at most `most`.
fn assert_at_most_once(what: &str, seen: &[Seen], executions: &Executions, most: usize) {
    let mut unknown = 0;
    for s in seen {
        assert!(executions.of(&s.id) <= 1, "{} executed twice", s.id);
        if s.status == 200 && s.body.get("result").is_some() {
            assert_eq!(s.body["result"], 1, "{} executed once, answered once", s.id);
            continue;
        }
        assert_eq!(
            (s.status, s.body["error"]["code"].as_i64()),
            (502, Some(-32014)),
            "a failure is 'may have executed': {s:?}"
        );
        unknown += 1;
    }
    println!(
        "{what} killed: {unknown} of {} may have executed",
        seen.len()
    );
    // Only what was on its way through what was killed: a few at 1000/s.
    assert!(
        unknown <= most,
        "{unknown} of {} may have executed",
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_only_requests_never_fail_when_an_origin_is_killed_and_comes_back() {
    let _one = heavy().await;
    let (url, executions) = upstream(0).await;
    let mut trio = Trio::start("quic", &url).await;
    let (edge, http) = trio.edge(&[]).await;
    let seen = load_through_a_kill(&mut trio, &http, "get").await;
    assert_none_failed(&seen);
    let killed = trio.peer(0).to_owned();
    let retried = origin_metric(&edge, "npamp_origin_retries_total", &killed).await;
    assert!(
        retried >= 1.0,
        "requests caught at the killed origin were retried"
    );
    assert!(executions.total() >= seen.len() as u64);
    // Back in rotation after its restart (its backoff is at most 8 s, and
    // over QUIC its old associations may take 8 s to end): it carries
    // requests again.
    let before = origin_metric(&edge, "npamp_origin_requests_total", &killed).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = before;
    for n in 0.. {
        let body = json!({"jsonrpc": "2.0", "id": format!("after-{n}"), "method": "get"});
        let (status, text) = support::post(&http, &body.to_string()).await;
        assert_eq!(status, 200, "{text}");
        after = origin_metric(&edge, "npamp_origin_requests_total", &killed).await;
        if after > before || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, shown) = http_get(&edge.printed("metrics ")).await;
    let lines: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with("npamp_origin"))
        .collect();
    assert!(
        after > before,
        "the restarted origin is used again ({before} → {after}): {lines:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_that_may_not_run_twice_is_never_executed_twice() {
    let _one = heavy().await;
    let (url, executions) = upstream(0).await;
    // Over TLS the kill is seen at once (the kernel resets the
    // connections); over QUIC when the associations time out.
    let mut trio = Trio::start("tls", &url).await;
    let (edge, http) = trio.edge(&[]).await;
    let seen = load_through_a_kill(&mut trio, &http, "send").await;
    assert_at_most_once("origin", &seen, &executions, 50);
    let killed = trio.peer(0).to_owned();
    let ejections = origin_metric(&edge, "npamp_origin_ejections_total", &killed).await;
    assert!(ejections >= 1.0, "the killed origin was ejected");
}

/// How long each execution of a group's upstream takes.
const DELAY: Duration = Duration::from_millis(5);

/// Two HTTP upstreams counting their executions in `count`, each taking
/// [`DELAY`], behind one origin (`--upstream` twice, with metrics) and an
/// edge where `get` is read-only.
async fn group_pair(count: &Arc<Executions>) -> (Vec<Upstream>, Pair) {
    let mut ups = Vec::new();
    for _ in 0..2 {
        ups.push(Upstream::start("127.0.0.1:0", 0, DELAY, count.clone()).await);
    }
    let first: &'static str = Box::leak(ups[0].url.clone().into_boxed_str());
    let second = ups[1].url.clone();
    let pair = Pair::start(PairOptions {
        upstream: Up::Url(first),
        origin_extra: &["--upstream", &second, "--metrics", "127.0.0.1:0"],
        edge_extra: &["--effect", "get=read-only"],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    (ups, pair)
}

/// Prints both gateways' metrics: where a lost request was held shows in
/// their counters.
async fn print_metrics(pair: &Pair) {
    for (name, p) in [("edge", &pair.edge), ("origin", &pair.origin)] {
        println!("{name}'s metrics after the load:\n{}", counters(p).await);
    }
}

/// One origin with two HTTP upstreams (`--upstream` twice) that share
/// one count of executions, behind an edge; upstream 0 is killed `kill_at`
/// seconds into a load of `seconds` at 1000/s and started again on its
/// address at `restart_at`.
async fn group_through_a_kill(
    method: &str,
    [seconds, kill_at, restart_at]: [f64; 3],
) -> (Vec<Seen>, Arc<Executions>, Vec<Upstream>, Pair) {
    let seen = Arc::new(Executions::default());
    let (mut ups, pair) = group_pair(&seen).await;
    let http = pair.ingress("http://");
    let replies = {
        let load = steady_load(&http, method, 1000, seconds, method);
        tokio::pin!(load);
        tokio::select! {
            _ = &mut load => panic!("the load ended early"),
            () = tokio::time::sleep(Duration::from_secs_f64(kill_at)) => {}
        }
        let addr = ups[0].addr.to_string();
        ups[0].kill();
        tokio::select! {
            _ = &mut load => panic!("the load ended early"),
            () = tokio::time::sleep(Duration::from_secs_f64(restart_at - kill_at)) => {}
        }
        ups[0] = Upstream::start(&addr, 0, DELAY, seen.clone()).await;
        load.await
    };
    (replies, seen, ups, pair)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origin_with_two_upstreams_never_executes_a_destructive_request_twice() {
    let _one = heavy().await;
    let (seen, executions, _ups, _pair) = group_through_a_kill("send", [5.0, 1.5, 3.0]).await;
    assert_at_most_once("upstream", &seen, &executions, 50);
    let detail = seen
        .iter()
        .find_map(|s| s.body["error"]["data"]["detail"].as_str());
    assert!(
        detail.is_none_or(|d| d.starts_with("may have executed: ")),
        "{detail:?}"
    );
}

/// A TCP address that takes no connection, as a host that drops SYNs: a
/// listener that never accepts, its accept queue filled, so the kernel
/// drops further SYNs. Held open while the value lives.
struct Blackhole {
    url: String,
    _held: (tokio::net::TcpListener, Vec<std::net::TcpStream>),
}

impl Blackhole {
    async fn new() -> Blackhole {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("address"))
            .expect("bind");
        let listener = socket.listen(0).expect("listen");
        let addr = listener.local_addr().expect("addr");
        let filled = tokio::task::spawn_blocking(move || {
            let mut held = Vec::new();
            for _ in 0..8 {
                match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                    Ok(s) => held.push(s),
                    // The queue is full: SYNs are dropped from now on.
                    Err(_) => return Some(held),
                }
            }
            None
        });
        let held = filled
            .await
            .expect("filling")
            .expect("a listener that never accepts fills its queue");
        Blackhole {
            url: format!("http://{addr}"),
            _held: (listener, held),
        }
    }
}

/// The error detail of a JSON-RPC reply, or "".
fn detail(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    v["error"]["data"]["detail"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upstream_that_drops_connections_costs_a_request_the_connect_timeout_not_the_request_timeout()
 {
    let _one = heavy().await;
    let hole = Blackhole::new().await;
    let hole_url: &'static str = Box::leak(hole.url.clone().into_boxed_str());
    let (good, _) = upstream(0).await;
    // Without a connect timeout a request sent to the hole would wait out
    // the request timeout (10 s here) and fail.
    let timeouts = [
        "--upstream-connect-timeout",
        "500ms",
        "--request-timeout",
        "10s",
    ];
    let mut origin_extra = vec!["--upstream", good.as_str(), "--metrics", "127.0.0.1:0"];
    origin_extra.extend(timeouts);
    let pair = Pair::start(PairOptions {
        upstream: Up::Url(hole_url),
        origin_extra: &origin_extra,
        edge_extra: &timeouts[2..],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let mut slowest = Duration::ZERO;
    for n in 0..8 {
        // `send`: not read-only, and still moved to the other upstream, as
        // a connection that was never made carried nothing.
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "send"}).to_string();
        let started = Instant::now();
        let (status, text) = support::post(&http, &body).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("\"result\""), "{text}");
    }
    let origin_metrics = counters(&pair.origin).await;
    let ejected = format!("npamp_group_ejections_total{{upstream=\"{}\"}} ", hole.url);
    let ejections: f64 = (origin_metrics.lines())
        .find_map(|l| l.strip_prefix(&ejected)?.parse().ok())
        .unwrap_or_else(|| panic!("no {ejected}in {origin_metrics}"));
    assert!(
        ejections >= 1.0,
        "the upstream that takes no connection is ejected"
    );
    assert!(
        slowest < Duration::from_secs(3),
        "slowest request {slowest:?}"
    );
    drop(pair);

    // Alone, the request fails at the connect timeout, saying so.
    let pair = Pair::start(PairOptions {
        upstream: Up::Url(hole_url),
        origin_extra: &timeouts,
        edge_extra: &timeouts[2..],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "get"}).to_string();
    let started = Instant::now();
    let (status, text) = support::post(&pair.ingress("http://"), &body).await;
    let took = started.elapsed();
    assert_eq!(status, 502, "{text}");
    assert!(
        detail(&text).contains("--upstream-connect-timeout"),
        "{text}"
    );
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
}

/// p-th percentile (0–100) of the latencies.
fn percentile(seen: &[Seen], p: f64) -> Duration {
    let mut l: Vec<Duration> = seen.iter().map(|s| s.latency).collect();
    l.sort_unstable();
    let rank = ((p / 100.0) * l.len() as f64).ceil() as usize;
    l[rank.clamp(1, l.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_read_only_request_is_hedged_and_the_first_reply_wins() {
    let _one = heavy().await;
    // Every 20th execution takes 200 ms: a p99 of 200 ms unhedged.
    let (url, executions) = upstream(20).await;
    let trio = Trio::start("quic", &url).await;
    let (plain, plain_http) = trio.edge(&[]).await;
    // Above most fast replies, well below a slow one.
    let (hedging, hedging_http) = trio.edge(&["--hedge-after", "50ms"]).await;
    // After the 90th percentile of what it has seen: about 10 % hedged.
    let (by_percentile, by_percentile_http) = trio.edge(&["--hedge-after", "p90"]).await;
    // Associations up before anything is timed (a handshake is slower
    // than the hedge delay); the percentile edge learns its latencies.
    for http in [&plain_http, &hedging_http, &by_percentile_http] {
        steady_load(http, "get", 100, 1.5, "warm").await;
    }
    // The percentile covers the last 5 to 10 s, so the warm-up's first
    // requests, which waited for the association's handshake, weigh in it
    // until they age out: on a slow machine more than a tenth of the
    // warm-up. More warm load until they have (12 s at most).
    let mut delays = Vec::new();
    for round in 0..24 {
        let delay = gauge(&by_percentile, "npamp_hedge_delay_seconds").await;
        delays.push(delay);
        if delay > 0.0 && delay < 0.1 {
            break;
        }
        steady_load(
            &by_percentile_http,
            "get",
            100,
            0.5,
            &format!("warm-{round}"),
        )
        .await;
    }
    assert!(
        delays.last().is_some_and(|d| *d > 0.0 && *d < 0.1),
        "p90 is a fast reply's latency: {delays:?} s"
    );
    // Side by side, interleaved: the same upstream, the same moments.
    let mut without = Vec::new();
    let mut with = [Vec::new(), Vec::new()];
    let mut extra = [0u64; 2];
    for round in 0..4 {
        without.extend(steady_load(&plain_http, "get", 200, 1.0, &format!("p{round}")).await);
        for (k, http) in [&hedging_http, &by_percentile_http].into_iter().enumerate() {
            let before = executions.total();
            let hedged = steady_load(http, "get", 200, 1.0, &format!("h{k}-{round}")).await;
            extra[k] += executions.total() - before - hedged.len() as u64;
            with[k].extend(hedged);
        }
    }
    // Over the whole run, at most the retry budget's share (a fifth) more
    // executions. (How many fast replies also outlast a delay is the
    // machine's: a debug build on a shared 2-core machine has hedged 16 %
    // at 50 ms, where the slow twentieth alone would be 5 %.)
    for k in 0..2 {
        assert!(
            extra[k] <= with[k].len() as u64 / 5,
            "edge {k}: {} extra executions of {}",
            extra[k],
            with[k].len()
        );
    }
    for s in without.iter().chain(with.iter().flatten()) {
        assert_eq!(s.status, 200, "{s:?}");
    }
    // Every 20th execution is slow: unhedged, about a twentieth of the
    // requests wait for one (at least a fortieth is asked, so that the
    // comparison below means something).
    let slow = Duration::from_millis(200);
    let answered_slowly = |seen: &[Seen]| seen.iter().filter(|s| s.latency >= slow).count();
    let slow_without = answered_slowly(&without);
    assert!(
        slow_without * 40 >= without.len(),
        "{slow_without} of {} unhedged requests took {slow:?} or more",
        without.len()
    );
    // Hedged, a slow execution's request is answered by its copy, after
    // the delay plus a fast reply: at most half as many wait as long as
    // the slow execution. (Counted, not a p99: a debug build on a shared
    // 2-core machine has fast replies whose 1 % tail is over 130 ms, which
    // puts the hedged p99 near the slow delay even when every slow
    // execution's copy answered first. In a release build the hedged p99
    // is a third of the unhedged one or less: results/2026-12-02-hedging.)
    for (k, with) in with.iter().enumerate() {
        let slow_with = answered_slowly(with);
        println!(
            "edge {k}: {slow_with} of {} hedged took {slow:?} or more, {slow_without} of {} unhedged",
            with.len(),
            without.len()
        );
        assert!(
            slow_with * 2 <= slow_without,
            "edge {k}: {slow_with} of {} hedged requests took {slow:?} or more, \
             {slow_without} of {} unhedged (p99 {:?} hedged, {:?} unhedged)",
            with.len(),
            without.len(),
            percentile(with, 99.0),
            percentile(&without, 99.0),
        );
    }
    for edge in [&hedging, &by_percentile] {
        let mut won = 0.0;
        for i in 0..2 {
            won += origin_metric(edge, "npamp_origin_hedges_won_total", trio.peer(i)).await;
        }
        assert!(won >= 1.0, "hedges answered first");
    }
    drop(plain);
}

/// Latency percentiles of `seen`, for a results table: p50, p99, p99.9, max.
fn spread(seen: &[Seen]) -> String {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    format!(
        "{} | {} | {} | {}",
        ms(percentile(seen, 50.0)),
        ms(percentile(seen, 99.0)),
        ms(percentile(seen, 99.9)),
        ms(percentile(seen, 100.0))
    )
}

/// Of `seen`: the requests answered with a result, those answered -32014,
/// and those the upstream executed more than once.
fn tally(seen: &[Seen], executions: &Executions) -> (usize, usize, usize) {
    let ok = seen
        .iter()
        .filter(|s| s.status == 200 && s.body.get("result").is_some())
        .count();
    let unknown = seen
        .iter()
        .filter(|s| s.body["error"]["code"] == -32014)
        .count();
    let twice = seen.iter().filter(|s| executions.of(&s.id) > 1).count();
    (ok, unknown, twice)
}

/// Appends `line` to `$FAILOVER_OUT` (when set) and prints it.
fn record(line: &str) {
    println!("{line}");
    if let Ok(path) = std::env::var("FAILOVER_OUT") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("FAILOVER_OUT");
        let _ = writeln!(f, "{line}");
    }
}

/// The committed runs (`results/2026-12-02-failover/`): 1000 requests a
/// second for 20 s through an edge with two origins, origin 0 killed with
/// SIGKILL at 5 s and started again at 10 s, over QUIC and TLS, for a
/// read-only and a destructive method; the same with two upstreams behind
/// one origin; then hedging (after 20 ms, after the p95) against an
/// upstream whose every 100th, then every 50th, execution takes 200 ms.
/// Not in CI (about 4 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a full run: cargo test -p npamp-gateway-cli --test integration failover::full_runs -- --ignored"]
async fn full_runs() {
    let _one = heavy().await;
    record(
        "| transport | method | requests | answered 200 | -32014 | other failures | executed twice | p50 ms | p99 ms | p99.9 ms | max ms | retries | ejections | retries refused |",
    );
    record("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for transport in ["quic", "tls"] {
        for method in ["get", "send"] {
            let (url, executions) = upstream(0).await;
            let mut trio = Trio::start(transport, &url).await;
            let (edge, http) = trio.edge(&[]).await;
            steady_load(&http, method, 100, 0.5, "warm").await;
            let load = steady_load(&http, method, 1000, 20.0, method);
            tokio::pin!(load);
            for (at, step) in [(5, "kill"), (10, "restart")] {
                let wait = Duration::from_secs(if step == "kill" { at } else { 5 });
                tokio::select! {
                    _ = &mut load => panic!("the load ended early"),
                    () = tokio::time::sleep(wait) => {}
                }
                match step {
                    "kill" => trio.kill(0),
                    _ => trio.restart(0).await,
                }
            }
            let seen = load.await;
            let (ok, unknown, twice) = tally(&seen, &executions);
            let killed = trio.peer(0).to_owned();
            let m = |name: &'static str| {
                let (edge, killed) = (&edge, killed.clone());
                async move { origin_metric(edge, name, &killed).await }
            };
            let retries = m("npamp_origin_retries_total").await;
            let ejections = m("npamp_origin_ejections_total").await;
            let refused = support::metric(&edge, "npamp_origin_retries_refused_total").await;
            record(&format!(
                "| {transport} | {method} | {} | {ok} | {unknown} | {} | {twice} | {} | {retries} | {ejections} | {refused} |",
                seen.len(),
                seen.len() - ok - unknown,
                spread(&seen)
            ));
        }
    }
    // Two upstreams behind one origin (QUIC), upstream 0 killed at 5 s and
    // started again at 10 s.
    for method in ["get", "send"] {
        let (seen, executions, _ups, _pair) = group_through_a_kill(method, [20.0, 5.0, 10.0]).await;
        let (ok, unknown, twice) = tally(&seen, &executions);
        record(&format!(
            "| quic, upstream killed | {method} | {} | {ok} | {unknown} | {} | {twice} | {} | | | |",
            seen.len(),
            seen.len() - ok - unknown,
            spread(&seen)
        ));
    }
    // Hedging: side by side, interleaved, 1 % and then 2 % of executions
    // 200 ms; a plain edge, one hedging after 20 ms, one after its p95.
    for slow_every in [100, 50] {
        let (url, executions) = upstream(slow_every).await;
        let trio = Trio::start("quic", &url).await;
        let hedges = [
            &[][..],
            &["--hedge-after", "20ms"],
            &["--hedge-after", "p95"],
        ];
        let mut edges = Vec::new();
        for args in hedges {
            let (edge, http) = trio.edge(args).await;
            steady_load(&http, "get", 100, 1.5, "warm").await;
            edges.push((edge, http, Vec::new(), 0));
        }
        for round in 0..10 {
            for (k, (_, http, seen, exec)) in edges.iter_mut().enumerate() {
                let before = executions.total();
                seen.extend(steady_load(http, "get", 200, 2.0, &format!("e{k}-{round}")).await);
                *exec += executions.total() - before;
            }
        }
        record("");
        record(&format!(
            "{} % of executions take 200 ms (every {slow_every}th):",
            100 / slow_every
        ));
        record("");
        record(
            "| edge | requests | upstream executions | extra | p50 ms | p99 ms | p99.9 ms | max ms |",
        );
        record("|---|---:|---:|---:|---:|---:|---:|---:|");
        for (args, (_, _, seen, exec)) in hedges.iter().zip(&edges) {
            let name = if args.is_empty() {
                "plain".to_owned()
            } else {
                args.join(" ")
            };
            let extra = *exec as f64 / seen.len() as f64 - 1.0;
            record(&format!(
                "| {name} | {} | {exec} | {:.2} % | {} |",
                seen.len(),
                extra * 100.0,
                spread(seen)
            ));
        }
    }
}

/// Soak: one origin with two upstreams under 1000 read-only requests a
/// second, the upstreams killed in turn (150 ms up, 100 ms down, about 4
/// kills a second) for `FAILOVER_SOAK_SECONDS` (default 60): none fails
/// and none waits a second. Not in CI.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a soak: cargo test -p npamp-gateway-cli --test integration failover::an_origin_loses -- --ignored"]
async fn an_origin_loses_no_read_only_request_through_many_upstream_kills() {
    let _one = heavy().await;
    let seconds: f64 = std::env::var("FAILOVER_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60.0);
    let count = Arc::new(Executions::default());
    let (mut ups, pair) = group_pair(&count).await;
    let http = pair.ingress("http://");
    let mut kills = 0usize;
    let seen = {
        let load = steady_load(&http, "get", 1000, seconds, "get");
        tokio::pin!(load);
        loop {
            tokio::select! {
                seen = &mut load => break seen,
                () = tokio::time::sleep(Duration::from_millis(150)) => {}
            }
            let i = kills % 2;
            kills += 1;
            let addr = ups[i].addr.to_string();
            ups[i].kill();
            tokio::select! {
                seen = &mut load => break seen,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            ups[i] = Upstream::start(&addr, 0, DELAY, count.clone()).await;
        }
    };
    let slow = seen
        .iter()
        .filter(|s| s.latency > Duration::from_secs(1))
        .count();
    println!("{kills} kills: {slow} of {} took over 1 s", seen.len());
    if slow > 0 || seen.iter().any(failed) {
        print_metrics(&pair).await;
    }
    assert_none_failed(&seen);
    assert_eq!(slow, 0, "requests waited a second or more");
}
