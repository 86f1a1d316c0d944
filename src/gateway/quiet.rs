//! Log lines that clients can cause, at most one per period: a flood of
//! broken or stalled clients must not flood the log (every one is counted
//! in the metrics; the lines in between go to debug).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// One warning line per [`PERIOD`] at most, for one kind of event.
pub struct Every {
    last: Mutex<Option<Instant>>,
    skipped: AtomicU64,
}

/// How often a warning of one kind may be logged.
pub const PERIOD: Duration = Duration::from_secs(5);

impl Every {
    pub const fn new() -> Self {
        Self {
            last: Mutex::new(None),
            skipped: AtomicU64::new(0),
        }
    }

    /// `Some(events not logged since the last line)` when this one may be
    /// logged; `None` (and counted) when a line went out less than a
    /// period ago.
    pub fn ready(&self) -> Option<u64> {
        self.ready_at(Instant::now())
    }

    fn ready_at(&self, now: Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some(at) if now.duration_since(at) < PERIOD => {
                self.skipped.fetch_add(1, Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.skipped.swap(0, Relaxed))
            }
        }
    }
}

impl Default for Every {
    fn default() -> Self {
        Self::new()
    }
}

/// A warning when `every` allows it, else a debug line; either way with
/// the event's fields.
macro_rules! warn_every {
    ($every:expr, $($arg:tt)+) => {
        match $every.ready() {
            Some(skipped) => tracing::warn!(skipped, $($arg)+),
            None => tracing::debug!($($arg)+),
        }
    };
}

pub(crate) use warn_every;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_and_the_rest_are_counted() {
        let e = Every::new();
        let t0 = Instant::now();
        assert_eq!(e.ready_at(t0), Some(0));
        for i in 1..=100 {
            assert_eq!(e.ready_at(t0 + Duration::from_millis(i * 10)), None);
        }
        assert_eq!(e.ready_at(t0 + PERIOD), Some(100));
        assert_eq!(e.ready_at(t0 + PERIOD + Duration::from_secs(1)), None);
    }
}
