//! A session's resumable event streams at an MCP edge (MCP 2025-11-25,
//! Streamable HTTP, "Resumability and Redelivery").
//!
//! Every event of a session's stream (a request's, or the GET stream) has
//! an id, `{stream}-{event}`: numbers unique within the session, so an id
//! names one stream and a place in it. A stream keeps the messages it sent
//! until its client shows it has them, so that a client whose connection
//! dropped may GET with `Last-Event-ID` and be sent what came after that
//! event on that stream, and no other's, then the rest as it comes.
//!
//! What is kept is bounded: `--max-body` octets a stream, and in all a
//! quarter of `--memory-budget` for the ingress ([`replay_budget`]), apart
//! from what requests in flight hold, so that kept events never crowd out
//! live traffic; the oldest go first when either is spent, and a resume
//! from before them is logged and counted as dropped, with how many it
//! misses. A stream whose reply was sent is kept a while after (the
//! session's last [`ENDED_KEPT`]), for a client that lost the reply itself.
//!
//! To a client of 2025-11-25 or later, a stream opens with a priming event
//! (an id, no data), as that revision has a server do: a client that loses
//! the stream before its first message may still resume it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::relay::Shared;
use crate::sse::{event_with_id, priming};

/// Events an open connection holds for a client that reads slowly.
const QUEUE: usize = 64;

/// Streams kept for a resume after their reply was sent, by session.
pub const ENDED_KEPT: usize = 8;

/// What an ingress's streams may keep in all: a quarter of the memory
/// budget.
pub fn replay_budget(memory_budget: usize) -> Arc<Shared> {
    Arc::new(Shared::new(usize::MAX, memory_budget / 4))
}

/// One resumable event stream of a session.
pub struct Stream {
    number: u64,
    inner: Mutex<Inner>,
    /// The most octets kept (`--max-body`).
    room: usize,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Inner {
    /// The number of the last event sent (0: the priming event's).
    last: u64,
    /// The messages sent that the client may not have, oldest first, by
    /// event number.
    kept: VecDeque<(u64, Bytes)>,
    kept_octets: usize,
    /// The events the budget dropped run through this one.
    dropped_through: u64,
    /// The client's connection, while it has one.
    tx: Option<mpsc::Sender<Bytes>>,
    /// Its last message was sent: a resume replays what is kept and ends.
    ended: bool,
}

/// A connection to a stream: the events to send first, then what `rx`
/// receives.
pub struct Connection {
    pub first: VecDeque<Bytes>,
    pub rx: mpsc::Receiver<Bytes>,
    /// Events the resume cannot replay: dropped from what was kept.
    pub missed: u64,
}

impl Stream {
    /// Stream `number` and its first connection; `prime`: it opens with a
    /// priming event.
    pub fn open(
        number: u64,
        prime: bool,
        room: usize,
        shared: Arc<Shared>,
    ) -> (Arc<Self>, Connection) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let s = Arc::new(Self {
            number,
            inner: Mutex::new(Inner {
                tx: Some(tx),
                ..Inner::default()
            }),
            room,
            shared,
        });
        let first = match prime {
            true => VecDeque::from([priming(&s.event_id(0))]),
            false => VecDeque::new(),
        };
        (
            s,
            Connection {
                first,
                rx,
                missed: 0,
            },
        )
    }

