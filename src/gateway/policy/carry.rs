//! One request's way across the members it may go to (an edge's origins,
//! an origin's HTTP upstreams), as a state machine without I/O or clock:
//! [`Carry::start`], [`Carry::ended`] and [`Carry::hedge_due`] take the
//! time and what happened, and say what to do ([`Action`]); the shell
//! sends, waits and answers as told. The rules (`docs/gateway.md`,
//! "Several origins" and "Several upstreams"):
//!
//! - Each try goes to the best member not tried yet among those allowed
//!   (a route's), by [`super::health`]'s choice; the member's health sees
//!   the try start and end.
//! - A try that **sent nothing** goes on to the next member as it is, and
//!   spends no retry budget.
//! - One that was sent and not answered goes on only when sending it again
//!   cannot execute it twice ([`Next::Again`]; [`Next::IfResendSafe`] when
//!   its effect is read-only or idempotent-write), a member is left, and
//!   the retry budget allows it; otherwise its end is the answer. A reply,
//!   a timeout and an error the member answered with are final.
//! - A hedged request (read-only, `--hedge-after`) gets a second copy when
//!   no reply came within its delay: at the next best member, or over
//!   another association of the same one when it is the only one, drawn
//!   from the retry budget; the two race ([`super::race`]). What the race
//!   answers goes through the rules above, and the next try is hedged too.
//! - Tries that are given up (the loser of a race; every try in flight
//!   when the request is dropped) end in their member's health as
//!   [`Outcome::Neutral`].

use std::time::{Duration, Instant};

use super::health::{Chooser, Health, Outcome, RetryBudget};
use super::race::{End, Race, Slot, Verdict};
use std::sync::atomic::Ordering::Relaxed;

/// The members a request may go to, with what they share.
pub trait Members {
    fn count(&self) -> usize;
    fn health(&self, i: usize) -> &Health;
    /// Their clock and the turn among equals.
    fn chooser(&self) -> &Chooser;
    fn budget(&self) -> &RetryBudget;
}

/// Whether a try that ended may go on to another member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A reply: the answer, and the winner of a race.
    Reply,
    /// Nothing was sent: on to the next member as it is.
    NotSent,
    /// Sent and not answered, and it cannot have been executed (the
    /// exchange says so): on within the budget.
    Again,
    /// Sent and not answered; it may have begun to execute: on only when
    /// sending it twice cannot execute it twice, within the budget.
    IfResendSafe,
    /// Final: a timeout, an error the member answered with.
    Final,
}

/// How a try ended, as the shell saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub next: Next,
    /// What it says of the member (a reply's latency is filled in from
    /// the try's start).
    pub outcome: Outcome,
}

/// What the shell does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send the request to `member` as try `slot`. `second`: over another
    /// association than the first try's (a hedge at the same member).
    /// `wait`: wait for an association, as no member is left after it.
    Try {
        slot: Slot,
        member: usize,
        second: bool,
        wait: bool,
    },
    /// Call [`Carry::hedge_due`] at this time.
    HedgeAt(Instant),
    /// Give up the try in `slot` (its reply, if one comes, is dropped).
    GiveUp(Slot),
    /// Answer with the end of the try in `slot`.
    Answer(Slot),
    /// No member may take it.
    NoMember,
}

/// The actions of one step, in order (three at most).
#[derive(Debug, Default)]
pub struct Steps([Option<Action>; 3]);

impl Steps {
    fn push(&mut self, a: Action) {
        if let Some(free) = self.0.iter_mut().find(|s| s.is_none()) {
            *free = Some(a);
        }
    }
}

impl IntoIterator for Steps {
    type Item = Action;
    type IntoIter = std::iter::Flatten<std::array::IntoIter<Option<Action>, 3>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().flatten()
    }
}

/// A try in flight.
#[derive(Clone, Copy, Debug)]
struct Flight {
    member: usize,
    started: Instant,
}

/// One request on its way.
pub struct Carry<'m, M: Members + ?Sized> {
    members: &'m M,
    /// The members it may go to (bits).
    allowed: u64,
    /// The members tried (bits).
    tried: u64,
    /// How long a try waits for a reply before it is hedged.
    hedge_after: Option<Duration>,
    /// When this round's try is hedged.
    hedge_at: Option<Instant>,
    /// The tries in flight, by slot.
    flights: [Option<Flight>; 2],
    /// How the tries of this round that ended did, by slot.
    ends: [Option<Next>; 2],
    race: Race,
    /// The member of this round's first try (where a retry is counted).
    round: usize,
}

impl<'m, M: Members + ?Sized> Carry<'m, M> {
    /// A request that may go to the `allowed` members (bits), hedged after
    /// `hedge_after` when given (only ever for a read-only request).
    pub fn new(members: &'m M, allowed: u64, hedge_after: Option<Duration>) -> Self {
        Self {
            members,
            allowed,
            tried: 0,
            hedge_after,
            hedge_at: None,
            flights: [None, None],
            ends: [None, None],
            race: Race::new(),
            round: 0,
        }
    }

    /// The first try. The request earns the budget its share.
    pub fn start(&mut self, now: Instant) -> Steps {
        self.members.budget().deposit(self.at(now));
        self.next_round(now)
    }

