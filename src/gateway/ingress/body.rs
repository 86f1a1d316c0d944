//! A request body read into one buffer, within `--max-body` and
//! `--stall-timeout`, and held against `--memory-budget` while it is read.
//!
//! A body that arrives in one piece with its head (as most do) is taken as
//! hyper hands it over, without a timer, a copy or a share of the budget:
//! it is in memory already and goes on at once to the exchange, which takes
//! its share. One that comes in pieces, or has to be waited for, is another
//! matter: a client can open many requests (hundreds of HTTP/2 streams) and
//! send each body almost whole, slowly. From its second piece or its first
//! wait, what a body holds (its buffer's capacity) is taken from the same
//! budget the requests in flight share, and given back when the body is
//! handed on or given up; a body that finds no room
//! is refused at once (503), so the bodies being read never hold more than
//! the budget. The same is taken from its connection's share
//! ([`connection_share`]), so that one client's many slow streams cannot
//! hold all of it. Its pieces are gathered into one growing buffer as they
//! come: a body sent one octet per chunk costs one buffer, not a buffer
//! object per chunk.

use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

use crate::relay::Shared;

/// Why a body was not read.
#[derive(Debug)]
pub enum BodyError {
    /// Over `max` octets.
    TooLarge,
    /// Not complete within the stall timeout.
    Timeout,
    /// The gateway's memory budget has no room for it while it is read.
    NoRoom,
    /// The client's stream failed.
    Read(hyper::Error),
}

/// What the bodies being read on one connection may hold at most: a
/// sixteenth of the memory budget, and at least one body of `--max-body`.
pub fn connection_share(max_body: usize, memory_budget: usize) -> Shared {
    Shared::new(usize::MAX, (memory_budget / 16).max(max_body))
}

/// What a body being read holds of the gateway's budget and of its
/// connection's share; given back when dropped.
struct Held<'a> {
    budgets: [&'a Shared; 2],
    octets: usize,
}

impl Held<'_> {
    /// Holds `total` octets in all (more, never fewer).
    fn grow_to(&mut self, total: usize) -> Result<(), BodyError> {
        if total <= self.octets {
            return Ok(());
        }
        let more = total - self.octets;
        let [gateway, connection] = self.budgets;
        connection
            .take(false, more)
            .map_err(|_| BodyError::NoRoom)?;
        if gateway.take(false, more).is_err() {
            connection.give(false, more);
            return Err(BodyError::NoRoom);
        }
        self.octets = total;
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        for b in self.budgets {
            b.give(false, self.octets);
        }
    }
}

/// The body so far: nothing, the one piece that came (not copied), or
/// pieces gathered into one buffer.
enum Gathered {
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Gathered {
    fn len(&self) -> usize {
        match self {
            Gathered::Empty => 0,
            Gathered::One(b) => b.len(),
            Gathered::Many(b) => b.len(),
        }
    }

    /// The memory it holds.
    fn capacity(&self) -> usize {
        match self {
            Gathered::Empty => 0,
            Gathered::One(b) => b.len(),
            Gathered::Many(b) => b.capacity(),
        }
    }

    fn push(&mut self, data: Bytes) {
        *self = match std::mem::replace(self, Gathered::Empty) {
            Gathered::Empty => Gathered::One(data),
            Gathered::One(first) => {
                let mut all = BytesMut::with_capacity((first.len() + data.len()).max(256));
                all.extend_from_slice(&first);
                all.extend_from_slice(&data);
                Gathered::Many(all)
            }
            Gathered::Many(mut all) => {
                all.extend_from_slice(&data);
                Gathered::Many(all)
            }
        };
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Gathered::Empty => Bytes::new(),
            Gathered::One(b) => b,
            Gathered::Many(b) => b.freeze(),
        }
    }
}

