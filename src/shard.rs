//! Shards: one single-threaded tokio runtime per core, as nginx runs one
//! worker process per core.
//!
//! A connection given to a shard is served there from its first octet to
//! its last, and so is everything it starts: the association it opens, the
//! tasks that association spawns, the upstream connections its requests
//! take. A request's wake-ups then stay on one thread. On one shared
//! multi-threaded runtime they move between workers: the worker that has a
//! second runnable task wakes a parked sibling to steal it, and on a
//! virtual machine each such wake-up goes through the host (measured in
//! `results/2026-12-05-one-worker/`: 3.1-4.6 context switches per request
//! at 1 in flight, against 2.0 with one worker).
//!
//! What the shards share (limits, metrics, health, the configuration) is
//! behind the same atomics and locks as before; only where tasks run
//! changes. A thread that is no shard's (the main runtime, which accepts)
//! may still use everything: it is served as it was.

use std::cell::Cell;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

thread_local! {
    /// The shard this thread runs, if it runs one.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The shards' runtimes. [`Shards::stop`], or dropping this, ends them:
/// each thread drops the tasks left on its runtime and exits.
pub struct Shards {
    handles: Vec<Handle>,
    /// Sent or dropped: each shard's thread then returns.
    stops: Mutex<Vec<oneshot::Sender<()>>>,
    next: AtomicUsize,
}

impl Shards {
    /// Starts `n` shards (at least one), each a thread named
    /// `npamp-shard-I` running a current-thread runtime with I/O and
    /// timers.
    pub fn start(n: usize) -> std::io::Result<Self> {
        let n = n.max(1);
        let mut handles = Vec::with_capacity(n);
        let mut stops = Vec::with_capacity(n);
        for i in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            handles.push(runtime.handle().clone());
            std::thread::Builder::new()
                .name(format!("npamp-shard-{i}"))
                .spawn(move || {
                    CURRENT.set(Some(i));
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                })?;
            stops.push(stop);
        }
        Ok(Self {
            handles,
            stops: Mutex::new(stops),
            next: AtomicUsize::new(0),
        })
    }

    /// Ends every shard now (a gateway's shutdown, once it has drained):
    /// the tasks left on them are dropped, their connections closed. A
    /// task spawned after this is dropped at once.
    pub fn stop(&self) {
        self.stops.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// How many shards there are.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Never: there is at least one shard.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The shard the calling thread runs; `None` on any other thread.
    pub fn current() -> Option<usize> {
        CURRENT.get()
    }

    /// Runs `task` on the next shard in turn.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_on(self.next.fetch_add(1, Relaxed), task)
    }

    /// Runs `task` on shard `i` (modulo their number).
    pub fn spawn_on<F>(&self, i: usize, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handles[i % self.handles.len()].spawn(task)
    }
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards").field("len", &self.len()).finish()
    }
}

/// Runs `task` on shard `i` of `shards` (modulo their number), or here
/// (`tokio::spawn`) when there are none.
pub fn spawn_on<F>(shards: Option<&Shards>, i: usize, task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match shards {
        Some(shards) => shards.spawn_on(i, task),
        None => tokio::spawn(task),
    }
}

/// Serves an accepted socket on the next shard of `shards` (or here when
/// there are none): the socket leaves this runtime's reactor and joins the
/// shard's, so that its readiness wakes the shard's thread. A socket that
/// cannot move (the system refused to deregister or register it) is
/// closed, and said so in the debug log.
pub fn serve_socket<S, F, Fut>(shards: Option<&Shards>, socket: S, serve: F) -> JoinHandle<()>
where
    S: Movable,
    F: FnOnce(S) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(shards) = shards else {
        return tokio::spawn(serve(socket));
    };
    let moved = socket.detach();
    shards.spawn(async move {
        match moved.and_then(S::attach) {
            Ok(socket) => serve(socket).await,
            Err(e) => tracing::debug!(error = %e, "cannot move a connection to a shard: closed"),
        }
    })
}

/// A tokio socket that can leave one runtime's reactor for another's.
pub trait Movable: Sized + Send + 'static {
    /// The socket apart from any reactor (still non-blocking).
    type Detached: Send + 'static;
    fn detach(self) -> std::io::Result<Self::Detached>;
    /// Registers it with the calling runtime's reactor.
    fn attach(detached: Self::Detached) -> std::io::Result<Self>;
}

