//! HTTP/1.1 connections to one plain JSON-RPC upstream, each driven by the
//! request that holds it, on that request's own task.
//!
//! hyper-util's pooled client gives every connection a task of its own and
//! hands each request to it over a channel and each reply back: two task
//! hand-offs per request, and with several worker threads often a wakeup of
//! another one. A POST whose reply is read whole needs neither. Here the
//! request's task takes an idle connection (or makes one), writes the
//! request, reads the reply while polling the connection itself, and puts
//! the connection back when it is ready for another request. An idle
//! connection is polled by nobody: one the upstream closed meanwhile is found
//! out when it is next taken, and a request it refused unsent goes out on a
//! fresh connection, as hyper-util's client does. Idle connections are kept
//! most recently used on top; those idle longer than the idle timeout are
//! closed whenever a connection is put back, so an upstream's burst of
//! connections does not stay open (or half-closed) for long after it.
//!
//! On a shard (one thread, [`crate::shard`]) this costs nothing in
//! parallelism: a connection's own task would run on the same thread. With
//! one shared worker pool (`--shards 0`) a connection's task could read one
//! reply on one worker while the request's task sends the next on another;
//! that once made this design lose 14–18 % of the rate at 4 in flight
//! (`results/2026-12-03-origin-inline-http1`), but no longer shows
//! (`results/2026-12-05-origin-inline-shards`).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper::{Request, Response, Uri};
use tower_service::Service;

use super::http_client::{BoxError, Conn, Connector};

/// Why a POST has no reply.
#[derive(Debug)]
pub enum PostError {
    /// No connection could be made, or the one taken refused the request
    /// before writing any of it: the upstream saw nothing.
    NotSent(BoxError),
    /// The exchange failed once the request may have been written.
    Exchange(hyper::Error),
}

/// One connection and the half that sends on it.
struct Http1 {
    send: SendRequest<Full<Bytes>>,
    /// `None` once the connection future has finished (closed, or failed).
    /// Boxed: the stream (with its TLS state) is kilobytes, and connections
    /// move in and out of the idle list.
    conn: Option<Box<Connection<Conn, Full<Bytes>>>>,
}

impl Http1 {
    /// Polls the connection, if it still runs; drops it when it finishes.
    /// A finished connection keeps its queue of requests until it is
    /// dropped: dropping it answers each queued request (with an error that
    /// hands the request back unsent).
    fn poll_conn(&mut self, cx: &mut std::task::Context<'_>) {
        if let Some(conn) = &mut self.conn
            && Future::poll(std::pin::Pin::new(&mut **conn), cx).is_ready()
        {
            self.conn = None;
        }
    }