    pub fn number(&self) -> u64 {
        self.number
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn event_id(&self, event: u64) -> String {
        format!("{}-{event}", self.number)
    }

    /// Whether a client's connection takes its events now.
    pub fn connected(&self) -> bool {
        self.lock().tx.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    /// Ends the connection the stream has, if any: its client reads what
    /// was sent and sees the end (and may resume).
    pub fn close(&self) {
        self.lock().tx = None;
    }

    /// Lets the connection that `tx` sends to go, if the stream still has
    /// it: an event it could not take in time was skipped, and the client
    /// must not go on past the gap. It sees the end, and resumes from the
    /// last event it read.
    pub fn detach(&self, tx: &mpsc::Sender<Bytes>) {
        let mut inner = self.lock();
        if inner.tx.as_ref().is_some_and(|t| t.same_channel(tx)) {
            inner.tx = None;
        }
    }

    /// Sends `m` as the stream's next event (`last`: its reply, after which
    /// it ends) and keeps it for a resume. What to send it to, and the
    /// event: `None` when no client's connection is there to take it.
    pub fn push(&self, m: Bytes, last: bool) -> Option<(mpsc::Sender<Bytes>, Bytes)> {
        let mut inner = self.lock();
        inner.last += 1;
        let event = inner.last;
        self.keep(&mut inner, event, m.clone());
        let tx = match last {
            true => {
                inner.ended = true;
                inner.tx.take()
            }
            false => inner.tx.clone(),
        };
        drop(inner);
        let tx = tx.filter(|tx| !tx.is_closed())?;
        Some((tx, event_with_id(Some(&self.event_id(event)), &m)))
    }

    /// Keeps event `event`, the oldest going first where the stream's room
    /// or the gateway's budget has none.
    fn keep(&self, inner: &mut Inner, event: u64, m: Bytes) {
        let len = m.len();
        while !inner.kept.is_empty()
            && (inner.kept_octets + len > self.room || self.shared.take(false, len).is_err())
        {
            self.drop_oldest(inner);
        }
        if len > self.room || (inner.kept.is_empty() && self.shared.take(false, len).is_err()) {
            inner.dropped_through = event;
            return;
        }
        // Taken in the loop's last test, or just above.
        inner.kept_octets += len;
        inner.kept.push_back((event, m));
    }

    fn drop_oldest(&self, inner: &mut Inner) {
        if let Some((event, m)) = inner.kept.pop_front() {
            inner.kept_octets -= m.len();
            self.shared.give(false, m.len());
            inner.dropped_through = inner.dropped_through.max(event);
        }
    }

    /// A new connection for a client that has every event through `after`:
    /// the events after it, then the rest as they come (none where the
    /// stream has ended). A connection the stream had is let go. `None`:
    /// the stream sent no event `after`.
    pub fn resume(&self, after: u64) -> Option<Connection> {
        let mut inner = self.lock();
        if after > inner.last {
            return None;
        }
        while inner.kept.front().is_some_and(|(e, _)| *e <= after) {
            if let Some((_, m)) = inner.kept.pop_front() {
                inner.kept_octets -= m.len();
                self.shared.give(false, m.len());
            }
        }
        let missed = inner.dropped_through.saturating_sub(after);
        let first = (inner.kept.iter())
            .map(|(e, m)| event_with_id(Some(&self.event_id(*e)), m))
            .collect();
        let (tx, rx) = mpsc::channel(QUEUE);
        inner.tx = (!inner.ended).then_some(tx);
        Some(Connection { first, rx, missed })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        self.shared.give(false, inner.kept_octets);
    }
}

/// A `Last-Event-ID` of this edge's: (stream, event).
pub fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, event) = id.split_once('-')?;
    Some((stream.parse().ok()?, event.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(octets: usize) -> Arc<Shared> {
        Arc::new(Shared::new(1000, octets))
    }

    fn drain(c: &mut Connection) -> Vec<Bytes> {
        let mut out: Vec<Bytes> = c.first.drain(..).collect();
        while let Ok(m) = c.rx.try_recv() {
            out.push(m);
        }
        out
    }

    fn text(events: &[Bytes]) -> Vec<String> {
        events
            .iter()
            .map(|e| String::from_utf8_lossy(e).into_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_resume_replays_what_came_after_the_last_event_and_goes_on() {
        let (s, mut c) = Stream::open(3, true, 1 << 20, shared(1 << 20));
        assert_eq!(text(&drain(&mut c)), ["id: 3-0\ndata: \n\n"]);
        for m in ["{\"p\":1}", "{\"p\":2}"] {
            let (tx, e) = s.push(Bytes::from(m), false).expect("connected");
            tx.send(e).await.expect("open");
        }
        assert_eq!(drain(&mut c).len(), 2);
        // The connection drops; the client has event 1 only.
        drop(c);
        assert!(!s.connected());
        assert!(s.push(Bytes::from("{\"p\":3}"), false).is_none());
        let mut c = s.resume(1).expect("sent");
        assert!(s.connected());
        assert_eq!(
            text(&drain(&mut c)),
            [
                "id: 3-2\nevent: message\ndata: {\"p\":2}\n\n",
                "id: 3-3\nevent: message\ndata: {\"p\":3}\n\n"
            ]
        );
        assert_eq!(c.missed, 0);
        // The reply ends it: what is sent, then nothing.
        let (tx, e) = s.push(Bytes::from("{\"id\":1}"), true).expect("connected");
        tx.send(e).await.expect("open");
        drop(tx);
        assert_eq!(drain(&mut c).len(), 1);
        assert!(c.rx.recv().await.is_none());
        // Lost again: a resume replays the reply, and ends.
        let mut c = s.resume(3).expect("sent");
        assert_eq!(
            text(&drain(&mut c)),
            ["id: 3-4\nevent: message\ndata: {\"id\":1}\n\n"]
        );
        assert!(c.rx.recv().await.is_none());
        // An event it never sent is no place to resume from.
        assert!(s.resume(5).is_none());
    }

    #[tokio::test]
    async fn a_connection_that_skipped_an_event_or_was_closed_ends() {
        let (s, mut c) = Stream::open(1, false, 1 << 20, shared(1 << 20));
        let (tx, _) = s.push(Bytes::from("{}"), false).expect("connected");
        // Its send timed out: the connection is let go, and ends.
        s.detach(&tx);
        drop(tx);
        assert!(!s.connected());
        assert!(c.rx.recv().await.is_none());
        // A resume's connection is another: detaching the old one leaves it.
        let (s, old) = Stream::open(2, false, 1 << 20, shared(1 << 20));
        let (tx, _) = s.push(Bytes::from("{}"), false).expect("connected");
        drop(old);
        let mut c = s.resume(1).expect("sent");
        s.detach(&tx);
        assert!(s.connected());
        s.close();
        assert!(c.rx.recv().await.is_none());
    }

    #[test]
    fn what_is_kept_is_bounded_and_a_resume_says_what_it_misses() {
        let budget = shared(1 << 20);
        let (s, c) = Stream::open(1, false, 20, budget.clone());
        drop(c);
        for i in 0..5 {
            assert!(
                s.push(Bytes::from(format!("{{\"n\":{i}}}")), false)
                    .is_none()
            );
        }
        // 7 octets each, 20 the room: the last two kept.
        let mut c = s.resume(0).expect("sent");
        assert_eq!(c.missed, 3);
        assert_eq!(drain(&mut c).len(), 2);
        // Kept octets are the gateway's: given back as they go.
        assert_eq!(budget.octets(), 14);
        drop(c);
        drop(s);
        assert_eq!(budget.octets(), 0);
    }

    #[test]
    fn a_spent_budget_keeps_nothing_and_is_not_overdrawn() {
        let budget = shared(8);
        let (s, c) = Stream::open(1, false, 1 << 20, budget.clone());
        drop(c);
        s.push(Bytes::from("{\"n\":1}"), false);
        // The gateway's first take always succeeds; the second is refused.
        s.push(Bytes::from("{\"n\":2}"), false);
        let mut c = s.resume(0).expect("sent");
        assert_eq!(c.missed, 1);
        assert_eq!(
            text(&drain(&mut c)),
            ["id: 1-2\nevent: message\ndata: {\"n\":2}\n\n"]
        );
    }

    #[test]
    fn event_ids_parse_as_written() {
        assert_eq!(parse_event_id("3-17"), Some((3, 17)));
        for bad in ["", "3", "3-", "-1", "a-1", "3-1-2", "3 -1"] {
            assert_eq!(parse_event_id(bad), None, "{bad:?}");
        }
    }
}
