//! Slow clients for fault injection (`npamp-loadgen slow`): connections
//! that hold a server's resources without finishing anything, to check it
//! cuts them off and keeps serving everyone else.
//!
//! - `headers`: slowloris, an HTTP request whose headers arrive one octet
//!   at a time and never end;
//! - `body`: complete headers, then part of the announced body and nothing
//!   more;
//! - `ws-no-read`: a WebSocket client that sends echo requests of
//!   `--size` octets (large replies) and never reads them;
//! - `tcp-no-read`: the same on a `tcp://` ingress (one request a line).
//!
//! With `--probe HOST:PORT`, a healthy HTTP client beside them posts one
//! small echo request every 20 ms and times each reply: what the slow
//! clients cost everyone else. Only loopback targets are accepted.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Headers,
    Body,
    WsNoRead,
    TcpNoRead,
}

/// How the server treated the slow connections.
#[derive(Debug, Default)]
pub struct SlowStats {
    pub opened: AtomicU64,
    /// Cut off by the server (closed or reset) within the run.
    pub cut_off: AtomicU64,
    /// Still open when the run ended.
    pub still_open: AtomicU64,
    /// Could not connect at all.
    pub refused: AtomicU64,
    /// Sum of the time each cut-off connection lived, ms.
    pub cut_off_after_ms_sum: AtomicU64,
    pub cut_off_after_ms_max: AtomicU64,
    pub cut_off_after_ms_min: AtomicU64,
    /// No-read modes: from the first write the server did not take within
    /// [`BLOCKED`] (it stopped reading) to the cut, ms: (min, max).
    pub cut_after_blocked_ms: Mutex<Option<(u64, u64)>>,
    /// No-read modes: from when the server's replies stopped arriving (the
    /// octets waiting unread in the client's socket last grew: from then
    /// on the server's writes to it are blocked) to the cut, ms: (min, max).
    pub cut_after_silent_ms: Mutex<Option<(u64, u64)>>,
    /// The healthy client's replies, ms each (`--probe`).
    pub probe_ms: Mutex<Vec<f64>>,
    /// Its requests that got no 200 with a result.
    pub probe_failed: AtomicU64,
    /// Why they failed, and how often each way.
    pub probe_failed_why: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl SlowStats {
    fn cut(&self, lived: Duration) {
        let ms = u64::try_from(lived.as_millis()).unwrap_or(u64::MAX);
        let first = self.cut_off.fetch_add(1, Relaxed) == 0;
        self.cut_off_after_ms_sum.fetch_add(ms, Relaxed);
        self.cut_off_after_ms_max.fetch_max(ms, Relaxed);
        if first {
            self.cut_off_after_ms_min.store(ms, Relaxed);
        } else {
            self.cut_off_after_ms_min.fetch_min(ms, Relaxed);
        }
    }

    fn cut_after_blocked(&self, d: Duration) {
        widen(&self.cut_after_blocked_ms, d);
    }

    fn cut_after_silent(&self, d: Duration) {
        widen(&self.cut_after_silent_ms, d);
    }

    fn probe_failed(&self, why: String) {
        self.probe_failed.fetch_add(1, Relaxed);
        *self
            .probe_failed_why
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(why)
            .or_default() += 1;
    }

    /// The probe's replies: (count, p50, p99, max) in ms.
    pub fn probe(&self) -> (usize, f64, f64, f64) {
        let mut ms = self
            .probe_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| {
            ms.get(((ms.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0.0)
        };
        (
            ms.len(),
            at(0.5),
            at(0.99),
            ms.last().copied().unwrap_or(0.0),
        )
    }
}

impl std::fmt::Display for SlowStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut = self.cut_off.load(Relaxed);
        let mean = self.cut_off_after_ms_sum.load(Relaxed) / cut.max(1);
        write!(
            f,
            "opened {} cut_off {} still_open {} refused {} cut_off_mean_ms {} cut_off_min_ms {} cut_off_max_ms {}",
            self.opened.load(Relaxed),
            cut,
            self.still_open.load(Relaxed),
            self.refused.load(Relaxed),
            mean,
            self.cut_off_after_ms_min.load(Relaxed),
            self.cut_off_after_ms_max.load(Relaxed)
        )?;
        for (name, span) in [
            ("blocked", &self.cut_after_blocked_ms),
            ("silent", &self.cut_after_silent_ms),
        ] {
            let span = *span
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((lo, hi)) = span {
                write!(
                    f,
                    " cut_after_{name}_min_ms {lo} cut_after_{name}_max_ms {hi}"
                )?;
            }
        }
        let (n, p50, p99, max) = self.probe();
        if n > 0 || self.probe_failed.load(Relaxed) > 0 {
            write!(
                f,
                " probe_ok {n} probe_failed {} probe_p50_ms {p50:.1} probe_p99_ms {p99:.1} probe_max_ms {max:.1}",
                self.probe_failed.load(Relaxed)
            )?;
        }
        let why = self
            .probe_failed_why
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !why.is_empty() {
            let why: Vec<_> = why.iter().map(|(k, n)| format!("{k}:{n}")).collect();
            write!(f, " probe_failed_why {}", why.join(","))?;
        }
        Ok(())
    }
}

/// What to run: `connections` slow clients of `mode` against `target`
/// (HOST:PORT), each sending requests of `size` octets (the no-read modes),
/// opened once and held for `duration`; `probe`: an HTTP ingress for the
/// healthy client.
#[derive(Clone, Debug)]
pub struct Slow {
    pub target: String,
    pub mode: Mode,
    pub connections: usize,
    pub duration: Duration,
    pub size: usize,
    pub probe: Option<String>,
}

/// A target that is not a loopback HOST:PORT.
#[derive(Debug, thiserror::Error)]
#[error("{0}: a loopback HOST:PORT (127.0.0.0/8 or [::1]) is needed")]
pub struct NotLoopback(String);

fn loopback(target: &str) -> Result<(), NotLoopback> {
    match target.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_loopback() => Ok(()),
        _ => Err(NotLoopback(target.to_owned())),
    }
}

