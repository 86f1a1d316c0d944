//! A listener's defences against connections that never finish: what keeps
//! a flood of silent sockets or abandoned QUIC attempts from locking real
//! peers out, and from flooding the log.
//!
//! ```text
//!  accepted ──▶ waiting room (silent: nothing sent yet)          full: the oldest is dropped
//!                 │ first octets within first_octets_timeout       silent too long: dropped
//!                 ▼
//!              handshake slot (max_handshakes, max_handshakes_per_source)   none free: refused
//!                 │ N-PAMP handshake within handshake_timeout
//!                 ▼
//!              association (no slot held)
//! ```
//!
//! A silent socket costs a descriptor and a small task, and never a
//! handshake slot; the room holds at most four per handshake slot,
//! so a new connection always gets in and a peer that speaks at once (every
//! real client) is through before it could be pushed out. QUIC attempts are
//! answered with a Retry (address validation, RFC 9000 §8.1) while many
//! handshakes are in progress, so an attempt that never completes costs no
//! state at all. Everything dropped or refused is counted and reported in
//! one log line every few seconds, never one line per socket.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tracing::warn;

use super::endpoint::Endpoint;
use super::stats::AssocStats;

/// How often, at most, the flood report is logged.
pub(super) const REPORT_EVERY: Duration = Duration::from_secs(5);

/// Silent connections a listener holds per handshake slot; one source
/// address may hold a quarter of them.
const ROOM_PER_SLOT: usize = 4;

/// What was dropped or refused, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dropped {
    /// Sent nothing within the first-octets deadline.
    Silent,
    /// Pushed out of a full waiting room by a newer connection.
    Evicted,
    /// No handshake slot free.
    Busy,
    /// The source address holds its share of slots.
    PerSource,
    /// Began a handshake and did not finish it in time.
    Stalled,
    /// A handshake that failed (wrong key, bad frame, ...).
    Failed,
    /// The listener could not accept (out of descriptors, ...).
    AcceptFailed,
}

const KINDS: usize = 7;

impl Dropped {
    const fn index(self) -> usize {
        self as usize
    }

    const fn describe(self) -> &'static str {
        match self {
            Self::Silent => "silent connections dropped",
            Self::Evicted => "silent connections pushed out by newer ones",
            Self::Busy => "refused (all handshake slots busy)",
            Self::PerSource => "refused (the source's share of slots in use)",
            Self::Stalled => "handshakes that stalled",
            Self::Failed => "handshakes that failed",
            Self::AcceptFailed => "accepts that failed (out of file descriptors? raise ulimit -n)",
        }
    }
}

/// The shared state of one listener's defences.
pub(super) struct Guard {
    slots: Arc<Semaphore>,
    max_slots: usize,
    max_per_source: usize,
    per_source: Mutex<HashMap<IpAddr, usize>>,
    room: Mutex<Room>,
    room_capacity: usize,
    room_per_source: usize,
    stats: Arc<AssocStats>,
    report: Report,
}

/// Silent connections by arrival, oldest first, and by source address.
#[derive(Default)]
struct Room {
    next: u64,
    waiting: BTreeMap<u64, Waiter>,
    by_source: HashMap<IpAddr, BTreeSet<u64>>,
}

/// A connection in the waiting room: its task, its source, and its socket
/// to look at.
struct Waiter {
    task: AbortHandle,
    source: IpAddr,
    socket: Option<Arc<tokio::net::TcpStream>>,
}

impl Waiter {
    /// Whether it has sent something since (its task has not run yet to
    /// see it): then it is no silent socket and is not pushed out.
    fn has_spoken(&self) -> bool {
        self.socket.as_deref().is_some_and(has_octets)
    }
}

/// Whether a socket has octets waiting, without waiting for any.
pub(super) fn has_octets(tcp: &tokio::net::TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::new(0u8); 1];
    // The socket is non-blocking: no data is WouldBlock, not a wait.
    matches!(socket2::SockRef::from(tcp).peek(&mut byte), Ok(n) if n > 0)
}

/// Waiters looked at, at most, to find a silent one to push out.
const EVICTION_LOOKS: usize = 8;

impl Room {
    fn insert(&mut self, waiter: Waiter) -> u64 {
        let id = self.next;
        self.next += 1;
        self.by_source.entry(waiter.source).or_default().insert(id);
        self.waiting.insert(id, waiter);
        id
    }

