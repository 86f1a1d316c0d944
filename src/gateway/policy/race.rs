//! Two tries at one thing, the second begun only when the first is slow: a
//! hedged request (the first reply wins) and a spare handshake (the first
//! association made wins) follow the same rule, held here.
//!
//! - The first try that **wins** (a reply; an association made) is the
//!   answer, and the other is given up.
//! - One that ends without winning waits for the other: when the first
//!   ended so, the second's end is the answer if the second was made (it
//!   was not when nothing was sent: no association for a hedge, no room
//!   for a spare), else the first's; when the second ended so, the
//!   first's end is the answer, whatever it is.
//! - A handshake gets its spare after [`spare_after`] the last one that
//!   succeeded with its origin.

use std::time::Duration;

/// A handshake that has run this many times as long as the last one with
/// the origin that succeeded (and at least [`SPARE_AFTER_AT_LEAST`]) gets a
/// spare.
pub const SPARE_AFTER_TIMES: u32 = 4;
/// The least a handshake runs before it gets a spare: a few round trips
/// and some scheduling delay on a loaded machine, far above a handshake's
/// time on a LAN (1.5 ms over loopback).
pub const SPARE_AFTER_AT_LEAST: Duration = Duration::from_millis(500);

/// How long a handshake runs before a spare is made beside it, when the
/// last one with its origin that succeeded took `last`.
pub fn spare_after(last: Duration) -> Duration {
    (last * SPARE_AFTER_TIMES).max(SPARE_AFTER_AT_LEAST)
}

/// One of the two tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The try begun first.
    First,
    /// The one begun beside it once the first was slow.
    Second,
}

impl Slot {
    pub fn other(self) -> Slot {
        match self {
            Slot::First => Slot::Second,
            Slot::Second => Slot::First,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// How one try ended, for the race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// It won: a reply, an association made.
    Won,
    /// It ended without winning, having been made (a failure the peer
    /// answered with, a handshake refused).
    Lost,
    /// It was never made (nothing sent; no room for it).
    NotMade,
}

/// What the race says after a try ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The answer is this try's end; give the other up if it runs.
    Answer(Slot),
    /// Wait for the other try.
    Wait,
}

/// A race of two tries, the second one running (with only the first
/// running, its end is the answer: there is nothing to race).
#[derive(Debug, Default)]
pub struct Race {
    /// A try that ended without winning while the other ran.
    held: Option<(Slot, End)>,
}

impl Race {
    pub fn new() -> Self {
        Self::default()
    }

    /// `slot` ended so.
    pub fn ended(&mut self, slot: Slot, end: End) -> Verdict {
        match self.held.take() {
            None if end == End::Won => Verdict::Answer(slot),
            None => {
                self.held = Some((slot, end));
                Verdict::Wait
            }
            // Both have ended: the second's when the first lost and the
            // second was made; the first's otherwise.
            Some((Slot::First, _)) if end != End::NotMade => Verdict::Answer(slot),
            Some((Slot::First, _)) => Verdict::Answer(Slot::First),
            Some((Slot::Second, _)) => Verdict::Answer(slot),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn race(ends: [(Slot, End); 2]) -> Slot {
        let mut r = Race::new();
        match r.ended(ends[0].0, ends[0].1) {
            Verdict::Answer(s) => s,
            Verdict::Wait => match r.ended(ends[1].0, ends[1].1) {
                Verdict::Answer(s) => s,
                Verdict::Wait => panic!("both ended and no answer"),
            },
        }
    }

    #[test]
    fn a_spare_waits_four_times_the_last_handshake_and_half_a_second_at_least() {
        let ms = Duration::from_millis;
        assert_eq!(spare_after(ms(2)), ms(500));
        assert_eq!(spare_after(ms(300)), ms(1200));
    }

    #[test]
    fn the_first_to_win_answers_and_a_loser_waits_for_the_other() {
        use End::*;
        use Slot::*;
        assert_eq!(race([(First, Won), (Second, Won)]), First);
        assert_eq!(race([(Second, Won), (First, Won)]), Second);
        // The first lost: the second answers when it was made, even lost.
        assert_eq!(race([(First, Lost), (Second, Won)]), Second);
        assert_eq!(race([(First, Lost), (Second, Lost)]), Second);
        assert_eq!(race([(First, NotMade), (Second, Lost)]), Second);
        assert_eq!(race([(First, Lost), (Second, NotMade)]), First);
        // The second lost or was not made: the first answers, whatever.
        assert_eq!(race([(Second, Lost), (First, Won)]), First);
        assert_eq!(race([(Second, NotMade), (First, Lost)]), First);
        assert_eq!(race([(Second, Lost), (First, NotMade)]), First);
    }
}