    /// The try in `slot` ended so. `resend_safe` is asked only when it
    /// matters: whether sending the request twice cannot execute it twice.
    pub fn ended(
        &mut self,
        now: Instant,
        slot: Slot,
        ended: Ended,
        resend_safe: impl FnOnce() -> bool,
    ) -> Steps {
        let Some(flight) = self.flights[slot.index()].take() else {
            return Steps::default();
        };
        self.finish(now, flight, ended.outcome);
        self.ends[slot.index()] = Some(ended.next);
        let racing = self.flights[slot.other().index()].is_some();
        let answer = match self.race.ended(slot, end_of(ended.next)) {
            Verdict::Wait if racing => return Steps::default(),
            // Nothing to race: this one's end is the answer.
            Verdict::Wait => slot,
            Verdict::Answer(answer) => answer,
        };
        let mut steps = Steps::default();
        if racing {
            // Only a winner answers while the other runs: give that up.
            if let Some(other) = self.flights[slot.other().index()].take() {
                self.finish(now, other, Outcome::Neutral);
            }
            steps.push(Action::GiveUp(slot.other()));
            if slot == Slot::Second {
                let won = &self.members.health(flight.member).hedges_won;
                won.fetch_add(1, Relaxed);
            }
        }
        let next = self.ends[answer.index()].unwrap_or(Next::Final);
        if self.goes_on(now, next, resend_safe) {
            return self.next_round(now);
        }
        steps.push(Action::Answer(answer));
        steps
    }

    /// The hedge's time has come: a second copy goes out, unless a reply
    /// came already or the budget refuses it (the first try then answers
    /// alone).
    pub fn hedge_due(&mut self, now: Instant) -> Steps {
        let (Some(first), None) = (self.flights[0], self.flights[1]) else {
            return Steps::default();
        };
        if self.hedge_at.is_none_or(|due| now < due) {
            return Steps::default();
        }
        self.hedge_at = None;
        let at = self.at(now);
        let second = self.choose(at).unwrap_or(first.member);
        if !self.members.budget().withdraw(at) {
            return Steps::default();
        }
        self.tried |= 1 << second;
        let health = self.members.health(second);
        health.hedges.fetch_add(1, Relaxed);
        health.start(at);
        self.flights[1] = Some(Flight {
            member: second,
            started: now,
        });
        let mut steps = Steps::default();
        steps.push(Action::Try {
            slot: Slot::Second,
            member: second,
            second: second == first.member,
            wait: !self.left(),
        });
        steps
    }

    /// Whether a try whose end was `next` goes on to another member: never
    /// after an answer; as it is when nothing was sent; else when that
    /// cannot execute it twice and the budget allows.
    fn goes_on(&mut self, now: Instant, next: Next, resend_safe: impl FnOnce() -> bool) -> bool {
        let again = match next {
            Next::Reply | Next::Final => false,
            Next::NotSent => self.left(),
            Next::Again => self.left() && self.members.budget().withdraw(self.at(now)),
            Next::IfResendSafe => {
                self.left() && resend_safe() && self.members.budget().withdraw(self.at(now))
            }
        };
        if again {
            let health = self.members.health(self.round);
            health.retries.fetch_add(1, Relaxed);
        }
        again
    }

    /// A round: a try at the best member not tried yet, hedged when that
    /// is asked for.
    fn next_round(&mut self, now: Instant) -> Steps {
        self.race = Race::new();
        self.ends = [None, None];
        let at = self.at(now);
        let Some(member) = self.choose(at) else {
            let mut steps = Steps::default();
            steps.push(Action::NoMember);
            return steps;
        };
        self.tried |= 1 << member;
        self.round = member;
        self.members.health(member).start(at);
        self.flights[0] = Some(Flight {
            member,
            started: now,
        });
        let mut steps = Steps::default();
        steps.push(Action::Try {
            slot: Slot::First,
            member,
            second: false,
            wait: !self.left(),
        });
        self.hedge_at = self.hedge_after.map(|after| now + after);
        if let Some(due) = self.hedge_at {
            steps.push(Action::HedgeAt(due));
        }
        steps
    }

    /// The best member allowed and not tried.
    fn choose(&self, at: u64) -> Option<usize> {
        let n = self.members.count();
        let out = self.tried | !self.allowed;
        if n == 1 {
            // No choice to make: no shared counter.
            return (out & 1 == 0).then_some(0);
        }
        let members = self.members;
        (members.chooser()).choose_at(at, n, |i| members.health(i), out)
    }

    /// Whether a member allowed and not tried is left.
    fn left(&self) -> bool {
        let all = match self.members.count() {
            64.. => u64::MAX,
            n => (1u64 << n) - 1,
        };
        all & self.allowed & !self.tried != 0
    }

    fn at(&self, now: Instant) -> u64 {
        self.members.chooser().at(now)
    }

    /// A try is over: its member's health learns how (a reply's latency
    /// from its start).
    fn finish(&self, now: Instant, flight: Flight, outcome: Outcome) {
        let outcome = match outcome {
            Outcome::Replied(_) => Outcome::Replied(now.saturating_duration_since(flight.started)),
            other => other,
        };
        self.members
            .health(flight.member)
            .finish(self.at(now), outcome);
    }
}

/// Tries still in flight when the request is dropped (its client went
/// away) end as given up. `Neutral` reads no time: none is needed here.
impl<M: Members + ?Sized> Drop for Carry<'_, M> {
    fn drop(&mut self) {
        for flight in self.flights.iter_mut().filter_map(Option::take) {
            self.members
                .health(flight.member)
                .finish(0, Outcome::Neutral);
        }
    }
}

/// A try's end as the race sees it.
fn end_of(next: Next) -> End {
    match next {
        Next::Reply => End::Won,
        Next::NotSent => End::NotMade,
        Next::Again | Next::IfResendSafe | Next::Final => End::Lost,
    }
}