/// Reads `body` whole: at most `max` octets, complete within `stall` of
/// its first wait, held against the gateway's budget and its connection's
/// share from then on.
pub async fn read_body<B>(
    mut body: B,
    max: usize,
    stall: Duration,
    budgets: [&Shared; 2],
) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes, Error = hyper::Error> + Unpin,
{
    let mut got = Gathered::Empty;
    let mut held: Option<Held<'_>> = None;
    let mut deadline = None;
    loop {
        let mut frame = std::pin::pin!(body.frame());
        let next = match futures_util::poll!(frame.as_mut()) {
            Poll::Ready(next) => next,
            Poll::Pending => {
                // It waits: from now on what it holds is budgeted.
                let h = held.get_or_insert(Held { budgets, octets: 0 });
                h.grow_to(got.capacity())?;
                let at = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + stall);
                tokio::time::timeout_at(at, frame)
                    .await
                    .map_err(|_| BodyError::Timeout)?
            }
        };
        let Some(frame) = next else {
            return Ok(got.into_bytes());
        };
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else {
            // Trailers: nothing of the body.
            continue;
        };
        if got.len() + data.len() > max {
            return Err(BodyError::TooLarge);
        }
        got.push(data);
        // A second piece is copied into a buffer of the body's own: from
        // then on it is budgeted, waits or not (many streams' bodies can
        // arrive at once, each read in one go).
        if held.is_none() && matches!(got, Gathered::Many(_)) {
            held = Some(Held { budgets, octets: 0 });
        }
        if let Some(h) = held.as_mut() {
            h.grow_to(got.capacity())?;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::Context;

    use hyper::body::{Body, Frame};

    use super::*;

    /// A body of pieces, each after `gap` (none: at once), on the test's
    /// paused clock.
    struct Pieces {
        pieces: VecDeque<Bytes>,
        gap: Option<Duration>,
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }

    impl Body for Pieces {
        type Data = Bytes;
        type Error = hyper::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
            if let Some(gap) = self.gap {
                let sleep = self
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            Poll::Ready(self.pieces.pop_front().map(|p| Ok(Frame::data(p))))
        }
    }

    fn pieces(n: usize, size: usize, gap: Option<Duration>) -> Pieces {
        Pieces {
            pieces: (0..n).map(|i| Bytes::from(vec![i as u8; size])).collect(),
            gap,
            sleep: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_came_whole_is_taken_without_a_copy_or_the_budget() {
        let shared = Shared::new(10, 1);
        let one = Bytes::from_static(b"{\"jsonrpc\":\"2.0\"}");
        let body = Pieces {
            pieces: VecDeque::from([one.clone()]),
            gap: None,
            sleep: None,
        };
        let got = read_body(body, 1024, Duration::from_secs(1), [&shared, &shared])
            .await
            .expect("read");
        assert_eq!(got.as_ptr(), one.as_ptr(), "copied");
        assert_eq!(shared.octets(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_body_in_one_octet_pieces_is_one_buffer_held_against_the_budget() {
        let (shared, conn) = (Shared::new(10, 1 << 20), connection_share(4096, 1 << 20));
        let body = pieces(1000, 1, Some(Duration::from_millis(1)));
        let reading = read_body(body, 4096, Duration::from_secs(10), [&shared, &conn]);
        let mut reading = std::pin::pin!(reading);
        // Half way, what it holds is taken from the budget: its buffer,
        // not a thousand objects.
        assert!(
            tokio::time::timeout(Duration::from_millis(500), reading.as_mut())
                .await
                .is_err()
        );
        let held = shared.octets();
        assert!((400..=1024).contains(&held), "held {held}");
        assert_eq!(conn.octets(), held);
        let got = reading.await.expect("read");
        assert_eq!(got.len(), 1000);
        assert_eq!((shared.octets(), conn.octets()), (0, 0), "given back");
    }

    #[tokio::test(start_paused = true)]
    async fn bodies_being_read_never_hold_more_than_the_budget() {
        let (shared, conn) = (Shared::new(10, 10_000), connection_share(1000, 10_000));
        // Something else holds 9 000 of the 10 000 octets.
        shared.take(false, 9000).expect("room");
        let body = pieces(10, 500, Some(Duration::from_millis(10)));
        let e = read_body(body, 1 << 20, Duration::from_secs(10), [&shared, &conn])
            .await
            .unwrap_err();
        assert!(matches!(e, BodyError::NoRoom), "{e:?}");
        assert_eq!((shared.octets(), conn.octets()), (9000, 0), "given back");
        shared.give(false, 9000);

        // One connection's bodies hold at most its share (here 1 000 of the
        // 16 000 octets): its second slow body finds no room, though the
        // gateway has plenty; another connection's does.
        let shared = Shared::new(10, 16_000);
        let (one, other) = (
            connection_share(1000, 16_000),
            connection_share(1000, 16_000),
        );
        let first = read_body(
            pieces(2, 300, Some(Duration::from_millis(10))),
            1000,
            Duration::from_secs(10),
            [&shared, &one],
        );
        let second = read_body(
            pieces(2, 300, Some(Duration::from_millis(10))),
            1000,
            Duration::from_secs(10),
            [&shared, &one],
        );
        let third = read_body(
            pieces(2, 300, Some(Duration::from_millis(10))),
            1000,
            Duration::from_secs(10),
            [&shared, &other],
        );
        let (first, second, third) = tokio::join!(first, second, third);
        assert_eq!(first.expect("first").len(), 600);
        assert!(matches!(second, Err(BodyError::NoRoom)), "{second:?}");
        assert_eq!(third.expect("third").len(), 600);
        assert_eq!((shared.octets(), one.octets(), other.octets()), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn too_large_and_too_slow_bodies_are_refused_and_give_back_their_share() {
        let shared = Shared::new(10, 1 << 20);
        let e = read_body(
            pieces(5, 300, None),
            1000,
            Duration::from_secs(1),
            [&shared, &shared],
        )
        .await
        .unwrap_err();
        assert!(matches!(e, BodyError::TooLarge), "{e:?}");
        let slow = pieces(10, 10, Some(Duration::from_millis(300)));
        let started = tokio::time::Instant::now();
        let e = read_body(slow, 1000, Duration::from_secs(1), [&shared, &shared])
            .await
            .unwrap_err();
        assert!(matches!(e, BodyError::Timeout), "{e:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(shared.octets(), 0);
    }
}
