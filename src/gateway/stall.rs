//! Whether a client still takes what it is sent. A writer gives a client up
//! only when no octet moved to it for `--stall-timeout`, not when one
//! message took that long: a client reading a large reply slowly keeps its
//! connection, and one that reads nothing is cut `--stall-timeout` after
//! its socket stopped taking octets, however its replies were cut into
//! messages.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::metrics::Metrics;

/// Instants kept in atomics, as nanoseconds after a base, on tokio's clock.
#[derive(Debug)]
struct Clock(Instant);

impl Clock {
    fn start() -> Self {
        Self(Instant::now())
    }

    /// Now, in nanoseconds after the base.
    fn now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(NOT_BLOCKED - 1)
    }

    /// The instant `ns` nanoseconds after the base.
    fn at(&self, ns: u64) -> Instant {
        self.0 + Duration::from_nanos(ns)
    }
}

/// When octets last moved to a client (shared by its stream and its
/// writer).
#[derive(Debug)]
pub struct Moved {
    clock: Clock,
    /// Nanoseconds after the clock's base.
    at: AtomicU64,
    /// When a write first found no room since octets last moved
    /// (nanoseconds after the clock's base); [`NOT_BLOCKED`] when none has.
    blocked: AtomicU64,
    /// When octets last moved to a client that had stopped taking them for
    /// a while (a write that had found no room): a reply still draining.
    /// Small writes that find room (PING and SETTINGS acknowledgements) do
    /// not move it, so they do not keep an idle connection.
    drained: AtomicU64,
}

const NOT_BLOCKED: u64 = u64::MAX;

impl Moved {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            clock: Clock::start(),
            at: AtomicU64::new(0),
            blocked: AtomicU64::new(NOT_BLOCKED),
            drained: AtomicU64::new(0),
        })
    }

    fn mark(&self) {
        let now = self.clock.now();
        self.at.store(now, Relaxed);
        // One writer per stream: a load, and stores only when it was
        // blocked, keep the common write at two plain stores.
        if self.blocked.load(Relaxed) != NOT_BLOCKED {
            self.drained.store(now, Relaxed);
            self.blocked.store(NOT_BLOCKED, Relaxed);
        }
    }

    fn block(&self) {
        let _ = self
            .blocked
            .compare_exchange(NOT_BLOCKED, self.clock.now(), Relaxed, Relaxed);
    }

    /// Since when a write has waited for room, if one does.
    fn blocked_since(&self) -> Option<Instant> {
        match self.blocked.load(Relaxed) {
            NOT_BLOCKED => None,
            ns => Some(self.clock.at(ns)),
        }
    }

    /// When octets last moved (the stream's creation if none has).
    pub fn last(&self) -> Instant {
        self.clock.at(self.at.load(Relaxed))
    }

    /// When octets last moved after a write had waited for room (the
    /// stream's creation if none has).
    fn drained(&self) -> Instant {
        self.clock.at(self.drained.load(Relaxed))
    }
}

/// A client's stream that notes in [`Moved`] each write that moved octets.
#[derive(Debug)]
pub struct Tracked<S> {
    inner: S,
    moved: Arc<Moved>,
}

impl<S> Tracked<S> {
    pub fn new(inner: S, moved: Arc<Moved>) -> Self {
        Self { inner, moved }
    }

