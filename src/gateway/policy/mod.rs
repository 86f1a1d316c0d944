//! The gateway's policy: the rules by which it judges where a request may
//! go, without I/O. Each member it can send to (an edge's origins, an
//! origin's upstreams) keeps a [`health::Health`]; a [`health::Chooser`]
//! picks among them; a [`health::RetryBudget`] bounds retries and hedges.
//! Time comes in as a parameter (milliseconds from the chooser's epoch,
//! which the shell reads the clock for), so the rules are tested without a
//! runtime or a clock.

pub mod backoff;
pub mod carry;
pub mod health;
pub mod race;

#[cfg(test)]
mod tests;