impl Movable for tokio::net::TcpStream {
    type Detached = std::net::TcpStream;
    fn detach(self) -> std::io::Result<Self::Detached> {
        self.into_std()
    }
    fn attach(detached: Self::Detached) -> std::io::Result<Self> {
        Self::from_std(detached)
    }
}

impl Movable for tokio::net::UnixStream {
    type Detached = std::os::unix::net::UnixStream;
    fn detach(self) -> std::io::Result<Self::Detached> {
        self.into_std()
    }
    fn attach(detached: Self::Detached) -> std::io::Result<Self> {
        Self::from_std(detached)
    }
}

/// One `T` for each shard, and one for the threads that are no shard's:
/// what a shard's tasks use without sharing it with another shard (an
/// upstream connection pool, whose connections' tasks then run on the
/// shard that uses them).
pub struct PerShard<T> {
    /// `[other threads, shard 0, shard 1, ...]`.
    each: Vec<T>,
}

impl<T> PerShard<T> {
    /// `make()` once for each of `shards`' shards and once more.
    pub fn new(shards: Option<&Shards>, mut make: impl FnMut() -> T) -> Self {
        let n = 1 + shards.map_or(0, Shards::len);
        Self {
            each: (0..n).map(|_| make()).collect(),
        }
    }

    /// The calling thread's.
    pub fn get(&self) -> &T {
        let i = Shards::current().map_or(0, |s| 1 + s);
        &self.each[i % self.each.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_task_runs_on_its_shard_and_spawns_there() {
        let shards = Shards::start(2).expect("shards");
        assert_eq!(Shards::current(), None);
        for i in 0..4 {
            let (mine, child) = shards
                .spawn_on(i, async {
                    let child = tokio::spawn(async { Shards::current() }).await;
                    (Shards::current(), child.ok().flatten())
                })
                .await
                .expect("task");
            assert_eq!(mine, Some(i % 2));
            assert_eq!(child, Some(i % 2), "a spawned task stays on the shard");
        }
    }

    #[tokio::test]
    async fn a_socket_moves_to_a_shard_and_is_served_there() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let shards = Shards::start(2).expect("shards");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = tokio::spawn(async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.expect("connect");
            c.write_all(b"ping").await.expect("write");
            let mut got = [0u8; 6];
            c.read_exact(&mut got).await.expect("read");
            got
        });
        let (tcp, _) = listener.accept().await.expect("accept");
        let (tx, rx) = oneshot::channel();
        serve_socket(Some(&shards), tcp, |mut tcp| async move {
            let mut got = [0u8; 4];
            tcp.read_exact(&mut got).await.expect("read");
            tcp.write_all(b"pong: ").await.expect("write");
            let _ = tx.send((got, Shards::current()));
        });
        let (got, on) = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("in time")
            .expect("served");
        assert_eq!(&got, b"ping");
        assert!(on.is_some(), "served on a shard");
        assert_eq!(&client.await.expect("client"), b"pong: ");
    }

    #[tokio::test]
    async fn stopped_shards_drop_their_tasks() {
        let shards = Shards::start(2).expect("shards");
        let (held, dropped) = oneshot::channel::<()>();
        shards.spawn_on(1, async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        shards.stop();
        let gone = tokio::time::timeout(Duration::from_secs(5), dropped).await;
        assert!(matches!(gone, Ok(Err(_))), "the pending task was dropped");
    }

    #[test]
    fn each_shard_has_its_own_value_and_other_threads_share_one() {
        let shards = Shards::start(3).expect("shards");
        let made = AtomicUsize::new(0);
        let per = std::sync::Arc::new(PerShard::new(Some(&shards), || made.fetch_add(1, Relaxed)));
        assert_eq!(*per.get(), 0, "this thread is no shard's");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        for i in 0..3 {
            let per = per.clone();
            let got = rt
                .block_on(shards.spawn_on(i, async move { *per.get() }))
                .expect("task");
            assert_eq!(got, i + 1);
        }
        assert_eq!(made.load(Relaxed), 4);
    }
}