    fn remove(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiting.remove(&id)?;
        if let Some(ids) = self.by_source.get_mut(&waiter.source) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_source.remove(&waiter.source);
            }
        }
        Some(waiter)
    }

    fn of_source(&self, source: IpAddr) -> usize {
        self.by_source.get(&source).map_or(0, BTreeSet::len)
    }

    /// Takes out the oldest silent waiter, of `source` or of any, looking
    /// at no more than [`EVICTION_LOOKS`] (those that have spoken stay).
    fn evict(&mut self, source: Option<IpAddr>) -> Option<Waiter> {
        let candidates: Vec<u64> = match source {
            Some(source) => self
                .by_source
                .get(&source)?
                .iter()
                .take(EVICTION_LOOKS)
                .copied()
                .collect(),
            None => self.waiting.keys().take(EVICTION_LOOKS).copied().collect(),
        };
        let silent = candidates
            .into_iter()
            .find(|id| self.waiting.get(id).is_some_and(|w| !w.has_spoken()))?;
        self.remove(silent)
    }
}

/// A handshake slot, given back when dropped.
pub(super) struct Slot {
    _permit: OwnedSemaphorePermit,
    source: IpAddr,
    guard: Arc<Guard>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_source = lock(&self.guard.per_source);
        if let Some(n) = per_source.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                per_source.remove(&self.source);
            }
        }
    }
}

/// A place in the waiting room, left when dropped.
pub(super) struct Waiting {
    id: u64,
    guard: Arc<Guard>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        lock(&self.guard.room).remove(self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Guard {
    pub(super) fn new(ep: &Endpoint) -> Arc<Self> {
        let max_slots = ep.max_handshakes.max(1);
        Arc::new(Self {
            slots: Arc::new(Semaphore::new(max_slots)),
            max_slots,
            max_per_source: ep.max_handshakes_per_source.clamp(1, max_slots),
            per_source: Mutex::default(),
            room: Mutex::default(),
            room_capacity: max_slots * ROOM_PER_SLOT,
            room_per_source: (max_slots * ROOM_PER_SLOT / 4).max(1),
            stats: ep.stats.clone(),
            report: Report::default(),
        })
    }

    /// How many silent connections the waiting room holds.
    #[cfg(test)]
    pub(super) fn room_capacity(&self) -> usize {
        self.room_capacity
    }

    /// Handshakes in progress now.
    pub(super) fn in_progress(&self) -> usize {
        self.max_slots - self.slots.available_permits()
    }

    fn held_by(&self, source: IpAddr) -> usize {
        lock(&self.per_source).get(&source).copied().unwrap_or(0)
    }

    /// Whether a QUIC attempt from `from` should prove its address first:
    /// once a quarter of the slots are busy, or half of the source's share.
    pub(super) fn wants_retry(&self, from: SocketAddr) -> bool {
        self.in_progress() >= self.max_slots.div_ceil(4)
            || self.held_by(from.ip()) >= self.max_per_source.div_ceil(2)
    }

    /// A QUIC Retry was sent.
    pub(super) fn retried(&self) {
        self.stats.quic_retries.fetch_add(1, Relaxed);
    }

    /// A handshake slot for a connection from `from`, or `None` (counted
    /// and reported) when none is free for it.
    pub(super) fn slot(self: &Arc<Self>, from: SocketAddr) -> Option<Slot> {
        let refused = |why| {
            self.stats.handshakes_refused.fetch_add(1, Relaxed);
            self.dropped(why, from, None);
            None
        };
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            return refused(Dropped::Busy);
        };
        let source = from.ip();
        {
            let mut per_source = lock(&self.per_source);
            let n = per_source.entry(source).or_insert(0);
            if *n >= self.max_per_source {
                drop(per_source);
                return refused(Dropped::PerSource);
            }
            *n += 1;
        }
        Some(Slot {
            _permit: permit,
            source,
            guard: self.clone(),
        })
    }

    /// Puts a silent connection's task (and its socket) in the waiting
    /// room. When its source holds more than its share of the room, that
    /// source's oldest silent connection is pushed out; else, when the room
    /// is full, the oldest silent one of any. A flood from one address thus
    /// only pushes out its own; one whose octets arrived before its task
    /// could look is never pushed out.
    pub(super) fn wait(
        self: &Arc<Self>,
        task: AbortHandle,
        socket: Option<Arc<tokio::net::TcpStream>>,
        from: SocketAddr,
    ) -> Waiting {
        let source = from.ip();
        let (id, evicted) = {
            let mut room = lock(&self.room);
            let id = room.insert(Waiter {
                task,
                source,
                socket,
            });
            let evicted = if room.of_source(source) > self.room_per_source {
                room.evict(Some(source))
            } else if room.waiting.len() > self.room_capacity {
                room.evict(None)
            } else {
                None
            };
            (id, evicted.map(|w| w.task))
        };
        if let Some(task) = evicted {
            task.abort();
            self.stats.connections_evicted.fetch_add(1, Relaxed);
            self.dropped(Dropped::Evicted, from, None);
        }
        Waiting {
            id,
            guard: self.clone(),
        }
    }

    /// Counts what was dropped, and reports now and then.
    pub(super) fn dropped(
        &self,
        what: Dropped,
        from: SocketAddr,
        error: Option<&dyn std::fmt::Display>,
    ) {
        if what == Dropped::Silent {
            self.stats.connections_silent.fetch_add(1, Relaxed);
        }
        self.report.note(what, from, error, self.in_progress());
    }
}

/// Counts since the last report, and when that was.
struct Report {
    counts: [AtomicU64; KINDS],
    last: Mutex<Option<Instant>>,
}

impl Default for Report {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            last: Mutex::new(None),
        }
    }
}