/// Runs `slow`; refuses targets that are not loopback.
pub async fn run(slow: Slow) -> Result<Arc<SlowStats>, NotLoopback> {
    loopback(&slow.target)?;
    if let Some(p) = &slow.probe {
        loopback(p)?;
    }
    let stats = Arc::new(SlowStats::default());
    let deadline = Instant::now() + slow.duration;
    let probe = slow.probe.clone().map(|addr| {
        let stats = stats.clone();
        tokio::spawn(async move { probe(&addr, deadline, &stats).await })
    });
    let pad = Arc::new("x".repeat(slow.size.saturating_sub(60)));
    let mut tasks = Vec::with_capacity(slow.connections);
    for _ in 0..slow.connections {
        let (addr, stats, pad) = (slow.target.clone(), stats.clone(), pad.clone());
        let mode = slow.mode;
        tasks.push(tokio::spawn(async move {
            let opened = Instant::now();
            let cut = match mode {
                Mode::Headers | Mode::Body => http(&addr, mode, deadline, &stats).await,
                Mode::WsNoRead => ws_no_read(&addr, &pad, deadline, &stats).await,
                Mode::TcpNoRead => tcp_no_read(&addr, &pad, deadline, &stats).await,
            };
            match cut {
                Some(true) => stats.cut(opened.elapsed()),
                Some(false) => {
                    stats.still_open.fetch_add(1, Relaxed);
                }
                None => {
                    stats.refused.fetch_add(1, Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    if let Some(p) = probe {
        let _ = p.await;
    }
    Ok(stats)
}

/// Widens a (min, max) span of ms to take `d`.
fn widen(span: &Mutex<Option<(u64, u64)>>, d: Duration) {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mut m = span
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *m = Some(m.map_or((ms, ms), |(lo, hi)| (lo.min(ms), hi.max(ms))));
}

/// When the server's replies last reached a no-read client: the octets
/// waiting unread in its socket (`FIONREAD`) last grew. Once they stop
/// growing the client's receive buffer is full and the server can move
/// nothing more to it, which is where a server's stall clock for it starts.
struct Arrivals {
    base: Instant,
    last_ms: AtomicU64,
}

impl Arrivals {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Samples the socket every 20 ms; never returns (run it beside the
    /// writes, in the same task, so the socket outlives it).
    async fn watch(&self, fd: std::os::fd::RawFd) {
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if let Some(n) = unread(fd)
                && n != last
            {
                last = n;
                let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.last_ms.store(ms, Relaxed);
            }
        }
    }

    /// How long since replies last arrived.
    fn silent_for(&self) -> Duration {
        self.base
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Relaxed)))
    }
}

/// Octets waiting unread in socket `fd`.
fn unread(fd: std::os::fd::RawFd) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which is valid
    // for the call; `fd` is a socket the caller keeps open while it asks.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    if r == 0 {
        usize::try_from(n).ok()
    } else {
        None
    }
}

/// A write that takes longer than this means the server stopped reading.
pub const BLOCKED: Duration = Duration::from_millis(200);

/// Times one write of a no-read client: notes when the server first
/// stopped reading, and the time from then to the cut.
struct Writes<'a> {
    stats: &'a SlowStats,
    blocked: Option<Instant>,
    arrivals: &'a Arrivals,
}

impl Writes<'_> {
    /// `Some(cut)` once the write ended the run: the server dropped us
    /// (`true`), or the deadline came (`false`).
    async fn write<E>(
        &mut self,
        deadline: Instant,
        write: impl std::future::Future<Output = Result<(), E>>,
    ) -> Option<bool> {
        let started = Instant::now();
        let left = deadline.saturating_duration_since(started);
        let r = tokio::time::timeout(left, write).await;
        if self.blocked.is_none() && started.elapsed() > BLOCKED {
            self.blocked = Some(started);
        }
        match r {
            Ok(Ok(())) => None,
            Ok(Err(_)) => {
                if let Some(b) = self.blocked {
                    self.stats.cut_after_blocked(b.elapsed());
                }
                self.stats.cut_after_silent(self.arrivals.silent_for());
                Some(true)
            }
            Err(_) => Some(false),
        }
    }
}

