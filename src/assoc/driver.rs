//! Runs an established association over its streams: one reader task, one
//! writer task, and an [`AssocHandle`] that any task may use to send.
//!
//! ```text
//!  senders ──seal under the lock──▶ queued octets ──writer task──▶ streams
//!  streams ──reader task──open under the lock──▶ BridgeSink::frame(Payload)
//!                         (many frames per hold)     (lock released)
//!  reader task: sleeps until Association::poll_timeout, then handle_timeout
//! ```
//!
//! Sealing and queueing happen together under one short lock, so frames
//! leave in sequence order whichever task sealed them, and the writer sends
//! everything queued since its last write in one write; while several
//! tasks send, it lets them seal first (`patience.rs`), so their frames share
//! a write. The queue is bounded: a sender waits while more than
//! [`PENDING_LIMIT`] octets are unwritten. Reading and writing are separate
//! tasks, so two peers that both write large batches never deadlock on flow
//! control. Which stream a channel's octets go to is [`Binding`]'s business.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::association::{Association, Counters, Event, Liveness};
use super::binding::{Binding, ReadStreams, Readers, Writers};
use super::error::{End, Failure, Gone, LinkError};
use super::frames::{FrameReader, Taken};
use super::patience::Patience;
use super::payload::Payload;
use super::stats::AssocStats;
use crate::wire::{ChannelId, FrameType};

/// Unwritten octets above which senders wait for the writer.
pub const PENDING_LIMIT: usize = 1 << 20;
/// How long a local CLOSE waits for the peer's CLOSE_ACK.
pub const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Where the Bridge payloads an association receives go. Called on the
/// association's reader task: awaiting here is backpressure on the peer.
pub trait BridgeSink: Send + 'static {
    /// One Bridge operation frame (0x0100–0x0105) and its plaintext, opened
    /// in place; what the sink keeps of it, it keeps with [`Payload::keep`].
    fn frame(
        &mut self,
        frame_type: FrameType,
        payload: Payload<'_>,
    ) -> impl Future<Output = ()> + Send;
    /// The association ended; nothing more will arrive.
    fn ended(&mut self, why: &End);
}

struct State {
    assoc: Association,
    end: Option<End>,
    /// Bridge frames sealed since the writer last took the queue.
    sealed: u32,
}

struct Shared {
    state: Mutex<State>,
    peer_identity: [u8; 32],
    stats: Arc<AssocStats>,
    /// Something to write (or the end).
    wake_writer: Notify,
    /// The writer took the pending octets (told only when `waiting`, or at
    /// the end).
    drained: Notify,
    /// A sender found the queue full and waits on `drained`.
    waiting: AtomicBool,
    /// The association ended.
    ended: Notify,
    /// Tells the reader to stop (close timeout).
    stop: Notify,
    is_ended: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while sealing cannot leave the octet queues half-written in
        // a way that matters more than losing the association: keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the association with an error, counted by class once (the
    /// reader and the writer may both fail).
    fn fail(&self, error: LinkError) -> End {
        let failure = Failure::new(error);
        let class = failure.class;
        let why = End::Error(failure);
        let first = {
            let mut s = self.lock();
            s.end.is_none().then(|| s.end = Some(why.clone())).is_some()
        };
        if first {
            self.stats.closed(class);
        }
        self.finish(why.clone());
        why
    }

    fn finish(&self, why: End) {
        let mut s = self.lock();
        if s.end.is_none() {
            s.end = Some(why);
        }
        drop(s);
        self.is_ended.store(true, Ordering::Release);
        self.wake_writer.notify_one();
        self.drained.notify_waiters();
        self.ended.notify_waiters();
    }
}

/// A running association: send Bridge frames, close it, watch it end.
/// Cheap to clone.
#[derive(Clone)]
pub struct AssocHandle(Arc<Shared>);

impl std::fmt::Debug for AssocHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssocHandle")
            .field("peer", &hex::encode(self.0.peer_identity))
            .field("open", &self.is_open())
            .finish()
    }
}

impl AssocHandle {
    pub fn peer_identity(&self) -> [u8; 32] {
        self.0.peer_identity
    }

    pub fn is_open(&self) -> bool {
        !self.0.is_ended.load(Ordering::Acquire)
    }

    /// Why it ended, once it has.
    pub fn end(&self) -> Option<End> {
        self.0.lock().end.clone()
    }

    pub fn counters(&self) -> Counters {
        self.0.lock().assoc.counters()
    }

