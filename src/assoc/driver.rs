//! Runs an established association over its streams: one reader task, one
//! writer task, and an [`AssocHandle`] that any task may use to send.
//!
//! ```text
//!  senders ──seal under the lock──▶ pending octets ──writer task──▶ streams
//!  streams ──reader task──open under the lock──▶ BridgeSink::frame(payload)
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
use super::{Association, Counters, Event};
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

/// What the reader does after one inbound frame.
enum Next {
    Continue,
    End(End),
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
    let why = loop {
        let next = tokio::select! {
            _ = shared.stop.notified() => break End::LocalClose,
            f = control.next() => f,
            f = next_or_pending(&mut bridge) => f,
            s = accept_bi(&quic), if late_bridge.is_some() => {
                match s {
                    Ok((w, r)) => {
                        bridge = Some(FrameReader::new(Box::new(r)));
                        if let Some(tx) = late_bridge.take() {
                            let _ = tx.send(Box::new(w) as BoxWrite);
                        }
                        continue;
                    }
                    Err(e) => break End::Error(format!("accepting the Bridge stream: {e}")),
                }
            }
        };
        let (header, frame) = match next {
            Ok(Some(f)) => f,
            Ok(None) => break End::Eof,
            Err(e) => break shared.fail(ErrorClass::of(&e), e.to_string()),
        };
        if let Next::End(why) = on_frame(&shared, &mut sink, &header, frame).await {
            break why;
        }
        // Frames already read come next, without another round of the
        // select above (a write of the peer's usually holds many).
        match drain(&shared, &mut sink, &mut control, &mut bridge).await {
            Next::Continue => {}
            Next::End(why) => break why,
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
    if let Some(conn) = quic {
        if matches!(why, End::PeerClosed(_)) {
            // The peer closes the connection once it has our CLOSE_ACK.
            let _ = tokio::time::timeout(CLOSE_WAIT, conn.closed()).await;
        }
        conn.close(quinn::VarInt::from_u32(0), b"association ended");
    }
}

async fn on_frame<S: BridgeSink>(
    shared: &Shared,
    sink: &mut S,
    header: &crate::wire::Header,
    frame: &mut [u8],
) -> Next {
    let (event, queued) = {
        let mut s = shared.lock();
        let State {
            assoc,
            control,
            bridge,
            ..
        } = &mut *s;
        let out = if header.channel == ChannelId::BRIDGE {
            bridge
        } else {
            control
        };
        let before = out.len();
        let event = assoc.handle(header, frame, Instant::now(), out);
        (event, out.len() > before)
    };
    if queued {
        shared.wake_writer.notify_one();
    }
    match event {
        Ok(Event::Bridge {
            frame_type,
            payload,
        }) => {
            sink.frame(frame_type, payload).await;
            Next::Continue
        }
        Ok(Event::Closed { code }) => Next::End(End::PeerClosed(code)),
        Ok(Event::CloseAcked) => Next::End(End::LocalClose),
        Ok(Event::Dropped(why)) => {
            debug!(?why, "frame dropped");
            shared.stats.dropped(why);
            Next::Continue
        }
        Ok(Event::None | Event::Pong { .. }) => Next::Continue,
        Err(e) => Next::End(shared.fail(
            ErrorClass::of_assoc(&e),
            TransportError::from(e).to_string(),
        )),
    }
}

/// Handles every whole frame already buffered by the readers.
async fn drain<S: BridgeSink>(
    shared: &Shared,
    sink: &mut S,
    control: &mut FrameReader,
    bridge: &mut Option<FrameReader>,
) -> Next {
    for reader in std::iter::once(control).chain(bridge.as_mut()) {
        loop {
            let (header, frame) = match reader.buffered() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Next::End(shared.fail(ErrorClass::of(&e), e.to_string())),
            };
            if let Next::End(why) = on_frame(shared, sink, &header, frame).await {
                return Next::End(why);
            }
        }
    }
    Next::Continue
}

async fn next_or_pending(
    reader: &mut Option<FrameReader>,
) -> Result<Option<(crate::wire::Header, &mut [u8])>, TransportError> {
    match reader {
        Some(r) => r.next().await,
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
