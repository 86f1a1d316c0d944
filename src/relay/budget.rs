//! What one gateway's exchanges share: the requests in flight
//! (`--max-in-flight`) and the octets of JSON-RPC text they hold between
//! them (`--memory-budget`). Each exchange takes its share when it admits a
//! message and gives it back when the message is answered or dropped.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Which shared limit is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// `--max-in-flight` requests wait for replies.
    InFlight,
    /// `--memory-budget` octets are held.
    Octets,
}

/// The gateway-wide limits and what is taken of them.
#[derive(Debug)]
pub struct Shared {
    max_in_flight: usize,
    max_octets: usize,
    in_flight: AtomicUsize,
    octets: AtomicUsize,
}

impl Shared {
    pub fn new(max_in_flight: usize, max_octets: usize) -> Self {
        Self {
            max_in_flight: max_in_flight.max(1),
            max_octets: max_octets.max(1),
            in_flight: AtomicUsize::new(0),
            octets: AtomicUsize::new(0),
        }
    }

    /// No limits (tests, tools).
    pub fn unlimited() -> Self {
        Self::new(usize::MAX, usize::MAX)
    }

    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    pub fn max_octets(&self) -> usize {
        self.max_octets
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    /// Octets held now.
    pub fn octets(&self) -> usize {
        self.octets.load(Relaxed)
    }

    /// Takes `octets` (and one request in flight when `request`). A message
    /// larger than the whole budget passes when nothing else is held, so no
    /// message within `--max-body` waits forever.
    pub fn take(&self, request: bool, octets: usize) -> Result<(), Full> {
        if request && self.in_flight.fetch_add(1, Relaxed) >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Relaxed);
            return Err(Full::InFlight);
        }
        let before = self.octets.fetch_add(octets, Relaxed);
        if before != 0 && before.saturating_add(octets) > self.max_octets {
            self.octets.fetch_sub(octets, Relaxed);
            if request {
                self.in_flight.fetch_sub(1, Relaxed);
            }
            return Err(Full::Octets);
        }
        Ok(())
    }

    /// Gives back what [`Shared::take`] took.
    pub fn give(&self, request: bool, octets: usize) {
        if request {
            self.in_flight.fetch_sub(1, Relaxed);
        }
        self.octets.fetch_sub(octets, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_octets_are_bounded_and_given_back() {
        let s = Shared::new(2, 100);
        assert_eq!(s.take(true, 60), Ok(()));
        assert_eq!(s.take(true, 50), Err(Full::Octets));
        assert_eq!(s.take(true, 40), Ok(()));
        assert_eq!(s.take(true, 0), Err(Full::InFlight));
        assert_eq!((s.in_flight(), s.octets()), (2, 100));
        s.give(true, 60);
        assert_eq!(s.take(false, 60), Ok(()));
        assert_eq!((s.in_flight(), s.octets()), (1, 100));
    }

    #[test]
    fn one_message_larger_than_the_budget_passes_alone() {
        let s = Shared::new(10, 100);
        assert_eq!(s.take(true, 500), Ok(()));
        assert_eq!(s.take(true, 1), Err(Full::Octets));
        s.give(true, 500);
        assert_eq!(s.octets(), 0);
    }
}
