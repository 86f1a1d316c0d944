//! When the association's writer yields before it takes its queue, so
//! that frames sealed together leave together ([`Patience`]).

use std::time::{Duration, Instant};

use tracing::debug;

/// Whether the writer lets the tasks already runnable on its worker go
/// first. [`tokio::task::yield_now`] runs it again once its worker has
/// nothing else to do, so the frames that several tasks seal in one round
/// leave in one write (over QUIC, usually in one datagram) instead of one
/// write each: tokio runs a task that another wakes next on the same
/// worker, which would otherwise put the writer straight after the first
/// sender.
///
/// The yield has to pay for itself, two ways:
/// - It costs a poll of the I/O driver, which pays only while other
///   senders are busy: each pass that yielded and then took a single frame
///   doubles the passes that skip the yield (up to [`MAX_SKIP`]), and a
///   pass that takes several small frames (under [`BATCH_BELOW`] octets in
///   all) yields every time again.
/// - On a saturated worker it would last until tokio next polls the I/O
///   driver (every 61 tasks), however long their work takes: a yield that
///   waited more than [`SLOW_YIELD`] for each Bridge frame it found turns
///   the yield off for [`QUIET`], so frames wait behind other work at most
///   once in that time.
#[derive(Debug, Default)]
pub(super) struct Patience {
    skip: u32,
    backoff: u32,
    quiet_until: Option<Instant>,
}

/// Passes between yields, at most, while yielding finds one frame a pass.
const MAX_SKIP: u32 = 64;

/// Octets of Bridge frames, at most, in a pass that shows yielding pays: a
/// write this large (a full TLS record) already pays for its syscall, and
/// large frames are not worth waiting to combine.
const BATCH_BELOW: usize = 16 << 10;

/// The wait, per frame found, past which a yield did not pay. Sealing a
/// small frame takes microseconds, and a debug build's a few hundred; a
/// yield as slow as this waited on other work (such as clients that send
/// large messages and never read). It is well above what the operating
/// system's preemption adds on a loaded 2-core machine: at 2 ms a pair at
/// 32 requests in flight lost a third of its batching to it.
const SLOW_YIELD: Duration = Duration::from_millis(5);

/// How long the writer goes without yielding after a slow yield.
const QUIET: Duration = Duration::from_secs(1);

impl Patience {
    /// Yields, if this pass should: how long the yield took, and when it
    /// ended.
    pub(super) async fn let_senders_seal(&mut self) -> Option<(Duration, Instant)> {
        if !self.should_yield(Instant::now) {
            return None;
        }
        let started = Instant::now();
        tokio::task::yield_now().await;
        let now = Instant::now();
        Some((now - started, now))
    }

    /// Whether this pass yields before it takes the queue.
    fn should_yield(&mut self, now: impl FnOnce() -> Instant) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        match self.quiet_until {
            Some(until) if now() < until => false,
            _ => {
                self.quiet_until = None;
                true
            }
        }
    }

    /// The pass took `frames` Bridge frames, `octets` in all, after a
    /// yield that lasted `waited`, or none.
    pub(super) fn took(&mut self, frames: u32, octets: usize, waited: Option<(Duration, Instant)>) {
        if let Some((waited, now)) = waited
            && frames >= 1
            && waited > SLOW_YIELD * frames
        {
            debug!(
                ?waited,
                frames, "the association writer's yield waited on other work: none for {QUIET:?}"
            );
            *self = Self {
                quiet_until: Some(now + QUIET),
                ..Self::default()
            };
            return;
        }
        if frames >= 2 && octets < BATCH_BELOW {
            self.skip = 0;
            self.backoff = 0;
        } else if frames >= 1 && waited.is_some() {
            self.backoff = (self.backoff * 2).clamp(1, MAX_SKIP);
            self.skip = self.backoff;
        }
        // Otherwise (Control frames only, or the end; one frame without a
        // yield) no evidence either way.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass of the writer at `now`: whether it yielded, and the frames and
    /// octets it then took, found after a yield of `wait`.
    fn pass(
        patience: &mut Patience,
        now: Instant,
        frames: u32,
        octets: usize,
        wait: Duration,
    ) -> bool {
        let yielded = patience.should_yield(|| now);
        patience.took(frames, octets, yielded.then_some((wait, now + wait)));
        yielded
    }

    const FAST: Duration = Duration::from_micros(20);

    #[test]
    fn the_writer_yields_less_while_it_finds_one_frame_a_pass() {
        let (mut patience, now) = (Patience::default(), Instant::now());
        let yields = (0..1000)
            .filter(|_| pass(&mut patience, now, 1, 100, FAST))
            .count();
        // Backing off 1, 2, 4, … 64 passes, then every 65th pass.
        assert!(
            yields <= 7 + 1000 / 65 + 1,
            "{yields} yields in 1000 passes"
        );
        // Several small frames in a pass: yield every pass again.
        patience.took(3, 300, None);
        assert!((0..5).all(|_| pass(&mut patience, now, 2, 200, FAST)));
        // A pass with nothing of the Bridge's (Control only) changes nothing.
        patience.took(0, 0, Some((FAST, now)));
        assert!(patience.should_yield(|| now));
    }

    #[test]
    fn several_large_frames_in_a_pass_do_not_make_the_writer_yield() {
        let (mut patience, now) = (Patience::default(), Instant::now());
        let yields = (0..1000)
            .filter(|_| pass(&mut patience, now, 2, 2 * 60_000, FAST))
            .count();
        assert!(
            yields <= 7 + 1000 / 65 + 1,
            "{yields} yields in 1000 passes"
        );
    }

    #[test]
    fn a_slow_yield_turns_yielding_off_for_a_while() {
        let (mut patience, start) = (Patience::default(), Instant::now());
        // A slow pass with no Bridge frame (Control only) says nothing, and
        // with several small frames a pass, every pass yields while yields are
        // fast.
        assert!(pass(&mut patience, start, 0, 0, Duration::from_secs(1)));
        assert!((0..10).all(|_| pass(&mut patience, start, 4, 400, FAST)));
        // One yield waits behind other work, longer than its frames are worth.
        let slow = SLOW_YIELD * 4 + Duration::from_micros(1);
        assert!(pass(&mut patience, start, 4, 400, slow));
        let after = start + slow;
        // No yield until QUIET has passed, however many small frames come.
        let during = [
            after,
            after + QUIET / 2,
            after + QUIET - Duration::from_millis(1),
        ];
        assert!(
            during
                .iter()
                .all(|&t| !pass(&mut patience, t, 4, 400, FAST))
        );
        assert!(pass(&mut patience, after + QUIET, 4, 400, FAST));
        // Waiting up to SLOW_YIELD for each frame found is worth it.
        assert!(pass(&mut patience, after + QUIET, 4, 400, SLOW_YIELD * 4));
        assert!(patience.should_yield(|| after + QUIET));
    }
}