fn echo_request(id: u64, pad: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":["{pad}"]}}"#)
}

/// `Some(true)`: the server cut the connection off before `deadline`;
/// `Some(false)`: still open at the deadline; `None`: no connection.
async fn http(addr: &str, mode: Mode, deadline: Instant, stats: &SlowStats) -> Option<bool> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    stats.opened.fetch_add(1, Relaxed);
    // The host it connected to, as a client names it (a gateway answers
    // only to its own names).
    let head = match mode {
        Mode::Body => format!(
            "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\":"
        ),
        _ => format!("POST / HTTP/1.1\r\nHost: {addr}\r\n"),
    };
    if tcp.write_all(head.as_bytes()).await.is_err() {
        return Some(true);
    }
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Some(false);
        }
        let tick = left.min(Duration::from_millis(500));
        tokio::select! {
            r = tcp.read(&mut buf) => match r {
                // An answer (408) is fine; the end of the stream is the cut.
                Ok(0) | Err(_) => return Some(true),
                Ok(_) => continue,
            },
            _ = tokio::time::sleep(tick) => {
                if mode == Mode::Headers && tcp.write_all(b"X").await.is_err() {
                    return Some(true);
                }
            }
        }
    }
}

async fn ws_no_read(addr: &str, pad: &str, deadline: Instant, stats: &SlowStats) -> Option<bool> {
    use tokio_tungstenite::tungstenite::Message;
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
        .await
        .ok()?;
    stats.opened.fetch_add(1, Relaxed);
    let fd = match ws.get_ref() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => tcp.as_raw_fd(),
        _ => return None,
    };
    let (mut sink, _never_read) = futures_util::StreamExt::split(ws);
    let arrivals = Arrivals::new();
    let mut writes = Writes {
        stats,
        blocked: None,
        arrivals: &arrivals,
    };
    let send = async {
        for id in 1.. {
            let req = echo_request(id, pad);
            if let Some(cut) = writes
                .write(deadline, sink.send(Message::Text(req.into())))
                .await
            {
                return Some(cut);
            }
        }
        Some(false)
    };
    tokio::select! {
        cut = send => cut,
        () = arrivals.watch(fd) => None,
    }
}

