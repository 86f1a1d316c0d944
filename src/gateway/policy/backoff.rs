//! Pauses between attempts at something that keeps failing (an upstream
//! session restarted, an MCP server's GET stream opened again): from a
//! first pause, doubling to a longest; an attempt that lasted starts them
//! over, so that a long-lived session that ends is restarted at once and
//! one that fails at once does not become a loop.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    longest: Duration,
    /// An attempt that lasted this long starts the pauses over.
    lasted: Duration,
    next: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, longest: Duration, lasted: Duration) -> Self {
        Self {
            first,
            longest,
            lasted,
            next: first,
        }
    }

    /// An attempt ended after it ran `ran`.
    pub fn ended(&mut self, ran: Duration) {
        if ran >= self.lasted {
            self.next = self.first;
        }
    }

    /// The pause before the next attempt; the one after it is twice as
    /// long, up to the longest.
    pub fn pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(self.longest);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_the_longest_and_an_attempt_that_lasted_starts_them_over() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(5000), ms(10_000));
        let pauses: Vec<u128> = (0..8)
            .map(|_| {
                b.ended(ms(1));
                b.pause().as_millis()
            })
            .collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.ended(ms(9_999));
        assert_eq!(b.pause(), ms(5000), "not long enough to start over");
        b.ended(ms(10_000));
        assert_eq!(b.pause(), ms(100));
    }
}
