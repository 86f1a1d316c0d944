//! Runs an established association over its streams: one reader task, one
//! writer task, and an [`AssocHandle`] that any task may use to send.
//!
//! ```text
//!  senders ──seal under the lock──▶ pending octets ──writer task──▶ streams
//!  streams ──reader task──open under the lock──▶ BridgeSink::frame(payload)
//!                         (many frames per hold)     (lock released)
//! ```
//!
//! Sealing and queueing happen together under one short lock, so frames
//! leave in sequence order whichever task sealed them, and the writer sends
//! everything queued since its last write in one write (batching comes for
//! free under load). The queue is bounded: a sender waits while more than
//! [`PENDING_LIMIT`] octets are unwritten. Reading and writing are separate
//! tasks, so two peers that both write large batches never deadlock on flow
//! control.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, oneshot};
use tracing::{debug, warn};

use super::stats::{AssocStats, ErrorClass};
use super::transport::{BoxWrite, FrameReader, TransportError};
use super::{AssocConfig, Association, Counters, Event, Liveness};
use crate::wire::{ChannelId, FrameType};

/// Unwritten octets above which senders wait for the writer.
pub const PENDING_LIMIT: usize = 4 << 20;
/// How long a local CLOSE waits for the peer's CLOSE_ACK.
pub const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Where the Bridge payloads an association receives go. Called on the
/// association's reader task: awaiting here is backpressure on the peer.
pub trait BridgeSink: Send + 'static {
    /// One Bridge operation frame (0x0100–0x0105) and its plaintext.
    fn frame(&mut self, frame_type: FrameType, payload: &[u8]) -> impl Future<Output = ()> + Send;
    /// The association ended; nothing more will arrive.
    fn ended(&mut self, why: &End);
}

/// Why an association ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// The peer sent CLOSE (code).
    PeerClosed(u16),
    /// We sent CLOSE (and the peer acknowledged it, or did not in time).
    LocalClose,
    /// The streams ended without a CLOSE.
    Eof,
    /// A transport or protocol error; the association is unusable.
    Error(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::PeerClosed(code) => write!(f, "the peer closed the association (code {code})"),
            End::LocalClose => f.write_str("closed locally"),
            End::Eof => f.write_str("the peer's streams ended without CLOSE"),
            End::Error(e) => f.write_str(e),
        }
    }
}

/// Sending on an association that has ended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the association has ended: {0}")]
pub struct Gone(pub End);

struct State {
    assoc: Association,
    control: Vec<u8>,
    bridge: Vec<u8>,
    end: Option<End>,
}

