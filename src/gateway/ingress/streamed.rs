//! One request, a stream of messages, at an HTTP edge (issue 52, item 2;
//! `docs/decisions.md` §11): an MCP request outside a session whose client
//! takes an event stream gets what the origin streams before the reply
//! (the server's progress and log messages for it) as events, then the
//! reply, on one 200 event stream. A reply that comes before anything else
//! is answered as any other.
//!
//! What waits for a client that does not read is bounded in octets
//! (`--max-body`, counted until the body hands it to hyper); more is
//! dropped and counted. The stream ends with the reply, whatever a losing
//! try of the request still holds (of a request tried more than once, the
//! edge streams the first try that sends anything: `Edge::call`).
//!
//! A subscription (`subscriptions/listen`) is a stream with no reply to
//! wait for but its end: one whose client lets that bound fill is ended
//! there (what is queued is sent, then the stream ends, and the request is
//! given up, which the server is told), not thinned. A subscription that
//! silently lost a notification would leave its client wrong with no sign;
//! a stream that ends without its `complete` result tells the client to
//! listen again (MCP 2026-07-28, "Graceful Closure").

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{Notify, mpsc};
use tracing::warn;

use super::response::{HttpResponse, event_response_counted};
use crate::gateway::context::Ctx;
use crate::gateway::edge::Edge;
use crate::gateway::edge::answer::{Answer, answer_streamed};
use crate::relay::{Attached, Failure, Interim};

/// The most messages that wait for a client to read them.
const QUEUED: usize = 64;

/// Where a request's streamed messages go until its reply is sent.
struct Stream {
    /// Taken when the reply is sent: the body ends then.
    tx: Mutex<Option<mpsc::Sender<Bytes>>>,
    /// The octets queued and not yet handed to hyper.
    queued: Arc<AtomicUsize>,
    /// The most of them (`--max-body`).
    room: usize,
    /// A subscription's: told when its queue fills, which ends it.
    overflow: Option<Notify>,
    ctx: Arc<Ctx>,
}

impl Stream {
    /// Queues `m` if the stream is open and has room; else drops it,
    /// counted.
    fn take(&self, m: Bytes) {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let len = m.len();
        let fits = self.queued.load(Relaxed) + len <= self.room;
        if fits && tx.as_ref().is_some_and(|tx| tx.try_send(m).is_ok()) {
            self.queued.fetch_add(len, Relaxed);
            return;
        }
        self.ctx.metrics.dropped.fetch_add(1, Relaxed);
        if let Some(overflow) = &self.overflow
            && tx.take().is_some()
        {
            warn!(
                room = self.room,
                "an MCP subscription's client does not read what it is sent: the subscription is ended"
            );
            overflow.notify_one();
        }
    }
}

/// The answer to `message`, streamed as the module says; `answer` makes
/// the answer of a reply that came first.
pub async fn streamed(
    edge: &Arc<Edge>,
    message: (Bytes, crate::jsonrpc::Kind),
    attached: Option<Attached>,
    answer: impl FnOnce(Answer) -> HttpResponse,
) -> HttpResponse {
    let ctx = edge.ctx.clone();
    let subscription = matches!(&message.1, crate::jsonrpc::Kind::Request { method, .. }
        if crate::jsonrpc::carriage::method_of(&message.0, method).as_deref()
            == Some(crate::gateway::mcp_names::LISTEN));
    // A subscription's queue is bounded by its octets alone (one message
    // in 64 of them at the least): a burst of small notifications to a
    // client that reads must not end it.
    let queued = match subscription {
        true => (ctx.limits.max_body / 64).max(QUEUED),
        false => QUEUED,
    };
    let (tx, mut rx) = mpsc::channel::<Bytes>(queued);
    let stream = Arc::new(Stream {
        tx: Mutex::new(Some(tx)),
        queued: Arc::new(AtomicUsize::new(0)),
        room: ctx.limits.max_body,
        overflow: subscription.then(Notify::new),
        ctx: ctx.clone(),
    });
    let (edge, (body, kind)) = (edge.clone(), message);
    let s = stream.clone();
    let interim = Interim(Arc::new(move |m: Bytes| s.take(m)));
    // Ended when the client leaves, before anything came or after: the
    // edge then gives the request up and tells the origin (`Edge::call`).
    let mut call = Call(tokio::spawn(async move {
        answer_streamed(&edge, body, kind, attached, Some(interim)).await
    }));
    let first = tokio::select! {
        biased;
        first = rx.recv() => first,
        a = &mut call.0 => {
            let a = a.unwrap_or_else(|e| Answer::Failed(Failure::Unavailable(e.to_string()), None));
            // A message queued just before the reply still goes first.
            match rx.try_recv() {
                Ok(first) => {
                    if let Some(send) = reply_after(&stream, Ok(a)) {
                        tokio::spawn(send);
                    }
                    return respond(&stream, Some(first), rx);
                }
                Err(_) => return answer(a),
            }
        }
    };
    let (stall, s) = (ctx.limits.stall_timeout, stream.clone());
    let Some(gone) = s.tx.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
        return respond(&stream, first, rx);
    };
    tokio::spawn(async move {
        let overflowed = async {
            match &s.overflow {
                Some(overflow) => overflow.notified().await,
                None => std::future::pending().await,
            }
        };
        let a = tokio::select! {
            a = &mut call.0 => a,
            // The client left: the request with it.
            () = gone.closed() => return,
            // A subscription its client does not read: ended, and given up.
            () = overflowed => return,
        };
        // Only the stream's own sender left, taken with the reply.
        drop(gone);
        let Some(send) = reply_after(&s, a) else {
            return;
        };
        // A client that stopped reading gets no more, after a while.
        let _ = tokio::time::timeout(stall, send).await;
    });
    respond(&stream, first, rx)
}

/// The task that carries the request: aborted when dropped (the client
/// left), which drops the request's call at the edge.
struct Call(tokio::task::JoinHandle<Answer>);

impl Drop for Call {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The event stream: `first`, then what `rx` has.
fn respond(stream: &Stream, first: Option<Bytes>, rx: mpsc::Receiver<Bytes>) -> HttpResponse {
    if let Some(m) = &first {
        stream
            .queued
            .fetch_sub(m.len().min(stream.queued.load(Relaxed)), Relaxed);
    }
    event_response_counted(first, rx, stream.queued.clone())
}

/// The reply's send, after which the stream ends (its sender taken, so a
/// losing try's messages go nowhere); `None` when there is no reply.
fn reply_after(
    stream: &Stream,
    answer: Result<Answer, tokio::task::JoinError>,
) -> Option<impl Future<Output = ()> + use<>> {
    let tx = stream.tx.lock().unwrap_or_else(|p| p.into_inner()).take()?;
    let reply: Bytes = match answer {
        Ok(Answer::Reply(t) | Answer::Challenged(t, _) | Answer::Passed(t, _)) => t,
        Ok(Answer::Failed(f, id)) => f.response(id.as_deref()).into(),
        Ok(Answer::None) => return None,
        Err(e) => Failure::Unavailable(e.to_string()).response(None).into(),
    };
    // Counted as the rest, which the body takes off.
    stream.queued.fetch_add(reply.len(), Relaxed);
    Some(async move {
        let _ = tx.send(reply).await;
    })
}
