//! Slow clients for fault injection (`npamp-loadgen slow`): connections
//! that hold a server's resources without finishing anything, to check it
//! cuts them off and keeps serving everyone else.
//!
//! - `headers`: slowloris, an HTTP request whose headers arrive one octet
//!   at a time and never end;
//! - `body`: complete headers, then part of the announced body and nothing
//!   more;
//! - `ws-no-read`: a WebSocket client that sends requests with large
//!   replies and never reads them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Headers,
    Body,
    WsNoRead,
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
}

impl SlowStats {
    fn cut(&self, lived: Duration) {
        let ms = u64::try_from(lived.as_millis()).unwrap_or(u64::MAX);
        self.cut_off.fetch_add(1, Relaxed);
        self.cut_off_after_ms_sum.fetch_add(ms, Relaxed);
        self.cut_off_after_ms_max.fetch_max(ms, Relaxed);
    }
}

impl std::fmt::Display for SlowStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut = self.cut_off.load(Relaxed);
        let mean = self.cut_off_after_ms_sum.load(Relaxed) / cut.max(1);
        write!(
            f,
            "opened {} cut_off {} still_open {} refused {} cut_off_mean_ms {} cut_off_max_ms {}",
            self.opened.load(Relaxed),
            cut,
            self.still_open.load(Relaxed),
            self.refused.load(Relaxed),
            mean,
            self.cut_off_after_ms_max.load(Relaxed)
        )
    }
}

/// Keeps `connections` slow clients of `mode` against `addr` (HOST:PORT)
/// for `duration`; each is opened once.
pub async fn run(
    addr: String,
    mode: Mode,
    connections: usize,
    duration: Duration,
) -> Arc<SlowStats> {
    let stats = Arc::new(SlowStats::default());
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (addr, stats) = (addr.clone(), stats.clone());
        tasks.push(tokio::spawn(async move {
            let opened = Instant::now();
            let cut = match mode {
                Mode::Headers | Mode::Body => http(&addr, mode, deadline, &stats).await,
                Mode::WsNoRead => ws_no_read(&addr, deadline, &stats).await,
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
    stats
}

/// `Some(true)`: the server cut the connection off before `deadline`;
/// `Some(false)`: still open at the deadline; `None`: no connection.
async fn http(addr: &str, mode: Mode, deadline: Instant, stats: &SlowStats) -> Option<bool> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    stats.opened.fetch_add(1, Relaxed);
    let head = match mode {
        Mode::Body => {
            "POST / HTTP/1.1\r\nHost: slow\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"jsonrpc\":"
        }
        _ => "POST / HTTP/1.1\r\nHost: slow\r\n",
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

async fn ws_no_read(addr: &str, deadline: Instant, stats: &SlowStats) -> Option<bool> {
    use tokio_tungstenite::tungstenite::Message;
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
        .await
        .ok()?;
    stats.opened.fetch_add(1, Relaxed);
    let (mut sink, _never_read) = futures_util::StreamExt::split(ws);
    let pad = "x".repeat(60_000);
    let mut id = 0u64;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Some(false);
        }
        id += 1;
        let req = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":["{pad}"]}}"#);
        match tokio::time::timeout(left, sink.send(Message::Text(req.into()))).await {
            Ok(Ok(())) => {}
            // The server dropped us.
            Ok(Err(_)) => return Some(true),
            // Blocked on a full socket at the deadline: not cut off.
            Err(_) => return Some(false),
        }
    }
}