struct Shared {
    state: Mutex<State>,
    peer_identity: [u8; 32],
    stats: Arc<AssocStats>,
    /// Something to write (or the end).
    wake_writer: Notify,
    /// The writer took the pending octets.
    drained: Notify,
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
    fn fail(&self, class: ErrorClass, message: String) -> End {
        let why = End::Error(message);
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
            let drained = self.0.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let mut s = self.0.lock();
                if let Some(end) = &s.end {
                    return Err(Gone(end.clone()));
                }
                if s.bridge.len() < PENDING_LIMIT {
                    let State { assoc, bridge, .. } = &mut *s;
                    let write = write.take().ok_or(Gone(End::LocalClose))?;
                    let sealed = assoc.seal(bridge, ChannelId::BRIDGE, frame_type, write);
                    drop(s);
                    return match sealed {
                        Ok(_) => {
                            self.0.wake_writer.notify_one();
                            Ok(())
                        }
                        Err(e) => Err(Gone(End::Error(e.to_string()))),
                    };
                }
            }
            drained.await;
        }
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
            let State { assoc, control, .. } = &mut *s;
            if !assoc.is_closed() && assoc.close(control, code).is_err() {
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

/// The streams an established association runs on.
pub(super) struct Streams {
    pub control: (FrameReader, BoxWrite),
    /// QUIC: the Bridge stream (client: opened; server: `None` until the
    /// client opens it). TLS: `None`, everything on `control`.
    pub bridge: Option<(FrameReader, BoxWrite)>,
    pub quic: Option<quinn::Connection>,
    /// Whether the Bridge stream is to be accepted (QUIC server).
    pub accept_bridge: bool,
}

/// Starts the reader and writer tasks of `assoc`; `sink` receives what
/// arrives on the Bridge channel. `open_bridge`: send a PING on the Bridge
/// stream at once so the server learns of it (QUIC client).
pub(super) fn spawn<S, F>(
    assoc: Association,
    streams: Streams,
    open_bridge: bool,
    stats: Arc<AssocStats>,
    make_sink: F,
) -> AssocHandle
where
    S: BridgeSink,
    F: FnOnce(AssocHandle) -> S,
{
    let peer_identity = *assoc.peer_identity();
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            assoc,
            control: Vec::with_capacity(1024),
            bridge: Vec::with_capacity(64 << 10),
            end: None,
        }),
        peer_identity,
        stats,
        wake_writer: Notify::new(),
        drained: Notify::new(),
        ended: Notify::new(),
        stop: Notify::new(),
        is_ended: AtomicBool::new(false),
    });
    let handle = AssocHandle(shared.clone());
    let sink = make_sink(handle.clone());
    let Streams {
        control: (control_reader, control_writer),
        bridge,
        quic,
        accept_bridge,
    } = streams;
    let (bridge_reader, bridge_writer) = match bridge {
        Some((r, w)) => (Some(r), Some(w)),
        None => (None, None),
    };
    if open_bridge && bridge_writer.is_some() {
        let mut s = shared.lock();
        let State { assoc, bridge, .. } = &mut *s;
        if let Err(e) = assoc.ping(bridge, Instant::now()) {
            warn!(error = %e, "could not open the Bridge stream");
        }
    }
    let (late_tx, late_rx) = oneshot::channel();
    let writer = tokio::spawn(write_loop(
        shared.clone(),
        control_writer,
        bridge_writer,
        accept_bridge.then_some(late_rx),
        quic.is_some(),
    ));
    tokio::spawn(read_loop(
        shared,
        control_reader,
        bridge_reader,
        quic,
        accept_bridge.then_some(late_tx),
        sink,
        writer,
    ));
    handle
}

async fn write_loop(
    shared: Arc<Shared>,
    mut control: BoxWrite,
    mut bridge: Option<BoxWrite>,
    mut late_bridge: Option<oneshot::Receiver<BoxWrite>>,
    quic: bool,
) {
    let mut spare_control = Vec::with_capacity(1024);
    let mut spare_bridge = Vec::with_capacity(64 << 10);
    loop {
        shared.wake_writer.notified().await;
        let ended = {
            let mut s = shared.lock();
            std::mem::swap(&mut s.control, &mut spare_control);
            std::mem::swap(&mut s.bridge, &mut spare_bridge);
            s.end.is_some()
        };
        shared.drained.notify_waiters();
        let result = async {
            if !spare_control.is_empty() {
                control.write_all(&spare_control).await?;
                control.flush().await?;
            }
            if !spare_bridge.is_empty() {
                if bridge.is_none()
                    && let Some(rx) = late_bridge.take()
                {
                    bridge = rx.await.ok();
                }
                let w = match (&mut bridge, quic) {
                    (Some(w), _) => w,
                    (None, false) => &mut control,
                    (None, true) => {
                        return Err(std::io::Error::other(
                            "the peer never opened the Bridge stream",
                        ));
                    }
                };
                w.write_all(&spare_bridge).await?;
                w.flush().await?;
            }
            Ok::<_, std::io::Error>(())
        }
        .await;
        spare_control.clear();
        spare_bridge.clear();
        if let Err(e) = result {
            shared.fail(ErrorClass::Io, format!("write: {e}"));
            break;
        }
        if ended {
            break;
        }
    }
    // Finish the streams (QUIC FIN / TLS close_notify); errors do not matter now.
    if let Some(w) = &mut bridge {
        let _ = w.shutdown().await;
    }
    let _ = control.shutdown().await;
}

/// Frames opened under one hold of the lock, at most: the lock is short for
/// senders, and still taken once per many frames, not once per frame.
const FRAMES_PER_PASS: usize = 32;