    /// Seals one Bridge frame whose payload `write` appends, and queues it;
    /// waits while the queue is full.
    pub async fn send(
        &self,
        frame_type: FrameType,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), Gone> {
        let mut write = Some(write);
        loop {
            // With room, as almost always: one hold of the state lock, and
            // no waiter registered with `drained` (whose lock every sender
            // and the writer would take).
            if let Some(sent) = self.send_if_room(frame_type, &mut write) {
                return sent;
            }
            // Full. Registered, then said (`waiting`), then looked again: a
            // writer that drains from here on sees `waiting` and wakes this.
            let drained = self.0.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            self.0.waiting.store(true, Ordering::SeqCst);
            if let Some(sent) = self.send_if_room(frame_type, &mut write) {
                return sent;
            }
            drained.await;
        }
    }

    /// [`AssocHandle::send`] without waiting: `None`, and nothing sealed,
    /// when the queue is full.
    pub fn try_send(
        &self,
        frame_type: FrameType,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Option<Result<(), Gone>> {
        self.send_if_room(frame_type, &mut Some(write))
    }

    /// Seals and queues the frame if the queue has room; `None` if it is
    /// full.
    fn send_if_room(
        &self,
        frame_type: FrameType,
        write: &mut Option<impl FnOnce(&mut Vec<u8>)>,
    ) -> Option<Result<(), Gone>> {
        let mut s = self.0.lock();
        if let Some(end) = &s.end {
            return Some(Err(Gone(end.clone())));
        }
        if s.assoc.queued(ChannelId::BRIDGE) >= PENDING_LIMIT {
            return None;
        }
        let Some(write) = write.take() else {
            return Some(Err(Gone(End::LocalClose)));
        };
        let sealed = s.assoc.seal(ChannelId::BRIDGE, frame_type, write);
        s.sealed += u32::from(sealed.is_ok());
        drop(s);
        Some(match sealed {
            Ok(_) => {
                self.0.wake_writer.notify_one();
                Ok(())
            }
            Err(e) => Err(Gone(End::error(e))),
        })
    }

    /// Sends an authenticated CLOSE and waits (up to [`CLOSE_WAIT`]) for the
    /// peer's CLOSE_ACK; the association has ended when this returns.
    pub async fn close(&self, code: u16) {
        let ended = self.0.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        {
            let mut s = self.0.lock();
            if s.end.is_some() {
                return;
            }
            if !s.assoc.is_closed() && s.assoc.close(code).is_err() {
                drop(s);
                self.0.finish(End::LocalClose);
                return;
            }
        }
        self.0.wake_writer.notify_one();
        if tokio::time::timeout(CLOSE_WAIT, ended).await.is_err() {
            debug!("no CLOSE_ACK in time");
            self.0.stop.notify_one();
            self.0.finish(End::LocalClose);
        }
    }

    /// Resolves when the association has ended.
    pub async fn ended(&self) {
        let ended = self.0.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if !self.is_open() {
            return;
        }
        ended.await;
    }
}

/// Starts the reader and writer tasks of `assoc` over `binding`; the sink
/// `make_sink` builds receives what arrives on the Bridge channel. A QUIC
/// client's Bridge stream is announced at once with a PING on it, so the
/// server can send on it before the client has a request to make.
pub(super) fn spawn<S, F>(
    mut assoc: Association,
    binding: Binding,
    stats: Arc<AssocStats>,
    make_sink: F,
) -> AssocHandle
where
    S: BridgeSink,
    F: FnOnce(AssocHandle) -> S,
{
    if binding.bridge_needs_announcing()
        && let Err(e) = assoc.ping_on(ChannelId::BRIDGE, Instant::now())
    {
        warn!(error = %e, "could not open the Bridge stream");
    }
    let peer_identity = *assoc.peer_identity();
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            assoc,
            end: None,
            sealed: 0,
        }),
        peer_identity,
        stats,
        wake_writer: Notify::new(),
        drained: Notify::new(),
        waiting: AtomicBool::new(false),
        ended: Notify::new(),
        stop: Notify::new(),
        is_ended: AtomicBool::new(false),
    });
    let handle = AssocHandle(shared.clone());
    let sink = make_sink(handle.clone());
    let (readers, writers) = binding.split();
    // Anything queued before the tasks start (the announcing PING) goes out
    // with the writer's first pass.
    shared.wake_writer.notify_one();
    let writer = tokio::spawn(write_loop(shared.clone(), writers));
    tokio::spawn(read_loop(shared, readers, sink, writer));
    handle
}