    /// `fut` to its end, polling the connection meanwhile (which is what
    /// writes the request and reads the reply into the body `fut` awaits).
    async fn drive<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = fut.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            if self.conn.is_some() {
                self.poll_conn(cx);
                if self.conn.is_none() {
                    // Ended and dropped: whatever `fut` waits on has its
                    // answer (an error) now.
                    return fut.as_mut().poll(cx);
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Polls the connection once, so that one whose reply was read whole
    /// moves to idle (or one the upstream closed finds out), then says
    /// whether it takes another request.
    async fn settle(&mut self) -> bool {
        std::future::poll_fn(|cx| {
            self.poll_conn(cx);
            Poll::Ready(())
        })
        .await;
        self.conn.is_some() && self.send.is_ready()
    }
}

struct Idle {
    conn: Http1,
    since: Instant,
}

/// The connections to one upstream.
pub struct Pool {
    connector: Connector,
    uri: Uri,
    /// `uri` as a request line names it (its [`origin_form`]), made once.
    target: Uri,
    /// Oldest first, most recently used last.
    idle: Mutex<VecDeque<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl Pool {
    /// At most `max_idle` idle connections to `uri` are kept, each for
    /// `idle_timeout` at most.
    pub fn new(connector: Connector, uri: Uri, max_idle: usize, idle_timeout: Duration) -> Self {
        Self {
            connector,
            target: origin_form(&uri),
            uri,
            idle: Mutex::new(VecDeque::new()),
            max_idle,
            idle_timeout,
        }
    }

    /// The upstream's URL.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// Sends `req` (its `Host` set) to the upstream's path and hands the
    /// response to `read`, driving the connection until `read` is done;
    /// the connection goes back to the pool if it can take another request.
    pub async fn exchange<T>(
        &self,
        mut req: Request<Full<Bytes>>,
        read: impl AsyncFnOnce(Response<Incoming>) -> T,
    ) -> Result<T, PostError> {
        *req.uri_mut() = self.target.clone();
        // An idle connection may have been closed by the upstream: a request
        // it refuses unsent is sent again, on the next idle one or a new one.
        let (mut conn, resp) = loop {
            let (mut conn, fresh) = match self.take() {
                Some(conn) => (conn, false),
                None => (self.connect().await?, true),
            };
            let sent = conn.send.try_send_request(req);
            match conn.drive(sent).await {
                Ok(resp) => break (conn, resp),
                Err(mut e) => match e.take_message() {
                    Some(unsent) if !fresh => req = unsent,
                    Some(_) => return Err(PostError::NotSent(Box::new(e.into_error()))),
                    None => return Err(PostError::Exchange(e.into_error())),
                },
            }
        };
        let out = conn.drive(read(resp)).await;
        if conn.settle().await {
            self.put(conn);
        }
        Ok(out)
    }

    fn take(&self) -> Option<Http1> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        // The most recently used first (the likeliest to be open); one idle
        // too long is closed (dropped) on the way.
        while let Some(Idle { conn, since }) = idle.pop_back() {
            if since.elapsed() < self.idle_timeout && !conn.send.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    fn put(&self, conn: Http1) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while idle
            .front()
            .is_some_and(|oldest| now.saturating_duration_since(oldest.since) >= self.idle_timeout)
        {
            idle.pop_front();
        }
        if idle.len() < self.max_idle {
            idle.push_back(Idle { conn, since: now });
        }
    }

    async fn connect(&self) -> Result<Http1, PostError> {
        let io = self
            .connector
            .clone()
            .call(self.uri.clone())
            .await
            .map_err(PostError::NotSent)?;
        let (send, conn) = http1::handshake(io)
            .await
            .map_err(|e| PostError::NotSent(Box::new(e)))?;
        Ok(Http1 {
            send,
            conn: Some(Box::new(conn)),
        })
    }

    /// Idle connections now (for tests).
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle.lock().map(|i| i.len()).unwrap_or(0)
    }
}

/// `uri` as a request line names it to the upstream: its path and query.
fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    fn connector() -> Connector {
        let tls = crate::gateway::context::tls_roots_client_config(None);
        Connector::new(tls.expect("the system's roots"), Duration::from_secs(5))
    }

    /// An HTTP/1.1 server on loopback answering `reply` to everything,
    /// counting the connections it accepted; `close_after`: it closes each
    /// connection 5 ms after that many requests, with a reset (as a process
    /// killed with unread data does) when `reset`.
    async fn server(
        reply: &'static str,
        close_after: Option<usize>,
        reset: bool,
    ) -> (Uri, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Relaxed);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut served = 0;
                    loop {
                        // One request per read is enough for these small ones.
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            reply.len()
                        );
                        if s.write_all(head.as_bytes()).await.is_err()
                            || s.write_all(reply.as_bytes()).await.is_err()
                        {
                            return;
                        }
                        served += 1;
                        if close_after == Some(served) {
                            // After the client has taken the reply and put
                            // the connection back: it learns of the close
                            // while the connection is idle.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            if reset {
                                let _ = s.set_zero_linger();
                            }
                            return;
                        }
                    }
                });
            }
        });
        let uri = format!("http://{addr}/rpc").parse().expect("uri");
        (uri, accepted)
    }

    fn post(uri: &Uri, body: &'static str) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(Bytes::from_static(body.as_bytes())));
        *req.method_mut() = hyper::Method::POST;
        *req.uri_mut() = origin_form(uri);
        let host = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        req.headers_mut()
            .insert(hyper::header::HOST, host.parse().expect("host"));
        req
    }

    async fn body(resp: Response<Incoming>) -> Bytes {
        resp.into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn sequential_requests_share_one_connection() {
        let (uri, accepted) = server(r#"{"jsonrpc":"2.0","id":1,"result":1}"#, None, false).await;
        let pool = Pool::new(connector(), uri.clone(), 8, Duration::from_secs(90));
        for _ in 0..20 {
            let got = pool
                .exchange(post(&uri, "{}"), body)
                .await
                .expect("a reply");
            assert_eq!(&got[..], br#"{"jsonrpc":"2.0","id":1,"result":1}"#);
        }
        assert_eq!(accepted.load(Relaxed), 1, "one connection for all of them");
        assert_eq!(pool.idle_count(), 1);
    }

    /// `tasks` tasks at once, each posting `each` requests in turn through
    /// `pool`; every one answered.
    async fn at_once(pool: &Arc<Pool>, uri: &Uri, tasks: usize, each: usize) {
        let tasks: Vec<_> = (0..tasks)
            .map(|_| {
                let (pool, uri) = (pool.clone(), uri.clone());
                tokio::spawn(async move {
                    for _ in 0..each {
                        pool.exchange(post(&uri, "{}"), body)
                            .await
                            .expect("a reply");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("the task");
        }
    }

    #[tokio::test]
    async fn concurrent_requests_each_take_a_connection_and_all_come_back() {
        let (uri, accepted) = server(r#"{"result":1}"#, None, false).await;
        let pool = Arc::new(Pool::new(
            connector(),
            uri.clone(),
            8,
            Duration::from_secs(90),
        ));
        at_once(&pool, &uri, 4, 10).await;
        let made = accepted.load(Relaxed);
        assert!(
            (1..=4).contains(&made),
            "{made} connections for 4 at a time"
        );
        assert_eq!(pool.idle_count(), made, "every connection went back");
    }

    /// Five requests in turn to a server that closes each connection (with
    /// a reset when `reset`) once it has answered, the close arriving while
    /// the connection waits idle in the pool: every request is answered, and
    /// none waits on the dead connection (a finished connection that were
    /// kept would hold the request it was handed forever).
    async fn each_goes_on_a_new_connection(reset: bool) {
        let (uri, accepted) = server(r#"{"result":1}"#, Some(1), reset).await;
        let pool = Pool::new(connector(), uri.clone(), 8, Duration::from_secs(90));
        for _ in 0..5 {
            let within = Duration::from_secs(5);
            let got = tokio::time::timeout(within, pool.exchange(post(&uri, "{}"), body)).await;
            let got = got.expect("an answer, not a wait on a closed connection");
            assert_eq!(&got.expect("a reply")[..], br#"{"result":1}"#);
            // Let the server's close arrive before the next request.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Relaxed), 5, "a new connection for each");
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_is_replaced_and_nothing_is_lost() {
        each_goes_on_a_new_connection(false).await;
    }

    #[tokio::test]
    async fn a_connection_reset_while_idle_is_replaced_and_nothing_is_lost() {
        each_goes_on_a_new_connection(true).await;
    }

    #[tokio::test]
    async fn a_refused_connection_is_not_sent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let uri: Uri = format!("http://{addr}/").parse().expect("uri");
        let pool = Pool::new(connector(), uri.clone(), 8, Duration::from_secs(90));
        match pool.exchange(post(&uri, "{}"), body).await {
            Err(PostError::NotSent(e)) => assert!(!e.to_string().is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn idle_connections_past_their_time_are_not_reused() {
        let (uri, accepted) = server(r#"{"result":1}"#, None, false).await;
        let pool = Pool::new(connector(), uri.clone(), 8, Duration::from_millis(30));
        pool.exchange(post(&uri, "{}"), body)
            .await
            .expect("a reply");
        tokio::time::sleep(Duration::from_millis(60)).await;
        pool.exchange(post(&uri, "{}"), body)
            .await
            .expect("a reply");
        assert_eq!(accepted.load(Relaxed), 2);
    }

    #[tokio::test]
    async fn connections_left_idle_past_their_time_are_closed_while_others_are_used() {
        let (uri, accepted) = server(r#"{"result":1}"#, None, false).await;
        let pool = Arc::new(Pool::new(
            connector(),
            uri.clone(),
            8,
            Duration::from_millis(40),
        ));
        // A burst of three at once leaves three idle connections.
        at_once(&pool, &uri, 3, 1).await;
        let made = accepted.load(Relaxed);
        assert!(made >= 2, "{made} connection(s) for three at once");
        assert_eq!(pool.idle_count(), made);
        // Then one at a time, for longer than the idle timeout: the one in
        // use stays, the others are closed once their time is up.
        for _ in 0..8 {
            pool.exchange(post(&uri, "{}"), body)
                .await
                .expect("a reply");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            pool.idle_count(),
            1,
            "{made} made; only the one in use is kept"
        );
        assert_eq!(accepted.load(Relaxed), made, "no new connection was needed");
    }

    #[test]
    fn the_request_line_names_the_path_and_query() {
        let uri: Uri = "http://h:1/a/b?c=d".parse().expect("uri");
        assert_eq!(origin_form(&uri), "/a/b?c=d");
        let uri: Uri = "http://h:1".parse().expect("uri");
        assert_eq!(origin_form(&uri), "/");
    }
}