/// What the reader does after the frames it has buffered.
enum Next {
    Continue,
    End(End),
}

/// A Bridge payload opened in place in a reader's buffer, handed to the sink
/// once the lock is released.
struct Delivery {
    on_bridge_stream: bool,
    frame_type: FrameType,
    payload: std::ops::Range<usize>,
}

async fn read_loop<S: BridgeSink>(
    shared: Arc<Shared>,
    mut control: FrameReader,
    mut bridge: Option<FrameReader>,
    quic: Option<quinn::Connection>,
    mut late_bridge: Option<oneshot::Sender<BoxWrite>>,
    mut sink: S,
    writer: tokio::task::JoinHandle<()>,
) {
    let mut deliveries = Vec::with_capacity(FRAMES_PER_PASS);
    let mut clock = tokio::time::interval(tick_period(shared.lock().assoc.config()));
    clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Since when the reader has been waiting for the peer (read, or ready
    // to read: time spent handing frames to a slow sink is not silence).
    let mut quiet_since = Instant::now();
    let why = loop {
        let ready = tokio::select! {
            _ = shared.stop.notified() => break End::LocalClose,
            _ = clock.tick() => match tick(&shared, quiet_since) {
                Some(why) => break why,
                None => continue,
            },
            r = control.fill() => r,
            r = fill_or_pending(&mut bridge) => r,
            s = accept_bi(&quic), if late_bridge.is_some() => {
                match s {
                    Ok((w, r)) => {
                        let max = shared.lock().assoc.config().max_payload_len;
                        bridge = Some(FrameReader::authenticated(Box::new(r), max));
                        if let Some(tx) = late_bridge.take() {
                            let _ = tx.send(Box::new(w) as BoxWrite);
                        }
                        continue;
                    }
                    Err(e) => break End::Error(format!("accepting the Bridge stream: {e}")),
                }
            }
        };
        match ready {
            Ok(true) => {}
            Ok(false) => break End::Eof,
            Err(e) => break shared.fail(ErrorClass::of(&e), e.to_string()),
        }
        // Every frame a read brought (a write of the peer's usually holds
        // many), before the next round of the select above.
        if let Next::End(why) = drain(
            &shared,
            &mut sink,
            &mut control,
            &mut bridge,
            &mut deliveries,
        )
        .await
        {
            break why;
        }
        quiet_since = Instant::now();
    };
    match &why {
        End::Error(e) => warn!(error = %e, "association closed with an error"),
        why => debug!(%why, "association ended"),
    }
    shared.finish(why.clone());
    sink.ended(&why);
    // Let the writer flush what is queued (a CLOSE_ACK), then end the connection.
    let _ = tokio::time::timeout(CLOSE_WAIT, writer).await;
    if let Some(conn) = quic {
        if matches!(why, End::PeerClosed(_)) {
            // The peer closes the connection once it has our CLOSE_ACK.
            let _ = tokio::time::timeout(CLOSE_WAIT, conn.closed()).await;
        }
        conn.close(quinn::VarInt::from_u32(0), b"association ended");
    }
}

/// How often the reader looks at the clock: once a second, or more often
/// when the keepalive period is shorter.
fn tick_period(config: &AssocConfig) -> Duration {
    (config.keepalive_after / 2).clamp(Duration::from_millis(1), Duration::from_secs(1))
}

/// Time-based key updates and keepalive ([`Association::tick`]); the end of
/// the association when the peer has gone silent.
fn tick(shared: &Shared, quiet_since: Instant) -> Option<End> {
    let (liveness, queued) = {
        let mut s = shared.lock();
        let State {
            assoc,
            control,
            bridge,
            ..
        } = &mut *s;
        let before = control.len() + bridge.len();
        let liveness = assoc.tick(Instant::now(), quiet_since, control, bridge);
        (liveness, control.len() + bridge.len() > before)
    };
    if queued {
        shared.wake_writer.notify_one();
    }
    match liveness {
        Ok(Liveness::Alive) => None,
        Ok(Liveness::Silent(silent)) => Some(shared.fail(
            ErrorClass::Io,
            format!(
                "the peer sent nothing for {:.1} s; keepalive PINGs went unanswered",
                silent.as_secs_f64()
            ),
        )),
        Err(e) => Some(shared.fail(
            ErrorClass::of_assoc(&e),
            TransportError::from(e).to_string(),
        )),
    }
}

/// How a pass over one reader's buffered frames stopped.
enum Pass {
    /// Nothing more is buffered.
    Done,
    /// Stopped early (Bridge payloads to deliver first); go again.
    More,
    End(End),
    Fail(ErrorClass, String),
}

/// Handles every whole frame the readers have buffered, in passes: each
/// pass opens up to [`FRAMES_PER_PASS`] frames under one hold of the lock,
/// then hands their Bridge payloads to the sink with the lock released. A
/// pass stops before a frame that is not a Bridge operation while payloads
/// wait, so the sink sees every frame in the order it arrived.
async fn drain<S: BridgeSink>(
    shared: &Shared,
    sink: &mut S,
    control: &mut FrameReader,
    bridge: &mut Option<FrameReader>,
    deliveries: &mut Vec<Delivery>,
) -> Next {
    loop {
        deliveries.clear();
        let (pass, queued) = {
            let mut s = shared.lock();
            let State {
                assoc,
                control: control_out,
                bridge: bridge_out,
                ..
            } = &mut *s;
            let before = control_out.len() + bridge_out.len();
            let mut outs = Outs {
                control: control_out,
                bridge: bridge_out,
            };
            let mut pass =
                open_buffered(assoc, &mut outs, &shared.stats, control, false, deliveries);
            if let (Pass::Done, Some(b)) = (&pass, bridge.as_mut()) {
                pass = open_buffered(assoc, &mut outs, &shared.stats, b, true, deliveries);
            }
            (pass, outs.control.len() + outs.bridge.len() > before)
        };
        if queued {
            shared.wake_writer.notify_one();
        }
        for d in deliveries.iter() {
            let reader = match (d.on_bridge_stream, bridge.as_ref()) {
                (true, Some(b)) => b,
                _ => &*control,
            };
            sink.frame(d.frame_type, reader.octets(d.payload.clone()))
                .await;
        }
        match pass {
            Pass::Done => return Next::Continue,
            Pass::More => {}
            Pass::End(why) => return Next::End(why),
            Pass::Fail(class, message) => return Next::End(shared.fail(class, message)),
        }
    }
}

/// Where frames sealed while handling inbound ones go (PONG, CLOSE_ACK,
/// KEY_UPDATE_ACK), by channel.
struct Outs<'a> {
    control: &'a mut Vec<u8>,
    bridge: &'a mut Vec<u8>,
}