    fn note(&self, r: &Poll<io::Result<usize>>) {
        match r {
            Poll::Ready(Ok(n)) if *n > 0 => self.moved.mark(),
            Poll::Pending => self.moved.block(),
            _ => {}
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write(cx, buf);
        me.note(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write_vectored(cx, bufs);
        me.note(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Resolves when a write to the client has waited `stall` with no octet
/// moving: for a connection whose writes happen inside another library
/// (hyper), run beside it and drop the connection when this resolves.
pub async fn stalled(moved: &Moved, stall: Duration) {
    loop {
        match moved.blocked_since() {
            // Nothing waits: look again a period later (an idle connection
            // costs one timer per period).
            None => tokio::time::sleep(stall).await,
            Some(since) => {
                let from = since.max(moved.last());
                if Instant::now() >= from + stall {
                    return;
                }
                tokio::time::sleep_until(from + stall).await;
            }
        }
    }
}

/// Whether a connection serves a request, and since when it has served
/// none: the idle rule of an HTTP connection (HTTP/1.1 and HTTP/2), kept
/// with two atomic operations per request and one timer per connection
/// instead of hyper's header-read timer, which allocates, arms and clears
/// a timer for every request.
#[derive(Debug)]
pub struct Requests {
    clock: Clock,
    /// Requests begun and not yet answered to the last octet.
    serving: AtomicU32,
    /// When the last request in service ended (the connection's opening if
    /// none has), nanoseconds after the clock's base.
    idle_since: AtomicU64,
}

impl Requests {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            clock: Clock::start(),
            serving: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
        })
    }

    /// A request begins: the connection is busy until the returned guard
    /// is dropped (with the reply's body, once hyper has written it all or
    /// given it up).
    pub fn begin(self: &Arc<Self>) -> Serving {
        self.serving.fetch_add(1, Ordering::AcqRel);
        Serving(self.clone())
    }

    /// Since when no request has been in service; `None` while one is.
    fn idle_since(&self) -> Option<Instant> {
        if self.serving.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.clock.at(self.idle_since.load(Ordering::Acquire)))
    }
}

/// A request in service (see [`Requests::begin`]).
#[derive(Debug)]
pub struct Serving(Arc<Requests>);

impl Drop for Serving {
    fn drop(&mut self) {
        let r = &self.0;
        // Stored before the count falls: whoever sees no request in service
        // sees when the last one ended.
        r.idle_since.fetch_max(r.clock.now(), Ordering::AcqRel);
        r.serving.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves when a connection has had no request in service for `stall`:
/// an idle keep-alive connection, or a client trickling a request's
/// headers (slowloris). Counted from the last request's end, or, where its
/// reply was still draining to a slow reader then, from the last octet that
/// drained; never while a write waits for room (that is the stall rule's).
/// Octets the gateway writes of its own (HTTP/2 PING and SETTINGS
/// acknowledgements) do not count: a client that only pings is idle. A
/// request's head begins its service, so one arriving just in time, read
/// by the connection before this is polled, keeps the connection. One
/// timer per connection, re-set at most once per `stall`.
pub async fn idle(requests: &Requests, moved: &Moved, stall: Duration) {
    loop {
        let at = match requests.idle_since() {
            // Busy, or a reply still waits for room: nothing can be due
            // before `stall` from now.
            Some(since) if moved.blocked_since().is_none() => {
                let due = since.max(moved.drained()) + stall;
                if Instant::now() >= due {
                    return;
                }
                due
            }
            _ => Instant::now() + stall,
        };
        tokio::time::sleep_until(at).await;
    }
}

/// One write to a client: `false` when it failed, or when no octet moved
/// for `stall` while it was pending (the client does not read; counted),
/// and the client is given up.
pub async fn wrote<E>(
    stall: Duration,
    moved: &Moved,
    metrics: &Metrics,
    write: impl Future<Output = Result<(), E>>,
) -> bool {
    let started = Instant::now();
    let mut write = std::pin::pin!(write);
    loop {
        let from = moved.last().max(started);
        match tokio::time::timeout_at(from + stall, &mut write).await {
            Ok(r) => return r.is_ok(),
            Err(_) if moved.last() > from => continue,
            Err(_) => {
                static STALLED: crate::gateway::quiet::Every = crate::gateway::quiet::Every::new();
                crate::gateway::quiet::warn_every!(
                    STALLED,
                    "client took no octet of its replies for {:.1} s (--stall-timeout): dropping it (one line per 5 s at most; all are counted in npamp_stalled_clients_total)",
                    stall.as_secs_f64()
                );
                metrics.stalled_clients.fetch_add(1, Relaxed);
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// A reader that takes `chunk` octets every `every`, forever: a slow
    /// client, not a stalled one.
    async fn drain_slowly(mut r: tokio::io::DuplexStream, chunk: usize, every: Duration) {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0; chunk];
        loop {
            tokio::time::sleep(every).await;
            if r.read(&mut buf).await.map_or(true, |n| n == 0) {
                return;
            }
        }
    }

    /// A reader that takes 1 KiB every `every`, `reads` times, and then
    /// nothing, keeping the stream open.
    async fn read_then_hold(mut r: tokio::io::DuplexStream, reads: usize, every: Duration) {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0; 1024];
        for _ in 0..reads {
            tokio::time::sleep(every).await;
            let _ = r.read(&mut buf).await;
        }
        std::future::pending::<()>().await;
        drop(r);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_of_a_large_reply_is_kept_and_a_stalled_one_is_cut_at_the_timeout() {
        let stall = Duration::from_secs(10);
        let metrics = Metrics::default();

        // 64 KiB through a 1 KiB pipe read 1 KiB a second: the write takes
        // about a minute, far past the stall timeout, and still succeeds.
        let (a, b) = tokio::io::duplex(1024);
        tokio::spawn(drain_slowly(b, 1024, Duration::from_secs(1)));
        let moved = Moved::new();
        let mut w = Tracked::new(a, moved.clone());
        let big = vec![7u8; 64 << 10];
        let started = tokio::time::Instant::now();
        assert!(wrote(stall, &moved, &metrics, w.write_all(&big)).await);
        assert!(started.elapsed() > Duration::from_secs(60));
        assert_eq!(metrics.stalled_clients.load(Relaxed), 0);

        // A reader that takes 4 KiB and then nothing: cut `stall` after the
        // last octet moved, not after the write began.
        let (a, b) = tokio::io::duplex(1024);
        let reader = tokio::spawn(read_then_hold(b, 4, Duration::from_secs(2)));
        let moved = Moved::new();
        let mut w = Tracked::new(a, moved.clone());
        let started = tokio::time::Instant::now();
        assert!(!wrote(stall, &moved, &metrics, w.write_all(&big)).await);
        let took = started.elapsed();
        // The last read is at 8 s and frees room for one more write.
        assert!(
            took >= Duration::from_secs(18) && took < Duration::from_secs(19),
            "{took:?}"
        );
        assert_eq!(metrics.stalled_clients.load(Relaxed), 1);
        reader.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_the_stall_timeout_after_its_last_request_ended() {
        let stall = Duration::from_secs(10);
        let moved = Moved::new();
        let requests = Requests::new();
        let opened = Instant::now();
        // No request at all: idle `stall` after opening.
        idle(&requests, &moved, stall).await;
        assert_eq!(opened.elapsed(), stall);

        // A request in service for 35 s (three and a half timeouts) keeps it,
        // and so do two overlapping ones; idle `stall` after the last ends.
        let first = requests.begin();
        let ends = async {
            tokio::time::sleep(Duration::from_secs(20)).await;
            let second = requests.begin();
            tokio::time::sleep(Duration::from_secs(15)).await;
            drop(first);
            tokio::time::sleep(Duration::from_secs(3)).await;
            drop(second);
            Instant::now()
        };
        let started = Instant::now();
        let (ended, ()) = tokio::join!(ends, idle(&requests, &moved, stall));
        assert_eq!(ended - started, Duration::from_secs(38));
        assert_eq!(Instant::now() - ended, stall);

        // The tail of a reply still draining to a slow reader after its
        // request ended (writes that waited for room, then moved) counts as
        // activity: idle `stall` after the last octet drained.
        drop(requests.begin());
        let drains = async {
            for _ in 0..4 {
                moved.block();
                tokio::time::sleep(Duration::from_secs(4)).await;
                moved.mark();
            }
            Instant::now()
        };
        let (last, ()) = tokio::join!(drains, idle(&requests, &moved, stall));
        assert_eq!(Instant::now() - last, stall);

        // Octets that find room at once after the last request (the
        // gateway's acknowledgements of a client's PINGs every 4 s) do not:
        // idle `stall` after the request ended, PINGs or not.
        drop(requests.begin());
        let ended = Instant::now();
        let pings = async {
            loop {
                tokio::time::sleep(Duration::from_secs(4)).await;
                moved.mark();
            }
        };
        tokio::select! {
            () = pings => unreachable!("the pings never end"),
            () = idle(&requests, &moved, stall) => {}
        }
        assert_eq!(Instant::now() - ended, stall);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_whose_write_waits_with_nothing_moving_is_found_stalled() {
        let stall = Duration::from_secs(10);
        let (a, b) = tokio::io::duplex(1024);
        let moved = Moved::new();
        let mut w = Tracked::new(a, moved.clone());
        // Idle, nothing waiting: never stalled.
        assert!(
            tokio::time::timeout(Duration::from_secs(60), stalled(&moved, stall))
                .await
                .is_err()
        );
        // A reply the reader takes slowly (1 KiB every 5 s, for 60 s): not
        // stalled. Then it reads no more, and keeps the connection open.
        let reader = tokio::spawn(read_then_hold(b, 12, Duration::from_secs(5)));
        let big = vec![7u8; 16 << 10];
        let write = tokio::spawn(async move {
            let _ = w.write_all(&big).await;
            w
        });
        assert!(
            tokio::time::timeout(Duration::from_secs(60), stalled(&moved, stall))
                .await
                .is_err()
        );
        // The reader stopped at 60 s: stalled `stall` after its last read.
        stalled(&moved, stall).await;
        let at = moved.last();
        assert!(
            tokio::time::Instant::now().duration_since(at) >= stall,
            "cut before the stall timeout"
        );
        assert!(!write.is_finished(), "the write still waits");
        reader.abort();
        write.abort();
    }
}