impl Report {
    /// Counts one event; logs the counts since the last line when
    /// [`REPORT_EVERY`] has passed since it (so the first event of a quiet
    /// listener is logged at once, and a flood gives one line per period).
    fn note(
        &self,
        what: Dropped,
        from: SocketAddr,
        error: Option<&dyn std::fmt::Display>,
        in_progress: usize,
    ) {
        self.counts[what.index()].fetch_add(1, Relaxed);
        let now = Instant::now();
        let since = {
            let mut last = lock(&self.last);
            match *last {
                Some(at) if now.duration_since(at) < REPORT_EVERY => return,
                prev => {
                    *last = Some(now);
                    prev.map(|at| now.duration_since(at))
                }
            }
        };
        let summary = self
            .counts
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let n = n.swap(0, Relaxed);
                (n > 0).then(|| format!("{n} {}", KIND_LIST[i].describe()))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let period = since.map_or_else(
            || "now".to_owned(),
            |d| format!("in the last {:.1} s", d.as_secs_f64()),
        );
        let error = error.map(ToString::to_string);
        warn!(
            %from, error, handshakes_in_progress = in_progress,
            "incoming connections {period}: {summary} (one line per {} s at most)",
            REPORT_EVERY.as_secs()
        );
    }
}

const KIND_LIST: [Dropped; KINDS] = [
    Dropped::Silent,
    Dropped::Evicted,
    Dropped::Busy,
    Dropped::PerSource,
    Dropped::Stalled,
    Dropped::Failed,
    Dropped::AcceptFailed,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::Trust;

    fn guard(max: usize, per_source: usize) -> Arc<Guard> {
        let mut ep = Endpoint::new([1; 32], Trust::InsecureAcceptAny);
        ep.max_handshakes = max;
        ep.max_handshakes_per_source = per_source;
        Guard::new(&ep)
    }

    fn addr(last: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, last], port))
    }

    #[test]
    fn slots_are_shared_out_per_source_and_given_back() {
        let g = guard(4, 2);
        let a1 = g.slot(addr(1, 1)).expect("a slot");
        let _a2 = g
            .slot(addr(1, 2))
            .expect("a second one for the same source");
        assert!(g.slot(addr(1, 3)).is_none(), "the source's share is used");
        let _b1 = g.slot(addr(2, 1)).expect("another source still gets one");
        let _b2 = g.slot(addr(2, 2)).expect("and its share");
        assert!(g.slot(addr(3, 1)).is_none(), "every slot is busy");
        assert_eq!(g.in_progress(), 4);
        drop(a1);
        assert_eq!(g.in_progress(), 3);
        let _c = g.slot(addr(3, 1)).expect("a slot given back is free again");
        assert_eq!(g.stats.handshakes_refused.load(Relaxed), 2);
        // A refusal for a busy listener leaves the source's count as it was.
        assert_eq!(g.held_by(addr(3, 1).ip()), 1);
    }

    #[test]
    fn retry_is_asked_for_once_a_quarter_of_the_slots_or_half_a_share_is_busy() {
        let g = guard(8, 4);
        assert!(!g.wants_retry(addr(1, 1)));
        let _a = [g.slot(addr(1, 1)), g.slot(addr(1, 2))];
        assert!(g.wants_retry(addr(1, 3)), "half the source's share");
        assert!(g.wants_retry(addr(2, 1)), "a quarter of all slots");
        let g = guard(256, 32);
        let _held: Vec<_> = (0..63).map(|i| g.slot(addr(i as u8, 1))).collect();
        assert!(!g.wants_retry(addr(200, 1)));
        let _one_more = g.slot(addr(201, 1));
        assert!(g.wants_retry(addr(200, 1)));
    }

    /// Waiting-room places for `n` never-ending tasks from `source`.
    fn waiters(
        g: &Arc<Guard>,
        n: usize,
        source: u8,
    ) -> (Vec<tokio::task::JoinHandle<()>>, Vec<Waiting>) {
        (0..n)
            .map(|i| {
                let task = tokio::spawn(std::future::pending::<()>());
                let place = g.wait(task.abort_handle(), None, addr(source, i as u16));
                (task, place)
            })
            .unzip()
    }

    /// Which of `tasks` were pushed out (aborted).
    async fn pushed_out(tasks: Vec<tokio::task::JoinHandle<()>>) -> Vec<bool> {
        tokio::task::yield_now().await;
        let mut out = Vec::new();
        for task in tasks {
            if task.is_finished() {
                out.push(task.await.is_err_and(|e| e.is_cancelled()));
            } else {
                task.abort();
                out.push(false);
            }
        }
        out
    }

    #[tokio::test]
    async fn a_flood_from_one_source_pushes_out_only_its_own() {
        let g = guard(4, 4);
        assert_eq!(g.room_capacity(), 4 * ROOM_PER_SLOT);
        let share = g.room_per_source;
        // Another source waits first; then one source floods.
        let (other, _other_places) = waiters(&g, 2, 9);
        let (flood, _places) = waiters(&g, share + 3, 1);
        let out = pushed_out(flood).await;
        assert_eq!(out.iter().filter(|&&e| e).count(), 3);
        assert!(out[..3].iter().all(|&e| e), "its oldest go: {out:?}");
        assert_eq!(
            pushed_out(other).await,
            [false, false],
            "the other source stays"
        );
        assert_eq!(g.stats.connections_evicted.load(Relaxed), 3);
    }

    #[tokio::test]
    async fn a_full_waiting_room_pushes_out_its_oldest() {
        let g = guard(1, 1);
        assert_eq!(g.room_capacity(), ROOM_PER_SLOT);
        // One per source: only the room's own size applies.
        let mut tasks = Vec::new();
        let mut places = Vec::new();
        for i in 0..ROOM_PER_SLOT + 2 {
            let (t, p) = waiters(&g, 1, i as u8 + 1);
            tasks.extend(t);
            places.extend(p);
        }
        let out = pushed_out(tasks).await;
        assert_eq!(out, [true, true, false, false, false, false]);
        assert_eq!(g.stats.connections_evicted.load(Relaxed), 2);
        // Leaving the room frees a place without pushing anyone out.
        places.truncate(1);
        let (t, _p) = waiters(&g, 1, 99);
        assert_eq!(g.stats.connections_evicted.load(Relaxed), 2);
        pushed_out(t).await;
    }

    #[test]
    fn a_flood_is_reported_in_one_line_per_period() {
        let r = Report::default();
        let from = addr(1, 1);
        r.note(Dropped::Silent, from, None, 0);
        assert!(lock(&r.last).is_some());
        // Within the period: counted, not logged (the counters keep them).
        for _ in 0..1000 {
            r.note(Dropped::Evicted, from, None, 0);
        }
        assert_eq!(r.counts[Dropped::Evicted.index()].load(Relaxed), 1000);
        assert_eq!(
            r.counts[Dropped::Silent.index()].load(Relaxed),
            0,
            "reported"
        );
    }
}