/// One pass over the frames buffered in `reader`, under the lock.
fn open_buffered(
    assoc: &mut Association,
    outs: &mut Outs<'_>,
    stats: &AssocStats,
    reader: &mut FrameReader,
    on_bridge_stream: bool,
    deliveries: &mut Vec<Delivery>,
) -> Pass {
    loop {
        let span = match reader.peek() {
            Ok(Some(span)) => span,
            Ok(None) => return Pass::Done,
            Err(e) => return Pass::Fail(ErrorClass::of(&e), e.to_string()),
        };
        let header = span.header;
        let bridge_operation = header.channel == ChannelId::BRIDGE
            && crate::bridge::kind_for_frame_type(header.frame_type).is_some();
        if !deliveries.is_empty() && (!bridge_operation || deliveries.len() >= FRAMES_PER_PASS) {
            return Pass::More;
        }
        let range = reader.take(&span);
        let now = reader.read_at();
        let out = if header.channel == ChannelId::BRIDGE {
            &mut *outs.bridge
        } else {
            &mut *outs.control
        };
        let frame = reader.frame_mut(range.clone());
        let base = frame.as_ptr() as usize;
        match assoc.handle(&header, frame, now, out) {
            Ok(Event::Bridge {
                frame_type,
                payload,
            }) => {
                // The plaintext lies inside the frame, opened in place.
                let start = range.start + (payload.as_ptr() as usize - base);
                deliveries.push(Delivery {
                    on_bridge_stream,
                    frame_type,
                    payload: start..start + payload.len(),
                });
            }
            Ok(Event::Closed { code }) => return Pass::End(End::PeerClosed(code)),
            Ok(Event::CloseAcked) => return Pass::End(End::LocalClose),
            Ok(Event::Dropped(why)) => {
                debug!(?why, "frame dropped");
                stats.dropped(why);
            }
            Ok(Event::None | Event::Pong { .. }) => {}
            Err(e) => {
                return Pass::Fail(
                    ErrorClass::of_assoc(&e),
                    TransportError::from(e).to_string(),
                );
            }
        }
    }
}