async fn write_loop(shared: Arc<Shared>, mut writers: Writers) {
    // At most one run of octets per channel per pass (Control first).
    let mut spares = [Vec::with_capacity(1024), Vec::with_capacity(64 << 10)];
    let mut patience = Patience::default();
    loop {
        shared.wake_writer.notified().await;
        let waited = patience.let_senders_seal().await;
        let mut runs = [None, None];
        let ended = {
            let mut s = shared.lock();
            for (run, spare) in runs.iter_mut().zip(spares.iter_mut()) {
                *run = s.assoc.poll_transmit(spare);
            }
            let octets = if runs[1].is_some() {
                spares[1].len()
            } else {
                0
            };
            patience.took(std::mem::take(&mut s.sealed), octets, waited);
            s.end.is_some()
        };
        // After the octets left the queue (the lock above): a sender that
        // said it waits after this looks again under that lock, and finds room.
        if shared.waiting.swap(false, Ordering::SeqCst) {
            shared.drained.notify_waiters();
        }
        let mut result = Ok(());
        for (run, octets) in runs.iter().zip(spares.iter()) {
            if let Some(channel) = *run {
                result = writers.write(channel, octets).await;
                if result.is_err() {
                    break;
                }
            }
        }
        if let Err(e) = result {
            shared.fail(e);
            break;
        }
        if ended {
            break;
        }
    }
    writers.shutdown().await;
}

/// Frames opened under one hold of the lock, at most: the lock is short for
/// senders, and still taken once per many frames, not once per frame.
const FRAMES_PER_PASS: usize = 32;

/// What the reader does after the frames it has buffered.
enum Next {
    Continue,
    End(End),
}

/// A Bridge payload opened in place, handed to the sink once the lock is
/// released: octets of a reader's shared buffer, or of a large frame read
/// into an allocation of its own.
enum Delivery {
    Shared(FrameType, bool, std::ops::Range<usize>),
    Own(FrameType, Bytes, std::ops::Range<usize>),
}

async fn read_loop<S: BridgeSink>(
    shared: Arc<Shared>,
    readers: Readers,
    mut sink: S,
    writer: tokio::task::JoinHandle<()>,
) {
    let mut deliveries = Vec::with_capacity(FRAMES_PER_PASS);
    let (max_payload, first_deadline) = {
        let s = shared.lock();
        (s.assoc.config().max_payload_len, s.assoc.poll_timeout())
    };
    // One timer for the association's life, re-armed only when the
    // deadline comes earlier than it is set for: firing early is harmless
    // (handle_timeout finds nothing due, and the timer is set again).
    let mut armed = first_deadline;
    let timer = tokio::time::sleep_until(far_or(armed));
    tokio::pin!(timer);
    let Readers {
        mut streams,
        mut pending,
    } = readers;
    let why = loop {
        let ready = tokio::select! {
            _ = shared.stop.notified() => break End::LocalClose,
            () = &mut timer, if armed.is_some() => {
                if let Some(why) = on_timeout(&shared) {
                    break why;
                }
                armed = shared.lock().assoc.poll_timeout();
                timer.as_mut().reset(far_or(armed));
                continue;
            },
            r = streams.fill() => r,
            r = pending.accept(max_payload) => match r {
                Ok(bridge) => {
                    streams.bridge = Some(bridge);
                    continue;
                }
                Err(e) => break shared.fail(e),
            },
        };
        match ready {
            Ok(true) => {}
            Ok(false) => break End::Eof,
            Err(e) => break shared.fail(e),
        }
        // Every frame a read brought (a write of the peer's usually holds
        // many), before the next round of the select above.
        if let Next::End(why) = drain(&shared, &mut sink, &mut streams, &mut deliveries).await {
            break why;
        }
        let deadline = {
            let mut s = shared.lock();
            s.assoc.reading_again(Instant::now());
            s.assoc.poll_timeout()
        };
        if deadline < armed || armed.is_none() {
            armed = deadline;
            timer.as_mut().reset(far_or(armed));
        }
    };
    match &why {
        End::Error(e) => warn!(error = %e, "association closed with an error"),
        why => debug!(%why, "association ended"),
    }
    shared.finish(why.clone());
    sink.ended(&why);
    // Let the writer flush what is queued (a CLOSE_ACK), then end the connection.
    let _ = tokio::time::timeout(CLOSE_WAIT, writer).await;
    if let Some(conn) = pending.into_conn() {
        if matches!(why, End::PeerClosed(_)) {
            // The peer closes the connection once it has our CLOSE_ACK.
            let _ = tokio::time::timeout(CLOSE_WAIT, conn.closed()).await;
        }
        conn.close(quinn::VarInt::from_u32(0), b"association ended");
    }
}

/// A deadline for the timer: `None` (closed) is a day away, never reached
/// in practice and re-armed if the association lives that long.
fn far_or(deadline: Option<Instant>) -> tokio::time::Instant {
    deadline
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400))
        .into()
}

/// Time-based key updates and keepalive ([`Association::handle_timeout`]);
/// the end of the association when the peer has gone silent.
fn on_timeout(shared: &Shared) -> Option<End> {
    let (liveness, queued) = {
        let mut s = shared.lock();
        let before = s.assoc.queued(ChannelId::CONTROL) + s.assoc.queued(ChannelId::BRIDGE);
        let liveness = s.assoc.handle_timeout(Instant::now());
        let after = s.assoc.queued(ChannelId::CONTROL) + s.assoc.queued(ChannelId::BRIDGE);
        (liveness, after > before)
    };
    if queued {
        shared.wake_writer.notify_one();
    }
    match liveness {
        Ok(Liveness::Alive) => None,
        Ok(Liveness::Silent(silent)) => Some(shared.fail(LinkError::PeerSilent(silent))),
        Err(e) => Some(shared.fail(e.into())),
    }
}