async fn tcp_no_read(addr: &str, pad: &str, deadline: Instant, stats: &SlowStats) -> Option<bool> {
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    stats.opened.fetch_add(1, Relaxed);
    let fd = tcp.as_raw_fd();
    let (_never_read, mut w) = tcp.into_split();
    let arrivals = Arrivals::new();
    let mut writes = Writes {
        stats,
        blocked: None,
        arrivals: &arrivals,
    };
    let send = async {
        for id in 1.. {
            let mut line = echo_request(id, pad);
            line.push('\n');
            if let Some(cut) = writes.write(deadline, w.write_all(line.as_bytes())).await {
                return Some(cut);
            }
        }
        Some(false)
    };
    tokio::select! {
        cut = send => cut,
        () = arrivals.watch(fd) => None,
    }
}

/// The healthy client: one small echo request every 20 ms on a keep-alive
/// connection (a fresh one after a failure), each timed.
async fn probe(addr: &str, deadline: Instant, stats: &SlowStats) {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":["probe"]}"#;
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut conn: Option<tokio::net::TcpStream> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    while Instant::now() < deadline {
        tick.tick().await;
        let started = Instant::now();
        if conn.is_none() {
            conn = tokio::net::TcpStream::connect(addr).await.ok();
        }
        let Some(tcp) = conn.as_mut() else {
            stats.probe_failed("connect".into());
            continue;
        };
        let answer = tokio::time::timeout(Duration::from_secs(5), exchange(tcp, &request)).await;
        match answer.unwrap_or_else(|_| Err("timeout".into())) {
            Ok(()) => stats
                .probe_ms
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(started.elapsed().as_secs_f64() * 1000.0),
            Err(why) => {
                stats.probe_failed(why);
                conn = None;
            }
        }
    }
}

/// One request and its response on a keep-alive connection: a 200 whose
/// body holds a result, or why not (one word: `write`, `read`, `closed`,
/// `no-length`, `status-CODE`, `no-result`).
async fn exchange(tcp: &mut tokio::net::TcpStream, request: &str) -> Result<(), String> {
    tcp.write_all(request.as_bytes())
        .await
        .map_err(|_| "write".to_owned())?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = tcp.read(&mut chunk).await.map_err(|_| "read".to_owned())?;
        if n == 0 {
            return Err("closed".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = resp.parse(&buf) {
            let len = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
                .ok_or_else(|| "no-length".to_owned())?;
            if buf.len() >= head + len {
                let body = &buf[head..head + len];
                return match resp.code {
                    Some(200) if body.windows(8).any(|w| w == b"\"result\"") => Ok(()),
                    Some(200) => Err("no-result".into()),
                    code => Err(format!("status-{}", code.unwrap_or(0))),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_why_the_probe_failed() {
        let stats = SlowStats::default();
        assert!(!stats.to_string().contains("probe_failed"));
        for why in ["status-503", "closed", "status-503"] {
            stats.probe_failed(why.into());
        }
        let line = stats.to_string();
        assert!(line.contains(" probe_failed 3 "), "{line}");
        assert!(
            line.ends_with(" probe_failed_why closed:1,status-503:2"),
            "{line}"
        );
    }

    /// Serves one connection: reads a request, writes `reply`, closes.
    async fn answering(reply: &'static str) -> tokio::net::TcpStream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(reply.as_bytes()).await;
        });
        tokio::net::TcpStream::connect(addr).await.expect("connect")
    }

    #[tokio::test]
    async fn an_exchange_names_what_it_got_instead_of_a_result() {
        let request = "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        for (reply, expected) in [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"result\":1}\n",
                Ok(()),
            ),
            (
                "HTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\n{}",
                Err("status-503"),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
                Err("no-result"),
            ),
            ("HTTP/1.1 200 OK\r\n\r\n", Err("no-length")),
            ("", Err("closed")),
        ] {
            let mut tcp = answering(reply).await;
            let got = exchange(&mut tcp, request).await;
            assert_eq!(got, expected.map_err(str::to_owned), "{reply:?}");
        }
    }
}