async fn fill_or_pending(reader: &mut Option<FrameReader>) -> Result<bool, TransportError> {
    match reader {
        Some(r) => r.fill().await,
        None => std::future::pending().await,
    }
}

async fn accept_bi(
    conn: &Option<quinn::Connection>,
) -> Result<(quinn::SendStream, quinn::RecvStream), TransportError> {
    match conn {
        Some(c) => Ok(c.accept_bi().await?),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use tokio::io::{AsyncReadExt, DuplexStream};

    use super::*;
    use crate::assoc::AssocConfig;
    use crate::bridge::BRIDGE_NOTIFY;
    use crate::wire::{Deframer, HEADER_LEN};

    /// What a sink saw: payloads in order, then how the association ended.
    #[derive(Default)]
    struct Seen {
        payloads: Vec<Vec<u8>>,
        ended: Option<End>,
    }

    struct Recorder(Arc<StdMutex<Seen>>);

    impl BridgeSink for Recorder {
        async fn frame(&mut self, _: FrameType, payload: &[u8]) {
            let mut seen = self.0.lock().expect("seen");
            assert!(seen.ended.is_none(), "a frame after the end");
            seen.payloads.push(payload.to_vec());
        }
        fn ended(&mut self, why: &End) {
            self.0.lock().expect("seen").ended = Some(why.clone());
        }
    }

    /// The server half of a pair runs on the driver over one in-memory
    /// stream (everything on it, as over TLS); the test is the client.
    fn driven() -> (Association, DuplexStream, AssocHandle, Arc<StdMutex<Seen>>) {
        driven_with(AssocConfig::default())
    }

    fn driven_with(
        config: AssocConfig,
    ) -> (Association, DuplexStream, AssocHandle, Arc<StdMutex<Seen>>) {
        let (client, server) = crate::assoc::tests::pair(config);
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (r, w) = tokio::io::split(theirs);
        let seen = Arc::new(StdMutex::new(Seen::default()));
        let sink = Recorder(seen.clone());
        let handle = spawn(
            server,
            Streams {
                control: (FrameReader::new(Box::new(r)), Box::new(w)),
                bridge: None,
                quic: None,
                accept_bridge: false,
            },
            false,
            Arc::new(AssocStats::default()),
            |_| sink,
        );
        (client, ours, handle, seen)
    }

    fn notify(client: &mut Association, wire: &mut Vec<u8>, i: u16) {
        client
            .seal(wire, ChannelId::BRIDGE, BRIDGE_NOTIFY, |o| {
                o.extend_from_slice(&i.to_be_bytes())
            })
            .expect("seal");
    }

    /// Reads frames from the driver until one of `frame_type` arrives.
    async fn await_frame(stream: &mut DuplexStream, frame_type: FrameType) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let mut at = 0;
            while let Some((frame, len)) = Deframer::default().deframe(&buf[at..]).expect("frame") {
                if frame.header.frame_type == frame_type {
                    return;
                }
                at += len;
            }
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
                .await
                .expect("the driver answers")
                .expect("read");
            assert!(n > 0, "the driver closed the stream");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    #[tokio::test]
    async fn frames_of_one_write_reach_the_sink_in_order_around_control_frames() {
        let (mut client, mut stream, handle, seen) = driven();
        // More Bridge frames than one pass holds, a PING in the middle, more
        // Bridge frames, then CLOSE, all in one write.
        let mut wire = Vec::new();
        for i in 0..(FRAMES_PER_PASS as u16 * 3 + 5) {
            notify(&mut client, &mut wire, i);
        }
        client.ping(&mut wire, Instant::now()).expect("ping");
        for i in 1000..1010 {
            notify(&mut client, &mut wire, i);
        }
        client.close(&mut wire, 7).expect("close");
        stream.write_all(&wire).await.expect("write");
        await_frame(&mut stream, FrameType::CLOSE_ACK).await;
        handle.ended().await;

        let seen = seen.lock().expect("seen");
        let expected: Vec<Vec<u8>> = (0..(FRAMES_PER_PASS as u16 * 3 + 5))
            .chain(1000..1010)
            .map(|i| i.to_be_bytes().to_vec())
            .collect();
        assert_eq!(seen.payloads, expected);
        assert_eq!(seen.ended, Some(End::PeerClosed(7)));
        assert_eq!(handle.end(), Some(End::PeerClosed(7)));
    }

    fn keepalive_config() -> AssocConfig {
        AssocConfig {
            keepalive_after: Duration::from_millis(60),
            peer_timeout: Duration::from_millis(300),
            ..AssocConfig::default()
        }
    }

    #[tokio::test]
    async fn a_silent_peer_is_pinged_then_given_up() {
        let (_client, mut stream, handle, seen) = driven_with(keepalive_config());
        let started = Instant::now();
        await_frame(&mut stream, FrameType::PING).await;
        tokio::time::timeout(Duration::from_secs(5), handle.ended())
            .await
            .expect("the association ends");
        assert!(started.elapsed() >= Duration::from_millis(300));
        let why = seen.lock().expect("seen").ended.clone();
        assert!(
            matches!(&why, Some(End::Error(e)) if e.contains("keepalive")),
            "{why:?}"
        );
    }

    #[tokio::test]
    async fn a_peer_that_answers_pings_stays() {
        let (mut client, mut stream, handle, _) = driven_with(keepalive_config());
        // Answer every PING for three peer timeouts, sending nothing else.
        let until = Instant::now() + Duration::from_millis(900);
        let (mut buf, mut chunk, mut pings) = (Vec::new(), [0u8; 4096], 0);
        while Instant::now() < until {
            let Ok(read) =
                tokio::time::timeout(Duration::from_millis(50), stream.read(&mut chunk)).await
            else {
                continue;
            };
            let n = read.expect("read");
            assert!(n > 0, "the driver closed the stream");
            buf.extend_from_slice(&chunk[..n]);
            let mut replies = Vec::new();
            while let Some(span) = Deframer::default().span(&buf).expect("frame") {
                let mut frame = buf.drain(..span.len).collect::<Vec<u8>>();
                pings += usize::from(span.header.frame_type == FrameType::PING);
                client
                    .handle(&span.header, &mut frame, Instant::now(), &mut replies)
                    .expect("handle");
            }
            stream.write_all(&replies).await.expect("write");
        }
        assert!(pings >= 3, "{pings} PINGs");
        assert!(handle.is_open(), "{:?}", handle.end());
    }

    #[tokio::test]
    async fn frames_before_a_tampered_one_are_delivered_and_nothing_after() {
        let (mut client, mut stream, handle, seen) = driven();
        let mut wire = Vec::new();
        for i in 0..5 {
            notify(&mut client, &mut wire, i);
        }
        let tampered = wire.len() + HEADER_LEN;
        for i in 5..10 {
            notify(&mut client, &mut wire, i);
        }
        wire[tampered] ^= 1;
        stream.write_all(&wire).await.expect("write");
        tokio::time::timeout(Duration::from_secs(5), handle.ended())
            .await
            .expect("the association ends");

        let seen = seen.lock().expect("seen");
        let expected: Vec<Vec<u8>> = (0u16..5).map(|i| i.to_be_bytes().to_vec()).collect();
        assert_eq!(seen.payloads, expected);
        assert!(
            matches!(&seen.ended, Some(End::Error(e)) if e.contains("failed authentication")),
            "{:?}",
            seen.ended
        );
    }
}