/// How a pass over one reader's buffered frames stopped.
enum Pass {
    /// Nothing more is buffered.
    Done,
    /// Stopped early (Bridge payloads to deliver first); go again.
    More,
    End(End),
    Fail(LinkError),
}

/// Handles every whole frame the readers have buffered, in passes: each
/// pass opens up to [`FRAMES_PER_PASS`] frames under one hold of the lock,
/// then hands their Bridge payloads to the sink with the lock released. A
/// pass stops before a frame that is not a Bridge operation while payloads
/// wait, so the sink sees every frame in the order it arrived.
async fn drain<S: BridgeSink>(
    shared: &Shared,
    sink: &mut S,
    readers: &mut ReadStreams,
    deliveries: &mut Vec<Delivery>,
) -> Next {
    loop {
        deliveries.clear();
        let (pass, queued) = {
            let mut s = shared.lock();
            let assoc = &mut s.assoc;
            let before = assoc.queued(ChannelId::CONTROL) + assoc.queued(ChannelId::BRIDGE);
            let mut pass = open_buffered(
                assoc,
                &shared.stats,
                &mut readers.control,
                false,
                deliveries,
            );
            if let (Pass::Done, Some(b)) = (&pass, readers.bridge.as_mut()) {
                pass = open_buffered(assoc, &shared.stats, b, true, deliveries);
            }
            let after = assoc.queued(ChannelId::CONTROL) + assoc.queued(ChannelId::BRIDGE);
            (pass, after > before)
        };
        if queued {
            shared.wake_writer.notify_one();
        }
        // A large frame's allocation goes to the sink (held no longer than
        // it keeps what it keeps of it).
        for d in deliveries.drain(..) {
            let (frame_type, payload) = match d {
                Delivery::Shared(frame_type, on_bridge_stream, payload) => {
                    let reader = match (on_bridge_stream, readers.bridge.as_ref()) {
                        (true, Some(b)) => b,
                        _ => &readers.control,
                    };
                    (frame_type, Payload::shared(reader.octets(payload)))
                }
                Delivery::Own(frame_type, frame, payload) => {
                    (frame_type, Payload::own(frame, payload))
                }
            };
            sink.frame(frame_type, payload).await;
        }
        match pass {
            Pass::Done => return Next::Continue,
            Pass::More => {}
            Pass::End(why) => return Next::End(why),
            Pass::Fail(e) => return Next::End(shared.fail(e)),
        }
    }
}

/// One pass over the frames buffered in `reader`, under the lock.
fn open_buffered(
    assoc: &mut Association,
    stats: &AssocStats,
    reader: &mut FrameReader,
    on_bridge_stream: bool,
    deliveries: &mut Vec<Delivery>,
) -> Pass {
    loop {
        let span = match reader.peek() {
            Ok(Some(span)) => span,
            Ok(None) => return Pass::Done,
            Err(e) => return Pass::Fail(e),
        };
        let header = span.header;
        let bridge_operation = header.channel == ChannelId::BRIDGE
            && crate::bridge::kind_for_frame_type(header.frame_type).is_some();
        if !deliveries.is_empty() && (!bridge_operation || deliveries.len() >= FRAMES_PER_PASS) {
            return Pass::More;
        }
        let taken = reader.take(&span);
        let now = reader.read_at();
        let frame = reader.sealed(&taken);
        let base = frame.octets().as_ptr() as usize;
        match assoc.handle_sealed(&header, frame, now) {
            Ok(Event::Bridge {
                frame_type,
                payload,
            }) => {
                // The plaintext lies inside the frame, opened in place.
                let start = payload.as_ptr() as usize - base;
                let payload = start..start + payload.len();
                deliveries.push(match taken {
                    Taken::Shared(at) => Delivery::Shared(
                        frame_type,
                        on_bridge_stream,
                        at.start + payload.start..at.start + payload.end,
                    ),
                    Taken::Own => Delivery::Own(frame_type, reader.take_own(), payload),
                });
            }
            Ok(Event::Closed { code }) => return Pass::End(End::PeerClosed(code)),
            Ok(Event::CloseAcked) => return Pass::End(End::LocalClose),
            Ok(Event::Dropped(why)) => {
                debug!(?why, "frame dropped");
                stats.dropped(why);
            }
            Ok(Event::None | Event::Pong { .. }) => {}
            Err(e) => return Pass::Fail(e.into()),
        }
    }
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;
